# LacunaLlama.cmake — find or build the pinned llama.cpp and define the `llama` target.
#
# Providers, in this order of preference:
#   1. LACUNA_LLAMA_SOURCE_DIR=<llama.cpp source>: built inside our build tree with
#      add_subdirectory (offline machines; GGML_CUDA and other GGML_* options pass through).
#   2. LACUNA_LLAMA_SYSTEM=ON, or llama_DIR given: an installed llama.cpp via
#      find_package(llama). Tests need LACUNA_LLAMA_DATA_DIR (a llama.cpp source tree, for
#      models/ggml-vocab-*.gguf and grammars/) in that case.
#   3. Default: scripts/fetch-llama.sh fetches node-llama-cpp@3.22.1 from npm, verifies its
#      sha512, clones its llama.cpp 0.5.0 bundle, builds llama + ggml (CPU) once and
#      installs them into LACUNA_LLAMA_CACHE (default ~/.cache/lacuna/llama.cpp-0.5.0);
#      later configures reuse that cache.
#
# Sets LACUNA_LLAMA_DATA_DIR (llama.cpp source tree holding models/ and grammars/) when known.
#
# llama.cpp's common library (`llama-common`: Jinja chat templates, tool-call formats and their
# parsers, common/chat.h) is the target `lacuna_llama_common` when the provider has it: built
# in our tree from LACUNA_LLAMA_SOURCE_DIR, or by fetch-llama.sh's additive step into the
# cache's build tree. An installed llama.cpp does not ship it; lacuna's chat module is then
# left out (LACUNA_HAVE_CHAT is OFF).

set(LACUNA_LLAMA_SOURCE_DIR "" CACHE PATH "Build llama.cpp from this source directory")
option(LACUNA_LLAMA_SYSTEM "Use an installed llama.cpp (find_package(llama))" OFF)
set(LACUNA_LLAMA_DATA_DIR "" CACHE PATH "llama.cpp source tree with models/ and grammars/ (for tests)")
if(DEFINED ENV{LACUNA_LLAMA_CACHE})
  set(_lacuna_default_cache "$ENV{LACUNA_LLAMA_CACHE}")
else()
  set(_lacuna_default_cache "$ENV{HOME}/.cache/lacuna/llama.cpp-0.5.0")
endif()
set(LACUNA_LLAMA_CACHE "${_lacuna_default_cache}" CACHE PATH "Where the pinned llama.cpp is built and installed once")

# (find_package below caches llama_DIR inside the cache's install/: not a system llama.cpp)
set(_lacuna_system_dir OFF)
if(llama_DIR)
  string(FIND "${llama_DIR}" "${LACUNA_LLAMA_CACHE}/install" _lacuna_in_cache)
  if(NOT _lacuna_in_cache EQUAL 0)
    set(_lacuna_system_dir ON)
  endif()
endif()

if(LACUNA_LLAMA_SOURCE_DIR)
  if(NOT EXISTS "${LACUNA_LLAMA_SOURCE_DIR}/include/llama.h")
    message(FATAL_ERROR "LACUNA_LLAMA_SOURCE_DIR=${LACUNA_LLAMA_SOURCE_DIR} holds no include/llama.h")
  endif()
  message(STATUS "lacuna: building llama.cpp from ${LACUNA_LLAMA_SOURCE_DIR}")
  set(LLAMA_BUILD_COMMON ON CACHE BOOL "" FORCE)
  set(LLAMA_BUILD_TESTS OFF CACHE BOOL "" FORCE)
  set(LLAMA_BUILD_TOOLS OFF CACHE BOOL "" FORCE)
  set(LLAMA_BUILD_EXAMPLES OFF CACHE BOOL "" FORCE)
  set(LLAMA_BUILD_SERVER OFF CACHE BOOL "" FORCE)
  set(LLAMA_BUILD_APP OFF CACHE BOOL "" FORCE)
  set(LLAMA_OPENSSL OFF CACHE BOOL "" FORCE)
  set(_lacuna_saved_shared ${BUILD_SHARED_LIBS})
  set(BUILD_SHARED_LIBS OFF)
  set(CMAKE_POSITION_INDEPENDENT_CODE ON)
  add_subdirectory("${LACUNA_LLAMA_SOURCE_DIR}" "${CMAKE_BINARY_DIR}/llama.cpp" EXCLUDE_FROM_ALL SYSTEM)
  set(BUILD_SHARED_LIBS ${_lacuna_saved_shared})
  add_library(lacuna_llama_common INTERFACE)
  target_link_libraries(lacuna_llama_common INTERFACE llama-common)
  target_include_directories(lacuna_llama_common SYSTEM INTERFACE
    "${LACUNA_LLAMA_SOURCE_DIR}/common" "${LACUNA_LLAMA_SOURCE_DIR}/vendor")
  if(NOT LACUNA_LLAMA_DATA_DIR)
    set(LACUNA_LLAMA_DATA_DIR "${LACUNA_LLAMA_SOURCE_DIR}" CACHE PATH "" FORCE)
  endif()
