// test_grammar_oracle.cpp — differential test: lacuna's token masks must equal the set of
// tokens llama.cpp's grammar sampler leaves unmasked, at every step of random token walks
// (with refused tokens thrown in), for every grammar in llama.cpp's grammars/ and for
// random grammars, on the llama-bpe, llama-spm and qwen2 vocabularies; and the stress set of
// bench/data/grammars on llama-bpe, qwen2 and gemma-4.
// LACUNA_ORACLE_STEPS (default 6) sets the steps per walk; LACUNA_ORACLE_RANDOM (default 6)
// the number of random grammars per vocabulary; LACUNA_ORACLE_TEXT_TOKENS (default 8) the
// tokens walked in each sample document of bench/data.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <utility>

#include "lacuna/grammar.h"
#include "lacuna/json_schema.h"
#include "lacuna/matcher.h"
#include "lacuna/token_index.h"
#include "llama.h"
#include "match/compiled_data.h"

using namespace lacuna;

namespace {

// Sets a test hook (detail::test_*) for its scope; the value before comes back after it.
template <class T>
struct ScopedHook {
  std::atomic<T>& hook;
  T before;
  ScopedHook(std::atomic<T>& h, T v) : hook(h), before(h.load()) { hook = v; }
  ~ScopedHook() { hook = before; }
};

size_t env_size(const char* name, size_t def) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? static_cast<size_t>(std::strtoull(v, nullptr, 10)) : def;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct VocabFixture {
  std::shared_ptr<llama_model> owner;  // frees the model when the cache goes at exit
  llama_model* model = nullptr;
  const llama_vocab* vocab = nullptr;
  std::shared_ptr<const TokenIndex> index;
};

VocabFixture& vocab_for(const std::string& name) {
  static std::map<std::string, VocabFixture> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  static bool backend = (llama_backend_init(), true);
  (void)backend;
  llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
  std::string path = std::string(LACUNA_LLAMA_SRC_DIR) + "/models/ggml-vocab-" + name + ".gguf";
  llama_model_params mp = llama_model_default_params();
  mp.vocab_only = true;
  VocabFixture fx;
  fx.model = llama_model_load_from_file(path.c_str(), mp);
  if (fx.model != nullptr) {
    fx.owner.reset(fx.model, llama_model_free);
    fx.vocab = llama_model_get_vocab(fx.model);
    fx.index = TokenIndex::build(fx.vocab);
  }
  return cache.emplace(name, std::move(fx)).first->second;
}

// Documented difference (docs/grammar.md): llama.cpp allows end-of-generation tokens while
// a UTF-8 sequence is pending; lacuna does not. Drops exactly those bits from llama.cpp's
// mask, after checking that lacuna's mask has none of them.
void exclude_eog_in_partial(const GrammarMatcher& m, const TokenIndex& index,
                            const std::vector<uint32_t>& ours, std::vector<uint32_t>& theirs) {
  if (!m.in_partial_utf8()) return;
  for (Token t : index.eog_tokens()) {
    EXPECT_FALSE(bitmask_test(ours.data(), t))
        << "end-of-generation allowed inside a UTF-8 sequence";
    theirs[static_cast<size_t>(t) >> 5] &= ~(1u << (static_cast<uint32_t>(t) & 31u));
  }
}

// llama.cpp's mask: the tokens its grammar sampler leaves unmasked.
std::vector<uint32_t> llama_mask(llama_sampler* smpl, size_t n_vocab) {
  std::vector<llama_token_data> data(n_vocab);
  for (size_t i = 0; i < n_vocab; ++i) data[i] = {static_cast<llama_token>(i), 0.0f, 0.0f};
  llama_token_data_array arr{data.data(), data.size(), -1, false};
  llama_sampler_apply(smpl, &arr);
  std::vector<uint32_t> words(bitmask_words(n_vocab), 0);
  for (size_t i = 0; i < arr.size; ++i) {
    if (!std::isinf(arr.data[i].logit)) bitmask_set(words.data(), arr.data[i].id);
  }
  return words;
}

// Reports the first five tokens where two masks differ (`where` names the step); returns
// whether they differ at all.
bool masks_differ(const VocabFixture& fx, const std::vector<uint32_t>& ours,
                  const std::vector<uint32_t>& theirs, const std::string& where) {
  size_t diffs = 0;
  for (size_t t = 0; t < fx.index->n_vocab() && diffs < 5; ++t) {
    const bool a = bitmask_test(ours.data(), static_cast<Token>(t));
    const bool b = bitmask_test(theirs.data(), static_cast<Token>(t));
    if (a != b) {
      ++diffs;
      ADD_FAILURE() << where << " token " << t << " '"
                    << fx.index->token_bytes(static_cast<Token>(t)) << "': lacuna " << a
                    << ", llama.cpp " << b;
    }
  }
  return diffs > 0;
}

struct WalkStats {
  size_t steps = 0;
  size_t refused_checked = 0;
  size_t skipped = 0;
};

// Walks `steps` tokens, comparing masks at every step. Returns false on the first mismatch.
void walk(const VocabFixture& fx, const std::string& gbnf, size_t steps, uint64_t seed,
          WalkStats& stats, std::shared_ptr<const CompiledGrammar> compiled = nullptr) {
  const size_t n_vocab = fx.index->n_vocab();
  Grammar grammar;
  try {
    grammar = parse_gbnf(gbnf);
  } catch (const GrammarError& e) {
    // Random grammars may be left-recursive through rules that can be empty: lacuna
    // rejects those (llama.cpp's check misses some); nothing to compare.
    ASSERT_NE(std::string(e.what()).find("left recursion"), std::string::npos) << e.what();
    ++stats.skipped;
    return;
  }
  llama_sampler* smpl = llama_sampler_init_grammar(fx.vocab, gbnf.c_str(), "root");
  ASSERT_NE(smpl, nullptr) << "llama.cpp refused the grammar:\n" << gbnf;
  // Half the walks use masks computed at compile time, half masks computed on first use.
  CompileOptions options;
  options.eager_ms = (seed & 1) != 0 ? 0.0 : -1.0;
  // Per-rule contexts (where stacks whose context leaves many tokens uncertain get masks of
  // the whole stack), with or without the small rules inlined, and cold prefix masks on
  // some walks.
  options.inline_rules = (seed & 2) == 0;
  options.inline_small_rules = (seed & 8) == 0;
  options.share_masks = (seed & 4) == 0;
  auto cg = compiled ? compiled : CompiledGrammar::compile(grammar, fx.index, options);
  GrammarMatcher m(cg);
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> ours(bitmask_words(n_vocab));
  for (size_t step = 0; step < steps; ++step) {
    std::vector<uint32_t> theirs = llama_mask(smpl, n_vocab);
    m.fill_next_token_bitmask(ours.data());
    exclude_eog_in_partial(m, *fx.index, ours, theirs);
    std::vector<Token> allowed;
    size_t diffs = 0;
    for (size_t t = 0; t < n_vocab; ++t) {
      const bool a = bitmask_test(ours.data(), static_cast<Token>(t));
      const bool b = bitmask_test(theirs.data(), static_cast<Token>(t));
      if (a != b && diffs++ < 5) {
        ADD_FAILURE() << "step " << step << " token " << t << " '"
                      << fx.index->token_bytes(static_cast<Token>(t)) << "': lacuna " << a
                      << ", llama.cpp " << b << "\ngrammar:\n"
                      << gbnf;
      }
      if (a) allowed.push_back(static_cast<Token>(t));
    }
    if (diffs > 0) break;
    ++stats.steps;
    // A few refused tokens must be refused by accept_token and leave the state unchanged.
    for (int k = 0; k < 3; ++k) {
      Token t = static_cast<Token>(rng() % n_vocab);
      if (bitmask_test(ours.data(), t)) continue;
      size_t before = m.history_size();
      EXPECT_FALSE(m.accept_token(t)) << "token " << t << " is masked but accepted";
      EXPECT_EQ(m.history_size(), before);
      ++stats.refused_checked;
    }
    if (allowed.empty()) break;
    // Prefer non-stop tokens; among them sometimes short ones so walks move through the grammar.
    std::vector<Token> pick;
    for (Token t : allowed) {
      if (!fx.index->is_eog(t)) pick.push_back(t);
    }
    if (pick.empty()) break;
    if (rng() % 3 == 0) {
      std::vector<Token> shorter;
      for (Token t : pick) {
        if (fx.index->token_bytes(t).size() <= 2) shorter.push_back(t);
      }
      if (!shorter.empty()) pick.swap(shorter);
    }
    Token chosen = pick[rng() % pick.size()];
    ASSERT_TRUE(m.accept_token(chosen)) << "allowed token " << chosen << " refused";
    try {
      llama_sampler_accept(smpl, chosen);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "llama.cpp threw on an allowed token: " << e.what();
      break;
    }
  }
  llama_sampler_free(smpl);
}

// A random grammar without left recursion: rule i only references rules j > i, or itself
// after a non-empty literal.
// Walks each of a fixed list of grammars `walks` times (seeds from `seed` on), with the
// grammar as the failure trace.
WalkStats walk_each(const VocabFixture& fx, const std::vector<std::string>& grammars, int walks,
                    size_t steps, uint64_t seed) {
  WalkStats stats;
  for (const auto& g : grammars) {
    SCOPED_TRACE(g);
    for (int k = 0; k < walks; ++k) walk(fx, g, steps, seed++, stats);
  }
  return stats;
}

std::string random_grammar(std::mt19937_64& rng) {
  static const std::vector<std::string> atoms = {
      "\"a\"",     "\"b\"",     "\"the\"",  "\" \"",  "\"in\"",
      "\"\\n\"",   "\"{\"",     "\"\\\"\"", "\"é\"",  "\"日本\"",
      "\"ing\"",   "[a-z]",     "[0-9]",    "[^a-z]", "[ \\t]",
      "[a-zA-Z_]", "[^\"\\\\]", ".",        "[é-ü]",  "[\\u4e00-\\u9fff]",
      "\"-\"",     "\"12\"",    "\"é日\""};
  const size_t n_rules = 2 + rng() % 3;
  auto rule_name = [](size_t i) {
    char buf[32];
    if (i == 0) {
      std::snprintf(buf, sizeof buf, "root");
    } else {
      std::snprintf(buf, sizeof buf, "r%zu", i);
    }
    return std::string(buf);
  };
  std::string out;
  for (size_t i = 0; i < n_rules; ++i) {
    out += rule_name(i) + " ::= ";
    const size_t n_alts = 1 + rng() % 3;
    for (size_t a = 0; a < n_alts; ++a) {
      if (a > 0) out += " | ";
      const size_t n_items = 1 + rng() % 3;
      for (size_t k = 0; k < n_items; ++k) {
        std::string item;
        const auto kind = rng() % 10;
        if (kind < 2 && i + 1 < n_rules) {
          item = rule_name(i + 1 + rng() % (n_rules - i - 1));
        } else if (kind == 2 && k > 0 && i > 0) {
          item = rule_name(i);  // right recursion after a non-empty item
          if (out.back() == ' ' && out.size() > 3 && out.substr(out.size() - 3) == "| ")
            item = atoms[0];
        } else if (kind == 3) {
          item = "(" + atoms[rng() % atoms.size()] + " | " + atoms[rng() % atoms.size()] + ")";
        } else {
          item = atoms[rng() % atoms.size()];
        }
        // Few repetitions: llama.cpp's own matcher is exponential in ambiguous grammars.
        static const char* ops[] = {"", "", "", "", "", "*", "+", "?", "{2}", "{1,3}", "{0,2}"};
        if (k + 1 == n_items) item += ops[rng() % 11];
        out += item + " ";
      }
    }
    out += "\n";
  }
  return out;
}

std::vector<llama_token> greedy_tokens(const TokenIndex& index, const std::string& text) {
  std::map<std::string, Token> pieces;
  for (size_t t = 0; t < index.n_vocab(); ++t) {
    if (index.kind(static_cast<Token>(t)) != TokenIndex::Kind::kText ||
        index.is_control(static_cast<Token>(t))) {
      continue;
    }
    pieces.emplace(std::string(index.token_bytes(static_cast<Token>(t))), static_cast<Token>(t));
  }
  std::vector<llama_token> out;
  for (size_t i = 0; i < text.size();) {
    size_t len = std::min<size_t>(16, text.size() - i);
    for (; len > 0; --len) {
      auto it = pieces.find(text.substr(i, len));
      if (it != pieces.end()) {
        out.push_back(it->second);
        break;
      }
    }
    if (len == 0) break;
    i += len;
  }
  return out;
}

class Oracle : public ::testing::TestWithParam<std::string> {};

// Walks `toks` through a matcher of the grammar and llama.cpp's sampler side by side,
// comparing masks at every step; returns the steps compared (all of them unless a mask
// differs, which fails the test).
size_t text_walk(const VocabFixture& fx, const std::string& gbnf, const std::vector<Token>& toks,
                 const CompileOptions& options) {
  llama_sampler* smpl = llama_sampler_init_grammar(fx.vocab, gbnf.c_str(), "root");
  EXPECT_NE(smpl, nullptr);
  if (smpl == nullptr) return 0;
  GrammarMatcher m(CompiledGrammar::compile(parse_gbnf(gbnf), fx.index, options));
  std::vector<uint32_t> ours(bitmask_words(fx.index->n_vocab()));
  size_t steps = 0;
  for (size_t i = 0; i < toks.size(); ++i) {
    m.fill_next_token_bitmask(ours.data());
    std::vector<uint32_t> theirs = llama_mask(smpl, fx.index->n_vocab());
    exclude_eog_in_partial(m, *fx.index, ours, theirs);
    if (masks_differ(fx, ours, theirs, "step " + std::to_string(i))) break;
    if (!bitmask_test(ours.data(), toks[i]) || !m.accept_token(toks[i])) {
      ADD_FAILURE() << "step " << i << " leaves the grammar";
      break;
    }
    llama_sampler_accept(smpl, toks[i]);
    ++steps;
  }
  llama_sampler_free(smpl);
  return steps;
}

// A test name for a vocabulary ("llama-bpe" -> "llama_bpe").
std::string vocab_test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;
  for (char& c : s) {
    if (c == '-') c = '_';
  }
  return s;
}

// Objects of string keys and string, number or array values.
const char* const kKeyValueGrammar = R"g(root ::= "{" ws (kv ("," ws kv)*)? "}"
kv ::= "\"" [^"\\]* "\"" ws ":" ws val
val ::= "\"" [^"\\]* "\"" | [0-9]+ | "[" (val ("," val)*)? "]"
ws ::= [ ]?)g";
// A JSON string with its escapes.
const char* const kJsonStringGrammar = R"g(root ::= "\"" char* "\""
char ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))g";
// Words that share prefixes, then a newline and more.
const char* const kWordsGrammar =
    R"g(root ::= "the" " " ("in" | "ing" | "a" [a-z]{0,3}) ("\n" root)?)g";

