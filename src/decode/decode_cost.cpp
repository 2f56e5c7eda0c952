// decode_cost.cpp — the cost model for draft lengths: what llama_decode costs by batch size
// (measured, or a default), and the draft length that maximizes expected tokens per unit cost.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>

#include "lacuna/generator.h"
#include "runtime/decode_parts.h"

namespace lacuna {

namespace {

using Clock = std::chrono::steady_clock;

// Relative cost of a batch of n tokens, each with logits, over a batch of one: `lacuna bench
// decode` on bench-0.5b (qwen2 shape, f16) with 2 threads on an AVX-512 x86 CPU (medians of 15,
// sizes 1, 2, 3, 4, 6, 8, 12, 16 measured, the others interpolated). llama.cpp decodes one
// token with its matrix-vector kernel and larger batches with its matrix-matrix kernel, which
// costs twice as much for two tokens there; on a GPU a batch is relatively cheaper, so this
// default drafts less than it could there (measure with measure_decode_cost()).
constexpr double kDefaultCost[] = {1.0,  2.05, 2.11, 2.27, 2.33, 2.38, 2.68, 2.97,
                                   3.13, 3.29, 3.44, 3.60, 3.80, 4.00, 4.20, 4.40};
// The same batches with logits for the last token only (what pending tokens cost).
constexpr double kDefaultCostLast[] = {1.0,  1.77, 1.83, 1.84, 1.91, 1.97, 2.19, 2.41,
                                       2.51, 2.62, 2.72, 2.83, 3.00, 3.16, 3.33, 3.50};
// One token without logits: the output projection (151936 x 896, 28% of bench-0.5b's
// weights) and the last layer's feed-forward are skipped; measured 0.66-0.83 on the same
// machine and model (docs/generator.md).
constexpr double kDefaultNoLogits = 0.72;

// Pool-adjacent-violators: the non-decreasing sequence closest to v (least squares), so
// that a noisy measurement out of order is averaged with its neighbours instead of raising
// everything after it.
void make_isotonic(std::vector<double>& v) {
  std::vector<double> sum;
  std::vector<size_t> count;
  for (double x : v) {
    sum.push_back(x);
    count.push_back(1);
    while (sum.size() >= 2 && sum[sum.size() - 2] / static_cast<double>(count[count.size() - 2]) >
                                  sum.back() / static_cast<double>(count.back())) {
      sum[sum.size() - 2] += sum.back();
      count[count.size() - 2] += count.back();
      sum.pop_back();
      count.pop_back();
    }
  }
  size_t at = 0;
  for (size_t b = 0; b < sum.size(); ++b)
    for (size_t i = 0; i < count[b]; ++i) v[at++] = sum[b] / static_cast<double>(count[b]);
}

// Linear interpolation between measured sizes, relative to ms_one. The batches of two or
// more (one kernel; a batch of one runs another) are made non-decreasing, and each token
// past 2 adds at least half the average slope from 2 to the end: a measured plateau is
// most likely noise, and a free extra token would make every draft look worth it.
std::vector<double> interpolate(std::span<const size_t> sizes, std::span<const double> ms,
                                double ms_one) {
  const size_t n_max = sizes.back();
  std::vector<double> pts(ms.begin(), ms.end());
  if (pts.size() > 2) {
    std::vector<double> tail(pts.begin() + 1, pts.end());
    make_isotonic(tail);
    std::copy(tail.begin(), tail.end(), pts.begin() + 1);
  }
  std::vector<double> out(n_max);
  size_t seg = 0;
  for (size_t n = 1; n <= n_max; ++n) {
    while (seg + 1 < sizes.size() && sizes[seg + 1] < n) ++seg;
    double v;
    if (sizes[seg] == n || seg + 1 >= sizes.size()) {
      v = pts[seg];
    } else {
      const double f =
          static_cast<double>(n - sizes[seg]) / static_cast<double>(sizes[seg + 1] - sizes[seg]);
      v = pts[seg] + f * (pts[seg + 1] - pts[seg]);
    }
    out[n - 1] = v / ms_one;
  }
  for (size_t i = 1; i < out.size(); ++i) out[i] = std::max(out[i], out[i - 1]);
  if (out.size() > 2) {
    const double floor = 0.5 * (out.back() - out[1]) / static_cast<double>(out.size() - 2);
    for (size_t i = 2; i < out.size(); ++i) out[i] = std::max(out[i], out[i - 1] + floor);
  }
  return out;
}

void check_ms(std::span<const size_t> sizes, std::span<const double> ms) {
  if (sizes.size() != ms.size() || sizes.empty())
    throw std::invalid_argument(
        "DecodeCost::from_ms: sizes and times differ in length or are empty");
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0 || (i > 0 && sizes[i] <= sizes[i - 1]))
      throw std::invalid_argument("DecodeCost::from_ms: sizes must be increasing and > 0");
    if (!(ms[i] > 0) || !std::isfinite(ms[i]))
      throw std::invalid_argument("DecodeCost::from_ms: times must be finite and > 0");
  }
  if (sizes[0] != 1) throw std::invalid_argument("DecodeCost::from_ms: the first size must be 1");
}

