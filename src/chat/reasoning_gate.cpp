// reasoning_gate.cpp — the answer's constraint: nothing is constrained inside the reasoning
// block; the inner constraint (lazy tool calls, a required call, a response schema) starts
// after the block's end tag, or at once when the answer does not open a block.
#include <algorithm>
#include <cstring>

#include "decode/constraint_factory.h"
#include "lacuna/chat.h"
#include "lacuna/constraint_ext.h"
#include "lacuna/matcher.h"
#include "lacuna/sampler.h"

namespace lacuna::chat {

namespace {

// A grammar constraint that also takes raw bytes (text after a trigger or after the end of
// reasoning that starts inside a token).
class ByteFedGrammar final : public Constraint, public ByteAcceptor {
 public:
  explicit ByteFedGrammar(std::unique_ptr<Constraint> inner) : inner_(std::move(inner)) {
    matcher_ = dynamic_cast<GrammarMatcher*>(inner_.get());
  }
  size_t n_vocab() const override { return inner_->n_vocab(); }
  void fill_next_token_bitmask(uint32_t* words) override { inner_->fill_next_token_bitmask(words); }
  bool accept_token(Token t) override { return inner_->accept_token(t); }
  bool rollback(size_t n) override { return inner_->rollback(n); }
  std::unique_ptr<Constraint> fork() const override {
    return std::make_unique<ByteFedGrammar>(inner_->fork());
  }
  void reset() override { inner_->reset(); }
  bool is_completed() const override { return inner_->is_completed(); }
  bool is_terminated() const override { return inner_->is_terminated(); }
  size_t forced_tokens(std::vector<Token>& out, size_t max_tokens) const override {
    return inner_->forced_tokens(out, max_tokens);
  }
  std::string jump_forward_string() const override { return inner_->jump_forward_string(); }
  bool accept_bytes(std::string_view bytes) override {
    return matcher_ != nullptr && matcher_->accept_string(bytes);
  }

 private:
  std::unique_ptr<Constraint> inner_;
  GrammarMatcher* matcher_ = nullptr;
};

struct GateShared {
  std::string start;                // reasoning start tag ("<think>")
  std::vector<std::string> ends;    // end tags ("</think>")
  std::vector<Token> start_tokens;  // tokens whose text begins with the start tag
  TokenPieceFn piece;
};

class ReasoningGate final : public Constraint {
 public:
  enum class State { undecided, thinking, open };

  ReasoningGate(std::unique_ptr<Constraint> inner, std::shared_ptr<const GateShared> shared,
                State initial)
      : inner_(std::move(inner)), shared_(std::move(shared)), initial_(initial), state_(initial) {}

  size_t n_vocab() const override { return inner_->n_vocab(); }

  void fill_next_token_bitmask(uint32_t* words) override {
    const size_t n_vocab = inner_->n_vocab();
    const size_t n_words = bitmask_words(n_vocab);
    if (state_ == State::open) {
      inner_->fill_next_token_bitmask(words);
      return;
    }
    if (state_ == State::thinking) {
      std::memset(words, 0xff, n_words * sizeof(uint32_t));
      if (n_vocab % 32 != 0) words[n_words - 1] = (1u << (n_vocab % 32)) - 1u;
      return;
    }
    inner_->fill_next_token_bitmask(words);
    for (Token t : shared_->start_tokens) bitmask_set(words, t);
  }

  bool accept_token(Token t) override {
    Record rec{state_, thinking_.size(), Kind::gate};
    if (state_ == State::open) {
      if (!inner_->accept_token(t)) return false;
      rec.kind = Kind::inner;
      history_.push_back(rec);
      return true;
    }
    std::string piece;
    shared_->piece(t, piece);
    if (state_ == State::undecided) {
      if (piece.compare(0, shared_->start.size(), shared_->start) != 0) {
        if (!inner_->accept_token(t)) return false;
        state_ = State::open;
        rec.kind = Kind::inner;
        history_.push_back(rec);
        return true;
      }
      state_ = State::thinking;
      piece.erase(0, shared_->start.size());
    }
    const size_t old = thinking_.size();
    thinking_ += piece;
    size_t end_at = std::string::npos;
    for (const std::string& e : shared_->ends) {
      const size_t from = old >= e.size() ? old - e.size() + 1 : 0;
      const size_t pos = thinking_.find(e, from);
      if (pos != std::string::npos) end_at = std::min(end_at, pos + e.size());
    }
    if (end_at != std::string::npos) {
      const std::string rest = thinking_.substr(end_at);
      if (!rest.empty()) {
        auto* bytes = dynamic_cast<ByteAcceptor*>(inner_.get());
        if (bytes != nullptr && !bytes->accept_bytes(rest)) {
          inner_->reset();
          state_ = rec.state;
          thinking_.resize(rec.thinking_size);
          return false;
        }
      }
      state_ = State::open;
      rec.kind = Kind::opened;
    }
    history_.push_back(rec);
    return true;
  }