// Per-rule contexts (a context of each rule, which goes on past its end to its callers),
// their masks computed lazily (eager_ms 0) or all at compile time (-1).
CompileOptions per_rule_contexts(double eager_ms) {
  CompileOptions options;
  options.eager_ms = eager_ms;
  options.inline_rules = false;
  options.inline_small_rules = false;
  return options;
}

// Masks on first use (eager_ms 0) or all at compile time (-1), no prefix masks shared with
// earlier grammars.
CompileOptions cold_masks(double eager_ms) {
  CompileOptions options;
  options.eager_ms = eager_ms;
  options.share_masks = false;
  return options;
}

// Each (grammar, text) case walked along its text and at random (three walks of `steps`),
// masks on first use and at compile time, all cold (with per-rule contexts where
// `inline_rules` is false); returns the text steps compared and adds the text's tokens to
// *text_tokens.
size_t walk_cases(const VocabFixture& fx,
                  const std::vector<std::pair<std::string, std::string>>& cases, size_t steps,
                  uint64_t seed, WalkStats& stats, size_t* text_tokens, bool inline_rules = true) {
  size_t text_steps = 0;
  for (const auto& [gbnf, text] : cases) {
    SCOPED_TRACE(gbnf);
    const std::vector<Token> toks = greedy_tokens(*fx.index, text);
    for (double eager_ms : {0.0, -1.0}) {
      CompileOptions options = cold_masks(eager_ms);
      options.inline_rules = inline_rules;
      text_steps += text_walk(fx, gbnf, toks, options);
      *text_tokens += toks.size();
      auto cg = CompiledGrammar::compile(parse_gbnf(gbnf), fx.index, options);
      for (int k = 0; k < 3; ++k) walk(fx, gbnf, steps, seed++, stats, cg);
    }
  }
  return text_steps;
}

// Walks a real document of each grammar (bench/data) token by token, comparing masks at
// every step: deep, realistic states that random walks rarely reach.
TEST_P(Oracle, SampleTextWalksMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const size_t max_tokens = env_size("LACUNA_ORACLE_TEXT_TOKENS", 8);
  const std::filesystem::path data =
      std::filesystem::path(__FILE__).parent_path().parent_path() / "bench" / "data";
  const std::filesystem::path grammars = std::filesystem::path(LACUNA_LLAMA_SRC_DIR) / "grammars";
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {"json", "sample.json"},          {"json_arr", "json_arr.txt"},
      {"arithmetic", "arithmetic.txt"}, {"c", "c.txt"},
      {"chess", "chess.txt"},           {"english", "english.txt"},
      {"japanese", "japanese.txt"},     {"list", "list.txt"}};
  size_t steps = 0;
  for (const auto& [name, file] : pairs) {
    SCOPED_TRACE(name);
    const std::string gbnf = read_file(grammars / (name + ".gbnf"));
    const std::string text = read_file(data / file);
    ASSERT_FALSE(text.empty()) << (data / file);
    std::vector<llama_token> toks(text.size() + 8);
    int32_t n = llama_tokenize(fx.vocab, text.data(), static_cast<int32_t>(text.size()),
                               toks.data(), static_cast<int32_t>(toks.size()), false, false);
    ASSERT_GT(n, 0);
    toks.resize(static_cast<size_t>(n));
    if (fx.index->token_bytes(toks[0]) != text.substr(0, fx.index->token_bytes(toks[0]).size())) {
      // SentencePiece adds a leading space; any valid token sequence will do: greedy
      // longest match over the vocabulary's pieces.
      toks = greedy_tokens(*fx.index, text);
    }
    toks.resize(std::min(toks.size(), max_tokens));
    llama_sampler* smpl = llama_sampler_init_grammar(fx.vocab, gbnf.c_str(), "root");
    ASSERT_NE(smpl, nullptr);
    GrammarMatcher m(CompiledGrammar::compile(parse_gbnf(gbnf), fx.index));
    std::vector<uint32_t> ours(bitmask_words(fx.index->n_vocab()));
    for (size_t i = 0; i < toks.size(); ++i) {
      m.fill_next_token_bitmask(ours.data());
      std::vector<uint32_t> theirs = llama_mask(smpl, fx.index->n_vocab());
      exclude_eog_in_partial(m, *fx.index, ours, theirs);
      if (ours != theirs) {
        for (size_t t = 0; t < fx.index->n_vocab(); ++t) {
          const bool a = bitmask_test(ours.data(), static_cast<Token>(t));
          const bool b = bitmask_test(theirs.data(), static_cast<Token>(t));
          if (a != b) {
            std::string hex;
            for (unsigned char c : fx.index->token_bytes(static_cast<Token>(t)))
              hex += std::to_string(c) + " ";
            ADD_FAILURE() << "step " << i << " token " << t << " bytes " << hex << ": lacuna " << a
                          << ", llama.cpp " << b;
          }
        }
        break;
      }
      // A tokenizer may emit what the grammar cannot (SentencePiece's leading space): stop.
      if (!bitmask_test(ours.data(), toks[i])) break;
      ASSERT_TRUE(m.accept_token(toks[i])) << "step " << i;
      llama_sampler_accept(smpl, toks[i]);
      ++steps;
    }
    llama_sampler_free(smpl);
  }
  std::printf("[oracle] %s sample texts: %zu steps compared\n", GetParam().c_str(), steps);
}

TEST_P(Oracle, LlamaCppGrammarsMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const size_t steps = env_size("LACUNA_ORACLE_STEPS", 6);
  std::filesystem::path dir = std::filesystem::path(LACUNA_LLAMA_SRC_DIR) / "grammars";
  WalkStats stats;
  size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".gbnf") continue;
    SCOPED_TRACE(entry.path().filename().string());
    walk(fx, read_file(entry.path()), steps, 1234 + n, stats);
    ++n;
  }
  std::printf(
      "[oracle] %s grammars/: %zu grammars, %zu steps compared, %zu refused tokens checked\n",
      GetParam().c_str(), n, stats.steps, stats.refused_checked);
  EXPECT_GE(n, 8u);
  EXPECT_GT(stats.steps, n);
  EXPECT_GT(stats.refused_checked, 0u);
}

TEST_P(Oracle, RandomGrammarsMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const size_t steps = env_size("LACUNA_ORACLE_STEPS", 6);
  const size_t count = env_size("LACUNA_ORACLE_RANDOM", 6);
  std::mt19937_64 rng(std::hash<std::string>{}(GetParam()));
  WalkStats stats;
  for (size_t i = 0; i < count; ++i) {
    std::string g = random_grammar(rng);
    SCOPED_TRACE(g);
    walk(fx, g, steps, rng(), stats);
  }
  std::printf(
      "[oracle] %s random: %zu grammars (%zu skipped as left-recursive), %zu steps compared\n",
      GetParam().c_str(), count, stats.skipped, stats.steps);
  EXPECT_GT(stats.steps, 0u);
}

// Every way of computing masks gives the same masks along a long JSON walk: chains of
// inlined rules or per-rule contexts (small rules inlined or not), masks at compile time
// or on first use, rule-prefix masks shared across grammars or cold. The first compile
// warms the shared prefix masks that the later ones reuse.
TEST_P(Oracle, ContextModesGiveEqualMasks) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::filesystem::path root = std::filesystem::path(__FILE__).parent_path().parent_path();
  const std::string gbnf =
      read_file(std::filesystem::path(LACUNA_LLAMA_SRC_DIR) / "grammars" / "json.gbnf");
  const std::string text = read_file(root / "bench" / "data" / "sample.json");
  std::vector<Token> toks = greedy_tokens(*fx.index, text);
  toks.resize(std::min<size_t>(toks.size(), 80));
  std::vector<std::vector<uint32_t>> reference;
  for (int mode = 0; mode < 16; ++mode) {
    SCOPED_TRACE("mode " + std::to_string(mode));
    CompileOptions o;
    o.inline_rules = (mode & 1) == 0;
    o.inline_small_rules = (mode & 8) == 0;
    o.share_masks = (mode & 2) == 0;
    o.eager_ms = (mode & 4) != 0 ? -1.0 : 0.0;
    GrammarMatcher m(CompiledGrammar::compile(parse_gbnf(gbnf), fx.index, o));
    std::vector<uint32_t> words(bitmask_words(fx.index->n_vocab()));
    for (size_t i = 0; i < toks.size(); ++i) {
      m.fill_next_token_bitmask(words.data());
      if (mode == 0) {
        reference.push_back(words);
      } else {
        ASSERT_EQ(words, reference[i]) << "step " << i;
      }
      if (!bitmask_test(words.data(), toks[i])) {
        ASSERT_GT(i, 8u) << "the sample text leaves the grammar early";
        break;
      }
      ASSERT_TRUE(m.accept_token(toks[i])) << "step " << i;
    }
  }
}

// Bounded repetitions of broad classes (what JSON Schema's maxLength and whitespace bounds
// compile to): the compiler accepts whole vocabulary subtrees at once along such runs, so
// check its masks where a token is just short enough, or just too long, for what is left.
TEST_P(Oracle, BoundedRepetitionMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::vector<std::string> grammars = {R"(root ::= "\"" [^"\\]{0,7} "\"")",
                                             R"(root ::= "\"" [^"\\]{2,5} "\"" [ \t]{0,3} "x")",
                                             R"(root ::= [a-z]{1,9} ("-" [a-z]{0,3})?)",
                                             R"(root ::= "[" ws num ("," ws num){0,2} "]"
num ::= "-"? [0-9]{1,6}
ws ::= [ \t\n]{0,6})",
                                             R"(root ::= ([a-zA-Z0-9 ] | "é"){0,10} "!")"};
  const WalkStats stats = walk_each(fx, grammars, 2, 10, 77);
  std::printf("[oracle] %s bounded repetitions: %zu steps compared\n", GetParam().c_str(),
              stats.steps);
  EXPECT_GT(stats.steps, grammars.size());
}

// A run's depth is followed only as far as a walk asks (the height of the subtree it would
// take) and kept as a lower bound past that. Bounded repetitions near a token's length, and
// a long one after a literal (a `maxLength` string after a key), with every depth computed
// checked against its chain followed to the end (a bound may not claim more).
TEST_P(Oracle, LazyRunDepthsMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  std::vector<std::string> grammars = {
      R"(root ::= "x" [^\n]{0,5} "\n" [^\n]{0,3} "\n")",
      R"(root ::= "\"" [^"\\]{0,255} "\"" [ ]{0,3} "\"")",
      // A schema's object of strings with a maxLength, as the converter writes it.
      R"(root ::= "{" ws ("\"company\"" ws ":" ws s ("," ws "\"role\"" ws ":" ws s)?)? ws "}"
s ::= "\"" c{0,255} "\"" | "null"
c ::= [^"\\\x00-\x1F] | "\\" ["\\/bfnrt]
ws ::= [ \t\n]{0,20})"};
  // Bounds near the length of a token; digits come first in the trie and their subtrees
  // are short, so a set is first asked for a little depth.
  for (int n = 3; n <= 8; ++n) {
    const std::string word = "[0-9a-z]{0," + std::to_string(n) + "}";
    grammars.push_back("root ::= " + word + " (\".\" " + word + "){0,2} \";\"");
    grammars.push_back("root ::= \"{\\\"\" [a-z]{0," + std::to_string(n) +
                       "} \"\\\":\\\"\" [^\"\\\\]{0," + std::to_string(n + 2) + "} \"\\\"}\"");
  }
  // Every depth computed is also checked against its chain followed to the end.
  struct CheckDepths {
    CheckDepths() { detail::test_check_run_depths = true; }
    ~CheckDepths() { detail::test_check_run_depths = false; }
  } check;
  const uint64_t bounds0 = detail::test_walk_counters.depth_bounds.load();
  const WalkStats stats = walk_each(fx, grammars, 4, 12, 4242);
  const uint64_t bounds = detail::test_walk_counters.depth_bounds.load() - bounds0;
  std::printf("[oracle] %s lazy run depths: %zu steps compared, %llu depths left as bounds\n",
              GetParam().c_str(), stats.steps, static_cast<unsigned long long>(bounds));
  EXPECT_GT(stats.steps, grammars.size());
  EXPECT_GT(bounds, 0u);
}

// Chains whose positions have equal structural classes share one mask walk; these grammars
// have equal rules and equal rests in places whose continuations differ, so a key that left
// out the continuation past a chain's end, or told apart too little, would show here.
TEST_P(Oracle, StructurallyEqualChainsMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::vector<std::string> grammars = {
      R"g(root ::= a "x" | b "y" | a "," b
a ::= [0-9]+
b ::= [0-9]+)g",
      R"g(root ::= item ("," ws item)*
item ::= "(" ws v ws ")" | "[" ws v ws "]" | "{" ws v ws "}" ws
v ::= [a-z]+ | item
ws ::= [ ]*)g",
      R"g(root ::= s1 ":" ws s2 | s2 "=" ws s1 ws "." | "<" s1 ">"
s1 ::= "\"" [a-z ]* "\""
s2 ::= "\"" [a-z ]* "\""
ws ::= [ \t]{0,3})g",
      // Repetition families (x{0,n} expands to r_n ::= x r_{n-1} | ""): chains at levels a
      // token cannot tell apart share a mask (families of 24 levels or more, from level 8);
      // nested counts are two families in one chain.
      R"g(root ::= "\"" ("" | g{0,30} w) "\"" | "<" (g{0,3}){0,4} ">"
g ::= w s
w ::= [^ "\\<>]+
s ::= [ ]+)g"};
  const WalkStats stats = walk_each(fx, grammars, 3, 10, 901);
  std::printf("[oracle] %s structurally equal chains: %zu steps compared\n", GetParam().c_str(),
              stats.steps);
  EXPECT_GT(stats.steps, grammars.size() * 3);
}

// Prefix masks shared across grammars are keyed by the closures of the rules a prefix calls
// (each rule with every rule it reaches, numbered by first use). Grammars whose rules differ
// only below a call (b, then c), and one that renames them all, compiled in turn over one
// TokenIndex with shared masks: the renamed one names closures already known, the others
// new ones, and every mask equals llama.cpp's.
TEST_P(Oracle, SharedPrefixClosuresMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::string list = R"g(root ::= "[" ws a (ws "," ws a)* ws "]"
ws ::= [ ]{0,2}
)g";
  const std::vector<std::string> grammars = {list + R"g(a ::= "k" b
b ::= c "." | "!"
c ::= [0-9]{1,3})g",
                                             list + R"g(a ::= "k" b
b ::= c ";" | "!"
c ::= [0-9]{1,3})g",
                                             list + R"g(a ::= "k" b
