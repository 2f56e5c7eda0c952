// constraint_factory.cpp — command-line constraint options to GBNF and to a Constraint.
#include "decode/constraint_factory.h"

#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include "lacuna/grammar.h"
#include "lacuna/json_schema.h"
#include "lacuna/matcher.h"
#include "lacuna/regex.h"
#include "lacuna/sampler.h"
#include "lacuna/token_index.h"

namespace lacuna::decode {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw std::runtime_error("error while reading " + path);
  return ss.str();
}

std::string choices_to_gbnf(const std::vector<std::string>& choices) {
  if (choices.empty()) throw std::invalid_argument("choices: the list is empty");
  std::string g = "root ::= ";
  for (size_t i = 0; i < choices.size(); ++i) {
    if (choices[i].empty()) throw std::invalid_argument("choices: an empty choice");
    if (i > 0) g += " | ";
    g += '"';
    for (unsigned char c : choices[i]) {
      switch (c) {
        case '"':
          g += "\\\"";
          break;
        case '\\':
          g += "\\\\";
          break;
        case '\n':
          g += "\\n";
          break;
        case '\r':
          g += "\\r";
          break;
        case '\t':
          g += "\\t";
          break;
        default:
          if (c < 0x20) {
            static const char* hex = "0123456789ABCDEF";
            g += "\\x";
            g += hex[c >> 4];
            g += hex[c & 15];
          } else {
            g += static_cast<char>(c);
          }
      }
    }
    g += '"';
  }
  return g + "\n";
}

std::string spec_to_gbnf(const ConstraintSpec& spec) {
  const int n = !spec.grammar_file.empty() + !spec.schema_file.empty() + !spec.regex.empty() +
                !spec.choices.empty();
  if (n == 0) throw std::invalid_argument("no constraint given");
  if (n > 1) {
    throw std::invalid_argument("give one of --grammar, --schema, --regex, --choices, not several");
  }
  if (!spec.grammar_file.empty()) return read_text_file(spec.grammar_file);
  if (!spec.schema_file.empty()) {
    SchemaOptions opts;
    return json_schema_to_gbnf(read_text_file(spec.schema_file), opts);
  }
  if (!spec.regex.empty()) return regex_to_gbnf(spec.regex);
  return choices_to_gbnf(spec.choices);
}

namespace {

// Token indexes are immutable and costly to build (one pass over the vocabulary): one per
// vocabulary for the life of the process.
std::shared_ptr<const TokenIndex> token_index_for(const llama_vocab* vocab) {
  static std::mutex mu;
  static std::map<const llama_vocab*, std::shared_ptr<const TokenIndex>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[vocab];
  if (!slot) slot = TokenIndex::build(vocab);
  return slot;
}

}  // namespace

std::unique_ptr<Constraint> make_grammar_constraint(const llama_vocab* vocab,
                                                    const std::string& gbnf,
                                                    const std::vector<std::string>& lazy_triggers) {
  if (vocab == nullptr) throw std::invalid_argument("make_grammar_constraint: null vocabulary");
  const Grammar grammar = parse_gbnf(gbnf);
  auto compiled = CompiledGrammar::compile(grammar, token_index_for(vocab));
  std::unique_ptr<Constraint> c = std::make_unique<GrammarMatcher>(std::move(compiled));
  if (!lazy_triggers.empty()) {
    LazyTriggers t;
    t.words = lazy_triggers;
    c = std::make_unique<LazyConstraint>(std::move(c), std::move(t), vocab_piece_fn(vocab));
  }
  return c;
}

}  // namespace lacuna::decode
