// runtime_capi.h — what the C ABI's model, context, stream and branch handles share: the
// handles' structs over lacuna::Model and runtime::Context, the guard that keeps a context
// to one thread at a time, and the conversions of stats and stop reasons.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "capi/capi_common.h"
#include "lacuna/generator.h"
#include "lacuna/lacuna.h"
#include "lacuna/runtime.h"

namespace lacuna::capi {

struct ModelState {
  explicit ModelState(Model m) : model(std::move(m)) {}
  Model model;
};

// One runtime::Context and the flags of its C handles.
struct ContextState {
  std::shared_ptr<ModelState> model;
  std::unique_ptr<runtime::Context> rt;
  std::atomic<bool> has_stream{false};
  std::atomic<bool> busy{false};  // a call on the context or one of its branches/streams
};

// Marks a context in use for one call; a second thread gets LACUNA_ERR_BUSY.
class ContextGuard {
 public:
  explicit ContextGuard(ContextState& c) : c_(c) {
    if (c_.busy.exchange(true, std::memory_order_acquire)) {
      throw CapiError(LACUNA_ERR_BUSY, "the context is in use by another thread");
    }
  }
  ~ContextGuard() { c_.busy.store(false, std::memory_order_release); }
  ContextGuard(const ContextGuard&) = delete;
  ContextGuard& operator=(const ContextGuard&) = delete;

 private:
  ContextState& c_;
};

inline void require(bool ok, const char* message) {
  if (!ok) throw CapiError(LACUNA_ERR_INVALID_ARGUMENT, message);
}

int32_t stop_code(StopReason r);
lacuna_stats to_c(const GenerationStats& g, bool cancelled);
// Fills a lacuna_step from a Step, copying its tokens and text into the given buffers
// (which the step then points into).
void fill_step(const Step& st, std::vector<Token>& tokens, std::string& text, lacuna_step* out);
// A constraint from GBNF or JSON Schema text for the context's model (schema warnings go to
// lacuna's log).
std::unique_ptr<Constraint> grammar_constraint(const ContextState& c, std::string_view gbnf,
                                               const std::vector<std::string>& triggers = {});
std::unique_ptr<Constraint> schema_constraint(const ContextState& c, std::string_view schema,
                                              bool compact,
                                              const std::vector<std::string>& triggers = {});

}  // namespace lacuna::capi

struct lacuna_model {
  std::shared_ptr<lacuna::capi::ModelState> state;
};

struct lacuna_context {
  std::shared_ptr<lacuna::capi::ContextState> state;
};