b ::= c "." | "!"
c ::= [a-z]{1,3})g",
                                             R"g(root ::= "[" sp item (sp "," sp item)* sp "]"
sp ::= [ ]{0,2}
item ::= "k" tail
tail ::= digits "." | "!"
digits ::= [0-9]{1,3})g"};
  auto closures = [&] {
    detail::SharedMasks& shared = fx.index->shared_masks();
    std::lock_guard<std::mutex> lock(shared.mu);
    return shared.closures.size();
  };
  WalkStats stats;
  uint64_t seed = 5150;
  std::vector<size_t> added;
  for (const std::string& gbnf : grammars) {
    SCOPED_TRACE(gbnf);
    const size_t before = closures();
    for (int k = 0; k < 4; ++k) {
      CompileOptions options;
      options.eager_ms = k % 2 == 0 ? -1.0 : 0.0;
      options.inline_rules = k < 2;
      auto cg = CompiledGrammar::compile(parse_gbnf(gbnf), fx.index, options);
      walk(fx, gbnf, 16, seed++, stats, cg);
    }
    added.push_back(closures() - before);
  }
  std::printf("[oracle] %s shared prefix closures: %zu steps compared\n", GetParam().c_str(),
              stats.steps);
  EXPECT_GT(stats.steps, grammars.size() * 4);
  EXPECT_GT(added[1], 0u);  // b differs
  EXPECT_GT(added[2], 0u);  // c differs, below b
  EXPECT_EQ(added[3], 0u);  // the first grammar, renamed
}

// Rules on no cycle are classed by the hash of their signature, and two are one class only
// where the earlier one's signature, made again, is equal. With every such rule given one
// hash, each is compared with all the earlier ones: rules that differ in a letter, a class,
// a callee or an alternative stay apart, and equal ones (a, c) share their chains' masks.
TEST_P(Oracle, CollidingRuleSignaturesMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::vector<std::string> grammars = {
      R"g(root ::= a "x" | b "y" | c "z" | d "w" | e "v"
a ::= [0-9]+ "a"
b ::= [0-9]+ "b"
c ::= [0-9]+ "a"
d ::= [0-7]+ "a"
e ::= [0-9]+ "a" | "q")g",
      R"g(root ::= k1 | k2 | k3
k1 ::= "{" ws "\"id\"" ws ":" ws num ws "}"
k2 ::= "{" ws "\"ix\"" ws ":" ws num ws "}"
k3 ::= "{" ws "\"id\"" ws ":" ws str ws "}"
num ::= [0-9]{1,6}
str ::= "\"" [a-z]{0,8} "\""
ws ::= [ ]{0,2})g"};
  const uint64_t again0 = detail::test_walk_counters.rules_signed_again.load();
  detail::test_collide_rule_hashes = true;
  const WalkStats stats = walk_each(fx, grammars, 4, 12, 4242);
  detail::test_collide_rule_hashes = false;
  const uint64_t again = detail::test_walk_counters.rules_signed_again.load() - again0;
  std::printf("[oracle] %s rules signed again %llu: %zu steps compared\n", GetParam().c_str(),
              static_cast<unsigned long long>(again), stats.steps);
  EXPECT_GT(again, 10u);
  EXPECT_GT(stats.steps, grammars.size() * 4);
}

// Loops over broad classes (a string's characters, a key outside a list of names) are
// skipped through their class exits: the tokens before the first code point outside the
// class are taken at once, and the walk goes on at that code point, inside the context or
// past its end (a string that closes and goes on with a comma and another string). Exits
// at every depth of a token, partial UTF-8 tails in a class with code points >= 128, and
// classes that leave out one letter of a name that goes on differently.
TEST_P(Oracle, ClassExitSkipMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::vector<std::string> grammars = {
      kKeyValueGrammar,
      R"g(root ::= "[" (s ("," s)*)? "]"
s ::= "\"" [^"]* "\"")g",
      R"g(root ::= "\"" (name | other) "\"" ":" [0-9]
name ::= "ab" ("cd" | "x" [^"\\c]*)?
other ::= [^"\\a] [^"\\]* | "a" [^"\\b] [^"\\]*)g",
      R"g(root ::= "<" [^<>]* ">" ("x" | [^x<>]{0,3}) "<" [^<>]{0,40} ">")g"};
  const WalkStats stats = walk_each(fx, grammars, 3, 12, 4242);
  std::printf("[oracle] %s class-exit skips: %zu steps compared\n", GetParam().c_str(),
              stats.steps);
  EXPECT_GT(stats.steps, grammars.size() * 3);
}

// A context whose top takes a broad class C0 into a loop on a broad class C1 copies the
// shared bitmask of the tokens C0 C1* and walks only what lies outside it. C0 narrower and
// wider than C1, a C0 that leaves out a code point >= 128 (the high code points are then
// walked one by one), partial UTF-8 tails, JSON's escapes, and a loop that ends in a second
// class right after.
TEST_P(Oracle, RootCoverMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::vector<std::string> grammars = {
      R"g(root ::= "{" (kv ("," kv)*)? "}"
kv ::= "\"" ("id" | [^"\\i] [^"\\]* | "i" [^"\\d] [^"\\]*) "\"" ":" [0-9])g",
      R"g(root ::= "<" [^<>] [^<>,;]* ("," [^<>é] [^<>]*)* ">")g",
      R"g(root ::= "\"" char* "\"" ("," "\"" char* "\"")*
char ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))g",
      R"g(root ::= "[" [^\]]* "]" [^\[]{0,5} "[" [a-z ]* "]")g"};
  const WalkStats stats = walk_each(fx, grammars, 3, 20, 5151);
  std::printf("[oracle] %s root covers: %zu steps compared\n", GetParam().c_str(), stats.steps);
  EXPECT_GT(stats.steps, grammars.size() * 3);
}

// Bounded runs of broad classes shorter than the tokens below them (`[^\n]{0,3}`): the
// walk takes the tokens between the class's exits and the nodes one past the run's depth
// at once, and goes on only at those nodes. Whole-stack contexts where the run may end
// after any code point (nothing lies past them), contexts whose rule returns somewhere,
// pending prefix walks, runs that end in a class that takes a partial UTF-8 tail, bounded
// covers, and tolerant takes.
// Runs of classes that take every code point from 128 on but a few (holes): a string's `.`
// (no U+2028, U+2029), `\S`, holes common tokens hit (é-ü), members with different holes,
// a hole at 128, a bounded run with holes (its stops found from the class exits), and runs
// whose levels have different holes.
TEST_P(Oracle, ClassHolesMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::vector<std::string> grammars = {
      R"g(root ::= "\"" [^"\\\x00-\x1F\u2028\u2029]* "\"" ("," root)?)g",
      R"g(root ::= [^ \t\n\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]{1,6} (" " root)?)g",
      R"g(root ::= "\"" [^"é-ü]* "\"" [é-ü]? "!")g", R"g(root ::= ([^a日] | [^b本])* ".")g",
      R"g(root ::= [^"\x80-\xff]* "\"" [^\u0100-\u017f]{0,3})g",
      R"g(root ::= "\"" [^"\\\u2028\u2029]{0,5} "\"" (" " root)?)g",
      // A run whose next level has more holes, then fewer (its strings end where the
      // holes differ).
      R"g(root ::= "<" [^<>é]{3} [^<>é-ü]* ">" [^<>é-ü]{3} [^<>é]* "<")g",
      // Letter classes written out as ranges (a schema's Unicode-letter `pattern`): more
      // holes than a few, outside the class and inside it.
      R"g(root ::= "\"" [^\x00-\x1F"\\!$'-*,;<>?\[-^`{-\u009F\u00A1-\u00A9\u00AB-\u00B1\u00B4\u00B6-\u00B8\u00BB\u00BF\u00D7\u00F7\u02C2-\u02C5\u02D2-\u02DF\u0375\u0378\u0379\u037E\u0380-\u0385\u0387\u038B\u038D\u03A2\u03F6\u0482-\u0489\u0530\u2000-\u206F\u3000-\u303F]{1,40} "\"" ("," root)?)g",
      R"g(root ::= [a-z\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u02C1\u0370-\u0373\u0376\u0377\u037B-\u037D\u0386\u0388-\u038A\u038C\u038E-\u03A1\u03A3-\u03F5\u0400-\u0481\u048A-\u052F]+ (" " root)?)g"};
  const WalkStats stats = walk_each(fx, grammars, 3, 8, 4242);
  std::printf("[oracle] %s class holes: %zu steps compared\n", GetParam().c_str(), stats.steps);
  EXPECT_GT(stats.steps, grammars.size() * 4);
}

// Runs whose code points from 128 on are given by ranges (CJK ideographs and kana, a
// Cyrillic block, Latin-1 letters beside ASCII ones) or are all of them with no ASCII
// (`[^\x00-\x7F]`): their classes, covers and exits (built from the nodes inside the
// class), a first code point wider or narrower than the rest in those ranges, a member whose
// class has too many ranges to keep, and runs of two kinds side by side.
TEST_P(Oracle, HighRangeRunsMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::vector<std::string> grammars = {
      R"g(root ::= ([\u4e00-\u9fff\u3040-\u30ff\uff01-\uff5e]{1,8} ("。" | "！" | "？") "\n"?){1,3})g",
      R"g(root ::= [^\x00-\x7F]{1,5} (", " [^\x00-\x7F]{1,5}){0,3})g",
      R"g(root ::= [a-zA-Z\u00c0-\u00ff]+ (" " [a-zA-Z\u00c0-\u00ff]+)* ".")g",
      R"g(root ::= ([\u0400-\u04ff]+ | [^\x00-\x7F]{1,4}) ("," root)?)g",
      R"g(root ::= "\"" [\u0400-\u04ff\u4e00-\u9fff]* "\"")g",
      R"g(root ::= [\u3040-\u30ff\u4e00-\u9fff] [\u4e00-\u9fff]{0,6} "。" [a-z]*)g",
      R"g(root ::= [\u00e0\u00e2\u00e4\u00e6\u00e8\u00ea\u00ec\u00ee\u00f0\u00f2\u4e00-\u9fff]{1,4} ".")g",
      // A run of ranges, then one of every code point but those ranges (it does not go on
      // into it); a first class narrower than the loop after it (not a cover).
      // (The string's loop builds the Cyrillic class's exits for the run after it.)
      R"g(root ::= "\"" [\u0400-\u04ff]* "\" " [\u0400-\u04ff] [^\x00-\x7F\u0400-\u04ff]* ".")g",
      R"g(root ::= [\u4e00-\u9fff] [\u4e00-\u9fff\u0400-\u04ff]* ".")g",
      // Ranges that members cut into pieces stepping apart: `о` also starts a literal
      // (`ной`, `кой`: after a first letter, `о` may go on in either).
      R"g(root ::= ([\u0400-\u0438\u043a-\u04ff] | "о" "й")+ ".")g"};
  const WalkStats stats = walk_each(fx, grammars, 3, 10, 6262);
  std::printf("[oracle] %s high ranges: %zu steps compared\n", GetParam().c_str(), stats.steps);
  EXPECT_GT(stats.steps, grammars.size() * 4);
}

// A root cover whose first code point's class is wider than the rest of the run's (any
// code point first, then any but the `<` that may start the marker): the tokens of
// (C0 and C1) C1* up to the run's length are covered, the root's children outside C1 walked.
TEST_P(Oracle, FirstClassWiderCoverMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::vector<std::string> grammars = {R"g(root ::= (.{0,12} "<E>" "\n"){2})g",
                                             R"g(root ::= . [^<]* "<" [^\n]{0,3})g",
                                             R"g(root ::= ([^\n] [^\n<]{0,6} "<"){1,3})g",
                                             R"g(root ::= .{0,1} "<" .{0,2} ">")g",
                                             R"g(root ::= "[" [^\[]{0,3} "[" [a-z ]* "]")g",
                                             R"g(root ::= "\"" ([^"\\] [^"\\é]{0,4} "é")* "\"")g"};
  const WalkStats stats = walk_each(fx, grammars, 4, 12, 5151);
  std::printf("[oracle] %s first class wider: %zu steps compared\n", GetParam().c_str(),
              stats.steps);
  EXPECT_GT(stats.steps, grammars.size() * 4);
}

// The root's children less the leaves above ASCII whose tokens have no partial UTF-8 tail
// (which a cover taking every code point from 128 on holds), every root child's summary
// (RootChild) and every child's code point (child_cps): checked against the trie and the
// tokens themselves.
TEST_P(Oracle, RootChildrenButHighLeavesListsTheRest) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const TokenIndex& ix = *fx.index;
  const auto& trie = ix.trie();
  const auto& tt = ix.trie_tokens();
  std::vector<uint32_t> expect;
  size_t skipped = 0;
  for (uint32_t j : ix.root_children()) {
    const uint32_t te =
        trie[j].end < trie.size() ? trie[trie[j].end].tok_begin : static_cast<uint32_t>(tt.size());
    bool partial = false;
    for (uint32_t k = trie[j].tok_begin; k < te; ++k) partial |= tt[k].partial.n_remain != 0;
    if (trie[j].cp >= 128 && trie[j].end == j + 1 && !partial) {
      ++skipped;
    } else {
      expect.push_back(j);
    }
  }
  std::vector<uint32_t> rest;
  for (const auto& rc : ix.root_kids_but_high_leaves()) rest.push_back(rc.node);
  EXPECT_EQ(rest, expect);
  // Every root child's summary, against its node and subtree.
  ASSERT_EQ(ix.root_kids().size(), ix.root_children().size());
  for (size_t k = 0; k < ix.root_kids().size(); ++k) {
    const TokenIndex::RootChild& rc = ix.root_kids()[k];
    const uint32_t j = ix.root_children()[k];
    const auto& sc = ix.subtree_chars()[j];
    const uint32_t te =
        trie[j].end < trie.size() ? trie[trie[j].end].tok_begin : static_cast<uint32_t>(tt.size());
    bool partial = false;
    for (uint32_t t = trie[j].tok_begin; t < te; ++t) partial |= tt[t].partial.n_remain != 0;
    ASSERT_EQ(rc.node, j);
    EXPECT_EQ(rc.cp, trie[j].cp);
    EXPECT_EQ(rc.end, trie[j].end);
    EXPECT_EQ(rc.height, sc.height);
    EXPECT_EQ(rc.ascii[0], sc.ascii[0]);
    EXPECT_EQ(rc.ascii[1], sc.ascii[1]);
    EXPECT_EQ(rc.non_ascii, sc.non_ascii);
    EXPECT_EQ(rc.partial, partial) << "root child " << j;
  }
  // Every child's code point beside its node id (child_cps).
  ASSERT_EQ(ix.child_cps().size(), ix.child_nodes().size());
  for (size_t k = 0; k < ix.child_nodes().size(); ++k) {
    ASSERT_EQ(ix.child_cps()[k], trie[ix.child_nodes()[k]].cp) << "child entry " << k;
  }
  std::printf("[oracle] %s root children %zu, high leaves left out %zu\n", GetParam().c_str(),
              ix.root_children().size(), skipped);
}

