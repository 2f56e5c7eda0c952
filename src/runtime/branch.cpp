// branch.cpp — runtime::Branch: one sequence of a Context (prefill with reuse, generation,
// produce/commit, fork and prune, metrics, Blink KV, state files), docs/runtime.md.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>

#include "decode/constraint_factory.h"
#include "lacuna/runtime.h"
#include "runtime/branch_state.h"
#include "runtime/log_sum_exp.h"

namespace lacuna::runtime {

namespace {

std::vector<uint8_t> read_state_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    throw StateFileError(err == ENOENT ? StateFileError::Kind::not_found : StateFileError::Kind::io,
                         "cannot open '" + path + "': " + std::strerror(err));
  }
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  if (in.bad())
    throw StateFileError(StateFileError::Kind::io, "error while reading '" + path + "'");
  return bytes;
}

void write_state_file(const std::string& path, std::span<const uint8_t> bytes) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      throw StateFileError(StateFileError::Kind::io,
                           "cannot create '" + tmp + "': " + std::string(std::strerror(errno)));
    }
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw StateFileError(StateFileError::Kind::io, "cannot write '" + tmp + "'");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw StateFileError(StateFileError::Kind::io, "cannot rename '" + tmp + "' to '" + path +
                                                       "': " + std::string(std::strerror(err)));
  }
}

std::vector<uint8_t> sequence_state(llama_context* ctx, llama_seq_id seq) {
  std::vector<uint8_t> state(llama_state_seq_get_size(ctx, seq));
  const size_t got = llama_state_seq_get_data(ctx, state.data(), state.size(), seq);
  if (got == 0 && !state.empty())
    throw std::runtime_error("llama.cpp could not copy the sequence state");
  state.resize(got);
  return state;
}

}  // namespace

bool Branch::valid() const {
  return ctx_ != nullptr && id_ < ctx_->branches_.size() && ctx_->branches_[id_] &&
         ctx_->branches_[id_]->gen == gen_;
}

Context& Branch::context() const {
  if (ctx_ == nullptr) throw std::invalid_argument("runtime: an empty branch handle");
  return *ctx_;
}

BranchState& Branch::state() const {
  return context().state_of(*this);
}

llama_seq_id Branch::seq() const {
  return state().seq;
}

void Branch::prefill(std::span<const Token> tokens) {
  const std::pair<Branch, std::span<const Token>> item{*this, tokens};
  context().prefill_many(std::span(&item, 1), false);
}

void Branch::prefill_text(std::string_view text, bool add_special, bool parse_special) {
  const Generator& g = *state().decoder;
  // BOS only at the start of an empty sequence.
  const bool at_start = g.history().empty() && g.history_base() == 0;
  const auto toks = tokenize(context().vocab(), text, add_special && at_start, parse_special);
  prefill(toks);
}

void Branch::set_tokens(std::span<const Token> tokens) {
  const std::pair<Branch, std::span<const Token>> item{*this, tokens};
  context().prefill_many(std::span(&item, 1), true);
}

Step Branch::next() {
  const Branch self = *this;
  context().store().step(std::span(&self, 1));
  return state().decoder->last_step();
}

StopReason Branch::generate(const std::function<bool(const Step&)>& on_step) {
  for (;;) {
    const Step s = next();
    if (on_step && !on_step(s)) return s.done ? s.reason : StopReason::none;
    if (s.done) return s.reason;
  }
}

Token Branch::produce() {
  Generator& g = *state().decoder;
  if (g.logits() == nullptr) {
    throw std::invalid_argument("runtime: branch " + std::to_string(id_) +
                                " has no logits at its position (prefill or commit first)");
  }
  return g.produce();
}

void Branch::commit(Token token) {
  const std::pair<Branch, Token> item{*this, token};
  context().store().commit(std::span(&item, 1));
}

