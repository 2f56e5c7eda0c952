// version.h — lacuna's version and the llama.cpp it was built against.
#pragma once

namespace lacuna {

// "MAJOR.MINOR.PATCH" of lacuna.
const char* version();

// The llama.cpp release lacuna is pinned to (what the default build fetches).
const char* pinned_llama_version();

}  // namespace lacuna