// The code-point pairs (each group's nodes again by their parent's group, in trie order), the
// nodes above ASCII by code point, and each group's token bitmask (with the ASCII blocks'
// unions), against the trie and the tokens' own code points.
TEST_P(Oracle, CodePointPairsAndTokenBitsMatchTheTrie) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const TokenIndex& ix = *fx.index;
  const auto& trie = ix.trie();
  constexpr uint32_t kG = TokenIndex::kCpGroups;
  auto group_of = [](uint32_t cp) { return cp < 128 ? cp : 128u; };
  // Every node below depth one once, in the pair of its code point and its parent's.
  std::vector<uint32_t> parent_of(trie.size(), 0);
  for (uint32_t j = 0; j < trie.size(); ++j) {
    for (uint32_t c = j + 1; c < trie[j].end; c = trie[c].end) parent_of[c] = j;
  }
  const auto& pairs = ix.cp_pairs();
  const auto& poff = ix.cp_pair_offsets();
  ASSERT_EQ(poff.size(), size_t{kG} * kG + 1);
  ASSERT_EQ(poff.back(), pairs.size());
  std::vector<uint8_t> seen(trie.size(), 0);
  size_t deep = 0;
  for (uint32_t j = 1; j < trie.size(); ++j) deep += parent_of[j] != 0;
  ASSERT_EQ(pairs.size(), deep);
  for (uint32_t p = 0; p < kG * kG; ++p) {
    for (uint32_t k = poff[p]; k < poff[p + 1]; ++k) {
      const uint32_t j = pairs[k].node;
      ASSERT_LT(j, trie.size());
      ASSERT_NE(parent_of[j], 0u) << "node " << j << " is a root child";
      EXPECT_EQ(pairs[k].parent_cp, trie[parent_of[j]].cp);
      EXPECT_EQ(group_of(trie[j].cp) * kG + group_of(trie[parent_of[j]].cp), p);
      if (k > poff[p]) {
        EXPECT_LT(pairs[k - 1].node, j) << "pair " << p << " not in trie order";
      }
      EXPECT_EQ(seen[j]++, 0) << "node " << j << " twice";
    }
  }
  // The nodes above ASCII, sorted by code point and then node, with their parent's.
  const auto& high = ix.high_nodes();
  size_t n_high = 0;
  for (uint32_t j = 1; j < trie.size(); ++j) n_high += trie[j].cp >= 128;
  ASSERT_EQ(high.size(), n_high);
  for (size_t k = 0; k < high.size(); ++k) {
    const auto& h = high[k];
    ASSERT_LT(h.node, trie.size());
    EXPECT_EQ(h.cp, trie[h.node].cp);
    EXPECT_EQ(h.parent_cp,
              parent_of[h.node] == 0 ? TokenIndex::kRootParent : trie[parent_of[h.node]].cp);
    if (k > 0) {
      EXPECT_TRUE(high[k - 1].cp < h.cp || (high[k - 1].cp == h.cp && high[k - 1].node < h.node))
          << "high node " << k << " out of order";
    }
  }
  // Each group's tokens, and each block's union.
  const size_t words = bitmask_words(ix.n_vocab());
  std::vector<std::vector<uint32_t>> expect(kG + 4, std::vector<uint32_t>(words, 0));
  for (const auto& t : ix.trie_tokens()) {
    size_t n;
    const uint32_t* cps = ix.code_points(t.id, &n);
    for (size_t i = 0; i < n; ++i) {
      bitmask_set(expect[group_of(cps[i])].data(), t.id);
      if (cps[i] < 128) bitmask_set(expect[kG + cps[i] / 32].data(), t.id);
    }
  }
  size_t set_bits = 0;
  for (uint32_t g = 0; g < kG + 4; ++g) {
    const uint32_t* got = ix.cp_token_bits(g);
    for (size_t w = 0; w < words; ++w) {
      ASSERT_EQ(got[w], expect[g][w]) << "group " << g << " word " << w;
      set_bits += static_cast<size_t>(__builtin_popcount(got[w]));
    }
  }
  EXPECT_GT(set_bits, ix.trie_tokens().size());
  std::printf("[oracle] %s code-point pairs %zu, nodes above ASCII %zu, group token bits set %zu\n",
              GetParam().c_str(), pairs.size(), high.size(), set_bits);
}

TEST_P(Oracle, BoundedRunCutMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::vector<std::string> grammars = {
      R"g(root ::= [^\n]{1,3} ("\n" [^\n]{0,4}){0,2})g",
      R"g(root ::= "[" item ("," item)* "]"
item ::= "\"" [^"\\]{0,5} "\"" | "(" item ")" | [^,()"\[\]]{2,6})g",
      R"g(root ::= ([^ \n]{1,4} " "){0,3} [^ \n]{0,2} ([é-ü] | [日-本]){0,2})g",
      R"g(root ::= "<" [^<>\n]{0,6} ">" [^<]{0,2} "<" ("a" | [^<>a]{1,3}) ">")g",
      // Bounded covers: a context at the start of a bounded run of one class copies the
      // class's tokens less those longer than the run (JSON Schema's maxLength strings).
      R"g(root ::= ("\"" char{0,9} "\"" | "<" [^<>]{8,12} ">") ("," root)?
char ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))g",
      // Tolerant takes: contexts that may end after any code point with something past
      // their end, which takes none of the run's class (a last line, a word before a
      // comma), or some of it (`extra` is e, x, tra).
      R"g(root ::= line ("\n" line){0,2}
line ::= [^\n]{1,12})g",
      R"g(root ::= w ("," w)* "." ("é" | [^.]{0,3})
w ::= [^,.]{1,9})g",
      R"g(root ::= w ("x" w){0,3}
w ::= [a-z]{1,3})g",
      // Tolerant runs whose last code point only ends the context (held by the cover), and
      // whose last level takes fewer code points, which only end it (not held).
      R"g(root ::= w ("\n" w){0,3}
w ::= [^\n]{1,6})g",
      R"g(root ::= w ("," root)?
w ::= [^,]{1,5} [^,a-m]?)g",
      R"g(root ::= "(" w ("," w)* ")" | "[" root "]"
w ::= [^,()\[\]]{1,5} [^,()a-m]?)g"};
  const WalkStats stats = walk_each(fx, grammars, 3, 8, 3131);
  // A word whose context may end after any letter, inside a recursive rule where a real
  // continuation follows the end and takes a letter of the word's class: after "<<",
  // `extra` is e, the two ends, x, tra.
  const std::string nested = R"g(root ::= "<" b "x" b ">"
b ::= "<" b ">"? | [a-z]{1,3})g";
  CompileOptions lazy;
  lazy.eager_ms = 0;
  GrammarMatcher m(CompiledGrammar::compile(parse_gbnf(nested), fx.index, lazy));
  llama_sampler* smpl = llama_sampler_init_grammar(fx.vocab, nested.c_str(), "root");
  ASSERT_NE(smpl, nullptr);
  for (Token t : greedy_tokens(*fx.index, "<<")) {
    ASSERT_TRUE(m.accept_token(t));
    llama_sampler_accept(smpl, t);
  }
  std::vector<uint32_t> ours(bitmask_words(fx.index->n_vocab()));
  m.fill_next_token_bitmask(ours.data());
  EXPECT_TRUE(ours == llama_mask(smpl, fx.index->n_vocab())) << "after <<";
  llama_sampler_free(smpl);
  std::printf("[oracle] %s bounded-run cuts: %zu steps compared\n", GetParam().c_str(),
              stats.steps);
  EXPECT_GT(stats.steps, grammars.size() * 4);
}

// Quiet takes: walks observed for a repetition family (24 levels or more, entered at level
// 8 or above) and prefix walks run with strict runs, which stop wherever the context may
// end; a frame of a broad class is then taken with quiet runs (nothing past the context's
// end), in a prefix walk as a pending frame, and with tolerant runs where something lies
// past the end (the last line). Lines that may end after any character, words after a
// separator of a deep family, a bounded string whose cover was found with strict runs, each
// walked with masks computed on first use and at compile time. Levels of a family that
// cannot share (below those a known walk's tokens reach, or no higher than a level whose
// observed walk reached the base) are walked unobserved, and some are here.
TEST_P(Oracle, QuietTakesMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::vector<std::string> grammars = {
      R"g(root ::= line ("\n" line){0,2}
line ::= [^\n]{1,30})g",
      R"g(root ::= (word sep){0,30} word
word ::= [^ \t\n]+
sep ::= [ \t\n]+)g",
      R"g(root ::= "\"" char{0,40} "\"" ("," [^,\n]{0,26}){0,3}
char ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))g",
      R"g(root ::= cell ("|" cell){0,3} "\n"
cell ::= [^|\n]{1,28})g",
      R"g(root ::= ([^<]{0,25} "<" [a-z]{1,3} ">"){1,2} [^<]{0,24})g"};
  const uint64_t unobserved0 = detail::test_walk_counters.unobserved_family_walks.load();
  const WalkStats stats = walk_each(fx, grammars, 4, 10, 8181);
  const uint64_t unobserved =
      detail::test_walk_counters.unobserved_family_walks.load() - unobserved0;
  std::printf("[oracle] %s quiet takes: %zu steps compared, %llu family levels unobserved\n",
              GetParam().c_str(), stats.steps, static_cast<unsigned long long>(unobserved));
  EXPECT_GT(stats.steps, grammars.size() * 4);
  EXPECT_GT(unobserved, 0u);
}

// A repetition family's level takes its mask from a higher level's where few tokens are
// longer than it (ContextClassifier::derive_level): the tokens of at most L code points
// keep their answers, and the longer ones that the higher level does not refuse are
// followed from the chain. A JSON string of at most 40 characters with escapes; runs of
// spaces (long tokens on BPE vocabularies) of at most 60; an X of one or two code points;
// code points of CJK text, which split into tokens with partial UTF-8 tails; a line that may
// end after any character, inside a repetition of lines (a key with the other family's
// reference kept exact); a table's cells (levels of prefix masks). Each walked with every level
// derived that has a level above it (the limits on longer tokens lifted), and with the classifier's
// own limits.
TEST_P(Oracle, DerivedLevelsMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"g(root ::= "\"" char{0,40} "\"" ("," [0-9]+)?
char ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))g",
       R"("A title with \"quotes\" and \u00e9, then more",12)"},
      {R"g(root ::= "[" [ a-z]{0,60} "]")g", "[ab" + std::string(40, ' ') + "cd ef]"},
      {R"g(root ::= ([a-z] [0-9]?){0,40} ";")g", "a1bc2d3efg4hij5klmn6opqrs7tuvwx8yz9abc;"},
      {R"g(root ::= [^\x00-\x7F]{0,30} "!")g", "日本語のテキストと絵文字🎉も入る長い行です!"},
      {R"g(root ::= line ("\n" line){0,2}
line ::= [^\n]{1,50})g",
       "The quick brown fox jumps over the lazy dog again.\nshort"},
      {R"g(root ::= row{1,10}
row ::= "|" (cell "|"){2,6} "\n"
cell ::= [^|\n]{1,30})g",
       "| A rather long first cell | 2 | x |\n|---|---|\n| Zürich 🇨🇭 | ok |\n"}};
  const uint64_t derived0 = detail::test_walk_counters.derived_levels.load();
  WalkStats stats;
  size_t text_steps = 0, text_tokens = 0;
  uint64_t seed = 5151;
  uint64_t forced_derived = 0;
  for (size_t most : {size_t{1} << 30, SIZE_MAX}) {
    ScopedHook<size_t> hook(detail::test_max_derived_long, most);
    const uint64_t before = detail::test_walk_counters.derived_levels.load();
    text_steps += walk_cases(fx, cases, 10, seed, stats, &text_tokens);
    if (most != SIZE_MAX)
      forced_derived = detail::test_walk_counters.derived_levels.load() - before;
    seed += 100;
  }
  const uint64_t derived = detail::test_walk_counters.derived_levels.load() - derived0;
  std::printf(
      "[oracle] %s derived levels: %llu (%llu with the limits lifted), %zu text steps, "
      "%zu random steps\n",
      GetParam().c_str(), static_cast<unsigned long long>(derived),
      static_cast<unsigned long long>(forced_derived), text_steps, stats.steps);
  EXPECT_EQ(text_steps, text_tokens);
  EXPECT_GT(forced_derived, 20u);
  EXPECT_GT(derived, forced_derived);  // the classifier's own limits derive some too
  EXPECT_GT(stats.steps, cases.size() * 20);
  // Small families (json.gbnf's digits and whitespace): levels of 16 and 20 members, whose
  // masks are lists of a few hundred tokens, derived from those lists under the classifier's
  // own limits. The text reaches their low levels (numbers of 14 and 15 digits, runs of 18 spaces
  // and 19 tabs), where a level's answers differ from the one above for the longest tokens.
  const std::vector<std::pair<std::string, std::string>> small = {
      {R"g(root ::= "[" ws num (ws "," ws num)* ws "]"
num ::= "-"? [1-9] [0-9]{0,15} ("." [0-9]+)?
ws ::= "" | " " | "\n" [ \t]{0,20})g",
       "[12345678901234,\n" + std::string(18, ' ') + "42,\n" + std::string(19, '\t') +
           "-7.5,\n   123456789012345 ]"}};
  text_steps = text_tokens = 0;
  {
    // With at most 4 longer tokens followed, most levels fall back to a walk (the limit
    // forced low, as for the classifier's other limits).
    ScopedHook<size_t> hook(detail::test_max_derived_long, 4);
    text_steps += walk_cases(fx, small, 6, seed + 1, stats, &text_tokens);
  }
  const uint64_t small0 = detail::test_walk_counters.derived_levels.load();
  text_steps += walk_cases(fx, small, 12, seed, stats, &text_tokens);
  const uint64_t small_derived = detail::test_walk_counters.derived_levels.load() - small0;
  std::printf("[oracle] %s small families: %llu derived levels\n", GetParam().c_str(),
              static_cast<unsigned long long>(small_derived));
  EXPECT_EQ(text_steps, text_tokens);
  EXPECT_GT(small_derived, 20u);
}

