// fuzz_gbnf.cpp — libFuzzer target: arbitrary text into the GBNF parser, printer and a
// byte-level matcher. Errors must be GrammarError/GrammarLimitError, never a crash or hang.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "lacuna/grammar.h"
#include "lacuna/matcher.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  lacuna::Grammar g;
  try {
    g = lacuna::parse_gbnf(text);
  } catch (const lacuna::GrammarError&) {
    return 0;
  }
  // The printed grammar must parse again.
  lacuna::Grammar again = lacuna::parse_gbnf(lacuna::to_gbnf(g));
  try {
    lacuna::CompileOptions opt;
    opt.max_positions = 20000;
    opt.max_stacks = 2000;
    auto cg = lacuna::CompiledGrammar::compile(again, nullptr, opt);
    lacuna::GrammarMatcher m(cg);
    // Feed the input's own bytes, a few at a time.
    for (size_t i = 0; i < size && i < 64; i += 3) {
      m.accept_string(text.substr(i, 3));
      (void)m.is_completed();
    }
    (void)m.jump_forward_string();
  } catch (const lacuna::GrammarLimitError&) {
  }
  return 0;
}