elseif(LACUNA_LLAMA_SYSTEM OR _lacuna_system_dir)
  find_package(llama REQUIRED)
  message(STATUS "lacuna: using installed llama.cpp ${LLAMA_VERSION} from ${llama_DIR}")
else()
  if(NOT EXISTS "${LACUNA_LLAMA_CACHE}/ok" OR NOT EXISTS "${LACUNA_LLAMA_CACHE}/install")
    message(STATUS "lacuna: fetching and building the pinned llama.cpp into ${LACUNA_LLAMA_CACHE} (once)")
  endif()
  execute_process(
    COMMAND bash "${PROJECT_SOURCE_DIR}/scripts/fetch-llama.sh" "${LACUNA_LLAMA_CACHE}"
    RESULT_VARIABLE _lacuna_fetch_rc)
  if(NOT _lacuna_fetch_rc EQUAL 0)
    message(FATAL_ERROR "lacuna: could not fetch/build llama.cpp (see messages above). "
                        "Offline? Pass -DLACUNA_LLAMA_SOURCE_DIR=<llama.cpp source> or -DLACUNA_LLAMA_SYSTEM=ON.")
  endif()
  find_package(llama REQUIRED PATHS "${LACUNA_LLAMA_CACHE}/install" NO_DEFAULT_PATH)
  # llama-common from the additive step (static libraries in the cache's build tree).
  set(_lacuna_cb "${LACUNA_LLAMA_CACHE}/build")
  set(_lacuna_cs "${LACUNA_LLAMA_CACHE}/src")
  foreach(_lib IN ITEMS "common/libllama-common.a" "common/libllama-common-base.a"
                        "vendor/cpp-httplib/libcpp-httplib.a")
    if(NOT EXISTS "${_lacuna_cb}/${_lib}")
      message(FATAL_ERROR "lacuna: ${_lacuna_cb}/${_lib} is missing; remove ${LACUNA_LLAMA_CACHE}/ok-common and configure again")
    endif()
  endforeach()
  find_package(Threads REQUIRED)
  add_library(lacuna_llama_common_base STATIC IMPORTED)
  set_target_properties(lacuna_llama_common_base PROPERTIES
    IMPORTED_LOCATION "${_lacuna_cb}/common/libllama-common-base.a")
  add_library(lacuna_llama_httplib STATIC IMPORTED)
  set_target_properties(lacuna_llama_httplib PROPERTIES
    IMPORTED_LOCATION "${_lacuna_cb}/vendor/cpp-httplib/libcpp-httplib.a")
  add_library(lacuna_llama_common STATIC IMPORTED)
  set_target_properties(lacuna_llama_common PROPERTIES
    IMPORTED_LOCATION "${_lacuna_cb}/common/libllama-common.a"
    INTERFACE_INCLUDE_DIRECTORIES "${_lacuna_cs}/common;${_lacuna_cs}/vendor"
    INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${_lacuna_cs}/common;${_lacuna_cs}/vendor"
    INTERFACE_LINK_LIBRARIES "lacuna_llama_common_base;lacuna_llama_httplib;llama;Threads::Threads")
  if(NOT LACUNA_LLAMA_DATA_DIR)
    set(LACUNA_LLAMA_DATA_DIR "${LACUNA_LLAMA_CACHE}/src" CACHE PATH "" FORCE)
  endif()
endif()

if(NOT TARGET llama)
  message(FATAL_ERROR "lacuna: no llama target after resolving llama.cpp")
endif()
if(TARGET lacuna_llama_common)
  set(LACUNA_HAVE_CHAT ON)
else()
  set(LACUNA_HAVE_CHAT OFF)
  message(STATUS "lacuna: llama.cpp's common library is not available; the chat module is left out")
endif()
