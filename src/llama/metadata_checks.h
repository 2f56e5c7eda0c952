// metadata_checks.h — checks on GGUF metadata that llama.cpp asserts on (aborting the process)
// instead of reporting an error; run before llama.cpp sees the file.
#pragma once

#include <string>

#include "gguf.h"

namespace lacuna::detail {

// Returns "" when the metadata is acceptable, else a sentence saying what is wrong:
// layer count outside [1, 512], inconsistent expert counts, unknown RoPE scaling type,
// zero KV heads, duplicate vocabulary entries, a tensor with a zero dimension.
std::string check_llama_metadata(const gguf_context* g, const std::string& arch);

}  // namespace lacuna::detail