// Label walks: strings whose state is a small automaton over their characters (a hex
// `pattern` with a length, as the JSON Schema converter writes it; a search pattern; a
// marker inside `.{0,n}`; escapes inside a bounded string) are decided by label sequences
// along a label trie instead of code points along the trie. Each grammar is compiled and
// walked four times (masks on first use, and all at compile time).
TEST_P(Oracle, LabelWalksMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::vector<std::string> grammars = {
      // [0-9a-fA-F]+ somewhere in exactly 6 characters (the converter's product automaton).
      R"g(root ::= "\"" s6 ("," [0-9]{1,3})?
s6 ::= o s5 | [0-9A-Fa-f] any5
s5 ::= o s4 | [0-9A-Fa-f] any4
s4 ::= o s3 | [0-9A-Fa-f] any3
s3 ::= o s2 | [0-9A-Fa-f] any2
s2 ::= o s1 | [0-9A-Fa-f] any1
s1 ::= [0-9A-Fa-f] "\""
any5 ::= c any4
any4 ::= c any3
any3 ::= c any2
any2 ::= c any1
any1 ::= c "\""
o ::= [^\x00-\x1F"\\0-9A-Fa-f] | "\\" ["/\\bnrt]
c ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))g",
      R"g(root ::= "\"" x{0,40} ("top-left" | "middle" | "bottom-right") x{0,40} "\""
x ::= [^"\\\x00-\x1F])g",
      R"g(root ::= (.{0,30} "<END>" "\n"){1,2})g",
      R"g(root ::= "\"" [a-z] [a-z0-9-]{0,11} "\"" (" " [A-Z]{2,4} "-" [0-9]{3,6})?)g"};
  WalkStats stats;
  uint64_t seed = 7070;
  for (const std::string& gbnf : grammars) {
    SCOPED_TRACE(gbnf);
    for (int k = 0; k < 4; ++k) {
      CompileOptions options;
      options.eager_ms = k == 3 ? -1.0 : 0.0;
      options.share_masks = false;
      auto cg = CompiledGrammar::compile(parse_gbnf(gbnf), fx.index, options);
      walk(fx, gbnf, 12, seed++, stats, cg);
    }
  }
  size_t label_tries = 0;
  {
    detail::SharedMasks& shared = fx.index->shared_masks();
    std::lock_guard<std::mutex> lock(shared.mu);
    for (const auto& [key, lt] : shared.label_tries) label_tries += lt != nullptr ? 1 : 0;
  }
  std::printf("[oracle] %s label walks: %zu steps compared, %zu label tries built\n",
              GetParam().c_str(), stats.steps, label_tries);
  EXPECT_GT(stats.steps, grammars.size() * 4);
  EXPECT_GT(label_tries, 0u);
}

// Live walks: strings whose automaton never dies on their characters (JSON Schema's
// unanchored `pattern`s, keys where other names are allowed) take the tokens of the class
// at once and walk on only at its exits, each from the set its path reaches; at a context's
// start (live_walk) and inside a walk, past a quote (live_region). Tokens with a partial
// UTF-8 tail are checked against the set their full code points reach (llama-spm's byte
// tokens). A pattern with a code point >= 128 is not live (its sets tell them apart).
TEST_P(Oracle, LiveWalksMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::string c = R"g(
c ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))g";
  const std::vector<std::string> grammars = {
      R"g(root ::= "\"" c* [a-z] [0-9a-z]* c* "\"" ("," [0-9]{1,3})?)g" + c,
      R"g(root ::= "\"" ("dev" c* | c* "top-left" c* | c* "rc" c* | c* "stable") "\"" " .")g" + c,
      R"g(root ::= "{" ws (kv (ws "," ws kv)*)? ws "}"
kv ::= "\"" ("name" | "id" | "type" | [a-z] c*) "\"" ws ":" ws [0-9]{1,4}
ws ::= [ \n]{0,2})g" +
          c,
      R"g(root ::= ("\"" c* [a-z] c* "\"" | [0-9]+) " .")g" + c,
      // Code points >= 128 only after the match: a partial UTF-8 tail fits some sets.
      R"g(root ::= "\"" [ !#-\[\]-~]* [a-z] c* "\"")g" + c,
      R"g(root ::= "\"" c* "é" c* "\"")g" + c};
  const CompileOptions lazy = cold_masks(0), eager = cold_masks(-1);
  const uint64_t walks0 = detail::test_walk_counters.live_walks.load();
  const uint64_t regions0 = detail::test_walk_counters.live_regions.load();
  WalkStats stats;
  uint64_t seed = 9090;
  for (const std::string& gbnf : grammars) {
    SCOPED_TRACE(gbnf);
    for (const CompileOptions& options : {lazy, eager}) {
      auto cg = CompiledGrammar::compile(parse_gbnf(gbnf), fx.index, options);
      for (int k = 0; k < 3; ++k) walk(fx, gbnf, 12, seed++, stats, cg);
    }
  }
  const uint64_t walks = detail::test_walk_counters.live_walks.load() - walks0;
  const uint64_t regions = detail::test_walk_counters.live_regions.load() - regions0;
  std::printf("[oracle] %s live walks %llu, live regions %llu: %zu steps compared\n",
              GetParam().c_str(), static_cast<unsigned long long>(walks),
              static_cast<unsigned long long>(regions), stats.steps);
  EXPECT_GT(walks, grammars.size());
  EXPECT_GT(regions, 0u);
  EXPECT_GT(stats.steps, grammars.size() * 12);
}

// The (grammar, text) cases walked as walk_cases does, in each context mode of
// `inline_modes`, with every text step and enough random steps compared; returns how far
// the `counters` (test_walk_counters entries) moved in all meanwhile, printed as `what`.
uint64_t walk_counting(const VocabFixture& fx, const std::string& vocab,
                       const std::vector<std::pair<std::string, std::string>>& cases, uint64_t seed,
                       std::initializer_list<const std::atomic<uint64_t>*> counters,
                       std::initializer_list<bool> inline_modes, const char* what) {
  auto total = [&] {
    uint64_t n = 0;
    for (const std::atomic<uint64_t>* c : counters) n += c->load();
    return n;
  };
  const uint64_t before = total();
  WalkStats stats;
  size_t text_tokens = 0, text_steps = 0;
  for (bool inline_rules : inline_modes) {
    text_steps += walk_cases(fx, cases, 12, seed, stats, &text_tokens, inline_rules);
  }
  const uint64_t moved = total() - before;
  std::printf("[oracle] %s %s %llu, %zu + %zu steps compared\n", vocab.c_str(), what,
              static_cast<unsigned long long>(moved), text_steps, stats.steps);
  EXPECT_EQ(text_steps, text_tokens);
  EXPECT_GT(stats.steps, cases.size() * 12);
  return moved;
}

// A key automaton as the JSON Schema converter writes one (KeyClassifier::key_expression):
// each state a rule whose self-loop comes first and whose moves are a group, so a state
// tail-calls its group and the group tail-calls the next state. A state is a boundary rule
// and its group is not, so that tail call pushed the state's end marker, and each move
// through the automaton grew the stack by one: every set was new, no live automaton was
// found, and each key position was walked node by node (3-4 ms a first-use mask in
// Github_hard o82151's `notifications`). Now a marker pushed takes the place of one on top,
// and a tail call into a boundary rule drops one (StackPool::call_base). Keys that must
// contain "git" (not accepted before it) or must not (a dead state), walked along a
// document and at random, per-rule contexts, masks on first use and at compile time.
TEST_P(Oracle, KeyAutomatonThroughGroupsMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::string obj = R"g(
root ::= "{" (kv ("," kv)*)? "}"
kv ::= "\"" k0 ":" [0-9]{1,3}
c0 ::= [^\x00-\x1F"\\g] | "\\" ["/\\bfnrt] | "\\u00" [01] [0-9a-fA-F]
c1 ::= [^\x00-\x1F"\\gi] | "\\" ["/\\bfnrt] | "\\u00" [01] [0-9a-fA-F]
c2 ::= [^\x00-\x1F"\\gt] | "\\" ["/\\bfnrt] | "\\u00" [01] [0-9a-fA-F]
c ::= [^\x00-\x1F"\\] | "\\" ["/\\bfnrt] | "\\u00" [01] [0-9a-fA-F])g";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {obj + R"g(
k0 ::= c0* ("g" k1)
k1 ::= "g"* (c1 k0 | "i" k2)
k2 ::= c2 k0 | "g" k1 | "t" k3
k3 ::= c* "\"")g",
       R"({"a digit here":1,"legit":22,"xgxgit yes":333})"},
      {obj + R"g(
k0 ::= c0* ("\"" | "g" k1)
k1 ::= "g"* ("\"" | c1 k0 | "i" k2)
k2 ::= "\"" | c2 k0 | "g" k1)g",
       R"({"plain key":1,"gigi ggi":22,"g":3})"}};
  // Per-rule contexts, where each state is a boundary rule (the mode large schemas get).
  // (3-5 live walks and regions before: the first sets only.)
  EXPECT_GT(walk_counting(
                fx, GetParam(), cases, 5151,
                {&detail::test_walk_counters.live_walks, &detail::test_walk_counters.live_regions},
                {false}, "key automata: live walks and regions"),
            20 * cases.size());
}

// The key of an object whose other properties are allowed, as the JSON Schema converter
// writes it: an automaton over any string that leaves out the names (each state moves on
// the next letter of some name and sends every other character to the string's rest), so
// that every set after a name's first letter is live over the string's class. Their labels
// are every letter of the names below that first letter (23 for these `u` names): a search
// that stepped each set on each label gave up past 12 labels or 512 steps, and each such
// letter was walked node by node. Each set is now stepped on its own labels (two or three),
// and up to 40 labels are kept. Random walks and documents, on first use and at compile
// time, in both context modes.
TEST_P(Oracle, NamesLeftOutOfAnyKeyMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::string gbnf = json_schema_to_gbnf(R"({"type": "object", "properties": {
      "underscore-property-hack": {"type": "integer"}, "universal-selector": {"type": "integer"},
      "unqualified-attributes": {"type": "integer"}, "unique-headings": {"type": "integer"},
      "box-model": {"type": "integer"}, "bulletproof-font-face": {"type": "integer"}}})");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {gbnf, R"({"universal-selector":1,"unknown key":2,"box-model":3})"},
      {gbnf, R"({"underscore":4,"unique-headings":5,"b":6})"}};
  // (None before: past 12 labels the search gave up.) Every region searched, none walked
  // lazily (LazyRegionsMasksEqual), so that the searches this counts are made.
  ScopedHook<size_t> searched(detail::test_live_step_budget, 512);
  EXPECT_GT(
      walk_counting(fx, GetParam(), cases, 6161, {&detail::test_walk_counters.live_many_labels},
                    {true, false}, "names left out of a key: live automata of more than 12 labels"),
      20u);
}

// An unanchored search for a run, as a `pattern` of `[A-Fa-f0-9]{64}` is written: each hex
// digit read adds a stack (the run may start at any of them), up to one more than the run's
// length, and a non-digit clears them. A finite automaton all the same, whose sets grow past
// 32 stacks, where live searches gave up (every root child walked node by node: 9 ms on
// Github_medium o33928's first character). Random walks and documents, on first use and at
// compile time.
TEST_P(Oracle, UnanchoredRunSearchMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::string c = R"g(
c ::= [^\x00-\x1F"\\] | "\\" ["/\\bfnrt])g";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"g(root ::= "{\"hash\": \"" c* [A-Fa-f0-9]{40} c* "\"}")g" + c,
       R"j({"hash": "sha1:0beec7b5ea3f0fdbc95d0dd47f3c5bc275da8a33 (ok)"})j"},
      {R"g(root ::= "\"" c* [0-9]{36} "\"")g" + c, R"("id 123456789012345678901234567890123456")"}};
  // (None before: past 32 stacks the search gave up.)
  EXPECT_GT(
      walk_counting(fx, GetParam(), cases, 3131, {&detail::test_walk_counters.live_large_sets},
                    {true}, "run searches: live automata with sets over 32 stacks"),
      4u);
}

// A search with a length bound, as the converter writes it (a `pattern` that is not a
// tail, with `minLength` and `maxLength`): each code point moves a count, and before the
// first letter a letter leads elsewhere than any other code point. The letters' class was
// the run there (the most ASCII code points), so every node of other scripts below such a
// string's start was walked one by one (Github_medium o23174's `[A-z]+` in 3..64 code
// points: 6-10 ms a first mask on llama-bpe). The code points from 128 on are the run now
// where the letters' successor takes them all in one run of its own (a lookahead). Walks
// along documents with other scripts and at random, on first use and at compile time.
TEST_P(Oracle, HighRunOverAsciiLookaheadMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::string region = json_schema_to_gbnf(R"({"type": "object", "properties": {
      "region": {"type": "string", "minLength": 3, "maxLength": 24, "pattern": "[A-z]+"}},
      "required": ["region"]})");
  const std::string word = json_schema_to_gbnf(R"({"type": "object", "properties": {
      "w": {"type": "string", "minLength": 2, "maxLength": 12, "pattern": "[a-z]"},
      "n": {"type": "string", "maxLength": 9, "pattern": "x.*y"}}})");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {region, R"({"region": "12 € Ünïcödé 日本 ok"})"},
      {word, R"({"w": "42 ставка b", "n": "-x日y"})"}};
  EXPECT_GT(
      walk_counting(fx, GetParam(), cases, 7373, {&detail::test_walk_counters.high_after_ascii},
                    {true}, "runs of code points >= 128 chosen by a lookahead"),
      2u);
}

// Keys sorted by `patternProperties` that search for a name inside the key (Github_hard
// o74466's `aggregate|filter|transform` beside named options, o82151's `notifications`), as
// the converter writes them: an automaton whose first character at a key's start leaves out
// the letters that start a name or a search. The set there dies on those letters, so a live
// search dropped them from C, and every node of them below a key's first character was an
// exit: the key was walked through a cover of the other letters, stopping at each of those
// nodes (250 root children, 4 ms a first-use mask in o74466). The letters on which only the
// start set dies now stay in C (their tokens are cleared from the class's bitmask), and a
// live walk is taken before such a cover where its class has far fewer exits. Random walks
// and documents, on first use and at compile time, in per-rule mode.
TEST_P(Oracle, KeyStartDeadLettersLiveMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::string options = json_schema_to_gbnf(R"({"type": "object", "properties": {
      "debug": {"type": "boolean"}, "groupby": {"type": "string"}, "insert_key": {"type": "object"}},
      "patternProperties": {"aggregate|filter|transform": {"type": "object"}},
      "additionalProperties": false})");
  const std::string notifications = json_schema_to_gbnf(R"({"type": "object", "patternProperties": {
      "hipchat": {"type": "object", "properties": {"room": {"type": "string"}}},
      "github": {"type": "object", "properties": {"token": {"type": "string"}}},
      ".*": {"type": "object", "properties": {"level": {"type": "integer"}}}}})");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {options, R"({"debug":true,"my aggregate":{},"pre-filter-post":{"x":1},"groupby":"k"})"},
      {notifications,
       R"({"hipchat":{"room":"r1","level":1},"ghhg github":{"token":"t"},"hip":{}})"},
      // No other stack takes a, f or g first: tokens that start with one must be refused.
      {R"g(root ::= "\"" [^"\\afg] s
s ::= [^"\\afg]* ("\"" | [afg] t)
t ::= [^"\\afg]* ("\"" | [afg] s))g",
       R"("hello afg fog at")"},
      // The start set comes back (after a, b or c), where it dies on them again: not live.
      {R"g(root ::= "\"" k
k ::= [^"\\abc] m
m ::= [abc] k | [^"\\abc] m | "\"")g",
       R"("xa bxcz yy")"}};
  // (None before: the start set's dead letters were dropped from C.)
  EXPECT_GT(
      walk_counting(fx, GetParam(), cases, 7171, {&detail::test_walk_counters.live_dead_starts},
                    {false}, "keys whose start set dies on some letters: live walks keeping them"),
      4u);
}

