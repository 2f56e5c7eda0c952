// capi_common.h — what the C ABI's files share: the thread-local error message, the mapping
// of lacuna's exceptions to lacuna_status, and the token-trie constraint builder.
#pragma once

#include <memory>
#include <new>
#include <stdexcept>
#include <string>

#include "lacuna/grammar.h"
#include "lacuna/json_schema.h"
#include "lacuna/kv.h"
#include "lacuna/lacuna.h"
#include "lacuna/matcher.h"
#include "lacuna/model.h"
#include "lacuna/regex.h"
#include "lacuna/runtime.h"
#include "lacuna/token_trie.h"

namespace lacuna::capi {

// Records `message` as the calling thread's last error and returns `status`.
lacuna_status fail(lacuna_status status, const std::string& message);

// A stored failure: thrown inside guarded() bodies to return a given status.
class CapiError : public std::runtime_error {
 public:
  CapiError(lacuna_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  lacuna_status status() const { return status_; }

 private:
  lacuna_status status_;
};

lacuna_status status_of(TrieErrc code);
lacuna_status status_of(ModelErrorKind kind);
lacuna_status status_of(runtime::StateFileError::Kind kind);

// Runs `fn` (which returns a lacuna_status), turning every exception into a status and a
// thread-local message prefixed with `what` (the C function's name).
template <typename Fn>
lacuna_status guarded(const char* what, Fn&& fn) {
  const auto prefixed = [what](const char* message) { return std::string(what) + ": " + message; };
  try {
    return fn();
  } catch (const CapiError& e) {
    return fail(e.status(), prefixed(e.what()));
  } catch (const TrieError& e) {
    return fail(status_of(e.code()), prefixed(e.what()));
  } catch (const GrammarError& e) {
    return fail(LACUNA_ERR_PARSE, prefixed(e.what()));
  } catch (const RegexError& e) {
    return fail(LACUNA_ERR_PARSE, prefixed(e.what()));
  } catch (const SchemaError& e) {
    return fail(LACUNA_ERR_SCHEMA, prefixed(e.what()));
  } catch (const GrammarLimitError& e) {
    return fail(LACUNA_ERR_LIMIT, prefixed(e.what()));
  } catch (const ModelError& e) {
    return fail(status_of(e.kind()), prefixed(e.what()));
  } catch (const runtime::StateFileError& e) {
    return fail(status_of(e.kind()), prefixed(e.what()));
  } catch (const std::invalid_argument& e) {
    return fail(LACUNA_ERR_INVALID_ARGUMENT, prefixed(e.what()));
  } catch (const std::length_error& e) {  // no free sequence, a buffer too small
    return fail(LACUNA_ERR_LIMIT, prefixed(e.what()));
  } catch (const std::logic_error& e) {  // not now: prune with children, next before prefill
    return fail(LACUNA_ERR_STATE, prefixed(e.what()));
  } catch (const std::bad_alloc&) {
    return fail(LACUNA_ERR_INTERNAL, prefixed("out of memory"));
  } catch (const std::exception& e) {
    return fail(LACUNA_ERR_INTERNAL, prefixed(e.what()));
  } catch (...) {
    return fail(LACUNA_ERR_INTERNAL, prefixed("unknown failure"));
  }
}

// The token-trie constraint for a payload under the C ABI's params (validated here).
std::unique_ptr<TokenTrieConstraint> make_trie(const llama_vocab* vocab, const char* json,
                                               size_t len, const lacuna_token_trie_params& p);

}  // namespace lacuna::capi
