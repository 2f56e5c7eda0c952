// fuzz_server_request.cpp — libFuzzer target: arbitrary bytes as the body of
// /v1/chat/completions and /v1/completions. The parser must return a request or throw
// ApiError (status 400, an error body that is valid JSON); nothing else may escape.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/api_request.h"

namespace {

void check_error(const lacuna::server::ApiError& e) {
  if (e.status != 400) std::abort();
  const nlohmann::json body = nlohmann::json::parse(lacuna::server::error_body(e), nullptr, false);
  if (body.is_discarded() || !body.contains("error") || !body["error"].contains("message")) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 16384) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  try {
    const lacuna::server::GenRequest r = lacuna::server::parse_chat_request(body);
    if (r.chat.messages.empty()) std::abort();  // "messages" is required and non-empty
  } catch (const lacuna::server::ApiError& e) {
    check_error(e);
  }
  try {
    const lacuna::server::GenRequest r = lacuna::server::parse_completion_request(body);
    if (r.prompt.empty()) std::abort();
  } catch (const lacuna::server::ApiError& e) {
    check_error(e);
  }
  return 0;
}
