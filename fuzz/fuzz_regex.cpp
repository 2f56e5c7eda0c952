// fuzz_regex.cpp — libFuzzer target: arbitrary text as an ECMAScript regex, in full-match and
// search modes. The converter must give a grammar our GBNF parser accepts, or RegexError.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "lacuna/grammar.h"
#include "lacuna/matcher.h"
#include "lacuna/regex.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 2048) return 0;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  for (bool search : {false, true}) {
    lacuna::RegexOptions opt;
    opt.search = search;
    opt.max_repeat = 100;
    std::string gbnf;
    try {
      gbnf = lacuna::regex_to_gbnf(text, opt);
    } catch (const lacuna::RegexError&) {
      return 0;
    }
    lacuna::Grammar g = lacuna::parse_gbnf(gbnf);
    try {
      lacuna::CompileOptions co;
      co.max_positions = 20000;
      co.max_stacks = 2000;
      auto cg = lacuna::CompiledGrammar::compile(g, nullptr, co);
      lacuna::GrammarMatcher m(cg);
      m.accept_string(text.substr(0, 32));
      (void)m.is_completed();
    } catch (const lacuna::GrammarLimitError&) {
    }
  }
  return 0;
}