// Table lookup; past the end, the last slope continued (at least the average per token).
double lookup(const std::vector<double>& t, size_t n) {
  if (n == 0) return 0.0;
  if (t.empty()) return static_cast<double>(n);
  if (n <= t.size()) return t[n - 1];
  const size_t m = t.size();
  const double last = t[m - 1];
  const double slope = m >= 2 ? std::max(t[m - 1] - t[m - 2], last / static_cast<double>(m)) : last;
  return last + slope * static_cast<double>(n - m);
}

}  // namespace

DecodeCost DecodeCost::cpu_default() {
  DecodeCost c;
  c.relative.assign(std::begin(kDefaultCost), std::end(kDefaultCost));
  c.relative_last.assign(std::begin(kDefaultCostLast), std::end(kDefaultCostLast));
  c.one_no_logits = kDefaultNoLogits;
  return c;
}

DecodeCost DecodeCost::from_ms(std::span<const size_t> sizes, std::span<const double> ms) {
  check_ms(sizes, ms);
  DecodeCost c;
  c.relative = interpolate(sizes, ms, ms[0]);
  return c;
}

DecodeCost DecodeCost::from_ms(std::span<const size_t> sizes, std::span<const double> ms,
                               std::span<const double> ms_last) {
  check_ms(sizes, ms);
  check_ms(sizes, ms_last);
  DecodeCost c;
  c.relative = interpolate(sizes, ms, ms[0]);
  c.relative_last = interpolate(sizes, ms_last, ms[0]);
  // Fewer logits never cost more.
  for (size_t i = 0; i < c.relative.size(); ++i)
    c.relative_last[i] = std::min(c.relative_last[i], c.relative[i]);
  return c;
}

double DecodeCost::of(size_t n) const {
  return lookup(relative, n);
}

double DecodeCost::of_pass(size_t n_pending, size_t n_draft) const {
  const size_t n = n_pending + n_draft;
  if (n == 0) return 0.0;
  if (relative_last.empty()) return of(n);
  const double last = std::min(lookup(relative_last, n), of(n));
  if (n == 1) return of(1);
  // The logits rows beyond the last one cost (all - last) / (n - 1) each; the drafts have one
  // each, the pending tokens none (but the last).
  return last + (of(n) - last) * static_cast<double>(n_draft) / static_cast<double>(n - 1);
}

void DecodeCost::set_no_logits_ms(double ms_no_logits, double ms_one) {
  if (!(ms_no_logits > 0) || !std::isfinite(ms_no_logits) || !(ms_one > 0) ||
      !std::isfinite(ms_one))
    throw std::invalid_argument("DecodeCost::set_no_logits_ms: times must be finite and > 0");
  // Fewer logits never cost more.
  one_no_logits = std::min(1.0, ms_no_logits / ms_one);
}

bool DecodeCost::split_pending(size_t n_pending, size_t n_draft) const {
  if (n_pending < 2 || !(one_no_logits > 0)) return false;
  const double split = static_cast<double>(n_pending - 1) * one_no_logits + of_pass(1, n_draft);
  return split < of_pass(n_pending, n_draft) - 1e-9;
}

double DecodeCost::of_plan(size_t n_pending, size_t n_draft) const {
  if (split_pending(n_pending, n_draft))
    return static_cast<double>(n_pending - 1) * one_no_logits + of_pass(1, n_draft);
  return of_pass(n_pending, n_draft);
}

