// session.cpp — Session: keeps one sequence's KV in step with a token list, reusing its own
// prefix, the in-memory prefix cache, the disk store and (tier 2, opt-in) edited spans.
#include <algorithm>
#include <string>

#include "lacuna/kv.h"
#include "lacuna/log.h"
#include "runtime/decode_parts.h"

namespace lacuna::kv {

const char* reuse_source_name(ReuseSource s) {
  switch (s) {
    case ReuseSource::none:
      return "none";
    case ReuseSource::own:
      return "own";
    case ReuseSource::memory:
      return "memory";
    case ReuseSource::disk:
      return "disk";
  }
  return "?";
}

KvShape model_shape(const llama_model* model) {
  KvShape s;
  s.n_layer = static_cast<uint32_t>(llama_model_n_layer(model));
  s.n_embd = static_cast<uint32_t>(llama_model_n_embd(model));
  s.n_head = static_cast<uint32_t>(llama_model_n_head(model));
  s.n_head_kv = static_cast<uint32_t>(llama_model_n_head_kv(model));
  return s;
}

MemoryTraits memory_traits(llama_context* ctx, bool kv_unified) {
  MemoryTraits t;
  const llama_model* model = llama_get_model(ctx);
  llama_memory_t mem = llama_get_memory(ctx);
  const bool recurrent = llama_model_is_recurrent(model) || llama_model_is_hybrid(model);
  t.can_shift = mem != nullptr && llama_memory_can_shift(mem) && !recurrent;
  t.partial_removal = mem != nullptr && !recurrent;
  t.shared_cells = kv_unified && !recurrent;
  const KvShape s = model_shape(model);
  const uint64_t head_dim = s.n_head > 0 ? s.n_embd / s.n_head : 0;
  t.kv_bytes_per_token = uint64_t{s.n_layer} * 2 * s.n_head_kv * head_dim * 2;  // f16 K and V
  return t;
}

Session::Session(llama_context* ctx, SeqId seq, const KvConfig& config, PrefixCache* cache,
                 PersistentStore* store, SeqId scratch_seq)
    : ctx_(ctx),
      mem_(nullptr),
      seq_(seq),
      scratch_(scratch_seq),
      config_(config),
      cache_(cache),
      store_(store) {
  if (ctx_ == nullptr) throw KvError("Session: null context");
  config_.validate();
  mem_ = llama_get_memory(ctx_);
  if (mem_ == nullptr) throw KvError("Session: the context has no memory");
  const auto n_seq = static_cast<SeqId>(llama_n_seq_max(ctx_));
  if (seq_ < 0 || seq_ >= n_seq) {
    throw KvError("Session: sequence " + std::to_string(seq_) + " is outside [0, " +
                  std::to_string(n_seq) + ")");
  }
  if (scratch_ >= n_seq || scratch_ == seq_) {
    throw KvError("Session: bad scratch sequence " + std::to_string(scratch_));
  }
  if (cache_ != nullptr && (cache_->owns_seq(seq_) || cache_->owns_seq(scratch_))) {
    throw KvError("Session: sequence " + std::to_string(seq_) + " is a prefix-cache holder");
  }
  if (store_ != nullptr && store_->block_size() != config_.block_size) {
    throw KvError("Session: the store's block size differs from the config's");
  }
  const bool unified = cache_ != nullptr || n_seq == 1;
  traits_ = memory_traits(ctx_, unified);
  if (!traits_.partial_removal) cache_ = nullptr;  // recurrent/hybrid: exact fallback
  if (!config_.prefix_cache) cache_ = nullptr;
  batch_cap_ = static_cast<int32_t>(std::max<uint32_t>(1, llama_n_batch(ctx_)));
  llama_memory_seq_rm(mem_, seq_, -1, -1);
}

Session::~Session() {
  if (pinned_ >= 0 && cache_ != nullptr) cache_->unpin(pinned_);
  if (batch_.token != nullptr) llama_batch_free(batch_);
}

void Session::set_pin(int32_t node) {
  if (cache_ == nullptr) return;
  if (node >= 0) cache_->pin(node);
  if (pinned_ >= 0) cache_->unpin(pinned_);
  pinned_ = node;
}

void Session::reset() {
  set_pin(-1);
  llama_memory_seq_rm(mem_, seq_, -1, -1);
  tokens_.clear();
  persisted_tokens_ = 0;
}

void Session::decode_range(std::span<const Token> tokens, Pos start, SeqId seq, bool last_logits) {
  if (tokens.empty()) return;
  if (batch_.token == nullptr) batch_ = llama_batch_init(batch_cap_, 0, 1);
  // Through the runtime's one decode path; a full KV cache first gives the prefix cache's
  // cells back, once.
  runtime::Part part{seq, start, tokens, last_logits ? size_t{1} : size_t{0}};
  bool evicted = false;
  const int32_t rc = runtime::decode_parts(
      ctx_, batch_, batch_cap_, std::span<runtime::Part>(&part, 1), {}, nullptr, [&]() {
        if (evicted || cache_ == nullptr || cache_->n_nodes() == 0) return false;
        log_message(LogLevel::info, "kv: context full, evicting the prefix cache");
        cache_->clear();
        evicted = true;
        return true;
      });
  if (rc != 0) {
    llama_memory_seq_rm(mem_, seq, -1, -1);
    if (seq == seq_) {
      set_pin(-1);
      tokens_.clear();
    }
    throw KvError(std::string("kv: llama_decode failed with status ") + std::to_string(rc) +
                  (rc == 1 ? " (no room in the KV cache)" : ""));
  }
}

size_t Session::try_disk(std::span<const Token> prompt, size_t limit, size_t best_other) {
  const PersistentStore::Entry e = store_->find(prompt);
  if (e.n_blocks == 0 || e.n_blocks * config_.block_size <= best_other) return 0;
  std::string reason;
  CacheFileView view;
  if (!store_->read(e, io_buffer_, view, reason)) {
    ++stats_.disk_rejected;
    return 0;
  }
  stats_.bytes_loaded += io_buffer_.size();
  const KvShape want = model_shape(llama_get_model(ctx_));
  if (view.shape.n_layer != want.n_layer || view.shape.n_embd != want.n_embd ||
      view.shape.n_head != want.n_head || view.shape.n_head_kv != want.n_head_kv) {
    log_message(LogLevel::warn, "kv store: '" + e.file + "' has other KV shapes; not loaded");
    ++stats_.disk_rejected;
    return 0;
  }
  size_t n = std::min(common_prefix(view.tokens, prompt), limit);
  if (!traits_.partial_removal && n != view.tokens.size()) return 0;  // cannot trim a state
  if (n <= best_other) return 0;
  set_pin(-1);
  tokens_.clear();
  clear_last_llama_error();
  const size_t got = llama_state_seq_set_data(ctx_, view.payload.data(), view.payload.size(), seq_);
  if (got == 0) {
    log_message(LogLevel::warn,
                "kv store: llama.cpp refused '" + e.file + "': " + last_llama_error());
    ++stats_.disk_rejected;
    llama_memory_seq_rm(mem_, seq_, -1, -1);
    return 0;
  }
  if (llama_memory_seq_pos_max(mem_, seq_) + 1 != static_cast<Pos>(view.tokens.size()) ||
      (n < view.tokens.size() && !llama_memory_seq_rm(mem_, seq_, static_cast<Pos>(n), -1))) {
    log_message(LogLevel::warn, "kv store: '" + e.file + "' restored an unexpected range");
    llama_memory_seq_rm(mem_, seq_, -1, -1);
    return 0;
  }
  return n;
}

size_t Session::apply_edit_reuse(std::span<const Token> prompt, size_t limit) {
  // Returns the number of leading new positions the sequence holds afterwards (0: not
  // applied, nothing changed).
  const size_t pre = std::min(common_prefix(tokens_, prompt), limit);
  const auto spans = diff_tokens(tokens_, prompt, config_.block_size);
  struct Keep {
    size_t ob, nb, len;
  };
  std::vector<Keep> keeps;
  size_t covered = pre;
  for (const EditSpan& s : spans) {
    if (s.kind != SpanKind::keep || s.new_begin + s.new_len <= pre) continue;
    size_t ob = s.old_begin, nb = s.new_begin, len = s.new_len;
    if (nb < pre) {  // the common prefix is kept in place already
      const size_t cut = pre - nb;
      ob += cut, nb += cut, len -= cut;
    }
    if (nb + len > limit) len = nb > limit ? 0 : limit - nb;
    if (len < config_.edit_min_span) continue;
    if (scratch_ < 0 && nb != covered) break;  // a gap before it could not be filled
    keeps.push_back({ob, nb, len});
    covered = nb + len;
  }
  if (keeps.empty()) return 0;
  // Shifting moves cells for every sequence that shares them: make sure none does.
  set_pin(-1);
  if (cache_ != nullptr && !cache_->forget_from(tokens_, pre / config_.block_size)) return 0;
  // 1. Drop the old positions that are not kept.
  size_t pos = pre;
  for (const Keep& k : keeps) {
    if (k.ob > pos) llama_memory_seq_rm(mem_, seq_, static_cast<Pos>(pos), static_cast<Pos>(k.ob));
    pos = k.ob + k.len;
  }
  llama_memory_seq_rm(mem_, seq_, static_cast<Pos>(pos), -1);
  // 2. Move kept spans: leftward moves in ascending order, then rightward ones descending, so
  // that no move lands on cells another pending move would take along.
  for (const Keep& k : keeps) {
    if (k.nb < k.ob) {
      llama_memory_seq_add(mem_, seq_, static_cast<Pos>(k.ob), static_cast<Pos>(k.ob + k.len),
                           static_cast<Pos>(k.nb) - static_cast<Pos>(k.ob));
    }
  }
  for (auto it = keeps.rbegin(); it != keeps.rend(); ++it) {
    if (it->nb > it->ob) {
      llama_memory_seq_add(mem_, seq_, static_cast<Pos>(it->ob), static_cast<Pos>(it->ob + it->len),
                           static_cast<Pos>(it->nb) - static_cast<Pos>(it->ob));
    }
  }
  // 3. Fill the gaps before kept spans. A sequence only accepts a batch that continues its
  // last position, so each gap is decoded in the scratch sequence over a copy of what comes
  // before it, then copied back.
  size_t filled = pre;
  size_t reused = 0;
  for (const Keep& k : keeps) {
    if (k.nb > filled) {
      llama_memory_seq_rm(mem_, scratch_, -1, -1);
      llama_memory_seq_cp(mem_, seq_, scratch_, 0, static_cast<Pos>(filled));
      decode_range(prompt.subspan(filled, k.nb - filled), static_cast<Pos>(filled), scratch_,
                   false);
      llama_memory_seq_cp(mem_, scratch_, seq_, static_cast<Pos>(filled), static_cast<Pos>(k.nb));
      llama_memory_seq_rm(mem_, scratch_, -1, -1);
      stats_.tokens_recomputed += k.nb - filled;
    }
    filled = k.nb + k.len;
    reused += k.len;
  }
  stats_.tokens_reused_own += pre;
  stats_.tokens_reused_edit += reused;
  return filled;
}

PrefillResult Session::prefill(std::span<const Token> prompt) {
  PrefillResult r = restore(prompt);
  const size_t filled = r.n_reused_positions;
  try {
    decode_range(prompt.subspan(filled), static_cast<Pos>(filled), seq_, true);
  } catch (...) {
    tokens_.clear();
    throw;
  }
  record(prompt, r);
  return r;
}

PrefillResult Session::restore(std::span<const Token> prompt) {
  if (prompt.empty()) throw std::invalid_argument("Session::prefill: empty prompt");
  const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(ctx_)));
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= n_vocab) {
      throw std::invalid_argument("Session::prefill: token " + std::to_string(prompt[i]) +
                                  " at index " + std::to_string(i) + " is outside the vocabulary");
    }
  }
  if (prompt.size() > llama_n_ctx(ctx_)) {
    throw KvError("Session::prefill: prompt of " + std::to_string(prompt.size()) +
                  " tokens does not fit the context (" + std::to_string(llama_n_ctx(ctx_)) + ")");
  }
  PrefillResult r;
  r.n_prompt = prompt.size();
  ++stats_.prefills;
  const size_t limit = prompt.size() - 1;  // the last token is always decoded, for its logits
  const uint64_t edit_before = stats_.tokens_reused_edit;
  const uint64_t recomputed_before = stats_.tokens_recomputed;

  // What the store holds of this session's tokens stays written only as far as the new
  // prompt keeps them (a sequence reused for another prompt writes its new tokens again).
  const size_t kept_written = std::min(persisted_tokens_, common_prefix(tokens_, prompt));
  size_t own = std::min(common_prefix(tokens_, prompt), limit);
  if (!traits_.partial_removal && own != tokens_.size()) own = 0;  // cannot drop a suffix

  PrefixCache::Match m;
  if (cache_ != nullptr) m = cache_->lookup(prompt, limit);

  size_t reused = 0;
  size_t filled = 0;  // positions [0, filled) hold the prompt's KV
  size_t from_disk = 0;
  if (store_ != nullptr) from_disk = try_disk(prompt, limit, std::max(own, m.n_tokens));
  if (from_disk > 0) {
    reused = filled = from_disk;
    r.source = ReuseSource::disk;
    stats_.tokens_reused_disk += from_disk;
  } else if (m.n_tokens > own) {
    if (!tokens_.empty() && !llama_memory_seq_rm(mem_, seq_, static_cast<Pos>(own), -1)) {
      llama_memory_seq_rm(mem_, seq_, -1, -1);
      own = 0;
    }
    if (tokens_.empty()) own = 0;
    cache_->copy_to(m, seq_, static_cast<Pos>(own));
    reused = filled = m.n_tokens;
    r.source = ReuseSource::memory;
    stats_.tokens_reused_own += own;
    stats_.tokens_reused_memory += m.n_tokens - own;
  } else {
    size_t edited = 0;
    if (config_.edit_reuse && traits_.can_shift && traits_.partial_removal && !tokens_.empty() &&
        own < tokens_.size()) {
      try {
        edited = apply_edit_reuse(prompt, limit);
      } catch (...) {  // the sequence was half rearranged: start over next time
        set_pin(-1);
        llama_memory_seq_rm(mem_, seq_, -1, -1);
        tokens_.clear();
        throw;
      }
    }
    if (edited > 0) {
      filled = edited;
      reused = own + (stats_.tokens_reused_edit - edit_before);
      r.edit_reuse = true;
      r.source = own > 0 ? ReuseSource::own : ReuseSource::none;
    } else {
      if (own < tokens_.size() && !llama_memory_seq_rm(mem_, seq_, static_cast<Pos>(own), -1)) {
        llama_memory_seq_rm(mem_, seq_, -1, -1);
        own = 0;
      }
      if (tokens_.empty()) llama_memory_seq_rm(mem_, seq_, -1, -1);
      reused = filled = own;
      r.source = own > 0 ? ReuseSource::own : ReuseSource::none;
      stats_.tokens_reused_own += own;
    }
  }
  tokens_.assign(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(filled));
  persisted_tokens_ = std::min(kept_written, filled);
  if (r.source == ReuseSource::disk) persisted_tokens_ = std::max(persisted_tokens_, from_disk);
  r.n_reused = reused;
  r.n_reused_positions = filled;
  r.n_computed =
      static_cast<size_t>(stats_.tokens_recomputed - recomputed_before) + (prompt.size() - filled);
  return r;
}

