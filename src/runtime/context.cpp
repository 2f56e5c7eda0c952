// context.cpp — runtime::Context: one llama_context with many sequences (unified KV), the
// prefix cache and persistent store every branch's prefill goes through, the sequence
// allocator, and the BranchStore's batched operations (docs/runtime.md).
#include <algorithm>
#include <cmath>
#include <thread>

#include "decode/constraint_factory.h"
#include "lacuna/log.h"
#include "lacuna/runtime.h"
#include "runtime/branch_state.h"
#include "runtime/decode_parts.h"

namespace lacuna::runtime {

namespace {

int32_t default_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int32_t>(n);
}

llama_context_params llama_params(const ContextParams& p, uint32_t n_seq) {
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = p.n_ctx;
  cp.n_batch = p.n_batch;
  cp.n_ubatch = std::min(p.n_ubatch, p.n_batch);
  cp.n_seq_max = n_seq;
  cp.n_threads = p.n_threads > 0 ? p.n_threads : default_threads();
  cp.n_threads_batch = p.n_threads_batch > 0 ? p.n_threads_batch : cp.n_threads;
  // One pool of cells for every sequence: a fork shares its parent's cells.
  cp.kv_unified = true;
  cp.embeddings = p.embeddings;
  if (p.embeddings) cp.pooling_type = LLAMA_POOLING_TYPE_MEAN;
  cp.no_perf = true;
  // With backend sampling a pass may carry up to max_draft + 1 sampled rows per sequence
  // (verified drafts); llama.cpp's default of one would leave the drafts out.
  if (p.decode.backend_sampling) {
    cp.n_outputs_max_per_seq =
        static_cast<uint32_t>(std::min<size_t>(p.decode.max_draft + 1, cp.n_batch));
  }
  return cp;
}

bool is_recurrent(const Model& m) {
  return llama_model_is_recurrent(m.get()) || llama_model_is_hybrid(m.get());
}

uint32_t cache_holders(const Model& m, const ContextParams& p) {
  return p.kv.prefix_cache && !is_recurrent(m) && !p.embeddings ? p.n_cache_holders : 0;
}

const ContextParams& checked(const ContextParams& p) {
  if (p.n_branches == 0) throw std::invalid_argument("runtime::Context: n_branches must be >= 1");
  if (p.n_batch < 2 || p.n_ubatch == 0) {
    throw std::invalid_argument("runtime::Context: n_batch must be >= 2 and n_ubatch >= 1");
  }
  if (p.n_threads < 0 || p.n_threads_batch < 0) {
    throw std::invalid_argument("runtime::Context: thread counts must be >= 0");
  }
  p.kv.validate();
  return p;
}

lacuna::Context make_llama(const Model& model, const ContextParams& p) {
  const uint32_t n_seq = p.n_branches + cache_holders(model, p);
  if (n_seq > llama_max_parallel_sequences()) {
    throw std::invalid_argument("runtime::Context: " + std::to_string(n_seq) +
                                " sequences (branches + prefix-cache holders) exceed llama.cpp's " +
                                std::to_string(llama_max_parallel_sequences()));
  }
  return lacuna::Context::create(model, llama_params(p, n_seq));
}

}  // namespace

Context::Context(Model model, ContextParams params)
    : model_(std::move(model)), params_(checked(params)), llama_(make_llama(model_, params_)) {
  const bool recurrent = is_recurrent(model_);
  const uint32_t holders = cache_holders(model_, params_);
  if (holders > 0) {
    std::vector<kv::SeqId> ids;
    for (uint32_t i = 0; i < holders; ++i)
      ids.push_back(static_cast<kv::SeqId>(params_.n_branches + i));
    cache_ = std::make_unique<kv::PrefixCache>(llama_.get(), std::move(ids), params_.kv.block_size,
                                               params_.kv.max_cached_tokens);
  }
  if (!params_.kv.persist_dir.empty() && !recurrent && !params_.embeddings) {
    const std::string path = params_.model_path.empty() ? model_.path() : params_.model_path;
    if (path.empty())
      throw kv::KvError("runtime::Context: the persistent store needs the model file's path");
    disk_ = std::make_unique<kv::PersistentStore>(
        params_.kv.persist_dir,
        kv::PersistentStore::model_fingerprint(params_.kv.persist_dir, path),
        params_.kv.block_size);
  }
  for (uint32_t i = params_.n_branches; i > 0; --i)
    free_seqs_.push_back(static_cast<llama_seq_id>(i - 1));
  batch_ = llama_batch_init(static_cast<int32_t>(params_.n_batch), 0, 1);
}

