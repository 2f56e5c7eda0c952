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

// The inner constraint of an answer that is free after its reasoning (a thinking budget with
// no tools or response format): every token, always complete.
class Unconstrained final : public Constraint {
 public:
  explicit Unconstrained(size_t n_vocab) : n_vocab_(n_vocab) {}
  size_t n_vocab() const override { return n_vocab_; }
  void fill_next_token_bitmask(uint32_t* words) override {
    const size_t n_words = bitmask_words(n_vocab_);
    std::memset(words, 0xff, n_words * sizeof(uint32_t));
    if (n_vocab_ % 32 != 0) words[n_words - 1] = (1u << (n_vocab_ % 32)) - 1u;
  }
  bool accept_token(Token t) override { return t >= 0 && static_cast<size_t>(t) < n_vocab_; }
  bool rollback(size_t) override { return true; }
  std::unique_ptr<Constraint> fork() const override {
    return std::make_unique<Unconstrained>(n_vocab_);
  }
  void reset() override {}
  bool is_completed() const override { return true; }
  bool is_terminated() const override { return false; }
  size_t forced_tokens(std::vector<Token>&, size_t) const override { return 0; }

 private:
  size_t n_vocab_;
};

struct GateShared {
  std::string start;                // reasoning start tag ("<think>")
  std::vector<std::string> ends;    // end tags ("</think>")
  std::vector<std::string> pieces;  // every token's text (undecided state, budget's close)
  TokenPieceFn piece;
  int32_t budget = -1;  // tokens of reasoning after which its end is forced (-1: none)
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
      if (budget_spent() && fill_closing_mask(words, n_words)) {
        return;
      }
      std::memset(words, 0xff, n_words * sizeof(uint32_t));
      if (n_vocab % 32 != 0) words[n_words - 1] = (1u << (n_vocab % 32)) - 1u;
      return;
    }
    // Undecided: what the inner constraint allows (while it has seen every token), and any
    // token that keeps the answer on the way into the start tag.
    if (inner_alive_) {
      inner_->fill_next_token_bitmask(words);
    } else {
      std::memset(words, 0, n_words * sizeof(uint32_t));
    }
    for (size_t t = 0; t < shared_->pieces.size(); ++t) {
      const std::string& piece = shared_->pieces[t];
      if (!piece.empty() && tag_consistent(piece)) bitmask_set(words, static_cast<Token>(t));
    }
  }

  bool accept_token(Token t) override {
    Record rec{state_, thinking_.size(), Kind::gate};
    rec.thinking_tokens = thinking_tokens_;
    if (state_ == State::thinking) {
      if (budget_spent() && !closes(t)) return false;
      ++thinking_tokens_;
    }
    if (state_ == State::open) {
      if (!inner_->accept_token(t)) return false;
      rec.kind = Kind::inner;
      history_.push_back(rec);
      return true;
    }
    std::string piece;
    shared_->piece(t, piece);
    rec.prefix_size = prefix_.size();
    rec.inner_alive = inner_alive_;
    if (state_ == State::undecided) {
      const bool on_tag = !piece.empty() && tag_consistent(piece);
      const bool inner_ok = inner_alive_ && inner_->accept_token(t);
      if (!on_tag) {
        if (!inner_ok) return false;
        state_ = State::open;
        rec.kind = Kind::inner;
        history_.push_back(rec);
        return true;
      }
      rec.kind = inner_ok ? Kind::inner : Kind::gate;
      inner_alive_ = inner_ok;
      prefix_ += piece;
      undecided_tokens_.push_back(t);
      if (prefix_.size() < shared_->start.size()) {
        history_.push_back(rec);
        return true;
      }
      // The start tag is complete: reasoning from here (the inner constraint starts over
      // after its end).
      piece = prefix_.substr(shared_->start.size());
      state_ = State::thinking;
      rec.kind = Kind::entered;
      inner_->reset();
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
          thinking_tokens_ = rec.thinking_tokens;
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
      if (rec.kind == Kind::entered || rec.state == State::undecided) {
        if (!undecided_tokens_.empty() && rec.state == State::undecided &&
            rec.kind != Kind::entered && prefix_.size() > rec.prefix_size) {
          undecided_tokens_.pop_back();
        }
        if (rec.kind == Kind::entered) {
          undecided_tokens_.pop_back();
          replay_inner(rec.prefix_size);
        }
      }
      state_ = rec.state;
      thinking_.resize(rec.thinking_size);
      thinking_tokens_ = rec.thinking_tokens;
      prefix_.resize(rec.prefix_size);
      inner_alive_ = rec.inner_alive;
    }
    return true;
  }

  std::unique_ptr<Constraint> fork() const override {
    auto g = std::make_unique<ReasoningGate>(inner_->fork(), shared_, initial_);
    g->state_ = state_;
    g->thinking_ = thinking_;
    g->thinking_tokens_ = thinking_tokens_;
    g->history_ = history_;
    g->prefix_ = prefix_;
    g->inner_alive_ = inner_alive_;
    g->undecided_tokens_ = undecided_tokens_;
    return g;
  }

  void reset() override {
    inner_->reset();
    state_ = initial_;
    thinking_.clear();
    thinking_tokens_ = 0;
    history_.clear();
    prefix_.clear();
    inner_alive_ = true;
    undecided_tokens_.clear();
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
  enum class Kind { gate, inner, opened, entered };
  struct Record {
    State state;
    size_t thinking_size;
    Kind kind;
    size_t prefix_size = 0;
    bool inner_alive = true;
    size_t thinking_tokens = 0;
  };
  bool budget_spent() const {
    return shared_->budget >= 0 && thinking_tokens_ >= static_cast<size_t>(shared_->budget);
  }
  // What of the first end tag is still to come (after what of it the reasoning ends with).
  std::string_view closing_rest() const {
    const std::string& end = shared_->ends.front();
    size_t k = std::min(end.size() - 1, thinking_.size());
    while (k > 0 && thinking_.compare(thinking_.size() - k, k, end, 0, k) != 0) --k;
    return std::string_view(end).substr(k);
  }
  static bool spells(std::string_view rest, const std::string& piece) {
    return !piece.empty() && piece.size() <= rest.size() &&
           rest.compare(0, piece.size(), piece) == 0;
  }
  // Past the budget: only tokens that spell the rest of the end tag. False when no token
  // does (the mask stays free).
  bool fill_closing_mask(uint32_t* words, size_t n_words) const {
    const std::string_view rest = closing_rest();
    std::memset(words, 0, n_words * sizeof(uint32_t));
    bool any = false;
    for (size_t t = 0; t < shared_->pieces.size(); ++t) {
      if (spells(rest, shared_->pieces[t])) {
        bitmask_set(words, static_cast<Token>(t));
        any = true;
      }
    }
    return any;
  }
  // Whether token t may follow once the budget is spent (as fill_closing_mask allows).
  bool closes(Token t) const {
    const std::string_view rest = closing_rest();
    if (t >= 0 && static_cast<size_t>(t) < shared_->pieces.size() &&
        spells(rest, shared_->pieces[static_cast<size_t>(t)])) {
      return true;
    }
    for (const std::string& piece : shared_->pieces) {
      if (spells(rest, piece)) return false;
    }
    return true;
  }
  // Whether `piece` after prefix_ stays on the start tag (a prefix of it, or past it).
  bool tag_consistent(const std::string& piece) const {
    const std::string& start = shared_->start;
    const std::string s = prefix_ + piece;
    const size_t n = std::min(s.size(), start.size());
    return s.compare(0, n, start, 0, n) == 0;
  }
  // Back into the undecided state: the inner constraint sees again the tokens it had
  // accepted before the start tag was complete.
  void replay_inner(size_t) {
    inner_->reset();
    for (Token t : undecided_tokens_) {
      if (!inner_->accept_token(t)) break;
    }
  }
  std::unique_ptr<Constraint> inner_;
  std::shared_ptr<const GateShared> shared_;
  State initial_;
  State state_;
  std::string thinking_;        // reasoning text seen so far (without the start tag)
  size_t thinking_tokens_ = 0;  // tokens accepted inside the reasoning block
  std::string prefix_;          // undecided: the answer so far, a proper prefix of the start tag
  bool inner_alive_ = true;     // undecided: the inner constraint accepted every token so far
  std::vector<Token> undecided_tokens_;  // undecided: those tokens
  std::vector<Record> history_;
};

}  // namespace