size_t DecodeCost::best_draft(size_t n_pending, size_t n_available, double accept_rate) const {
  if (n_available == 0) return 0;
  const double a = std::clamp(accept_rate, 0.0, 1.0);
  const size_t base = std::max<size_t>(n_pending, 1);
  // The pass runs anyway (its pending tokens need it) and yields one token. k drafts add
  // a + a^2 + ... + a^k expected tokens (a draft is kept only if every one before it was),
  // each of which would otherwise cost a pass of one token, and they add of_plan(base, k) -
  // of_plan(base, 0) to this pass. Pick the k with the largest net saving; none unless it
  // is > 0 (a tie goes to the shorter draft).
  size_t best_k = 0;
  double best_gain = 0.0;
  double extra = 0.0;
  double a_pow = 1.0;
  const double c_base = of_plan(base, 0);
  for (size_t k = 1; k <= n_available; ++k) {
    a_pow *= a;
    extra += a_pow;
    const double gain = extra * of(1) - (of_plan(base, k) - c_base);
    if (gain > best_gain + 1e-9) {
      best_gain = gain;
      best_k = k;
    }
    if (a_pow < 1e-6) break;  // further drafts add nothing
  }
  return best_k;
}

DecodeCost measure_decode_cost(llama_context* ctx, llama_seq_id seq, std::span<const size_t> sizes,
                               int reps, std::vector<double>* ms_out, bool all_logits) {
  if (ctx == nullptr) throw std::invalid_argument("measure_decode_cost: null context");
  if (reps < 1) throw std::invalid_argument("measure_decode_cost: reps must be >= 1");
  if (sizes.empty() || sizes[0] != 1)
    throw std::invalid_argument("measure_decode_cost: sizes must start with 1");
  const size_t n_max = *std::max_element(sizes.begin(), sizes.end());
  const uint32_t n_batch = llama_n_batch(ctx);
  if (n_max > n_batch)
    throw std::invalid_argument("measure_decode_cost: a size exceeds the context's n_batch");
  llama_memory_t mem = llama_get_memory(ctx);
  const llama_pos start = llama_memory_seq_pos_max(mem, seq) + 1;
  if (static_cast<size_t>(start) + n_max >= llama_n_ctx(ctx))
    throw std::invalid_argument("measure_decode_cost: no room in the context");
  const llama_vocab* vocab = llama_model_get_vocab(llama_get_model(ctx));
  const int32_t n_vocab = llama_vocab_n_tokens(vocab);

  // Through the runtime's decode path, as the generator's passes run (docs/runtime.md).
  llama_batch batch = llama_batch_init(static_cast<int32_t>(n_max), 0, 1);
  std::vector<double> ms(sizes.size(), 0.0);
  // samples[s][r]; the sizes take turns within each repetition, so that a change of machine
  // load falls on all of them alike.
  std::vector<std::vector<double>> samples(sizes.size(),
                                           std::vector<double>(static_cast<size_t>(reps)));
  std::vector<Token> tokens(n_max);
  for (size_t i = 0; i < n_max; ++i) {
    tokens[i] = static_cast<Token>((1000 + 7 * i) % static_cast<size_t>(n_vocab));
  }
  try {
    for (int r = 0; r < reps; ++r) {
      for (size_t s = 0; s < sizes.size(); ++s) {
        runtime::Part part{seq, start, std::span<const Token>(tokens).first(sizes[s]),
                           all_logits ? sizes[s] : 1};
        runtime::DecodeCounters counters;
        const int32_t rc = runtime::decode_parts(ctx, batch, static_cast<int32_t>(n_max),
                                                 std::span<runtime::Part>(&part, 1), {}, &counters);
        samples[s][static_cast<size_t>(r)] = counters.ms;
        llama_memory_seq_rm(mem, seq, start, -1);
        if (rc != 0)
          throw std::runtime_error("measure_decode_cost: llama_decode failed (status " +
                                   std::to_string(rc) + ")");
      }
    }
    for (size_t s = 0; s < sizes.size(); ++s) {
      std::sort(samples[s].begin(), samples[s].end());
      ms[s] = samples[s][samples[s].size() / 2];
    }
  } catch (...) {
    llama_batch_free(batch);
    throw;
  }
  llama_batch_free(batch);
  if (ms_out != nullptr) *ms_out = ms;
  return DecodeCost::from_ms(sizes, ms);
}