Branch Branch::fork() {
  Context& c = context();
  BranchState& parent = state();
  // The child's session empties its sequence, then the parent's KV is shared into it.
  const Generator& from = *parent.decoder;
  const llama_seq_id parent_seq = parent.seq;
  const uint32_t id = c.allocate(parent.params, [&](llama_seq_id seq) {
    llama_memory_seq_cp(llama_get_memory(c.raw()), parent_seq, seq, -1, -1);
    return from.fork(seq);
  });
  BranchState& child = *c.branches_[id];
  child.parent = parent.id;
  child.parent_gen = parent.gen;
  child.fork_shared = static_cast<uint64_t>(parent.decoder->n_past());
  parent.children.push_back(id);
  return c.handle(id);
}

void Branch::prune() {
  BranchState& st = state();
  for (uint32_t ch : st.children) {
    if (context().branches_[ch]) {
      throw std::logic_error("runtime: branch " + std::to_string(id_) + " has " +
                             std::to_string(st.children.size()) +
                             " live children: prune them first, or prune_subtree()");
    }
  }
  context().free_branch(st.id);
}

void Branch::prune_subtree() {
  BranchState& st = state();
  const std::vector<uint32_t> kids = st.children;
  for (uint32_t ch : kids) {
    if (context().branches_[ch]) context().handle(ch).prune_subtree();
  }
  context().free_branch(st.id);
}

Branch Branch::parent() const {
  const BranchState& st = state();
  if (st.parent < 0) return Branch();
  const auto& p = ctx_->branches_[static_cast<size_t>(st.parent)];
  if (!p || p->gen != st.parent_gen) return Branch();
  return Branch(ctx_, static_cast<uint32_t>(st.parent), st.parent_gen);
}

std::vector<Branch> Branch::children() const {
  std::vector<Branch> out;
  for (uint32_t ch : state().children) {
    if (ctx_->branches_[ch]) out.push_back(ctx_->handle(ch));
  }
  return out;
}

void Branch::set_constraint(std::unique_ptr<Constraint> constraint) {
  state().decoder->set_constraint(std::move(constraint));
}

void Branch::set_grammar(const std::string& gbnf, const std::vector<std::string>& lazy_triggers) {
  set_constraint(
      decode::make_grammar_constraint(context().model().vocab_ptr(), gbnf, lazy_triggers));
}

void Branch::set_json_schema(const std::string& schema, bool compact,
                             const std::vector<std::string>& lazy_triggers) {
  set_constraint(decode::make_schema_constraint(context().model().vocab_ptr(), schema, compact,
                                                lazy_triggers));
}

void Branch::set_sampler_params(float temp, uint32_t seed, int32_t top_k, float top_p,
                                float min_p) {
  BranchState& st = state();
  st.decoder->set_sampling(temp, seed, top_k, top_p, min_p);
  st.params.temp = temp;
  st.params.seed = seed;
  st.params.top_k = top_k;
  st.params.top_p = top_p;
  st.params.min_p = min_p;
}

void Branch::set_logit_bias(std::vector<llama_logit_bias> bias) {
  BranchState& st = state();
  st.decoder->set_logit_bias(bias);
  st.params.logit_bias = std::move(bias);
}

void Branch::set_stop_strings(std::vector<std::string> stop_strings) {
  BranchState& st = state();
  st.decoder->set_stop_strings(stop_strings);
  st.params.stop_strings = std::move(stop_strings);
}

void Branch::set_params(const BranchParams& params) {
  BranchState& st = state();
  for (const std::string& s : params.stop_strings) {
    if (s.empty()) throw std::invalid_argument("Branch::set_params: an empty stop string");
  }
  if (params.logprobs > 20) {
    throw std::invalid_argument("Branch::set_params: logprobs above 20");
  }
  Generator& g = *st.decoder;
  g.set_sampling(params.temp, params.seed, params.top_k, params.top_p, params.min_p);
  g.set_logit_bias(params.logit_bias);
  g.set_stop_strings(params.stop_strings);
  g.set_max_tokens(params.max_tokens);
  g.set_track_surprisal(params.track_perplexity);
  g.set_logprobs(params.logprobs);
  st.params = params;
}

