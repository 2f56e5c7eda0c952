// constraint_factory.cpp — command-line constraint options to GBNF and to a Constraint.
#include "decode/constraint_factory.h"

#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include "lacuna/grammar.h"
#include "lacuna/json_schema.h"
#include "lacuna/log.h"
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

// What tells two vocabularies apart when one was freed and the other was loaded at the same
// address: the size and the pieces of a spread of tokens.
std::string vocab_fingerprint(const llama_vocab* vocab) {
  const int32_t n = llama_vocab_n_tokens(vocab);
  std::string f =
      std::to_string(n) + ":" + std::to_string(static_cast<int>(llama_vocab_type(vocab)));
  char buf[256];
  for (int32_t i = 0; i < 64 && n > 0; ++i) {
    const Token t = static_cast<Token>((static_cast<int64_t>(n - 1) * i) / 63);
    const int32_t len = llama_token_to_piece(vocab, t, buf, sizeof(buf), 0, true);
    f += '|';
    if (len > 0) f.append(buf, static_cast<size_t>(len));
  }
  return f;
}

// Token indexes are immutable and costly to build (one pass over the vocabulary): one per
// vocabulary for the life of the process. Keyed by address and checked by fingerprint, so a
// vocabulary freed and replaced by another at the same address gets its own index.
std::shared_ptr<const TokenIndex> token_index_for(const llama_vocab* vocab) {
  struct Entry {
    std::string fingerprint;
    std::shared_ptr<const TokenIndex> index;
  };
  static std::mutex mu;
  static std::map<const llama_vocab*, Entry> cache;
  std::string fp = vocab_fingerprint(vocab);
  std::lock_guard<std::mutex> lock(mu);
  Entry& slot = cache[vocab];
  if (!slot.index || slot.fingerprint != fp) {
    slot.index = TokenIndex::build(vocab);
    slot.fingerprint = std::move(fp);
  }
  return slot.index;
}

}  // namespace

std::unique_ptr<Constraint> make_grammar_constraint(const llama_vocab* vocab,
                                                    const std::string& gbnf,
                                                    const std::vector<std::string>& lazy_triggers) {
  if (vocab == nullptr) throw std::invalid_argument("make_grammar_constraint: null vocabulary");
  const Grammar grammar = parse_gbnf(gbnf);
  auto compiled = CompiledGrammar::compile(grammar, token_index_for(vocab));
  return make_lazy(vocab, std::make_unique<GrammarMatcher>(std::move(compiled)), lazy_triggers);
}

std::unique_ptr<Constraint> make_lazy(const llama_vocab* vocab, std::unique_ptr<Constraint> c,
                                      const std::vector<std::string>& lazy_triggers) {
  if (lazy_triggers.empty()) return c;
  LazyTriggers t;
  t.words = lazy_triggers;
  return std::make_unique<LazyConstraint>(std::move(c), std::move(t), vocab_piece_fn(vocab));
}

std::unique_ptr<Constraint> make_schema_constraint(const llama_vocab* vocab,
                                                   const std::string& schema, bool compact,
                                                   const std::vector<std::string>& lazy_triggers) {
  SchemaOptions so;
  so.whitespace =
      compact ? SchemaOptions::Whitespace::Compact : SchemaOptions::Whitespace::Flexible;
  so.on_warning = [](const std::string& keyword, const std::string& pointer,
                     const std::string& message) {
    log_message(LogLevel::warn, "schema: " + keyword + " at " + pointer + ": " + message);
  };
  return make_grammar_constraint(vocab, json_schema_to_gbnf(schema, so), lazy_triggers);
}

}  // namespace lacuna::decode