void Session::record(std::span<const Token> prompt, const PrefillResult& r) {
  const size_t reused = r.n_reused;
  stats_.tokens_recomputed += prompt.size() - r.n_reused_positions;
  tokens_.assign(prompt.begin(), prompt.end());
  const size_t full_blocks = prompt.size() / config_.block_size;
  const size_t hit_blocks = std::min(full_blocks, reused / config_.block_size);
  stats_.blocks_hit += hit_blocks;
  stats_.blocks_missed += full_blocks - hit_blocks;
  stats_.tokens_reused += reused;
  stats_.bytes_saved += reused * traits_.kv_bytes_per_token;

  if (cache_ != nullptr) {
    set_pin(-1);  // the previous prompt's path is no longer this sequence's
    set_pin(cache_->insert(prompt, seq_));
  }
}

void Session::assume(std::span<const Token> tokens) {
  const Pos pos_max = llama_memory_seq_pos_max(mem_, seq_);
  if (pos_max + 1 != static_cast<Pos>(tokens.size())) {
    throw KvError("Session::assume: the sequence holds " + std::to_string(pos_max + 1) +
                  " positions, not " + std::to_string(tokens.size()));
  }
  tokens_.assign(tokens.begin(), tokens.end());
}

void Session::decode(Token token) {
  const Token one[1] = {token};
  decode_range(one, static_cast<Pos>(tokens_.size()), seq_, true);
  tokens_.push_back(token);
}