  bool rollback(size_t n) override {
    if (n > history_.size()) return false;
    for (size_t i = 0; i < n; ++i) {
      const Record rec = history_.back();
      history_.pop_back();
      if (rec.kind == Kind::inner) inner_->rollback(1);
      if (rec.kind == Kind::opened) inner_->reset();
      state_ = rec.state;
      thinking_.resize(rec.thinking_size);
    }
    return true;
  }

  std::unique_ptr<Constraint> fork() const override {
    auto g = std::make_unique<ReasoningGate>(inner_->fork(), shared_, initial_);
    g->state_ = state_;
    g->thinking_ = thinking_;
    g->history_ = history_;
    return g;
  }

  void reset() override {
    inner_->reset();
    state_ = initial_;
    thinking_.clear();
    history_.clear();
  }

  bool is_completed() const override { return state_ == State::open && inner_->is_completed(); }
  bool is_terminated() const override { return state_ == State::open && inner_->is_terminated(); }
  size_t forced_tokens(std::vector<Token>& out, size_t max_tokens) const override {
    return state_ == State::open ? inner_->forced_tokens(out, max_tokens) : 0;
  }
  std::string jump_forward_string() const override {
    return state_ == State::open ? inner_->jump_forward_string() : std::string();
  }

 private:
  enum class Kind { gate, inner, opened };
  struct Record {
    State state;
    size_t thinking_size;
    Kind kind;
  };
  std::unique_ptr<Constraint> inner_;
  std::shared_ptr<const GateShared> shared_;
  State initial_;
  State state_;
  std::string thinking_;  // reasoning text seen so far (without the start tag)
  std::vector<Record> history_;
};

}  // namespace

std::unique_ptr<Constraint> make_constraint(const llama_vocab* vocab, const Prompt& prompt) {
  if (!prompt.constraint_error.empty()) throw ChatError(prompt.constraint_error);
  if (prompt.gbnf.empty()) return nullptr;
  if (vocab == nullptr) throw ChatError("make_constraint: null vocabulary");
  std::unique_ptr<Constraint> c;
  try {
    c = std::make_unique<ByteFedGrammar>(decode::make_grammar_constraint(vocab, prompt.gbnf));
  } catch (const std::exception& e) {
    throw ChatError(std::string("the answer's grammar does not compile: ") + e.what());
  }
  const TokenPieceFn piece = vocab_piece_fn(vocab);
  if (!prompt.triggers.empty()) {
    LazyTriggers t;
    t.patterns = prompt.triggers;
    c = std::make_unique<LazyConstraint>(std::move(c), std::move(t), piece);
  }
  if (prompt.thinking_start.empty() && !prompt.thinking_open) return c;
  if (prompt.thinking_end.empty()) return c;
  auto shared = std::make_shared<GateShared>();
  shared->start = prompt.thinking_start;
  shared->ends = prompt.thinking_end;
  shared->piece = piece;
  if (!shared->start.empty() && !prompt.thinking_open) {
    const int32_t n = llama_vocab_n_tokens(vocab);
    std::string buf;
    for (Token t = 0; t < n; ++t) {
      buf.clear();
      piece(t, buf);
      if (buf.compare(0, shared->start.size(), shared->start) == 0) {
        shared->start_tokens.push_back(t);
      }
    }
  }
  const auto initial =
      prompt.thinking_open ? ReasoningGate::State::thinking : ReasoningGate::State::undecided;
  return std::make_unique<ReasoningGate>(std::move(c), std::move(shared), initial);
}

}  // namespace lacuna::chat