void Branch::reseed(uint32_t seed) {
  BranchState& st = state();
  st.decoder->reseed(seed);
  st.params.seed = seed;
}

double Branch::model_entropy() const {
  const Generator& g = *state().decoder;
  const float* l = g.logits();
  if (l == nullptr)
    throw std::invalid_argument("runtime: the branch has no logits at its position");
  const int32_t n = context().vocab().n_vocab();
  const double lse = log_sum_exp(l, n);
  double h = 0;
  for (int32_t i = 0; i < n; ++i) {
    const double lp = static_cast<double>(l[i]) - lse;
    const double p = std::exp(lp);
    if (p > 0) h -= p * lp;
  }
  return h;
}

double Branch::model_surprisal(Token token) const {
  const Generator& g = *state().decoder;
  const float* l = g.logits();
  if (l == nullptr)
    throw std::invalid_argument("runtime: the branch has no logits at its position");
  const int32_t n = context().vocab().n_vocab();
  if (token < 0 || token >= n) {
    throw std::invalid_argument("runtime: token " + std::to_string(token) +
                                " outside the vocabulary");
  }
  return log_sum_exp(l, n) - static_cast<double>(l[token]);
}

double Branch::perplexity() const {
  const Generator& g = *state().decoder;
  return g.surprisal_count() == 0
             ? 0.0
             : std::exp(g.surprisal_sum() / static_cast<double>(g.surprisal_count()));
}

std::vector<float> Branch::logits() const {
  const Generator& g = *state().decoder;
  const float* l = g.logits();
  if (l == nullptr) return {};
  return std::vector<float>(l, l + context().vocab().n_vocab());
}

void Branch::clear_and_reseed(std::span<const Token> sinks, std::span<const Token> tail) {
  BranchState& st = state();
  Context& c = context();
  std::vector<Token> target(sinks.begin(), sinks.end());
  target.insert(target.end(), tail.begin(), tail.end());
  if (target.empty()) throw std::invalid_argument("runtime: clear_and_reseed with no tokens");
  const int32_t n_vocab = c.vocab().n_vocab();
  for (Token t : target) {
    if (t < 0 || t >= n_vocab) {
      throw std::invalid_argument("runtime: clear_and_reseed: token " + std::to_string(t) +
                                  " outside the vocabulary");
    }
  }
  if (target.size() >= c.n_ctx()) {
    throw std::invalid_argument("runtime: clear_and_reseed of " + std::to_string(target.size()) +
                                " tokens does not fit the context of " + std::to_string(c.n_ctx()));
  }
  Generator& g = *st.decoder;
  const auto hist = g.history();
  st.session->assume(hist.first(static_cast<size_t>(g.n_past() - g.history_base())));
  // Reuse is exact here: kept KV was computed for the same tokens at the same positions (the
  // sinks, when they are the sequence's start).
  const kv::PrefillResult r = st.session->restore(target);
  const size_t filled = r.n_reused_positions;
  g.rewind(g.history_base());
  g.adopt(std::span<const Token>(target).first(filled));
  g.extend(std::span<const Token>(target).subspan(filled), c.shared());
  st.session->record(target, r);
}

void Branch::save_state(const std::string& path) const {
  BranchState& st = state();
  Context& c = context();
  const Generator& g = *st.decoder;
  if (g.n_past() == 0)
    throw StateFileError(StateFileError::Kind::limit, "the branch is empty: prefill first");
  // Every token of the sequence, those still pending (not in the KV payload) too: loading
  // decodes what the payload lacks.
  const auto kv_tokens = g.history();
  const std::vector<uint8_t> state = sequence_state(c.raw(), st.seq);
  kv::KvShape shape = kv::model_shape(c.model().get());
  kv::payload_kv_info(state, shape.n_layer, shape);
  const auto bytes =
      kv::encode_cache_file(c.fingerprint(), /*block_size=*/1, shape, kv_tokens, state);
  write_state_file(path, bytes);
}

