// log_sum_exp.h — log(sum(exp(l))) over a row of logits: the softmax's normalizer, so that
// log p(t) = l[t] - log_sum_exp(l, n) under the model's distribution (raw logits).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace lacuna::runtime {

inline double log_sum_exp(const float* l, int32_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int32_t i = 0; i < n; ++i) m = std::max(m, l[i]);
  double sum = 0;
  for (int32_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(l[i] - m));
  return std::log(sum) + m;
}

}  // namespace lacuna::runtime
