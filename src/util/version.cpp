// version.cpp — lacuna's version strings.
#include "lacuna/version.h"

namespace lacuna {

const char* version() { return "0.1.0"; }

const char* pinned_llama_version() { return "0.5.0 (node-llama-cpp@3.22.1 bundle)"; }

}  // namespace lacuna