// Keys sorted by overlapping `patternProperties` (`.*`, `github`, `hipchat`: Github_hard
// o82144's `notifications`), as the converter writes them: one key automaton per subset of
// the names a key contains. At a key's start, the automaton of keys that must not contain
// `github` dies on the `b` after `githu`; a live search dropped `b` from C, whose exits
// were then every `b` node below a key's character, and the key was walked through a cover
// instead (2-3.5 ms a context, 7-12 ms a first-use mask). Such letters stay in C now, and
// the tokens below the nodes where a path takes one in a dying state are cleared from the
// class's bitmask (die stops). Keys with the names, inside others, cut short, and strings
// that must not contain `ab`; random walks and documents, in per-rule mode and inline.
TEST_P(Oracle, KeyNameDiesLiveMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::string notifications = json_schema_to_gbnf(R"({"type": "object", "patternProperties": {
      ".*": {"type": "object", "properties": {"level": {"type": "integer"}}},
      "github": {"type": "object", "properties": {"token": {"type": "string"}}},
      "hipchat": {"type": "object", "properties": {"room": {"type": "string"}}}},
      "additionalProperties": false})");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {notifications,
       R"({"github":{"token":"t"},"hipchat":{"room":"r"},"my github hub":{},"hipchat2github":{"level":3},"githu":{},"hipcha t":{"level":1}})"},
      // No other stack takes the tokens with an `ab` (`cab`, `abc`): refused.
      {R"g(root ::= "\"" k0
k0 ::= [^"\\a]* ("\"" | "a" k1)
k1 ::= "a"* ("\"" | [^"\\ab] k0))g",
       R"("banana aa aca")"}};
  // (None before: such letters were dropped from C.)
  EXPECT_GT(walk_counting(fx, GetParam(), cases, 9191, {&detail::test_walk_counters.live_die_stops},
                          {false, true}, "names a key must not contain: live walks' die stops"),
            0u);
}

// A search that moves on one letter beyond the quote and backslash of a string's loop
// (patternProperties `after_[create|update|destroy]`: each `a` may start a match). The
// cover of the other code points stopped at every node of an `a` below the key's first
// character (13,000 nodes, 2.5 ms a first-use mask in Github_medium o45263); a live walk
// is taken there now where its class has far fewer exits than that letter has nodes.
// Random walks and documents, in both context modes.
TEST_P(Oracle, KeySearchOneLetterLiveMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::string hooks = json_schema_to_gbnf(R"({"type": "object", "properties": {
      "hook": {"type": "object", "patternProperties": {
          "after_[create|update|destroy]": {"type": "array", "items": {"type": "string"}}}}}})");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {hooks, R"({"hook":{"after_create":["a"],"a nice day":1,"banana after_u":[]}})"},
      {R"g(root ::= "\"" [^"\\a]* "a" [^"\\]* "\"")g", R"("banana split")"}};
  EXPECT_GT(
      walk_counting(fx, GetParam(), cases, 8181, {&detail::test_walk_counters.live_over_letters},
                    {false, true}, "searches moving on one letter: live walks before a cover"),
      1u);
}

// Live walks whose automaton has one label (a string's characters after a pattern's first
// class): the local state at each exit is read off the chain of states by the exit's depth,
// unless an exit or a child of the root outside the class lies above it (a `"` token's
// subtree, `a","b`). Their exits go on in one walk, from a frame per state and depth.
TEST_P(Oracle, OneLabelLiveExitsMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::string names = json_schema_to_gbnf(R"({"type": "object", "properties": {
      "name": {"type": "string", "pattern": "^[A-Za-z ].*$"},
      "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z].*"}},
      "note": {"type": "string", "pattern": "^\\S.*$", "maxLength": 40}}})");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {names, R"({"name":"John Smith, \"Jr\".","tags":["a\",\"b","x y"],"note":"ok: \"q\""})"},
      {R"g(root ::= "[" item ("," item)* "]"
item ::= "\"" [A-Za-z0-9 ] ([^"\\] | "\\" ["\\/bfnrt])* "\"")g",
       R"(["a","b c","d \"e\"","9 lives"])"}};
  EXPECT_GT(walk_counting(fx, GetParam(), cases, 7272,
                          {&detail::test_walk_counters.exit_states_one_label}, {false, true},
                          "one-label live walks: exit states read off the chain"),
            1u);
}

// Chains whose top element is a class of several code points, alike below it (by
// structural class, the stacks past their end too): each root child's walk is kept from the
// second such chain on and read back by the others. The first character of a key in
// objects that each name a few properties and take any other (a class leaving out the
// names' first letters, then the rest of the key), strings of one class before different
// closings, and a class whose chains end in different places (not shared). Random walks
// and documents, in both context modes.
TEST_P(Oracle, KidMemoMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  // Objects that take any other property, and objects whose other properties are numbers
  // or strings: their keys' first characters are alike up to the key's end, after which
  // `":"` goes on in a string only.
  const std::string objects = json_schema_to_gbnf(R"({"type": "object", "properties": {
      "a": {"type": "object", "properties": {"name": {"type": "string"}, "tag": {"type": "string"}}},
      "b": {"type": "object", "properties": {"url": {"type": "string"}, "port": {"type": "integer"}}},
      "c": {"type": "object", "properties": {"kind": {"type": "string"}, "size": {"type": "integer"}}},
      "d": {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "integer"}}}},
      "e": {"type": "object", "properties": {"x": {"type": "string"}}, "additionalProperties": {"type": "integer"}},
      "f": {"type": "object", "properties": {"y": {"type": "string"}}, "additionalProperties": {"type": "string"}},
      "g": {"type": "object", "properties": {"z": {"type": "string"}}, "additionalProperties": {"type": "integer"}},
      "h": {"type": "object", "properties": {"w": {"type": "string"}}, "additionalProperties": {"type": "string"}}}})");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {objects,
       R"({"a":{"name":"x","other":[1,"q"]},"b":{"url":"u","zz":{"k":null}},"c":{"x y":"\"z"},"d":[{"id":1,"id2":"w"}],"e":{"n":1},"f":{"s":"t"},"g":{"m":2},"h":{"v":"u"}})"},
      {R"g(root ::= "<" w "|" w "|" v ">"
w ::= [^|<>\\] [^|<>]* | [a-z] "!"
v ::= [^|<>\\] [^|<>]* "."?)g",
       R"(<hello world|a!|tail end.>)"},
      // One body before an `n` or a `z`, which the body leaves out: "can" goes on only before
      // an `n` (not shared: what follows each call differs).
      {R"g(root ::= a "n1" b "z1" c "n2" d "z2" e "n3"
a ::= [^"nz] [^"nz]*
b ::= [^"nz] [^"nz]*
c ::= [^"nz] [^"nz]*
d ::= [^"nz] [^"nz]*
e ::= [^"nz] [^"nz]*)g",
       R"(can1bez1can2doz2can3)"}};
  EXPECT_GT(walk_counting(fx, GetParam(), cases, 5151, {&detail::test_walk_counters.kid_memo_hits},
                          {false, true}, "root children read from a kid memo"),
            10u);
}

// Lazy regions: below a set that may be a live automaton, a subtree too small to pay for
// the automaton's search (an object's names that share a first letter, a state per letter of
// each) is walked node by node, each node's set stepped from its parent's, the walk handed
// back where the context may end. Keys beside names that share first letters (chosen on
// their own), and with every live region forced lazy: those keys, searches in strings, a
// key automaton, and partial UTF-8 tails after a match. Documents and random walks, both
// context modes (the forced runs one mode each), and with every search stopped after 3 set
// steps; it fails when the nodes
// where the context may end are skipped rather than handed back, or when a step fills the
// memo of code points that other members take (step_alike).
TEST_P(Oracle, LazyRegionsMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  std::string props;
  for (const char* name :
       {"address",    "addressLine", "admin",     "adminPath", "agent",   "agentName", "alias",
        "allow",      "allowList",   "alpha",     "amount",    "anchor",  "apply",     "archive",
        "area",       "array",       "artist",    "asset",     "assetId", "audio",     "author",
        "authorName", "auto",        "available", "average"}) {
    props += std::string(props.empty() ? "" : ", ") + "\"" + name + "\": {\"type\": \"integer\"}";
  }
  const std::string names =
      json_schema_to_gbnf("{\"type\": \"object\", \"properties\": {" + props +
                          "}, \"additionalProperties\": {\"type\": \"string\"}}");
  const std::string doc = R"({"address":1,"agent":2,"another":"x","allowList":3,"axe":"q"})";
  const std::string c = R"g(
c ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))g";
  const std::vector<std::pair<std::string, std::string>> forced_cases = {
      {names, doc},
      {R"g(root ::= "\"" ("dev" c* | c* "top-left" c* | c* "rc" c* | c* "stable") "\"" " .")g" + c,
       R"("a top-left corner" .)"},
      {R"g(root ::= "\"" [ !#-\[\]-~]* [a-z] c* "\"")g" + c, R"("12 abc é")"}};
  EXPECT_GT(
      walk_counting(fx, GetParam(), {{names, doc}}, 8181,
                    {&detail::test_walk_counters.lazy_regions}, {false, true}, "lazy regions"),
      0u);
  {
    // Searches stopped after 3 set steps: not remembered as failed, the region walked lazily.
    ScopedHook<size_t> hook(detail::test_live_step_budget, 3);
    EXPECT_GT(walk_counting(fx, GetParam(), forced_cases, 8383,
                            {&detail::test_walk_counters.lazy_regions}, {false},
                            "lazy regions (searches stopped early)"),
              0u);
  }
  ScopedHook<bool> hook(detail::test_lazy_regions, true);
  EXPECT_GT(
      walk_counting(fx, GetParam(), forced_cases, 8282, {&detail::test_walk_counters.lazy_regions},
                    {true}, "lazy regions (forced)"),
      0u);
}

// Unbounded root covers (a string's characters; a key's first character that starts none
// of an object's names, then the rest of it): the root's children the cover does not hold
// whole are walked in one batch from the class exits, those whose code point the run's set
// cannot take (a control character; a letter the class leaves out, as the `t` of
// llama-bpe's " t\xe1\xbb") kept only as stops for the partial UTF-8 tails below them.
// Keys beside an object's names, a class that leaves out a letter (tokens with a partial
// tail below its dead stops), and a string's loop after a first character that leaves out
// more, walked along documents and at random.
TEST_P(Oracle, UnboundedRootStopsMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::string object = json_schema_to_gbnf(R"({"type": "object", "properties": {
      "alpha": {"type": "integer"}, "beta": {"type": "string"}, "gamma": {"type": "boolean"}},
      "additionalProperties": {"type": "integer"}})");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {object, R"({"alpha":1,"beta":"b","other key":2,"zeta":3})"},
      {R"g(root ::= "<" [^<>t] [^<>t]* ">" ("," root)?)g", "<abc d>,<xyz ü>"},
      {R"g(root ::= "\"" [^"\\\x00-\x1Fab] [^"\\\x00-\x1F]* "\"" ":" [0-9])g", R"("kéy":1)"}};
  EXPECT_GT(
      walk_counting(fx, GetParam(), cases, 7373, {&detail::test_walk_counters.unbounded_root_stops},
                    {false}, "unbounded root batches"),
      0u);
}

// Literals (an object's keys, keywords) are followed down the trie without a set per code
// point while the next element is one ASCII code point too; the set is made where that run
// ends. Keys of an object with many properties, literals ending a rule, before a class,
// before a reference, inside a repetition, next to non-ASCII ones (not followed that way),
// and a run of one letter. Random walks and documents, in both context modes.
TEST_P(Oracle, LiteralRunsMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::string config = json_schema_to_gbnf(R"({"type": "object", "properties": {
      "AccessModifierOffset": {"type": "integer"}, "AlignAfterOpenBracket": {"enum": ["Align", "DontAlign"]},
      "AlignConsecutiveMacros": {"type": "boolean"}, "AllowShortBlocksOnASingleLine": {"type": "boolean"},
      "BasedOnStyle": {"enum": ["LLVM", "Google", "Chromium"]}, "ColumnLimit": {"type": "integer"},
      "IndentWidth": {"type": "integer"}, "UseTab": {"enum": ["Never", "Always"]}}})");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {config, R"({"AlignAfterOpenBracket":"Align","BasedOnStyle":"Google","IndentWidth":4})"},
      {R"g(root ::= ("function" [ ]+ name "(" ")" | "return" [ ]+ name ";" | "null") [\n]?
name ::= [a-z]+ | "undefined" | "café" "s"?)g",
       R"(function undefined()
)"},
      {R"g(root ::= "aaaaaaaaaaaaaaaa" "b"? ("naïve" | "résumé") "xyzzy")g",
       R"(aaaaaaaaaaaaaaaanaïvexyzzy)"},
      {R"g(root ::= ("<tag>" [a-z]{1,8} "</tag>"){1,3})g", R"(<tag>hello</tag><tag>w</tag>)"}};
  EXPECT_GT(walk_counting(fx, GetParam(), cases, 9191, {&detail::test_walk_counters.literal_runs},
                          {false, true}, "literals followed without a set per code point"),
            8u);
}

