// sampler_capi.cpp — the C ABI for samplers and constraints (lacuna.h): token trie,
// constraint adapter, lazy activation, error reporting.
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "capi/capi_common.h"
#include "lacuna/lacuna.h"
#include "lacuna/sampler.h"
#include "lacuna/token_trie.h"

struct lacuna_constraint {
  std::unique_ptr<lacuna::Constraint> constraint;
};

namespace {

using lacuna::capi::guarded;
using lacuna::capi::make_trie;

lacuna::TokenTrieConstraint* trie_behind(llama_sampler* smpl) {
  lacuna::Constraint* c = lacuna::sampler_constraint(smpl);
  if (auto* lazy = dynamic_cast<lacuna::LazyConstraint*>(c)) c = &lazy->inner();
  return dynamic_cast<lacuna::TokenTrieConstraint*>(c);
}

lacuna::ConstraintSamplerParams sampler_params(const lacuna_sampler_params& p) {
  lacuna::ConstraintSamplerParams out;
  switch (p.selector) {
    case LACUNA_SELECT_NONE:
      out.selector = lacuna::Selector::kNone;
      break;
    case LACUNA_SELECT_GREEDY:
      out.selector = lacuna::Selector::kGreedy;
      break;
    case LACUNA_SELECT_DIST:
      out.selector = lacuna::Selector::kDist;
      break;
    default:
      throw std::invalid_argument("unknown selector " + std::to_string(p.selector));
  }
  out.temperature = p.temperature;
  out.top_p = p.top_p;
  out.seed = p.seed;
  return out;
}

}  // namespace