void Branch::load_state(const std::string& path) {
  BranchState& st = state();
  Context& c = context();
  llama_context* ctx = c.raw();
  const std::vector<uint8_t> bytes = read_state_file(path);
  kv::CacheFileView view;
  std::string reason;
  if (!kv::parse_cache_file(bytes, view, reason)) {
    throw StateFileError(StateFileError::Kind::parse,
                         "'" + path + "' is not a valid state file: " + reason);
  }
  if (!(view.fingerprint == c.fingerprint())) {
    throw StateFileError(
        StateFileError::Kind::model_mismatch,
        "'" + path + "' was saved with another model (fingerprint " + view.fingerprint.hex() + ")");
  }
  const kv::KvShape want = kv::model_shape(c.model().get());
  if (view.shape.n_layer != want.n_layer || view.shape.n_embd != want.n_embd ||
      view.shape.n_head != want.n_head || view.shape.n_head_kv != want.n_head_kv) {
    throw StateFileError(StateFileError::Kind::model_mismatch,
                         "'" + path + "' has KV shapes of another model");
  }
  const int32_t n_vocab = c.vocab().n_vocab();
  for (Token t : view.tokens) {
    if (t < 0 || t >= n_vocab) {
      throw StateFileError(
          StateFileError::Kind::parse,
          "'" + path + "' holds token " + std::to_string(t) + ", outside the vocabulary");
    }
  }
  if (view.tokens.empty() || view.tokens.size() >= c.n_ctx()) {
    throw StateFileError(StateFileError::Kind::limit,
                         "'" + path + "' holds " + std::to_string(view.tokens.size()) +
                             " tokens; the context has room for " + std::to_string(c.n_ctx() - 1));
  }
  Generator& g = *st.decoder;
  // Keep the current sequence so that a refused payload leaves the branch as it was.
  const std::vector<uint8_t> before = sequence_state(ctx, st.seq);
  llama_memory_t mem = llama_get_memory(ctx);
  llama_memory_seq_rm(mem, st.seq, -1, -1);
  const size_t got =
      llama_state_seq_set_data(ctx, view.payload.data(), view.payload.size(), st.seq);
  const llama_pos pos_max = llama_memory_seq_pos_max(mem, st.seq);
  if (got == 0 || pos_max < 0 || static_cast<size_t>(pos_max) + 1 > view.tokens.size()) {
    llama_memory_seq_rm(mem, st.seq, -1, -1);
    if (!before.empty()) llama_state_seq_set_data(ctx, before.data(), before.size(), st.seq);
    throw StateFileError(StateFileError::Kind::parse,
                         "llama.cpp refused the KV data of '" + path + "'");
  }
  // The last token in the KV cache is decoded again, so that the branch has its logits.
  const size_t kv = static_cast<size_t>(pos_max) + 1;
  llama_memory_seq_rm(mem, st.seq, static_cast<llama_pos>(kv - 1), -1);
  g.rewind(g.history_base());
  g.adopt(view.tokens.first(kv - 1));
  const std::span<const Token> rest = view.tokens.subspan(kv - 1);
  const std::span<const Token> rests[1] = {rest};
  Generator* gp = &g;
  Generator::prefill_many(std::span<Generator* const>(&gp, 1), rests, c.shared());
  st.session->assume(view.tokens);
}

uint64_t Branch::persist() {
  BranchState& st = state();
  const Generator& g = *st.decoder;
  st.session->assume(g.history().first(static_cast<size_t>(g.n_past() - g.history_base())));
  return st.session->persist();
}

std::span<const Token> Branch::tokens() const {
  return state().decoder->history();
}
const Generator& Branch::generator() const {
  return *state().decoder;
}
Generator& Branch::generator() {
  return *state().decoder;
}
const kv::KvStats& Branch::kv_stats() const {
  return state().session->stats();
}

}  // namespace lacuna::runtime