Context::~Context() {
  branches_.clear();  // sessions unpin their prefix-cache nodes first
  cache_.reset();
  if (batch_.token != nullptr) llama_batch_free(batch_);
}

uint32_t Context::n_ctx() const {
  return llama_n_ctx(llama_.get());
}

size_t Context::n_live_branches() const {
  return static_cast<size_t>(std::count_if(branches_.begin(), branches_.end(),
                                           [](const auto& b) { return b != nullptr; }));
}

kv::KvStats Context::kv_stats() const {
  kv::KvStats s = retired_stats_;
  for (const auto& b : branches_) {
    if (b) s += b->session->stats();
  }
  return s;
}

Branch Context::handle(uint32_t id) {
  return Branch(this, id, branches_[id]->gen);
}

BranchState& Context::state_of(const Branch& b) {
  if (b.ctx_ == nullptr) throw std::invalid_argument("runtime: an empty branch handle");
  if (b.ctx_ != this) throw std::invalid_argument("runtime: the branch belongs to another context");
  if (b.id_ >= branches_.size() || !branches_[b.id_] || branches_[b.id_]->gen != b.gen_) {
    throw std::invalid_argument("runtime: branch " + std::to_string(b.id_) + " was pruned");
  }
  return *branches_[b.id_];
}

uint32_t Context::allocate(const BranchParams& params,
                           const std::function<std::unique_ptr<Generator>(llama_seq_id)>& make) {
  if (free_seqs_.empty()) {
    throw std::length_error("runtime: no free sequence for a new branch (" +
                            std::to_string(params_.n_branches) +
                            " branches alive; ContextParams::n_branches)");
  }
  const llama_seq_id seq = free_seqs_.back();
  auto st = std::make_unique<BranchState>();
  st->seq = seq;
  st->params = params;
  st->gen = next_gen_++;
  // The session empties the sequence: made before any KV is put there.
  st->session =
      std::make_unique<kv::Session>(llama_.get(), seq, params_.kv, cache_.get(), disk_.get());
  if (make) {
    st->decoder = make(seq);
  } else {
    GeneratorConfig gc;
    gc.temp = params.temp;
    gc.seed = params.seed;
    gc.top_k = params.top_k;
    gc.top_p = params.top_p;
    gc.min_p = params.min_p;
    gc.max_tokens = params.max_tokens;
    gc.stop_strings = params.stop_strings;
    gc.seq = seq;
    gc.decode = params_.decode;
    gc.print_stats = params.print_stats;
    if (!proto_) proto_ = std::make_unique<Generator>(llama_.get(), GeneratorConfig{});
    st->decoder = proto_->fresh(gc);
    st->decoder->set_logit_bias(params.logit_bias);
    st->decoder->set_track_surprisal(params.track_perplexity);
    st->decoder->set_logprobs(params.logprobs);
  }
  free_seqs_.pop_back();
  uint32_t id = 0;
  while (id < branches_.size() && branches_[id]) ++id;
  st->id = id;
  if (id == branches_.size()) {
    branches_.push_back(std::move(st));
  } else {
    branches_[id] = std::move(st);
  }
  return id;
}

void Context::free_branch(uint32_t id) {
  BranchState& st = *branches_[id];
  retired_stats_ += st.session->stats();
  if (st.parent >= 0 && branches_[static_cast<size_t>(st.parent)] &&
      branches_[static_cast<size_t>(st.parent)]->gen == st.parent_gen) {
    auto& ch = branches_[static_cast<size_t>(st.parent)]->children;
    ch.erase(std::remove(ch.begin(), ch.end(), id), ch.end());
  }
  const llama_seq_id seq = st.seq;
  branches_[id].reset();  // the session unpins its prefix-cache path
  llama_memory_seq_rm(llama_get_memory(llama_.get()), seq, -1, -1);
  free_seqs_.push_back(seq);
}

Branch Context::create_branch(const BranchParams& params) {
  return handle(allocate(params));
}

const kv::Fingerprint& Context::fingerprint() {
  if (!fingerprint_) {
    const std::string path = params_.model_path.empty() ? model_.path() : params_.model_path;
    if (path.empty()) throw kv::KvError("runtime: the model has no file to fingerprint");
    fingerprint_ = std::make_unique<kv::Fingerprint>(kv::fingerprint_file(path));
  }
  return *fingerprint_;
}