// Live walks of searches whose sets treat code points >= 128 differently within a few
// ranges: a pattern's `.` (ECMAScript's, without U+2028 and U+2029) leaves those ranges
// out of the automaton's class, where the walk meets them as exits; `\s`'s spaces above
// ASCII are taken by a class of ASCII code points. And a suffix search (`.*.txt`: each
// code point adds a state until a `t` comes), whose bounded cover of two code points the
// live walk replaces. Random walks and documents, masks on first use and at compile time.
TEST_P(Oracle, LiveSearchesWithHolesMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::string dot = R"g(
d ::= [^\x00-\x1F"\\\u2028\u2029] | "\\" ["/\\bft] | "\\u000" [0-9bBcCeEfF] | "\\u001" [0-9a-fA-F])g";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"g(root ::= "{\"name\": " ("\"" d* d "txt" "\"" | "null") "}")g" + dot,
       R"({"name": "café résumé.txt"})"},
      {R"g(root ::= "\"" e* "@" e+ "\""
e ::= [^\x00-\x1F"\\\u2028\u2029])g",
       R"("user@example.org")"},
      {R"g(root ::= "\"" s* [a-zA-Z0-9 ,\-] "\""
s ::= [a-zA-Z0-9\-. ,\t\u00a0\u2000-\u200a\u3000])g",
       R"("Deploy, stage-2 now")"},
      {R"g(root ::= "\"" c* c "txt" "\""
c ::= [^\x00-\x1F"\\])g",
       R"("report.txt")"},
      // Classes that take a few ranges above ASCII beside their ASCII code points (holes
      // inside the class): the tokens of those ranges' letters alone come back into the
      // class's tokens, and a node of such a letter is no exit.
      {R"g(root ::= "\"" w* w "ción" w* "\""
w ::= [a-zA-Z0-9 ,.\-\u00c0-\u00ff\u0400-\u044f])g",
       R"("la canción de Zoé, Привет")"},
      {R"g(root ::= "\"" w{0,30} "\"" ("," root)?
w ::= [a-zA-Z0-9 ,.\-\u00c0-\u00ff])g",
       R"("Zoé à Genève","hôtel")"},
      {R"g(root ::= "\"" (d+ "/")? d+ ":" d+ "\"")g" + dot, R"("docker.io/library/python:3")"},
      // Words of `\S`, which leaves out a few spaces above ASCII: every other code point
      // above ASCII steps like the first of them (WalkStates::high_like).
      {json_schema_to_gbnf(R"({"type": "object", "properties": {"q": {"type": "string",
          "pattern": "^(?:\\S+\\s+){0,3}\\S+$"}}})"),
       R"({"q": "Quel café à Zürich"})"}};
  const uint64_t holes0 = detail::test_walk_counters.live_holes.load();
  const uint64_t like0 = detail::test_walk_counters.high_like_sets.load();
  const uint64_t walks0 = detail::test_walk_counters.live_walks.load();
  WalkStats stats;
  size_t text_tokens = 0;
  const size_t text_steps = walk_cases(fx, cases, 10, 4242, stats, &text_tokens);
  const uint64_t holes = detail::test_walk_counters.live_holes.load() - holes0;
  const uint64_t walks = detail::test_walk_counters.live_walks.load() - walks0;
  const uint64_t like = detail::test_walk_counters.high_like_sets.load() - like0;
  std::printf(
      "[oracle] %s live automata with holes %llu, live walks %llu, sets stepping alike "
      "outside their holes %llu: %zu + %zu steps compared\n",
      GetParam().c_str(), static_cast<unsigned long long>(holes),
      static_cast<unsigned long long>(walks), static_cast<unsigned long long>(like), text_steps,
      stats.steps);
  EXPECT_GT(holes, 0u);
  EXPECT_GT(like, 0u);
  EXPECT_GT(walks, cases.size());
  EXPECT_EQ(text_steps, text_tokens);
  EXPECT_GT(stats.steps, cases.size() * 6);
}

// Equal masks held once (ContextClassifier::same_mask): an unanchored search for a long
// bounded run leaves one stack per position of the run, each its own context with a mask
// equal to its neighbours' (o40228's `[a-zA-Z0-9_-]{162}`, a 160-stack step that OR-ed 160
// copies of one bitmask); a string bounded by a pattern's length pairs, whose levels share
// masks too. Walked along a text and at random, masks on first use and at compile time,
// whole-stack masks included (a context of the search has no mask of its own).
TEST_P(Oracle, SameMasksSharedMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"g(root ::= "{\"id\": \"" c* [\-0-9A-Z_a-z]{40} c* "\"}"
c ::= [^\x00-\x1F"\\] | "\\" ["/\\bfnrt])g",
       R"({"id": "key-0123456789abcdefghijklmnopqrstuvwxyz_ABCDEFGHIJ end"})"},
      {json_schema_to_gbnf(
           R"({"type":"object","properties":{"code":{"type":"string","maxLength":30},)"
           R"("oid":{"type":"string","minLength":12,"maxLength":12,"pattern":"[0-9a-fA-F]+"}}})"),
       R"({"code": "someAuthorizationCode", "oid": "0123456789ab"})"}};
  const uint64_t same0 = detail::test_walk_counters.same_masks.load();
  WalkStats stats;
  size_t text_tokens = 0;
  const size_t text_steps = walk_cases(fx, cases, 12, 777, stats, &text_tokens);
  const uint64_t same = detail::test_walk_counters.same_masks.load() - same0;
  std::printf("[oracle] %s masks equal to an earlier one %llu: %zu + %zu steps compared\n",
              GetParam().c_str(), static_cast<unsigned long long>(same), text_steps, stats.steps);
  EXPECT_GT(same, 2 * cases.size());
  EXPECT_EQ(text_steps, text_tokens);
  EXPECT_GT(stats.steps, cases.size() * 6);
}

// Live walks over a key where names other than the schema's are allowed: its class leaves
// out the first letters of the schema's names, and its exits are every token that leaves
// that class (18,000 on llama-bpe). (With 18 first letters left out, the key's start takes
// the root cover, which clears them, unless the cover's limit is forced below that: half
// the walks do each.) An object under allOf and anyOf is parsed along two
// branches, so its key positions are the top of two stacks with one key automaton: the
// automaton's local states at the exits are found once and reused (exit_states). Walked
// along a document with per-rule contexts and inlined ones, masks on first use and at
// compile time.
TEST_P(Oracle, LiveExitStatesSharedMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  std::string props;
  for (const char* k :
       {"alpha", "also", "amber", "apex", "beta", "bold", "copt", "dopt", "eopt", "fopt", "gopt",
        "iopt",  "jopt", "kopt",  "lopt", "mopt", "nopt", "popt", "ropt", "sopt", "topt", "uopt"}) {
    props += std::string(props.empty() ? "" : ",") + "\"" + k + "\":{\"type\":\"boolean\"}";
  }
  const std::string schema =
      R"({"allOf":[{"$ref":"#/definitions/a"},{"anyOf":[{"$ref":"#/definitions/c"},)"
      R"({"$ref":"#/definitions/d"}]}],"definitions":{"a":{"properties":{"options":{)"
      R"("$ref":"#/definitions/o"}}},"o":{"type":"object","properties":{"sub":{"$ref":"#/definitions/o"},)" +
      props +
      R"(}},"c":{"properties":{"files":{"type":"array","items":{"type":"string"}}}},)"
      R"("d":{"properties":{"include":{"type":"array","items":{"type":"string"}}}}}})";
  const std::string gbnf = json_schema_to_gbnf(schema);
  const std::string text =
      R"({"options": {"sub": {"sub": {"alpha": true, "zzz": false, "amber": false}, "also": true}, )"
      R"("alpha": true, "zebra": 1, "bold": false}, "files": ["a"]})";
  const std::vector<Token> toks = greedy_tokens(*fx.index, text);
  const uint64_t reused0 = detail::test_walk_counters.exit_states_reused.load();
  const uint64_t walks0 = detail::test_walk_counters.live_walks.load();
  size_t steps = 0;
  for (int mode = 0; mode < 8; ++mode) {
    // Half the walks with whole-stack masks wherever a context leaves a token uncertain: each
    // stack at a key's start walks from the key automaton's live set of its own.
    detail::test_deep_threshold = (mode & 2) != 0 ? 0 : SIZE_MAX;
    detail::test_max_cover_clear = (mode & 4) != 0 ? 16 : 0;
    SCOPED_TRACE("mode " + std::to_string(mode));
    CompileOptions o;
    o.inline_rules = (mode & 1) != 0;
    o.eager_ms = (mode & 3) == 1 ? -1.0 : 0.0;
    o.share_masks = false;
    steps += text_walk(fx, gbnf, toks, o);
  }
  detail::test_deep_threshold = SIZE_MAX;
  detail::test_max_cover_clear = 0;
  const uint64_t reused = detail::test_walk_counters.exit_states_reused.load() - reused0;
  const uint64_t walks = detail::test_walk_counters.live_walks.load() - walks0;
  std::printf(
      "[oracle] %s live walks %llu, their exit states reused %llu times: %zu steps compared\n",
      GetParam().c_str(), static_cast<unsigned long long>(walks),
      static_cast<unsigned long long>(reused), steps);
  EXPECT_GT(reused, 0u);
  EXPECT_EQ(steps, 8 * toks.size());
}

// A context whose mask hits a limit while it is computed is checked by the matcher against
// the stack itself, in one walk of the vocabulary trie that skips the subtrees the stack
// refuses. With max_walk_states at 1 every context takes that path: strings, escapes,
// multi-byte classes (partial UTF-8 tails), tokens that end the grammar, nested rules.
TEST_P(Oracle, LimitFallbackMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::vector<std::string> grammars = {
      kKeyValueGrammar, kJsonStringGrammar,
      R"g(root ::= ("é" | [日-本] | [a-z ])+ ("!" | "日本"))g", kWordsGrammar};
  // On first use (max_walk_states), and at compile time, where a context out of the
  // limits is left to the same check instead of failing the compile (max_mask_set_stacks).
  CompileOptions lazy;
  lazy.eager_ms = 0;
  lazy.max_walk_states = 1;
  CompileOptions eager;
  eager.eager_ms = -1;
  eager.max_mask_set_stacks = 1;
  WalkStats stats;
  uint64_t seed = 6060;
  for (const std::string& gbnf : grammars) {
    SCOPED_TRACE(gbnf);
    for (const CompileOptions& options : {lazy, eager}) {
      auto cg = CompiledGrammar::compile(parse_gbnf(gbnf), fx.index, options);
      for (int k = 0; k < 3; ++k) walk(fx, gbnf, 10, seed++, stats, cg);
    }
  }
  std::printf("[oracle] %s limit fallbacks: %zu steps compared\n", GetParam().c_str(), stats.steps);
  EXPECT_GT(stats.steps, grammars.size() * 6);
}

// A context whose walk past its end would step many stacks (a rule called from hundreds of
// places) leaves the tokens that leave it uncertain, or, where that is too many of them,
// gets no mask and its stacks whole-stack masks (the bound forced down to no stacks, so
// that every context with somewhere to go past its end takes that way, and the cap on
// uncertain tokens down to 6, so that most of them then get no mask); and the walk states and
// the walk pool are forgotten when they fill up (max_walk_states forced low, so that it
// happens every few walks).
// Lazily and at compile time: masks must be llama.cpp's.
TEST_P(Oracle, LeaveUncertainAndStateResetsMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::vector<std::string> grammars = {
      kKeyValueGrammar, kJsonStringGrammar, kWordsGrammar,
      R"g(root ::= "[" ws (item (ws "," ws item)*)? ws "]"
item ::= "{" ws "\"id\"" ws ":" ws num ws ("," ws "\"tag\"" ws ":" ws str ws)? "}" | num | str
num ::= "-"? [0-9]{1,6}
str ::= "\"" [^"\\]{0,12} "\""
ws ::= [ \n]{0,3})g",
      // A repetition family deep enough for observed walks (their memo is by walk-pool node).
      R"g(root ::= ([a-z]+ " "){0,40} [a-z]+ ".")g",
      // Rules of one class that end in different places: chains keyed by their classes and
      // the set after their end must not meet a key from before a reset (set ids are reused).
      R"g(root ::= (d0 "a" | d1 "b" | d2 "c" | d3 "d" | d4 "e" | d5 "f" | d6 "g" | d7 "h")+ "."
d0 ::= [0-9] [0-9]?
d1 ::= [0-9] [0-9]?
d2 ::= [0-9] [0-9]?
d3 ::= [0-9] [0-9]?
d4 ::= [0-9] [0-9]?
d5 ::= [0-9] [0-9]?
d6 ::= [0-9] [0-9]?
d7 ::= [0-9] [0-9]?)g"};
  const CompileOptions lazy = per_rule_contexts(0), eager = per_rule_contexts(-1);
  CompileOptions resets = lazy;
  resets.max_walk_states = 48;
  const uint64_t leave0 = detail::test_walk_counters.leave_walks.load();
  const uint64_t none0 = detail::test_walk_counters.no_mask.load();
  const uint64_t resets0 = detail::test_walk_counters.state_resets.load();
  WalkStats stats;
  uint64_t seed = 8080;
  for (const std::string& gbnf : grammars) {
    SCOPED_TRACE(gbnf);
    for (const CompileOptions& options : {lazy, eager}) {
      // Every rule's end left uncertain with the default cap and one few stay under; and
      // rules called from more than 3 places (the set after them built only that far).
      for (auto [max_after, cap] : {std::pair<int64_t, size_t>{0, 0}, {0, 6}, {3, 0}}) {
        ScopedHook<int64_t> after(detail::test_max_after_stacks, max_after);
        ScopedHook<size_t> leave_cap(detail::test_leave_cap, cap);
        auto cg = CompiledGrammar::compile(parse_gbnf(gbnf), fx.index, options);
        for (int k = 0; k < 2; ++k) walk(fx, gbnf, 10, seed++, stats, cg);
      }
    }
    for (size_t states : {48, 16}) {
      resets.max_walk_states = states;
      auto cg = CompiledGrammar::compile(parse_gbnf(gbnf), fx.index, resets);
      for (int k = 0; k < 3; ++k) walk(fx, gbnf, 10, seed++, stats, cg);
    }
  }
  const uint64_t leave = detail::test_walk_counters.leave_walks.load() - leave0;
  const uint64_t none = detail::test_walk_counters.no_mask.load() - none0;
  const uint64_t reset = detail::test_walk_counters.state_resets.load() - resets0;
  std::printf(
      "[oracle] %s leave-uncertain walks %llu, contexts without a mask %llu, state "
      "resets %llu: %zu steps compared\n",
      GetParam().c_str(), static_cast<unsigned long long>(leave),
      static_cast<unsigned long long>(none), static_cast<unsigned long long>(reset), stats.steps);
  EXPECT_GT(leave, grammars.size());
  EXPECT_GT(none, 0u);
  EXPECT_GT(reset, 0u);
  EXPECT_GT(stats.steps, grammars.size() * 9);
}

