// sampling.cpp — the plain llama.cpp sampler chain (greedy, or seeded temperature sampling).
#include <cmath>
#include <new>
#include <stdexcept>

#include "lacuna/model.h"

namespace lacuna {

SamplerPtr make_sampler(const SamplingParams& params) {
  if (!std::isfinite(params.temp) || !std::isfinite(params.top_p) || !std::isfinite(params.min_p)) {
    throw std::invalid_argument("make_sampler: temp, top_p and min_p must be finite numbers");
  }
  if (params.top_p < 0.0f || params.min_p < 0.0f) {
    throw std::invalid_argument("make_sampler: top_p and min_p must be >= 0");
  }
  llama_sampler_chain_params cp = llama_sampler_chain_default_params();
  cp.no_perf = true;
  SamplerPtr chain(llama_sampler_chain_init(cp));
  if (!chain) throw std::bad_alloc();
  if (params.temp <= 0.0f) {
    llama_sampler_chain_add(chain.get(), llama_sampler_init_greedy());
    return chain;
  }
  if (params.top_k > 0)
    llama_sampler_chain_add(chain.get(), llama_sampler_init_top_k(params.top_k));
  if (params.top_p < 1.0f) {
    llama_sampler_chain_add(chain.get(), llama_sampler_init_top_p(params.top_p, 1));
  }
  if (params.min_p > 0.0f) {
    llama_sampler_chain_add(chain.get(), llama_sampler_init_min_p(params.min_p, 1));
  }
  llama_sampler_chain_add(chain.get(), llama_sampler_init_temp(params.temp));
  llama_sampler_chain_add(chain.get(), llama_sampler_init_dist(params.seed));
  return chain;
}

}  // namespace lacuna