// Reuse first (each branch on its own: own prefix, prefix cache, disk), then the rest of
// every branch decoded in shared batches.
void Context::prefill_many(std::span<const std::pair<Branch, std::span<const Token>>> items,
                           bool replace) {
  const int32_t n_vocab = model_.vocab().n_vocab();
  std::vector<BranchState*> states;
  std::vector<std::vector<Token>> targets(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    BranchState& st = state_of(items[i].first);
    for (const auto* s : states) {
      if (s == &st) throw std::invalid_argument("runtime: a branch appears twice in one prefill");
    }
    states.push_back(&st);
    for (size_t k = 0; k < items[i].second.size(); ++k) {
      const Token t = items[i].second[k];
      if (t < 0 || t >= n_vocab) {
        throw std::invalid_argument("runtime: token " + std::to_string(t) + " at index " +
                                    std::to_string(k) + " is outside the vocabulary of " +
                                    std::to_string(n_vocab));
      }
    }
    std::vector<Token>& target = targets[i];
    if (!replace) {
      const auto have = st.decoder->history();
      target.assign(have.begin(), have.end());
    }
    target.insert(target.end(), items[i].second.begin(), items[i].second.end());
    if (target.empty() || (!replace && items[i].second.empty())) {
      throw std::invalid_argument("runtime: prefill of no tokens");
    }
    if (target.size() >= n_ctx()) {
      throw std::runtime_error("runtime: " + std::to_string(target.size()) +
                               " tokens do not fit in the context of " + std::to_string(n_ctx()));
    }
  }
  std::vector<kv::PrefillResult> restored(items.size());
  std::vector<Generator*> gens;
  std::vector<std::span<const Token>> rests;
  for (size_t i = 0; i < items.size(); ++i) {
    BranchState& st = *states[i];
    Generator& g = *st.decoder;
    const auto hist = g.history();
    st.session->assume(hist.first(static_cast<size_t>(g.n_past() - g.history_base())));
    restored[i] = st.session->restore(targets[i]);
    const size_t filled = restored[i].n_reused_positions;
    g.rewind(g.history_base());
    g.adopt(std::span<const Token>(targets[i]).first(filled));
    gens.push_back(&g);
    rests.push_back(std::span<const Token>(targets[i]).subspan(filled));
  }
  Generator::prefill_many(gens, rests, shared());
  for (size_t i = 0; i < items.size(); ++i) states[i]->session->record(targets[i], restored[i]);
}

Generator::Shared Context::shared() {
  Generator::Shared s;
  s.batch = &batch_;
  s.on_full = [this]() {
    // Worth a retry only when the cache gave cells back (nodes pinned by live branches stay).
    if (cache_ == nullptr || cache_->n_nodes() == 0) return false;
    const size_t before = cache_->n_nodes();
    cache_->clear();
    log_message(LogLevel::info, "runtime: context full, evicted " +
                                    std::to_string(before - cache_->n_nodes()) +
                                    " prefix-cache blocks");
    return cache_->n_nodes() < before;
  };
  return s;
}

void Context::blink_if_full(std::span<const Branch> branches) {
  for (const Branch& b : branches) {
    BranchState& st = state_of(b);
    const BranchParams& p = st.params;
    if (p.blink_sinks + p.blink_tail == 0) continue;
    Generator& g = *st.decoder;
    if (g.done() || !g.prefilled()) continue;
    const DecodeOptions& o = params_.decode;
    const size_t need =
        static_cast<size_t>(g.n_past()) + g.n_pending() + o.max_forced + o.max_draft + 2;
    if (need < n_ctx()) continue;
    const auto hist = g.history();
    if (p.blink_sinks + p.blink_tail >= hist.size()) continue;
    Branch(b).clear_and_reseed(hist.first(p.blink_sinks), hist.last(p.blink_tail));
    ++st.reseeds;
  }
}