// Per-rule contexts that go on past their end and are left by most tokens: a one-character
// rule whose tail calls lead into a key of any other name (clang-format's schema), and a
// word made of one-letter calls. Their walks stop past the deep threshold and the contexts
// get no mask, so their stacks take whole-stack masks, as they did when the mask listed every
// leaving token as uncertain. Lazily and at compile time, with the threshold at its default
// and forced low: masks must be llama.cpp's.
TEST_P(Oracle, CappedWalksMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::vector<std::string> grammars = {
      R"g(root ::= "{" (kv ("," kv)*)? "}"
kv ::= "\"" ("id\"" | key) ":" val
key ::= "\"" | "i" key-i | [^"\\i] tail
key-i ::= "\"" | "d" [^"\\] tail | [^"\\d] tail
tail ::= [^"\\]* "\""
val ::= [0-9]+ | "\"" tail)g",
      R"g(root ::= w (" " w)* "."
w ::= c w | c
c ::= [a-z])g"};
  const CompileOptions lazy = per_rule_contexts(0), eager = per_rule_contexts(-1);
  const uint64_t capped0 = detail::test_walk_counters.capped_walks.load();
  WalkStats stats;
  uint64_t seed = 9090;
  for (const std::string& gbnf : grammars) {
    SCOPED_TRACE(gbnf);
    for (const CompileOptions& options : {lazy, eager}) {
      for (size_t threshold : {SIZE_MAX, size_t{64}}) {
        SCOPED_TRACE(threshold);
        ScopedHook<size_t> deep(detail::test_deep_threshold, threshold);
        auto cg = CompiledGrammar::compile(parse_gbnf(gbnf), fx.index, options);
        for (int k = 0; k < 2; ++k) walk(fx, gbnf, 10, seed++, stats, cg);
      }
    }
  }
  const uint64_t capped = detail::test_walk_counters.capped_walks.load() - capped0;
  std::printf("[oracle] %s capped walks %llu: %zu steps compared\n", GetParam().c_str(),
              static_cast<unsigned long long>(capped), stats.steps);
  EXPECT_GT(capped, grammars.size());
  EXPECT_GT(stats.steps, grammars.size() * 9);
}

// The eager budget runs out in the middle of a mask's walk (forced after a given number of
// trie nodes: the clock cannot be stopped there on demand): the walk is abandoned, nothing
// of it is kept or shared, and its context and the rest are computed on first use. Masks
// before and after must be llama.cpp's, with prefix masks shared across the compiles.
TEST_P(Oracle, EagerBudgetAbandonedWalkMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::vector<std::string> grammars = {
      kKeyValueGrammar, kJsonStringGrammar, kWordsGrammar,
      R"g(root ::= line ("\n" line){0,8}
line ::= [^\n]{1,40})g",
      // A label walk (a search pattern in a bounded string), abandoned in its label trie's
      // build, its walk or its exits.
      R"g(root ::= "\"" x{0,30} ("top-left" | "middle") x{0,30} "\"" ("," [0-9]{1,3})?
x ::= [^"\\\x00-\x1F])g"};
  CompileOptions options;
  options.eager_ms = 1e6;  // only the forced end stops the eager masks
  WalkStats stats;
  uint64_t seed = 7070;
  size_t abandoned = 0;
  for (const std::string& gbnf : grammars) {
    SCOPED_TRACE(gbnf);
    for (uint64_t nodes : {1, 40, 600, 20000}) {
      std::shared_ptr<const CompiledGrammar> cg;
      {
        ScopedHook<uint64_t> hook(detail::test_eager_walk_nodes, nodes);
        cg = CompiledGrammar::compile(parse_gbnf(gbnf), fx.index, options);
      }
      if (cg->n_contexts_computed() < cg->n_contexts()) ++abandoned;
      for (int k = 0; k < 2; ++k) walk(fx, gbnf, 10, seed++, stats, cg);
    }
  }
  std::printf("[oracle] %s abandoned eager walks: %zu compiles of %zu, %zu steps compared\n",
              GetParam().c_str(), abandoned, grammars.size() * 4, stats.steps);
  EXPECT_GE(abandoned, grammars.size() * 2);
  EXPECT_GT(stats.steps, grammars.size() * 6);
}

// Matchers of one compiled grammar share the run-time checks of the stacks they meet (by
// the stack's positions). Texts that reach one same top position above different stacks
// (a word inside "(" or "[", at several depths), each walked by a new matcher of one
// compiled grammar, one after the other and twice: every mask must still be llama.cpp's.
// A token that leaves its context and goes on past the end is accepted at compile time
// where the returns of every call site of the chain's bottom rule take it alone
// (ContextClassifier::settle): an S-expression's item called from two places; an item
// whose call sites are followed by different characters (a token one site's returns take
// stays uncertain); the root's rule called again inside (nothing may lie below a frame of
// the root: a rule it tail-calls is never settled); a call whose rest may be empty. Every
// list is settled here (the minimum forced to 1), and with the classifier's own minimum.
TEST_P(Oracle, SettledByReturnsMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"g(root ::= sexp
sexp ::= "(" ws item (ws1 item)* ws ")"
item ::= atom | sexp
atom ::= [^ \t\n()]+
ws ::= [ \t\n]*
ws1 ::= [ \t\n]+)g",
       "(define (f x)\n  (if (< x 2) x (+ (f (- x 1)) (f (- x 2)))))"},
      {R"g(root ::= list
list ::= "(" ws item (ws1 item)* ws ")" | "[" ws item ws "|" ws item ws "]"
item ::= atom | list
atom ::= [^ \n()[\]|]+
ws ::= [ \n]*
ws1 ::= [ \n]+)g",
       "(ab [cd | ef]\n(gh [i|j] k) [(l m)|n])"},
      {R"g(root ::= item
item ::= [a-z]+ | "(" root ("\n" root)* ")")g",
       "(ab\n(cd\nef)\ngh)"},
      {R"g(root ::= "{" pair ("," pair)* "}"
pair ::= key ":" val
key ::= [a-z]+
val ::= [0-9]+ ("." [0-9]+)? | "{" pair ("," pair)* "}")g",
       "{ab:12,cd:{ef:3.5,g:7},h:0}"}};
  const uint64_t settled0 = detail::test_walk_counters.settled_tokens.load();
  WalkStats stats;
  size_t text_steps = 0, text_tokens = 0;
  uint64_t seed = 4242;
  for (const auto& [min_settle, inline_rules] :
       {std::pair{size_t{1}, true}, std::pair{size_t{1}, false}, std::pair{SIZE_MAX, true}}) {
    ScopedHook<size_t> hook(detail::test_min_settle, min_settle);
    text_steps += walk_cases(fx, cases, 8, seed, stats, &text_tokens, inline_rules);
    seed += 100;
  }
  const uint64_t settled = detail::test_walk_counters.settled_tokens.load() - settled0;
  std::printf("[oracle] %s settled by returns: %llu tokens, %zu text steps, %zu random steps\n",
              GetParam().c_str(), static_cast<unsigned long long>(settled), text_steps,
              stats.steps);
  EXPECT_EQ(text_steps, text_tokens);
  EXPECT_GT(settled, 0u);  // (thousands on llama-bpe and qwen2; few on llama-spm)
  EXPECT_GT(stats.steps, cases.size() * 20);
}

// Each token's answer is kept under the top frames its check read alone (the next level of
// a recursion finds the answers of the tokens that read no deeper, and checks the rest):
// the deep texts put the same top frames above different brackets further down, which
// tokens of several closing brackets (")))", "))]") reach, so an answer kept under fewer
// frames than its token read gives a wrong mask here.
TEST_P(Oracle, MatchersShareCheckedStacks) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const std::string brackets = R"g(root ::= item ("," ws item)*
item ::= "(" ws v ws ")" | "[" ws v ws "]" | "{" ws v ws "}"
v ::= [a-z]+ | item
ws ::= [ ]?)g";
  // A step that pops to one of the stack's own frames and dies on its position has still
  // read it: after "xab", ")" returns to the frame of "Q" (no token goes on with it) and after
  // "yab" to that of ";" (");" does). Kept under the top frame alone, "yab"'s check would
  // find "xab"'s, which refused ");".
  const std::string returns = R"g(root ::= "x" v "Q" | "y" v ";"
v ::= [a-z]+ ")")g";
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {brackets,
       {"(abc)", "[abc]", "([abc])", "[(abc)]", "((the))", "[[the]]", "({in}),[x]", "[{in}],(x)",
        "((((((ab))))))", "[(((((ab)))))]", "(([((((ab))))]))", "{((((ab))))}",
        "(((((((((ab)))))))))", "[[(((((((ab)))))))]]"}},
      {returns, {"xab)Q", "yab);", "xabc)Q", "yabc);"}}};
  size_t steps = 0;
  const uint64_t top0 = detail::test_walk_counters.top_frame_checks.load();
  const uint64_t partly0 = detail::test_walk_counters.partly_kept_checks.load();
  const uint64_t whole0 = detail::test_walk_counters.levels_kept_whole.load();
  // The brackets once more with one level listed per context: the others are kept under
  // the whole stack (as past the 32 levels of the default).
  for (size_t k = 0; k < cases.size() * 2 + 1; ++k) {
    const bool one_level = k == cases.size() * 2;
    ScopedHook<size_t> levels(detail::test_max_checked_levels, one_level ? 1 : SIZE_MAX);
    const auto& [gbnf, texts] = cases[one_level ? 0 : k / 2];
    const bool inline_rules = k % 2 == 1;
    CompileOptions options;
    options.eager_ms = 0;
    options.inline_rules = inline_rules;
    auto cg = CompiledGrammar::compile(parse_gbnf(gbnf), fx.index, options);
    for (int round = 0; round < 2; ++round) {
      for (const std::string& text : texts) {
        SCOPED_TRACE(text);
        const std::vector<llama_token> toks = greedy_tokens(*fx.index, text);
        llama_sampler* smpl = llama_sampler_init_grammar(fx.vocab, gbnf.c_str(), "root");
        ASSERT_NE(smpl, nullptr);
        GrammarMatcher m(cg);
        std::vector<uint32_t> ours(bitmask_words(fx.index->n_vocab()));
        for (size_t i = 0; i <= toks.size(); ++i) {
          m.fill_next_token_bitmask(ours.data());
          std::vector<uint32_t> theirs = llama_mask(smpl, fx.index->n_vocab());
          exclude_eog_in_partial(m, *fx.index, ours, theirs);
          const std::string where = "grammar " + std::to_string(k / 2) +
                                    (inline_rules ? " inlined" : " per rule") + " round " +
                                    std::to_string(round) + " step " + std::to_string(i);
          if (masks_differ(fx, ours, theirs, where) || i == toks.size()) break;
          ++steps;
          ASSERT_TRUE(m.accept_token(toks[i])) << "step " << i;
          llama_sampler_accept(smpl, toks[i]);
        }
        llama_sampler_free(smpl);
      }
    }
  }
  const uint64_t top = detail::test_walk_counters.top_frame_checks.load() - top0;
  const uint64_t partly = detail::test_walk_counters.partly_kept_checks.load() - partly0;
  const uint64_t whole = detail::test_walk_counters.levels_kept_whole.load() - whole0;
  std::printf(
      "[oracle] %s shared stack checks: %zu steps compared, %llu found under top frames, %llu "
      "checks of only the tokens that kept ones left, %llu levels kept under whole stacks\n",
      GetParam().c_str(), steps, static_cast<unsigned long long>(top),
      static_cast<unsigned long long>(partly), static_cast<unsigned long long>(whole));
  EXPECT_GT(steps, cases[0].second.size() * 8);
  EXPECT_GT(top, cases[0].second.size());
  // Each new depth of "((((((ab))))))" checks again only the tokens of more brackets.
  EXPECT_GT(partly, 4u);
  EXPECT_GT(whole, 4u);
}

// The stress set of bench/data/grammars (broad negated classes under bounded and unbounded
// repetitions, Unicode and emoji ranges, nested optional repetitions, long alternations,
// token references, deep recursion, the converter's shapes), on the vocabularies the
// benchmark runs them on: each grammar's text walked token by token (masks computed on
// first use, or all at compile time, by turns), then one random walk.
class OracleStress : public ::testing::TestWithParam<std::string> {};

TEST_P(OracleStress, StressGrammarsMasksEqual) {
  VocabFixture& fx = vocab_for(GetParam());
  ASSERT_NE(fx.model, nullptr) << "vocabulary " << GetParam() << " not found";
  const size_t max_tokens = env_size("LACUNA_ORACLE_TEXT_TOKENS", 8);
  const size_t steps = env_size("LACUNA_ORACLE_STEPS", 6);
  const std::filesystem::path dir =
      std::filesystem::path(__FILE__).parent_path().parent_path() / "bench" / "data" / "grammars";
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".gbnf") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 12u);
  size_t text_steps = 0, k = 0;
  WalkStats stats;
  for (const auto& path : files) {
    SCOPED_TRACE(path.filename().string());
    const std::string gbnf = read_file(path);
    std::filesystem::path text_path = path;
    const std::string text = read_file(text_path.replace_extension(".txt"));
    std::vector<llama_token> toks(text.size() + 8);
    const int32_t n = llama_tokenize(fx.vocab, text.data(), static_cast<int32_t>(text.size()),
                                     toks.data(), static_cast<int32_t>(toks.size()), false, false);
    ASSERT_GT(n, 0);
    toks.resize(static_cast<size_t>(n));
    std::string joined;
    for (llama_token t : toks) joined += fx.index->token_bytes(t);
    if (joined != text) toks = greedy_tokens(*fx.index, text);
    toks.resize(std::min(toks.size(), max_tokens));
    CompileOptions options;
    options.eager_ms = (k++ & 1) != 0 ? -1.0 : 0.0;
    llama_sampler* smpl = llama_sampler_init_grammar(fx.vocab, gbnf.c_str(), "root");
    ASSERT_NE(smpl, nullptr);
    GrammarMatcher m(CompiledGrammar::compile(parse_gbnf(gbnf), fx.index, options));
    std::vector<uint32_t> ours(bitmask_words(fx.index->n_vocab()));
    for (size_t i = 0; i < toks.size(); ++i) {
      m.fill_next_token_bitmask(ours.data());
      std::vector<uint32_t> theirs = llama_mask(smpl, fx.index->n_vocab());
      exclude_eog_in_partial(m, *fx.index, ours, theirs);
      ASSERT_TRUE(ours == theirs) << "step " << i;
      ASSERT_TRUE(bitmask_test(ours.data(), toks[i])) << "the text leaves the grammar, step " << i;
      ASSERT_TRUE(m.accept_token(toks[i])) << "step " << i;
      llama_sampler_accept(smpl, toks[i]);
      ++text_steps;
    }
    llama_sampler_free(smpl);
    walk(fx, gbnf, steps, 7000 + k, stats);
  }
  std::printf("[oracle] %s stress set: %zu grammars, %zu text steps, %zu random steps compared\n",
              GetParam().c_str(), files.size(), text_steps, stats.steps);
  EXPECT_GT(stats.steps, files.size());
}

INSTANTIATE_TEST_SUITE_P(Vocabs, OracleStress, ::testing::Values("llama-bpe", "qwen2", "gemma-4"),
                         vocab_test_name);

INSTANTIATE_TEST_SUITE_P(Vocabs, Oracle, ::testing::Values("llama-bpe", "llama-spm", "qwen2"),
                         vocab_test_name);

}  // namespace
