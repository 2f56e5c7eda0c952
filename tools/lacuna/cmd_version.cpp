// cmd_version.cpp — `lacuna version`: prints lacuna's and llama.cpp's versions.
#include <cstdio>

#include "command.h"
#include "lacuna/version.h"
#include "llama.h"

LACUNA_COMMAND(cmd_version, "version", "print versions and system info") {
  std::printf("lacuna %s\nllama.cpp %s\nsystem: %s\n", lacuna::version(),
              lacuna::pinned_llama_version(), llama_print_system_info());
  return 0;
}