std::unique_ptr<Constraint> make_constraint(const llama_vocab* vocab, const Prompt& prompt) {
  if (!prompt.constraint_error.empty()) throw ChatError(prompt.constraint_error);
  const bool reasons =
      (!prompt.thinking_start.empty() || prompt.thinking_open) && !prompt.thinking_end.empty();
  const bool budget = prompt.thinking_budget >= 0 && reasons;
  if (prompt.gbnf.empty() && !budget) return nullptr;
  if (vocab == nullptr) throw ChatError("make_constraint: null vocabulary");
  std::unique_ptr<Constraint> c;
  if (prompt.gbnf.empty()) {
    c = std::make_unique<Unconstrained>(static_cast<size_t>(llama_vocab_n_tokens(vocab)));
  } else {
    try {
      c = std::make_unique<ByteFedGrammar>(decode::make_grammar_constraint(vocab, prompt.gbnf));
    } catch (const std::exception& e) {
      throw ChatError(std::string("the answer's grammar does not compile: ") + e.what());
    }
  }
  const TokenPieceFn piece = vocab_piece_fn(vocab);
  if (!prompt.triggers.empty()) {
    LazyTriggers t;
    t.patterns = prompt.triggers;
    c = std::make_unique<LazyConstraint>(std::move(c), std::move(t), piece);
  }
  if (!reasons) return c;
  auto shared = std::make_shared<GateShared>();
  shared->start = prompt.thinking_start;
  shared->ends = prompt.thinking_end;
  shared->piece = piece;
  shared->budget = budget ? prompt.thinking_budget : -1;
  if ((!shared->start.empty() && !prompt.thinking_open) || budget) {
    const int32_t n = llama_vocab_n_tokens(vocab);
    shared->pieces.resize(static_cast<size_t>(n));
    for (Token t = 0; t < n; ++t) piece(t, shared->pieces[static_cast<size_t>(t)]);
  }
  const auto initial =
      prompt.thinking_open ? ReasoningGate::State::thinking : ReasoningGate::State::undecided;
  return std::make_unique<ReasoningGate>(std::move(c), std::move(shared), initial);
}

}  // namespace lacuna::chat
