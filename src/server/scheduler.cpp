// scheduler.cpp — the scheduler thread: admission from the bounded queue, chunked prefill
// through the prefix cache, one BranchStore::step per iteration over every running branch,
// results to the jobs (scheduler.h; the flow is in docs/server.md).
#include "server/scheduler.h"

#include <algorithm>
#include <exception>
#include <iterator>
#include <span>
#include <stdexcept>

namespace lacuna::server {

namespace {

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// The prompt tokens a branch already holds and can keep: their common prefix, less the
// prompt's last token, which is decoded again for its logits.
size_t reusable_prefix(const runtime::Branch& b, std::span<const Token> prompt) {
  if (prompt.empty()) return 0;
  return std::min(kv::common_prefix(b.tokens(), prompt), prompt.size() - 1);
}

}  // namespace

// ---- Job -------------------------------------------------------------------------------

void Job::push_text(std::string_view text, std::span<const TokenLogprob> logprobs) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.append(text);
    pending_logprobs_.insert(pending_logprobs_.end(), logprobs.begin(), logprobs.end());
  }
  cv_.notify_all();
}

void Job::finish(const JobResult& result) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_) return;
    ended_ = true;
    result_ = result;
  }
  cv_.notify_all();
}

void Job::fail(int status, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_) return;
    ended_ = true;
    failed_ = true;
    error_status_ = status;
    error_ = message;
  }
  cv_.notify_all();
}

void Job::wait(Update& update, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout,
               [&] { return ended_ || !pending_.empty() || !pending_logprobs_.empty(); });
  update.text += pending_;
  pending_.clear();
  update.logprobs.insert(update.logprobs.end(), std::make_move_iterator(pending_logprobs_.begin()),
                         std::make_move_iterator(pending_logprobs_.end()));
  pending_logprobs_.clear();
  if (ended_) {
    update.ended = true;
    update.failed = failed_;
    update.error_status = error_status_;
    update.error = error_;
    update.result = result_;
  }
}

// ---- Scheduler -------------------------------------------------------------------------

Scheduler::Scheduler(runtime::Context& ctx, SchedulerOptions options, Metrics& metrics)
    : ctx_(ctx), options_(options), metrics_(metrics) {
  if (options_.parallel == 0) throw std::invalid_argument("parallel must be at least 1");
  if (options_.parallel > ctx_.params().n_branches) {
    throw std::invalid_argument("parallel exceeds the context's branches");
  }
  if (options_.prefill_chunk == 0) options_.prefill_chunk = ctx_.params().n_batch;
  slot_busy_.assign(options_.parallel, false);
  kept_.resize(options_.parallel);
  slots_.resize(options_.parallel);
  for (size_t i = 0; i < slots_.size(); ++i) slots_[i].id = i;
  metrics_.kv_cells_total = ctx_.n_ctx();
}

Scheduler::~Scheduler() {
  stop();
}

void Scheduler::start() {
  thread_ = std::thread([this] { loop(); });
}

void Scheduler::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Scheduler::Submit Scheduler::submit(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Submit::stopping;
    if (queue_.size() >= options_.queue) return Submit::queue_full;
    queue_.push_back(job);
    metrics_.queue_depth = queue_.size();
  }
  cv_.notify_all();
  return Submit::ok;
}

std::vector<SlotInfo> Scheduler::slots() const {
  std::lock_guard<std::mutex> lock(mu_);
  return slots_;
}

size_t Scheduler::queue_depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

void Scheduler::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || !active_.empty(); });
      if (stopping_) break;
    }
    admit();
    drop_cancelled();
    prefill_chunk();
    step();
    active_.erase(
        std::remove_if(active_.begin(), active_.end(), [](const Active& a) { return !a.job; }),
        active_.end());
    metrics_.running = active_.size();
    try {
      metrics_.kv_cells_used = ctx_.store().kv_pressure().cells_used;
    } catch (const std::exception&) {
    }
    publish_slots();
  }
  // Shutting down: every job still here ends with an error its client sees.
  for (Active& a : active_) end(a, false, 503, "the server is shutting down");
  active_.clear();
  std::deque<std::shared_ptr<Job>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(queue_);
    metrics_.queue_depth = 0;
  }
  for (auto& job : left) job->fail(503, "the server is shutting down");
  metrics_.running = 0;
  publish_slots();
}

