# Makefile — the two commands a newcomer needs (`make demo`, `make test`) and a few more.
# Everything installs what it needs first (scripts/install-deps.sh, the pinned llama.cpp).

BUILD      ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
FUZZ_BUILD ?= build-fuzz
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
FUZZ_SECONDS ?= 20
CMAKE_ARGS ?=
DEMO_MODEL := $(BUILD)/models/demo-tiny-llama3.gguf
DEMO_PROMPT ?= Write a JSON object describing a city:
# llama.cpp's OpenMP threads spin while waiting by default; on a busy machine (tests side
# by side, CI) spinning threads starve each other. Passive waiting costs little when idle.
export OMP_WAIT_POLICY ?= passive

.PHONY: all deps build demo test test-unit test-asan test-tsan test-fuzz fuzz format clean llama-server

all: build

deps:
	@bash scripts/install-deps.sh

$(BUILD)/build.ninja: | deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)

build: $(BUILD)/build.ninja
	cmake --build $(BUILD) --parallel $(JOBS)

# The main job: build, generate the demo model (random weights around llama-3's real
# tokenizer), and run a generation on it.
demo: build
	$(BUILD)/lacuna make-model --preset tiny-llama3 --out $(DEMO_MODEL) --skip-existing
	$(BUILD)/lacuna run -m $(DEMO_MODEL) -p "$(DEMO_PROMPT)" -n 48 --threads 2
	$(BUILD)/lacuna run -m $(DEMO_MODEL) -p "Call the weather tool as JSON:" --schema examples/tool_call_schema.json --schema-whitespace compact -n 128 --threads 2 --json-stats
	$(BUILD)/lacuna chat -m $(DEMO_MODEL) --messages examples/chat_messages.json --tools examples/chat_tools.json --tool-choice required --json --threads 2

# All tests: the Release suite, then the unit tests again under ASan+UBSan, the threaded
# tests under TSan, and a short run of every fuzz target, each in its own build directory.
test: test-unit test-asan test-tsan test-fuzz

test-unit: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

test-asan: | deps
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLACUNA_SANITIZE=address,undefined $(CMAKE_ARGS)
	cmake --build $(ASAN_BUILD) --parallel $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS) -LE slow

test-tsan: | deps
	cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLACUNA_SANITIZE=thread $(CMAKE_ARGS)
	cmake --build $(TSAN_BUILD) --parallel $(JOBS) --target lacuna_cli $$(cd tests && ls test_*threads*.cpp 2>/dev/null | sed 's/\.cpp$$//')
	TSAN_OPTIONS=halt_on_error=1 ctest --test-dir $(TSAN_BUILD) --output-on-failure -R 'threads|make_test_models'

test-fuzz:
	$(MAKE) fuzz FUZZ_SECONDS=10

fuzz: | deps
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLACUNA_FUZZ=ON -DLACUNA_BUILD_TESTS=OFF $(CMAKE_ARGS)
	cmake --build $(FUZZ_BUILD) --parallel $(JOBS)
	@for f in $(FUZZ_BUILD)/fuzz/fuzz_*; do [ -x "$$f" ] || continue; n=$$(basename $$f); \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$n; seeds=""; [ -d fuzz/corpus/$$n ] && seeds=fuzz/corpus/$$n; \
	  echo "== $$n ($(FUZZ_SECONDS) s)"; \
	  "$$f" -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 -print_final_stats=1 $(FUZZ_BUILD)/corpus/$$n $$seeds || exit 1; done

format:
	clang-format -i $$(git ls-files '*.h' '*.cpp' '*.c')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD)

# Opt-in, not part of `make test`: llama.cpp's own llama-server built from the pinned bundle
# (fetched by the lacuna build) with the same ggml flags, to compare against `lacuna serve`
# with `lacuna bench serve` (docs/server.md). The binary: $(LLAMA_SERVER_BUILD)/bin/llama-server.
LLAMA_SRC ?= $(HOME)/.cache/lacuna/llama.cpp-0.5.0/src
LLAMA_SERVER_BUILD ?= build-llama-server
llama-server: $(BUILD)/build.ninja
	cmake -S $(LLAMA_SRC) -B $(LLAMA_SERVER_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
	  -DBUILD_SHARED_LIBS=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DGGML_NATIVE=ON \
	  -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
	  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF
	cmake --build $(LLAMA_SERVER_BUILD) --parallel $(JOBS) --target llama-server
