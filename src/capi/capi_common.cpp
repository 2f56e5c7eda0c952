// capi_common.cpp — the C ABI's shared parts: the thread-local last error, status mapping,
// the token-trie builder, and the functions every part of lacuna.h relies on.
#include "capi/capi_common.h"

#include "lacuna/sampler.h"

namespace lacuna::capi {
namespace {

thread_local std::string g_last_error;

}  // namespace

lacuna_status fail(lacuna_status status, const std::string& message) {
  g_last_error = message;
  return status;
}

lacuna_status status_of(TrieErrc code) {
  switch (code) {
    case TrieErrc::kSyntax:
      return LACUNA_ERR_PARSE;
    case TrieErrc::kSchema:
    case TrieErrc::kEmptyLeafSet:
    case TrieErrc::kTokenRange:
    case TrieErrc::kDuplicate:
      return LACUNA_ERR_SCHEMA;
    case TrieErrc::kTooLarge:
    case TrieErrc::kTooDeep:
    case TrieErrc::kLimit:
      return LACUNA_ERR_LIMIT;
    case TrieErrc::kModelMismatch:
      return LACUNA_ERR_MODEL_MISMATCH;
    case TrieErrc::kUnknownPath:
      return LACUNA_ERR_NOT_FOUND;
  }
  return LACUNA_ERR_INTERNAL;
}

lacuna_status status_of(ModelErrorKind kind) {
  switch (kind) {
    case ModelErrorKind::not_found:
      return LACUNA_ERR_NOT_FOUND;
    case ModelErrorKind::unreadable:
      return LACUNA_ERR_IO;
    case ModelErrorKind::empty:
    case ModelErrorKind::not_gguf:
    case ModelErrorKind::malformed:
    case ModelErrorKind::truncated:
      return LACUNA_ERR_PARSE;
    case ModelErrorKind::unsupported_architecture:
    case ModelErrorKind::vocab_only:
      return LACUNA_ERR_SCHEMA;
    case ModelErrorKind::load_failed:
      return LACUNA_ERR_INTERNAL;
  }
  return LACUNA_ERR_INTERNAL;
}

std::unique_ptr<TokenTrieConstraint> make_trie(const llama_vocab* vocab, const char* json,
                                               size_t len, const lacuna_token_trie_params& p) {
  if (vocab == nullptr) throw std::invalid_argument("vocab is NULL");
  if (json == nullptr && len != 0) throw std::invalid_argument("json is NULL");
  if (p.max_span_tokens < 0) throw std::invalid_argument("max_span_tokens is negative");
  if (p.end_tokens == nullptr && p.n_end_tokens != 0) {
    throw std::invalid_argument("end_tokens is NULL but n_end_tokens is not 0");
  }
  const int32_t n_vocab = llama_vocab_n_tokens(vocab);
  if (n_vocab <= 0) throw std::invalid_argument("vocab has no tokens");
  TriePayloadLimits limits;
  limits.max_payload_bytes = p.max_payload_bytes;
  const std::string_view text(json == nullptr ? "" : json, len);
  std::shared_ptr<const TrieSet> set =
      p.use_cache != 0 ? TrieCache::global().get(text, static_cast<size_t>(n_vocab), limits)
                       : build_trie_set(text, static_cast<size_t>(n_vocab), limits);
  if (p.expected_model_id != nullptr && set->model_id != p.expected_model_id) {
    throw TrieError(TrieErrc::kModelMismatch, "/modelId: payload is for model \"" + set->model_id +
                                                  "\", expected \"" + p.expected_model_id + "\"");
  }
  TrieOptions options;
  if (p.n_end_tokens > 0) {
    options.end_tokens.assign(p.end_tokens, p.end_tokens + p.n_end_tokens);
  } else if (p.use_default_end_tokens != 0) {
    for (llama_token t : {llama_vocab_eos(vocab), llama_vocab_eot(vocab)}) {
      if (t != LLAMA_TOKEN_NULL) options.end_tokens.push_back(t);
    }
  }
  options.max_span_tokens = static_cast<size_t>(p.max_span_tokens);
  options.piece = vocab_piece_fn(vocab);
  return std::make_unique<TokenTrieConstraint>(
      std::move(set), std::move(options),
      p.descriptor_path == nullptr ? std::string_view() : std::string_view(p.descriptor_path));
}

lacuna_status status_of(runtime::StateFileError::Kind kind) {
  using K = runtime::StateFileError::Kind;
  switch (kind) {
    case K::not_found:
      return LACUNA_ERR_NOT_FOUND;
    case K::io:
      return LACUNA_ERR_IO;
    case K::parse:
      return LACUNA_ERR_PARSE;
    case K::model_mismatch:
      return LACUNA_ERR_MODEL_MISMATCH;
    case K::limit:
      return LACUNA_ERR_LIMIT;
  }
  return LACUNA_ERR_INTERNAL;
}

}  // namespace lacuna::capi

extern "C" const char* lacuna_last_error(void) {
  return lacuna::capi::g_last_error.c_str();
}