extern "C" {

uint32_t lacuna_abi_version(void) {
  return LACUNA_ABI_VERSION;
}

const char* lacuna_status_name(lacuna_status status) {
  switch (status) {
    case LACUNA_OK:
      return "LACUNA_OK";
    case LACUNA_ERR_INVALID_ARGUMENT:
      return "LACUNA_ERR_INVALID_ARGUMENT";
    case LACUNA_ERR_PARSE:
      return "LACUNA_ERR_PARSE";
    case LACUNA_ERR_SCHEMA:
      return "LACUNA_ERR_SCHEMA";
    case LACUNA_ERR_MODEL_MISMATCH:
      return "LACUNA_ERR_MODEL_MISMATCH";
    case LACUNA_ERR_LIMIT:
      return "LACUNA_ERR_LIMIT";
    case LACUNA_ERR_NOT_FOUND:
      return "LACUNA_ERR_NOT_FOUND";
    case LACUNA_ERR_STATE:
      return "LACUNA_ERR_STATE";
    case LACUNA_ERR_INTERNAL:
      return "LACUNA_ERR_INTERNAL";
    case LACUNA_ERR_IO:
      return "LACUNA_ERR_IO";
    case LACUNA_ERR_BUSY:
      return "LACUNA_ERR_BUSY";
  }
  return "LACUNA_ERR_UNKNOWN";
}

void lacuna_constraint_free(lacuna_constraint* constraint) {
  delete constraint;
}

lacuna_token_trie_params lacuna_token_trie_default_params(void) {
  lacuna_token_trie_params p;
  std::memset(&p, 0, sizeof(p));
  p.mode = LACUNA_TRIE_MODE_ARGMAX;
  p.temperature = 1.0f;
  p.top_p = 1.0f;
  p.seed = 0;
  p.use_default_end_tokens = 1;
  p.max_span_tokens = 500;
  p.max_payload_bytes = lacuna::TriePayloadLimits{}.max_payload_bytes;
  p.use_cache = 1;
  return p;
}

lacuna_sampler_params lacuna_sampler_default_params(void) {
  lacuna_sampler_params p;
  p.selector = LACUNA_SELECT_NONE;
  p.temperature = 1.0f;
  p.top_p = 1.0f;
  p.seed = 0;
  return p;
}

llama_sampler* lacuna_sampler_init_token_trie(const llama_vocab* vocab, const char* json,
                                              size_t len, int mode) {
  lacuna_token_trie_params p = lacuna_token_trie_default_params();
  p.mode = mode;
  return lacuna_sampler_init_token_trie_ext(vocab, json, len, &p);
}

llama_sampler* lacuna_sampler_init_token_trie_ext(const llama_vocab* vocab, const char* json,
                                                  size_t len,
                                                  const lacuna_token_trie_params* params) {
  llama_sampler* result = nullptr;
  guarded("lacuna_sampler_init_token_trie", [&] {
    const lacuna_token_trie_params p = params ? *params : lacuna_token_trie_default_params();
    lacuna::ConstraintSamplerParams sp;
    switch (p.mode) {
      case LACUNA_TRIE_MODE_ARGMAX:
        sp.selector = lacuna::Selector::kGreedy;
        break;
      case LACUNA_TRIE_MODE_SAMPLE:
        sp.selector = lacuna::Selector::kDist;
        break;
      case LACUNA_TRIE_MODE_MASK:
        sp.selector = lacuna::Selector::kNone;
        break;
      default:
        throw std::invalid_argument("unknown mode " + std::to_string(p.mode) +
                                    " (0 = argmax, 1 = sample, 2 = mask only)");
    }
    sp.temperature = p.temperature;
    sp.top_p = p.top_p;
    sp.seed = p.seed;
    sp.name = "lacuna-token-trie";
    result = lacuna::make_constraint_sampler(make_trie(vocab, json, len, p), sp);
    return LACUNA_OK;
  });
  return result;
}

lacuna_status lacuna_constraint_init_token_trie(const llama_vocab* vocab, const char* json,
                                                size_t len, const lacuna_token_trie_params* params,
                                                lacuna_constraint** out) {
  return guarded("lacuna_constraint_init_token_trie", [&] {
    if (out == nullptr) throw std::invalid_argument("out is NULL");
    *out = nullptr;
    const lacuna_token_trie_params p = params ? *params : lacuna_token_trie_default_params();
    auto c = std::make_unique<lacuna_constraint>();
    c->constraint = make_trie(vocab, json, len, p);
    *out = c.release();
    return LACUNA_OK;
  });
}

lacuna_status lacuna_token_trie_chosen_leaf(llama_sampler* smpl, const char** name) {
  return guarded("lacuna_token_trie_chosen_leaf", [&] {
    if (name == nullptr) throw std::invalid_argument("name is NULL");
    *name = nullptr;
    auto* trie = trie_behind(smpl);
    if (trie == nullptr) throw std::invalid_argument("the sampler holds no token trie");
    const std::string* leaf = trie->chosen_leaf();
    *name = leaf == nullptr ? nullptr : leaf->c_str();
    return LACUNA_OK;
  });
}

lacuna_status lacuna_token_trie_select(llama_sampler* smpl, const char* path) {
  return guarded("lacuna_token_trie_select", [&] {
    auto* trie = trie_behind(smpl);
    if (trie == nullptr) throw std::invalid_argument("the sampler holds no token trie");
    trie->select(path == nullptr ? std::string_view() : std::string_view(path));
    return LACUNA_OK;
  });
}

const char* lacuna_token_trie_warning(llama_sampler* smpl) {
  auto* trie = trie_behind(smpl);
  return trie == nullptr ? nullptr : trie->warning().c_str();
}

llama_sampler* lacuna_sampler_init_constraint(lacuna_constraint* constraint,
                                              const lacuna_sampler_params* params) {
  std::unique_ptr<lacuna_constraint> owned(constraint);
  llama_sampler* result = nullptr;
  guarded("lacuna_sampler_init_constraint", [&] {
    if (!owned || !owned->constraint) throw std::invalid_argument("constraint is NULL");
    const lacuna_sampler_params p = params ? *params : lacuna_sampler_default_params();
    result = lacuna::make_constraint_sampler(std::move(owned->constraint), sampler_params(p));
    return LACUNA_OK;
  });
  return result;
}

lacuna_status lacuna_constraint_init_lazy(lacuna_constraint* inner, const llama_vocab* vocab,
                                          const char* const* trigger_words, size_t n_words,
                                          const llama_token* trigger_tokens, size_t n_tokens,
                                          const char* const* trigger_patterns, size_t n_patterns,
                                          lacuna_constraint** out) {
  std::unique_ptr<lacuna_constraint> owned(inner);
  return guarded("lacuna_constraint_init_lazy", [&] {
    if (out == nullptr) throw std::invalid_argument("out is NULL");
    *out = nullptr;
    if (!owned || !owned->constraint) throw std::invalid_argument("inner constraint is NULL");
    if ((trigger_words == nullptr && n_words != 0) ||
        (trigger_tokens == nullptr && n_tokens != 0) ||
        (trigger_patterns == nullptr && n_patterns != 0)) {
      throw std::invalid_argument("a trigger array is NULL but its count is not 0");
    }
    lacuna::LazyTriggers triggers;
    for (size_t i = 0; i < n_words; ++i) {
      if (trigger_words[i] == nullptr) throw std::invalid_argument("trigger word is NULL");
      triggers.words.emplace_back(trigger_words[i]);
    }
    triggers.tokens.assign(trigger_tokens, trigger_tokens + n_tokens);
    for (size_t i = 0; i < n_patterns; ++i) {
      if (trigger_patterns[i] == nullptr) throw std::invalid_argument("trigger pattern is NULL");
      triggers.patterns.emplace_back(trigger_patterns[i]);
    }
    lacuna::TokenPieceFn piece;
    if (vocab != nullptr) piece = lacuna::vocab_piece_fn(vocab);
    auto c = std::make_unique<lacuna_constraint>();
    c->constraint = std::make_unique<lacuna::LazyConstraint>(std::move(owned->constraint),
                                                             std::move(triggers), std::move(piece));
    *out = c.release();
    return LACUNA_OK;
  });
}

lacuna_status lacuna_sampler_is_terminated(llama_sampler* smpl, int32_t* terminated) {
  return guarded("lacuna_sampler_is_terminated", [&] {
    if (terminated == nullptr) throw std::invalid_argument("terminated is NULL");
    lacuna::Constraint* c = lacuna::sampler_constraint(smpl);
    if (c == nullptr) throw std::invalid_argument("not a lacuna sampler");
    *terminated = c->is_terminated() ? 1 : 0;
    return LACUNA_OK;
  });
}

lacuna_status lacuna_sampler_is_completed(llama_sampler* smpl, int32_t* completed) {
  return guarded("lacuna_sampler_is_completed", [&] {
    if (completed == nullptr) throw std::invalid_argument("completed is NULL");
    lacuna::Constraint* c = lacuna::sampler_constraint(smpl);
    if (c == nullptr) throw std::invalid_argument("not a lacuna sampler");
    *completed = c->is_completed() ? 1 : 0;
    return LACUNA_OK;
  });
}

lacuna_status lacuna_sampler_forced_tokens(llama_sampler* smpl, llama_token* tokens,
                                           size_t capacity, size_t* n) {
  return guarded("lacuna_sampler_forced_tokens", [&] {
    if (n == nullptr || (tokens == nullptr && capacity != 0)) {
      throw std::invalid_argument("tokens or n is NULL");
    }
    *n = 0;
    lacuna::Constraint* c = lacuna::sampler_constraint(smpl);
    if (c == nullptr) throw std::invalid_argument("not a lacuna sampler");
    std::vector<lacuna::Token> forced;
    c->forced_tokens(forced, capacity);
    for (size_t i = 0; i < forced.size() && i < capacity; ++i) tokens[i] = forced[i];
    *n = std::min(forced.size(), capacity);
    return LACUNA_OK;
  });
}

const char* lacuna_sampler_error(llama_sampler* smpl, uint64_t* refused) {
  llama_sampler* found = lacuna::find_constraint_sampler(smpl);
  if (found == nullptr) return nullptr;
  thread_local std::string message;
  const auto status = lacuna::constraint_sampler_status(found);
  if (refused != nullptr) *refused = status.refused_accepts;
  message = status.last_error;
  return message.c_str();
}

}  // extern "C"
