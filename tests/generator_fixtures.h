// generator_fixtures.h — shared helpers for the generator tests: tiny models, a string-set
// constraint equivalent to the GBNF `root ::= "s1" | "s2" | ...`, and run helpers.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "decode/forced_string.h"
#include "lacuna/constraint.h"
#include "lacuna/generator.h"
#include "llama.h"

namespace lacuna::testing {

inline std::string model_path(const std::string& name) {
  const char* dir = std::getenv("LACUNA_TEST_MODEL_DIR");
  return std::string(dir != nullptr ? dir : LACUNA_TEST_MODEL_DIR) + "/" + name + ".gguf";
}

struct ModelDeleter {
  void operator()(llama_model* m) const { llama_model_free(m); }
};
struct ContextDeleter {
  void operator()(llama_context* c) const { llama_free(c); }
};
struct SamplerDeleter {
  void operator()(llama_sampler* s) const { llama_sampler_free(s); }
};
using ModelHandle = std::unique_ptr<llama_model, ModelDeleter>;
using ContextHandle = std::unique_ptr<llama_context, ContextDeleter>;
using SamplerHandle = std::unique_ptr<llama_sampler, SamplerDeleter>;

inline void quiet_llama() {
  llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
}

inline ModelHandle load_model(const std::string& name) {
  quiet_llama();
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  ModelHandle m(llama_model_load_from_file(model_path(name).c_str(), mp));
  return m;
}

inline ContextHandle make_context(llama_model* model, uint32_t n_ctx = 512,
                                  uint32_t n_batch = 512) {
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = n_ctx;
  cp.n_batch = n_batch;
  cp.n_ubatch = n_batch;
  cp.n_threads = 1;
  cp.n_threads_batch = 1;
  cp.no_perf = true;
  return ContextHandle(llama_init_from_model(model, cp));
}

inline std::vector<Token> tokenize(const llama_vocab* vocab, const std::string& text,
                                   bool add_special) {
  std::vector<Token> out(text.size() + 16);
  int32_t n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), out.data(),
                             static_cast<int32_t>(out.size()), add_special, false);
  if (n < 0) {
    out.resize(static_cast<size_t>(-n));
    n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), out.data(),
                       static_cast<int32_t>(out.size()), add_special, false);
  }
  out.resize(static_cast<size_t>(std::max(n, 0)));
  return out;
}

inline std::string detokenize(const llama_vocab* vocab, const std::vector<Token>& tokens) {
  std::string text;
  std::string piece;
  for (Token t : tokens) {
    decode::token_piece(vocab, t, piece);
    text += piece;
  }
  return text;
}

// Token pieces as llama.cpp's grammar sees them (special tokens rendered), indexed by the
// first byte so that masks cost little.
struct PieceTable {
  size_t n_vocab = 0;
  std::vector<std::string> pieces;
  std::vector<std::vector<Token>> by_first_byte = std::vector<std::vector<Token>>(256);
  std::vector<Token> eog;

  explicit PieceTable(const llama_vocab* vocab) {
    n_vocab = static_cast<size_t>(llama_vocab_n_tokens(vocab));
    pieces.resize(n_vocab);
    std::vector<char> buf(256);
    for (size_t t = 0; t < n_vocab; ++t) {
      const Token id = static_cast<Token>(t);
      if (llama_vocab_is_eog(vocab, id)) eog.push_back(id);
      int32_t n =
          llama_token_to_piece(vocab, id, buf.data(), static_cast<int32_t>(buf.size()), 0, true);
      if (n < 0) {
        buf.resize(static_cast<size_t>(-n));
        n = llama_token_to_piece(vocab, id, buf.data(), static_cast<int32_t>(buf.size()), 0, true);
      }
      pieces[t].assign(buf.data(), static_cast<size_t>(std::max(n, 0)));
      if (!pieces[t].empty() && pieces[t][0] != 0 && !llama_vocab_is_eog(vocab, id)) {
        by_first_byte[static_cast<unsigned char>(pieces[t][0])].push_back(id);
      }
    }
  }
};

// Output must be exactly one of the strings (ASCII, no '<'): the same language as the GBNF
// root ::= "s1" | "s2" | ..., with llama.cpp's rules for end-of-generation tokens (allowed
// once the output is complete) and empty pieces (never allowed).
class StringSetConstraint : public Constraint {
 public:
  StringSetConstraint(std::shared_ptr<const PieceTable> table, std::vector<std::string> strings)
      : table_(std::move(table)), strings_(std::move(strings)) {}

  size_t n_vocab() const override { return table_->n_vocab; }

  void fill_next_token_bitmask(uint32_t* words) override { fill(out_, terminated_, words); }

