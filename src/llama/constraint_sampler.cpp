// constraint_sampler.cpp — the llama_sampler adapter over any lacuna::Constraint (mask in
// apply, advance in accept, fork in clone), with optional greedy/dist selection.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>

#include "lacuna/sampler.h"
#include "llama/backend_mask.h"

namespace lacuna {
namespace {

struct SamplerState {
  std::unique_ptr<Constraint> constraint;
  SparseAllowed* sparse = nullptr;
  ConstraintSamplerParams params;
  std::vector<uint32_t> mask;  // bitmask_words(n_vocab)
  bool mask_clean = true;      // all zero (the list path relies on it)
  std::mt19937 rng;
  ConstraintSamplerStatus status;
  // Backend sampling (docs/backend_sampling.md): the mask in the graph, made from the
  // constraint's state when llama.cpp sets the graph's inputs.
  std::unique_ptr<backend::MaskGraph> graph;
  std::vector<uint32_t> backend_mask;

  SamplerState(std::unique_ptr<Constraint> c, ConstraintSamplerParams p)
      : constraint(std::move(c)), params(std::move(p)), rng(params.seed) {
    sparse = dynamic_cast<SparseAllowed*>(constraint.get());
    mask.assign(bitmask_words(constraint->n_vocab()), 0u);
  }
};

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

SamplerState* state_of(const llama_sampler* smpl) {
  return static_cast<SamplerState*>(smpl->ctx);
}

void record_empty(SamplerState& s) {
  ++s.status.empty_masks;
  s.status.last_error = "constraint allows none of the candidate tokens";
  if (s.constraint->is_terminated()) s.status.last_error += " (the constraint is terminated)";
}

// Marks every candidate not in the (all-zero-outside-use) mask with -inf.
void mask_with_bitmask(SamplerState& s, llama_token_data_array* cur_p) {
  const auto n_vocab = static_cast<Token>(s.constraint->n_vocab());
  const uint32_t* words = s.mask.data();
  size_t allowed = 0;
  for (size_t i = 0; i < cur_p->size; ++i) {
    const Token id = cur_p->data[i].id;
    if (id >= 0 && id < n_vocab && bitmask_test(words, id)) {
      if (cur_p->data[i].logit != kNegInf) ++allowed;
    } else {
      cur_p->data[i].logit = kNegInf;
    }
  }
  if (allowed == 0) record_empty(s);
}

// The list path: cur_p is the full id-ordered array (data[t].id == t for every allowed t),
// so the allowed entries are moved to the front and cur_p shrinks to them. Returns false
// when cur_p does not look like that.
bool compact_id_ordered(const AllowedTokens& a, llama_token_data_array* cur_p) {
  if (a.size == 0 || cur_p->sorted) return false;
  const auto last = static_cast<size_t>(a.tokens[a.size - 1]);
  if (last >= cur_p->size) return false;
  for (size_t i = 0; i < a.size; ++i) {
    if (cur_p->data[a.tokens[i]].id != a.tokens[i]) return false;
  }
  // Ids in a candidate array are distinct, so these entries are exactly the allowed ones.
  // a.tokens is sorted ascending with tokens[i] >= i: writing slot i never clobbers a later
  // source slot.
  for (size_t i = 0; i < a.size; ++i) cur_p->data[i] = cur_p->data[a.tokens[i]];
  cur_p->size = a.size;
  return true;
}

void apply_mask(SamplerState& s, llama_token_data_array* cur_p) {
  AllowedTokens a;
  if (s.sparse != nullptr) a = s.sparse->allowed_tokens();
  switch (a.kind) {
    case AllowedTokens::Kind::kAll:
      return;
    case AllowedTokens::Kind::kList: {
      if (compact_id_ordered(a, cur_p)) {
        cur_p->selected = -1;
        bool any = false;
        for (size_t i = 0; i < cur_p->size; ++i) any |= cur_p->data[i].logit != kNegInf;
        if (!any) record_empty(s);
        return;
      }
      if (!s.mask_clean) {
        std::fill(s.mask.begin(), s.mask.end(), 0u);
        s.mask_clean = true;
      }
      for (size_t i = 0; i < a.size; ++i) bitmask_set(s.mask.data(), a.tokens[i]);
      mask_with_bitmask(s, cur_p);
      for (size_t i = 0; i < a.size; ++i) s.mask[static_cast<size_t>(a.tokens[i]) >> 5] = 0u;
      return;
    }
    case AllowedTokens::Kind::kBitmask:
      s.constraint->fill_next_token_bitmask(s.mask.data());
      s.mask_clean = false;
      mask_with_bitmask(s, cur_p);
      return;
  }
}

void select_greedy(llama_token_data_array* cur_p) {
  if (cur_p->size == 0) return;
  size_t best = 0;
  for (size_t i = 1; i < cur_p->size; ++i) {
    if (cur_p->data[i].logit > cur_p->data[best].logit) best = i;
  }
  cur_p->selected = static_cast<int64_t>(best);
}

void select_dist(SamplerState& s, llama_token_data_array* cur_p) {
  const float temp = s.params.temperature;
  if (temp <= 0.0f) {
    select_greedy(cur_p);
    return;
  }
  // Allowed (finite) candidates to the front; the rest are dropped from cur_p.
  auto* begin = cur_p->data;
  auto* end = std::partition(begin, begin + cur_p->size,
                             [](const llama_token_data& d) { return d.logit != kNegInf; });
  const auto n = static_cast<size_t>(end - begin);
  if (n == 0) {  // nothing allowed: keep llama.cpp's invariants, pick the first candidate
    if (cur_p->size > 0) cur_p->selected = 0;
    return;
  }
  cur_p->size = n;
  std::sort(begin, end,
            [](const llama_token_data& a, const llama_token_data& b) { return a.logit > b.logit; });
  cur_p->sorted = true;
  const float max_l = begin[0].logit;
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    begin[i].p = std::exp((begin[i].logit - max_l) / temp);
    sum += begin[i].p;
  }
  size_t keep = n;
  if (s.params.top_p < 1.0f) {
    double cum = 0.0;
    for (size_t i = 0; i < n; ++i) {
      cum += begin[i].p / sum;
      if (cum >= s.params.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept_sum = 0.0;
  for (size_t i = 0; i < keep; ++i) kept_sum += begin[i].p;
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  const double target = uni(s.rng) * kept_sum;
  double run = 0.0;
  size_t chosen = keep - 1;
  for (size_t i = 0; i < keep; ++i) {
    run += begin[i].p;
    if (run >= target) {
      chosen = i;
      break;
    }
  }
  for (size_t i = 0; i < n; ++i)
    begin[i].p = i < keep ? static_cast<float>(begin[i].p / kept_sum) : 0.0f;
  cur_p->selected = static_cast<int64_t>(chosen);
}

const char* iface_name(const llama_sampler* smpl) {
  return state_of(smpl)->params.name.c_str();
}

void iface_apply(llama_sampler* smpl, llama_token_data_array* cur_p) {
  SamplerState& s = *state_of(smpl);
  apply_mask(s, cur_p);
  switch (s.params.selector) {
    case Selector::kNone:
      break;
    case Selector::kGreedy:
      select_greedy(cur_p);
      break;
    case Selector::kDist:
      select_dist(s, cur_p);
      break;
  }
}

void iface_accept(llama_sampler* smpl, llama_token token) {
  SamplerState& s = *state_of(smpl);
  if (s.constraint->accept_token(token)) return;
  ++s.status.refused_accepts;
  s.status.last_refused = token;
  s.status.last_error = "constraint refused token " + std::to_string(token) +
                        (s.constraint->is_terminated() ? " (the constraint is terminated)" : "") +
                        "; its state is unchanged";
}

void iface_reset(llama_sampler* smpl) {
  SamplerState& s = *state_of(smpl);
  s.constraint->reset();
  s.status = {};
  s.rng.seed(s.params.seed);
}

llama_sampler* iface_clone(const llama_sampler* smpl);

void iface_free(llama_sampler* smpl) {
  delete state_of(smpl);
}

// ---- backend sampling: the constraint's mask applied inside llama.cpp's graph ----------

// One output row per sequence only: the mask of a second row depends on the token sampled
// in the first, which the graph chooses. A kDist selector (its own top-p and RNG) stays on
// the CPU; kGreedy becomes an argmax in the graph.
bool iface_backend_init(llama_sampler* smpl, ggml_backend_buffer_type_t buft, uint32_t n_out) {
  SamplerState& s = *state_of(smpl);
  if (n_out > 1 || s.params.selector == Selector::kDist) return false;
  s.graph = std::make_unique<backend::MaskGraph>(s.constraint->n_vocab());
  if (!s.graph->init(buft)) {
    s.graph.reset();
    return false;
  }
  s.backend_mask.assign(bitmask_words(s.constraint->n_vocab()), 0u);
  return true;
}

void iface_backend_apply(llama_sampler* smpl, ggml_context* ctx, ggml_cgraph*,
                         llama_sampler_data* data) {
  SamplerState& s = *state_of(smpl);
  if (!s.graph) return;
  data->logits = s.graph->apply(ctx, data->logits, data->candidates);
  if (s.params.selector == Selector::kGreedy) {
    ggml_tensor* flat = ggml_reshape_1d(ctx, data->logits, ggml_nelements(data->logits));
    ggml_tensor* best = ggml_argmax(ctx, flat);
    if (data->candidates != nullptr) {
      ggml_tensor* ids =
          ggml_reshape_2d(ctx, data->candidates, 1, ggml_nelements(data->candidates));
      best = ggml_get_rows(ctx, ids, best);
    }
    data->sampled = best;
  }
}

// Before the graph runs: the mask of the constraint's current state (every token while a
// lazy constraint waits for its trigger).
void iface_backend_set_input(llama_sampler* smpl) {
  SamplerState& s = *state_of(smpl);
  if (!s.graph) return;
  AllowedTokens a;
  if (s.sparse != nullptr) a = s.sparse->allowed_tokens();
  const bool all = a.kind == AllowedTokens::Kind::kAll && s.sparse != nullptr;
  if (!all) s.constraint->fill_next_token_bitmask(s.backend_mask.data());
  for (size_t i = 0; i < s.graph->n_inputs(); ++i) {
    s.graph->upload(i, all ? nullptr : s.backend_mask.data());
  }
}

void iface_backend_reset(llama_sampler* smpl) {
  SamplerState& s = *state_of(smpl);
  if (s.graph) s.graph->reset();
}

// The constraint's state, RNG and error state; the graph inputs stay dst's.
void iface_copy_state(const llama_sampler* src, llama_sampler* dst) {
  const SamplerState& a = *state_of(src);
  SamplerState& b = *state_of(dst);
  b.constraint = a.constraint->fork();
  b.sparse = dynamic_cast<SparseAllowed*>(b.constraint.get());
  b.rng = a.rng;
  b.status = a.status;
}

llama_sampler_i make_iface() {
  llama_sampler_i i{};
  i.name = iface_name;
  i.accept = iface_accept;
  i.apply = iface_apply;
  i.reset = iface_reset;
  i.clone = iface_clone;
  i.free = iface_free;
  i.backend_init = iface_backend_init;
  i.backend_accept = nullptr;  // llama.cpp 0.5.0 never calls it: accept() advances the constraint
  i.backend_apply = iface_backend_apply;
  i.backend_set_input = iface_backend_set_input;
  i.backend_reset = iface_backend_reset;
  i.copy_state = iface_copy_state;
  return i;
}

llama_sampler_i g_iface = make_iface();

llama_sampler* iface_clone(const llama_sampler* smpl) {
  const SamplerState& s = *state_of(smpl);
  auto copy = std::make_unique<SamplerState>(s.constraint->fork(), s.params);
  copy->rng = s.rng;
  copy->status = s.status;
  return llama_sampler_init(&g_iface, copy.release());
}

}  // namespace

llama_sampler* make_constraint_sampler(std::unique_ptr<Constraint> constraint,
                                       const ConstraintSamplerParams& params) {
  if (!constraint) throw std::invalid_argument("make_constraint_sampler: null constraint");
  if (constraint->n_vocab() == 0)
    throw std::invalid_argument("make_constraint_sampler: n_vocab is 0");
  if (!std::isfinite(params.temperature) || !std::isfinite(params.top_p) || params.top_p <= 0.0f) {
    throw std::invalid_argument(
        "make_constraint_sampler: temperature must be finite and top_p finite and > 0");
  }
  auto state = std::make_unique<SamplerState>(std::move(constraint), params);
  return llama_sampler_init(&g_iface, state.release());
}

bool is_constraint_sampler(const llama_sampler* smpl) {
  return smpl != nullptr && smpl->iface == &g_iface;
}

llama_sampler* find_constraint_sampler(llama_sampler* smpl) {
  if (smpl == nullptr) return nullptr;
  if (is_constraint_sampler(smpl)) return smpl;
  if (llama_sampler_chain_get(smpl, -1) != smpl) return nullptr;  // not a chain
  const int32_t n = llama_sampler_chain_n(smpl);
  for (int32_t i = 0; i < n; ++i) {
    if (llama_sampler* found = find_constraint_sampler(llama_sampler_chain_get(smpl, i))) {
      return found;
    }
  }
  return nullptr;
}

Constraint* sampler_constraint(llama_sampler* smpl) {
  llama_sampler* found = find_constraint_sampler(smpl);
  return found == nullptr ? nullptr : state_of(found)->constraint.get();
}

ConstraintSamplerStatus constraint_sampler_status(llama_sampler* smpl) {
  llama_sampler* found = find_constraint_sampler(smpl);
  if (found == nullptr) throw std::invalid_argument("not a lacuna constraint sampler");
  return state_of(found)->status;
}

void clear_sampler_error(llama_sampler* smpl) {
  llama_sampler* found = find_constraint_sampler(smpl);
  if (found == nullptr) throw std::invalid_argument("not a lacuna constraint sampler");
  state_of(found)->status = {};
}

TokenPieceFn vocab_piece_fn(const llama_vocab* vocab) {
  if (vocab == nullptr) throw std::invalid_argument("vocab_piece_fn: null vocab");
  const int32_t n_vocab = llama_vocab_n_tokens(vocab);
  return [vocab, n_vocab](Token token, std::string& out) {
    if (token < 0 || token >= n_vocab) {
      out.clear();
      return;
    }
    if (out.capacity() < 64) out.reserve(64);
    out.resize(out.capacity());
    int32_t n =
        llama_token_to_piece(vocab, token, out.data(), static_cast<int32_t>(out.size()), 0, true);
    if (n < 0) {
      out.resize(static_cast<size_t>(-n));
      n = llama_token_to_piece(vocab, token, out.data(), static_cast<int32_t>(out.size()), 0, true);
    }
    out.resize(n < 0 ? 0 : static_cast<size_t>(n));
  };
}

}  // namespace lacuna