double measure_decode_no_logits_ms(llama_context* ctx, llama_seq_id seq, int reps) {
  if (ctx == nullptr) throw std::invalid_argument("measure_decode_no_logits_ms: null context");
  if (reps < 1) throw std::invalid_argument("measure_decode_no_logits_ms: reps must be >= 1");
  llama_memory_t mem = llama_get_memory(ctx);
  const llama_pos start = llama_memory_seq_pos_max(mem, seq) + 1;
  if (static_cast<size_t>(start) + 1 >= llama_n_ctx(ctx))
    throw std::invalid_argument("measure_decode_no_logits_ms: no room in the context");
  llama_batch batch = llama_batch_init(1, 0, 1);
  const Token token = 1000 % llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(ctx)));
  std::vector<double> samples;
  for (int r = 0; r < reps; ++r) {
    runtime::Part part{seq, start, std::span<const Token>(&token, 1), 0};
    runtime::DecodeCounters counters;
    const int32_t rc =
        runtime::decode_parts(ctx, batch, 1, std::span<runtime::Part>(&part, 1), {}, &counters);
    samples.push_back(counters.ms);
    llama_memory_seq_rm(mem, seq, start, -1);
    if (rc != 0) {
      llama_batch_free(batch);
      throw std::runtime_error("measure_decode_no_logits_ms: llama_decode failed (status " +
                               std::to_string(rc) + ")");
    }
  }
  llama_batch_free(batch);
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

namespace {

// (model address, description, size in bytes, parameters, threads). The address alone could
// be reused by another model after a free; the rest tells such a model apart.
using CostKey = std::tuple<const llama_model*, std::string, uint64_t, uint64_t, int32_t>;

std::mutex& cost_cache_mutex() {
  static std::mutex m;
  return m;
}

std::map<CostKey, DecodeCost>& cost_cache() {
  static std::map<CostKey, DecodeCost> c;
  return c;
}

}  // namespace

DecodeCost cached_decode_cost(llama_context* ctx, llama_seq_id seq, int reps) {
  if (ctx == nullptr) throw std::invalid_argument("cached_decode_cost: null context");
  if (reps < 1) throw std::invalid_argument("cached_decode_cost: reps must be >= 1");
  const llama_model* model = llama_get_model(ctx);
  char desc[256] = {};
  llama_model_desc(model, desc, sizeof(desc));
  const CostKey key{model, desc, llama_model_size(model), llama_model_n_params(model),
                    llama_n_threads(ctx)};
  std::lock_guard<std::mutex> lock(cost_cache_mutex());
  if (auto it = cost_cache().find(key); it != cost_cache().end()) return it->second;

  const size_t n_batch = llama_n_batch(ctx);
  std::vector<size_t> sizes;
  for (size_t n : {1, 2, 3, 4, 6, 8}) {
    if (n <= n_batch) sizes.push_back(n);
  }
  const llama_pos start = llama_memory_seq_pos_max(llama_get_memory(ctx), seq) + 1;
  if (sizes.size() < 2 || static_cast<size_t>(start) + sizes.back() >= llama_n_ctx(ctx))
    return DecodeCost::cpu_default();
  // Both tables, one repetition of each in turn, so that a change of machine load falls on
  // both alike; one uncounted decode first (the first pass of a context builds its graph).
  std::vector<std::vector<double>> all(sizes.size()), last(sizes.size());
  std::vector<double> none;
  std::vector<double> one;
  measure_decode_cost(ctx, seq, sizes, 1, &one);
  for (int r = 0; r < reps; ++r) {
    measure_decode_cost(ctx, seq, sizes, 1, &one);
    for (size_t i = 0; i < sizes.size(); ++i) all[i].push_back(one[i]);
    measure_decode_cost(ctx, seq, sizes, 1, &one, false);
    for (size_t i = 0; i < sizes.size(); ++i) last[i].push_back(one[i]);
    none.push_back(measure_decode_no_logits_ms(ctx, seq, 1));
  }
  std::sort(none.begin(), none.end());
  std::vector<double> ms_all, ms_last;
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::sort(all[i].begin(), all[i].end());
    std::sort(last[i].begin(), last[i].end());
    ms_all.push_back(all[i][all[i].size() / 2]);
    ms_last.push_back(last[i][last[i].size() / 2]);
  }
  DecodeCost c = DecodeCost::from_ms(sizes, ms_all, ms_last);
  c.set_no_logits_ms(none[none.size() / 2], ms_all[0]);
  cost_cache().emplace(key, c);
  return c;
}

void clear_decode_cost_cache() {
  std::lock_guard<std::mutex> lock(cost_cache_mutex());
  cost_cache().clear();
}

}  // namespace lacuna