  bool accept_token(Token token) override {
    if (terminated_ || token < 0 || static_cast<size_t>(token) >= table_->n_vocab) return false;
    if (std::find(table_->eog.begin(), table_->eog.end(), token) != table_->eog.end()) {
      if (!complete(out_)) return false;
      history_.push_back(out_.size());
      terminated_ = true;
      return true;
    }
    const std::string& p = table_->pieces[static_cast<size_t>(token)];
    if (p.empty() || !live(out_ + p)) return false;
    history_.push_back(out_.size());
    out_ += p;
    return true;
  }

  bool rollback(size_t n) override {
    if (n > history_.size()) return false;
    for (size_t i = 0; i < n; ++i) {
      out_.resize(history_.back());
      history_.pop_back();
      terminated_ = false;
    }
    return true;
  }

  std::unique_ptr<Constraint> fork() const override {
    return std::make_unique<StringSetConstraint>(*this);
  }
  void reset() override {
    out_.clear();
    history_.clear();
    terminated_ = false;
  }
  bool is_completed() const override { return complete(out_); }
  bool is_terminated() const override { return terminated_; }

  size_t forced_tokens(std::vector<Token>& out, size_t max_tokens) const override {
    std::string text = out_;
    std::vector<uint32_t> words(bitmask_words(table_->n_vocab));
    size_t n = 0;
    while (n < max_tokens) {
      fill(text, terminated_, words.data());
      Token only = -1;
      size_t count = 0;
      for (size_t w = 0; w < words.size() && count < 2; ++w) {
        uint32_t bits = words[w];
        while (bits != 0 && count < 2) {
          only = static_cast<Token>(w * 32 + static_cast<size_t>(__builtin_ctz(bits)));
          bits &= bits - 1;
          ++count;
        }
      }
      if (count != 1) break;
      out.push_back(only);
      ++n;
      if (std::find(table_->eog.begin(), table_->eog.end(), only) != table_->eog.end()) break;
      text += table_->pieces[static_cast<size_t>(only)];
    }
    return n;
  }

  std::string jump_forward_string() const override {
    if (terminated_) return {};
    std::string common;
    bool first = true;
    for (const auto& s : strings_) {
      if (s.compare(0, out_.size(), out_) != 0 || s.size() < out_.size()) continue;
      const std::string rest = s.substr(out_.size());
      if (first) {
        common = rest;
        first = false;
      } else {
        size_t k = 0;
        while (k < common.size() && k < rest.size() && common[k] == rest[k]) ++k;
        common.resize(k);
      }
    }
    return common;
  }

  const std::string& output() const { return out_; }

 private:
  bool live(const std::string& text) const {
    for (const auto& s : strings_) {
      if (s.size() >= text.size() && s.compare(0, text.size(), text) == 0) return true;
    }
    return false;
  }
  bool complete(const std::string& text) const {
    return std::find(strings_.begin(), strings_.end(), text) != strings_.end();
  }
  void fill(const std::string& text, bool terminated, uint32_t* words) const {
    std::fill(words, words + bitmask_words(table_->n_vocab), 0u);
    if (terminated) return;
    bool seen[256] = {};
    for (const auto& s : strings_) {
      if (s.size() <= text.size() || s.compare(0, text.size(), text) != 0) continue;
      const unsigned char c = static_cast<unsigned char>(s[text.size()]);
      if (seen[c]) continue;
      seen[c] = true;
      for (Token t : table_->by_first_byte[c]) {
        const std::string& p = table_->pieces[static_cast<size_t>(t)];
        for (const auto& s2 : strings_) {
          if (s2.size() >= text.size() + p.size() && s2.compare(0, text.size(), text) == 0 &&
              s2.compare(text.size(), p.size(), p) == 0) {
            bitmask_set(words, t);
            break;
          }
        }
      }
    }
    if (complete(text)) {
      for (Token t : table_->eog) bitmask_set(words, t);
    }
  }

  std::shared_ptr<const PieceTable> table_;
  std::vector<std::string> strings_;
  std::string out_;
  std::vector<size_t> history_;
  bool terminated_ = false;
};

// The GBNF grammar of the same language, for llama.cpp's own grammar sampler.
inline std::string string_set_gbnf(const std::vector<std::string>& strings) {
  std::string g = "root ::= ";
  for (size_t i = 0; i < strings.size(); ++i) {
    if (i > 0) g += " | ";
    g += '"';
    for (char c : strings[i]) {
      if (c == '"' || c == '\\') g += '\\';
      if (c == '\n') {
        g += "\\n";
        continue;
      }
      g += c;
    }
    g += '"';
  }
  return g + "\n";
}

}  // namespace lacuna::testing