std::vector<float> Context::encode(std::span<const Token> tokens) {
  if (!params_.embeddings) {
    throw std::logic_error("runtime::Context::encode: the context was not made for embeddings");
  }
  if (tokens.empty()) throw std::invalid_argument("runtime::Context::encode: no tokens");
  if (tokens.size() > std::min(params_.n_batch, params_.n_ubatch)) {
    throw std::invalid_argument("runtime::Context::encode: " + std::to_string(tokens.size()) +
                                " tokens exceed one batch (n_ubatch " +
                                std::to_string(params_.n_ubatch) + ")");
  }
  const int32_t n_vocab = model_.vocab().n_vocab();
  for (Token t : tokens) {
    if (t < 0 || t >= n_vocab) {
      throw std::invalid_argument("runtime::Context::encode: token " + std::to_string(t) +
                                  " is outside the vocabulary");
    }
  }
  if (free_seqs_.empty()) throw std::length_error("runtime::Context::encode: no free sequence");
  const llama_seq_id seq = free_seqs_.back();
  llama_memory_t mem = llama_get_memory(llama_.get());
  llama_memory_seq_rm(mem, seq, -1, -1);
  Part part{seq, 0, tokens, tokens.size()};
  const int32_t rc = decode_parts(llama_.get(), batch_, static_cast<int32_t>(params_.n_batch),
                                  std::span<Part>(&part, 1), {});
  std::vector<float> out;
  if (rc == 0) {
    const float* e = llama_get_embeddings_seq(llama_.get(), seq);
    if (e != nullptr) out.assign(e, e + model_.n_embd());
  }
  llama_memory_seq_rm(mem, seq, -1, -1);
  if (rc != 0) {
    throw std::runtime_error(std::string("runtime::Context::encode: llama_decode failed: ") +
                             decode_status_text(rc));
  }
  if (out.empty()) throw std::runtime_error("runtime::Context::encode: no pooled embedding");
  double norm = 0;
  for (float v : out) norm += static_cast<double>(v) * v;
  norm = std::sqrt(norm);
  if (norm > 0) {
    for (float& v : out) v = static_cast<float>(v / norm);
  }
  return out;
}

// ---- BranchStore --------------------------------------------------------------------------

void BranchStore::commit(std::span<const std::pair<Branch, Token>> items) {
  std::vector<Generator*> gens;
  std::vector<Token> tokens;
  for (const auto& [b, t] : items) {
    gens.push_back(ctx_->state_of(b).decoder.get());
    tokens.push_back(t);
  }
  Generator::commit_many(gens, tokens, ctx_->shared());
}

void BranchStore::step(std::span<const Branch> branches) {
  std::vector<Generator*> gens;
  for (const Branch& b : branches) gens.push_back(ctx_->state_of(b).decoder.get());
  ctx_->blink_if_full(branches);
  Generator::step_many(gens, ctx_->shared());
}

void BranchStore::prefill(std::span<const std::pair<Branch, std::vector<Token>>> items) {
  std::vector<std::pair<Branch, std::span<const Token>>> spans;
  for (const auto& [b, t] : items) spans.emplace_back(b, std::span<const Token>(t));
  ctx_->prefill_many(spans, false);
}

void BranchStore::retain_only(Branch keep) {
  BranchState& st = ctx_->state_of(keep);
  for (uint32_t id = 0; id < ctx_->branches_.size(); ++id) {
    if (ctx_->branches_[id] && id != st.id) ctx_->free_branch(id);
  }
  st.parent = -1;
  st.children.clear();
}

size_t BranchStore::available() const {
  return ctx_->free_seqs_.size();
}

KvPressure BranchStore::kv_pressure() const {
  // llama.cpp does not tell how many cells are in use: count each branch's positions, a
  // fork's prefix shared with its live parent once (docs/runtime.md).
  KvPressure k;
  k.n_ctx = ctx_->n_ctx();
  uint64_t used = 0;
  for (const auto& b : ctx_->branches_) {
    if (!b) continue;
    const Generator& g = *b->decoder;
    const uint64_t held = static_cast<uint64_t>(g.n_past());
    uint64_t shared = 0;
    if (b->parent >= 0) {
      const auto& p = ctx_->branches_[static_cast<size_t>(b->parent)];
      if (p && p->gen == b->parent_gen) {
        shared =
            std::min<uint64_t>({b->fork_shared, held, static_cast<uint64_t>(p->decoder->n_past())});
      }
    }
    used += held - shared;
  }
  k.cells_used = static_cast<uint32_t>(std::min<uint64_t>(used, k.n_ctx));
  k.remaining = k.n_ctx - k.cells_used;
  return k;
}

}  // namespace lacuna::runtime