void Session::append_external(std::span<const Token> tokens) {
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  const Pos pos_max = llama_memory_seq_pos_max(mem_, seq_);
  if (pos_max + 1 != static_cast<Pos>(tokens_.size())) {
    const size_t have = static_cast<size_t>(pos_max + 1);
    tokens_.resize(std::min(have, tokens_.size()));
    throw KvError("Session::append_external: the sequence holds " + std::to_string(have) +
                  " positions, not the recorded token count");
  }
}

uint64_t Session::persist() {
  if (store_ == nullptr || tokens_.size() < config_.block_size ||
      tokens_.size() <= persisted_tokens_) {
    return 0;
  }
  const size_t size = llama_state_seq_get_size(ctx_, seq_);
  if (size == 0) return 0;
  io_buffer_.resize(size);
  const size_t got = llama_state_seq_get_data(ctx_, io_buffer_.data(), io_buffer_.size(), seq_);
  if (got == 0) {
    log_message(LogLevel::warn,
                "kv store: could not read the sequence state: " + last_llama_error());
    return 0;
  }
  KvShape shape = model_shape(llama_get_model(ctx_));
  payload_kv_info(std::span<const uint8_t>(io_buffer_.data(), got), shape.n_layer, shape);
  const uint64_t written =
      store_->write(tokens_, shape, std::span<const uint8_t>(io_buffer_.data(), got));
  stats_.bytes_written += written;
  persisted_tokens_ = tokens_.size();
  return written;
}

}  // namespace lacuna::kv