void Scheduler::admit() {
  while (active_.size() < options_.parallel) {
    std::shared_ptr<Job> job;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.empty()) break;
      job = std::move(queue_.front());
      queue_.pop_front();
      metrics_.queue_depth = queue_.size();
    }
    if (job->cancelled()) {
      ++metrics_.cancelled;
      job->fail(499, "cancelled by the client");
      continue;
    }
    Active a;
    a.job = job;
    a.id = next_id_++;
    a.admitted = Clock::now();
    metrics_.queue_wait.observe(ms_between(job->arrival, a.admitted) / 1000.0);
    size_t shared = 0;
    a.slot = choose_slot(*job, &shared);
    Kept& kept = kept_[a.slot];
    try {
      if (kept.branch.valid() && shared > 0) {
        // The kept branch takes this request: its settings now, its tokens at prefill.
        a.branch = kept.branch;
        kept.branch = runtime::Branch();
        a.branch.set_params(job->params);
      } else {
        if (kept.branch.valid()) kept.branch.prune();
        kept.branch = runtime::Branch();
        a.branch = ctx_.create_branch(job->params);
      }
      a.branch.set_constraint(std::move(job->constraint));
    } catch (const std::exception& e) {
      if (a.branch.valid()) a.branch.prune();
      job->fail(503, std::string("no branch for the request: ") + e.what());
      continue;
    }
    a.kv_before = a.branch.kv_stats();
    slot_busy_[a.slot] = true;
    active_.push_back(std::move(a));
  }
}

size_t Scheduler::choose_slot(const Job& job, size_t* shared) {
  const std::vector<Token>& prompt = job.prompt;
  size_t best = slot_busy_.size();
  size_t best_shared = 0;
  size_t empty = slot_busy_.size();
  for (size_t i = 0; i < slot_busy_.size(); ++i) {
    if (slot_busy_[i]) continue;
    const Kept& k = kept_[i];
    if (!k.branch.valid()) {
      if (empty == slot_busy_.size()) empty = i;
      continue;
    }
    if (!job.keep) continue;
    const size_t n = reusable_prefix(k.branch, prompt);
    if (n > best_shared) {
      best_shared = n;
      best = i;
    }
  }
  *shared = best_shared;
  if (best_shared > 0) return best;
  // Kept branches stay only in free slots (a slot taken keeps or prunes its own).
  return empty != slot_busy_.size() ? empty : oldest_kept();
}

size_t Scheduler::oldest_kept() const {
  size_t oldest = kept_.size();
  for (size_t i = 0; i < kept_.size(); ++i) {
    if (kept_[i].branch.valid() && (oldest == kept_.size() || kept_[i].tick < kept_[oldest].tick)) {
      oldest = i;
    }
  }
  return oldest;
}

void Scheduler::drop_kept(bool all) {
  for (;;) {
    const size_t oldest = oldest_kept();
    if (oldest == kept_.size()) return;
    if (!all) {
      const runtime::KvPressure k = ctx_.store().kv_pressure();
      if (static_cast<double>(k.remaining) >= options_.retain_headroom * k.n_ctx) return;
    }
    try {
      kept_[oldest].branch.prune();
    } catch (const std::exception&) {
    }
    kept_[oldest].branch = runtime::Branch();
  }
}

void Scheduler::drop_cancelled() {
  for (Active& a : active_) {
    if (a.job && a.job->cancelled()) {
      ++metrics_.cancelled;
      end(a, false, 499, "cancelled by the client");
    }
  }
}

void Scheduler::prefill_chunk() {
  size_t budget = options_.prefill_chunk;
  for (Active& a : active_) {
    if (!a.job || a.running) continue;
    const std::vector<Token>& prompt = a.job->prompt;
    try {
      // Grow the branch chunk by chunk; KV reused from its own prefix, the prefix cache or
      // the persistent store costs no budget, so a cached prompt goes in at once.
      while (budget > 0 && a.prefilled < prompt.size()) {
        // The first chunk starts past what the prefix cache holds: a set_tokens reuses at
        // most its target minus one token, so chunks cut short of the cached path would
        // each decode the tail of their last block again (measured: 1,664 of 2,020 cached
        // tokens reused in 512-token chunks).
        size_t base = a.prefilled;
        if (base == 0 && prompt.size() > 1) {
          // What the branch holds itself (a kept branch) or the prefix cache, whichever is
          // longer.
          base = reusable_prefix(a.branch, prompt);
          if (ctx_.prefix_cache() != nullptr) {
            base = std::max(base, ctx_.prefix_cache()->lookup(prompt, prompt.size() - 1).n_tokens);
          }
        }
        const size_t target = std::min(prompt.size(), base + budget);
        const uint64_t before = a.branch.kv_stats().tokens_recomputed;
        a.branch.set_tokens(std::span<const Token>(prompt.data(), target));
        const uint64_t spent = a.branch.kv_stats().tokens_recomputed - before;
        budget -= std::min<uint64_t>(budget, spent);
        a.prefilled = target;
      }
    } catch (const std::invalid_argument& e) {
      end(a, false, 400, e.what());
      continue;
    } catch (const std::exception& e) {
      // Kept branches give their cells back first; the next iteration tries again.
      if (oldest_kept() != kept_.size()) {
        drop_kept(/*all=*/true);
        break;
      }
      end(a, false, 503, std::string("the prompt does not fit now: ") + e.what());
      continue;
    }
    if (a.prefilled == prompt.size()) a.running = true;
    if (budget == 0) break;
  }
}

void Scheduler::step() {
  std::vector<runtime::Branch> branches;
  std::vector<Active*> owners;
  for (Active& a : active_) {
    if (a.job && a.running) {
      branches.push_back(a.branch);
      owners.push_back(&a);
    }
  }
  if (branches.empty()) return;
  bool batched = true;
  try {
    ctx_.store().step(branches);
    ++metrics_.steps;
  } catch (const std::exception&) {
    batched = false;
  }
  if (!batched) {
    // Kept branches give their cells back, then the batch again, once.
    if (oldest_kept() != kept_.size()) {
      drop_kept(/*all=*/true);
      try {
        ctx_.store().step(branches);
        ++metrics_.steps;
        batched = true;
      } catch (const std::exception&) {
      }
    }
  }
  const Clock::time_point now = Clock::now();
  for (Active* a : owners) {
    if (!batched) {
      // Isolate the failure: each branch alone, so one bad request ends only itself.
      try {
        (void)a->branch.next();
      } catch (const std::exception& e) {
        end(*a, false, 500, std::string("decoding failed: ") + e.what());
        continue;
      }
    }
    const Generator& g = a->branch.generator();
    const Step s = g.last_step();
    // The log-probabilities of this step's tokens (when asked for), sent with its text.
    const std::span<const TokenLogprob> lp =
        std::span<const TokenLogprob>(g.logprobs()).subspan(a->logprobs_sent);
    a->logprobs_sent = g.logprobs().size();
    if (!s.text.empty() || !lp.empty()) {
      if (!a->got_text && !s.text.empty()) {
        a->got_text = true;
        a->first_text = now;
        metrics_.ttft.observe(ms_between(a->job->arrival, now) / 1000.0);
      }
      a->job->push_text(s.text, lp);
    }
    if (s.done) end(*a, true);
  }
}

void Scheduler::end(Active& a, bool ok, int status, const std::string& error) {
  if (!a.job) return;
  if (ok) {
    const Generator& g = a.branch.generator();
    const Clock::time_point now = Clock::now();
    JobResult r;
    r.stats = g.stats();
    r.stop = r.stats.stop;
    r.prompt_tokens = a.job->prompt.size();
    // What the prefill did not decode. (Not tokens_reused: the chunks of one prompt reuse
    // each other's KV, which counts as reuse of the branch's own tokens.)
    const kv::KvStats& kv = a.branch.kv_stats();
    const uint64_t decoded = kv.tokens_recomputed - a.kv_before.tokens_recomputed;
    r.cached_tokens =
        decoded >= r.prompt_tokens ? 0 : r.prompt_tokens - static_cast<size_t>(decoded);
    r.completion_tokens = g.tokens().size();
    r.queue_ms = ms_between(a.job->arrival, a.admitted);
    r.ttft_ms =
        a.got_text ? ms_between(a.job->arrival, a.first_text) : ms_between(a.job->arrival, now);
    r.generate_ms = a.got_text ? ms_between(a.first_text, now) : 0.0;
    r.prefill_ms = r.ttft_ms - r.queue_ms;
    metrics_.prompt_tokens += r.prompt_tokens;
    metrics_.cached_tokens += r.cached_tokens;
    metrics_.completion_tokens += r.completion_tokens;
    metrics_.forward_passes += r.stats.forward_passes;
    if (r.completion_tokens > 1 && a.got_text) {
      metrics_.per_token.observe(r.generate_ms / 1000.0 /
                                 static_cast<double>(r.completion_tokens - 1));
    }
    a.job->finish(r);
    const uint64_t from_disk = kv.tokens_reused_disk - a.kv_before.tokens_reused_disk;
    if (ctx_.persistent_store() != nullptr && options_.persist_min_prompt > 0 &&
        r.prompt_tokens >= options_.persist_min_prompt && from_disk < r.prompt_tokens) {
      try {
        (void)a.branch.persist();
      } catch (const std::exception&) {
        // The store refused (full disk, permissions): the answer is already out; go on.
      }
    }
  } else {
    a.job->fail(status, error);
  }
  if (ok && options_.retain && a.job->keep && a.branch.valid()) {
    // Kept for the next request that shares a prefix with it (choose_slot).
    kept_[a.slot] = Kept{a.branch, ++tick_};
  } else {
    try {
      if (a.branch.valid()) a.branch.prune();
    } catch (const std::exception&) {
    }
  }
  slot_busy_[a.slot] = false;
  a.job.reset();
  drop_kept(/*all=*/false);
}

void Scheduler::publish_slots() {
  std::vector<SlotInfo> s(options_.parallel);
  for (size_t i = 0; i < s.size(); ++i) s[i].id = i;
  for (const Active& a : active_) {
    if (!a.job) continue;
    SlotInfo& info = s[a.slot];
    info.busy = true;
    info.job = a.id;
    info.prompt_tokens = a.job->prompt.size();
    info.prefilled = a.prefilled;
    info.generated = a.running ? a.branch.generator().tokens().size() : 0;
  }
  std::lock_guard<std::mutex> lock(mu_);
  slots_ = std::move(s);
}

}  // namespace lacuna::server
