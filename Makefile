# fedcase: `make demo` runs the main job, `make test` runs every test.
# `make cluster-demo` runs it on three replicas on PostgreSQL behind HAProxy (docs/scaling.md).
# All install missing Debian packages first, then configure (Ninja + ccache) and build in build/.
# `make fuzz` builds the libFuzzer harnesses with clang in build-fuzz/ and runs each for
# FUZZ_SECONDS (fuzz/README.md).

BUILD_DIR ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc)
FUZZ_SECONDS ?= 60
export CCACHE_DIR ?= $(CURDIR)/.cache/ccache

.PHONY: all deps configure build test demo cluster-demo bench fuzz clean

all: build

deps:
	@bash scripts/install-deps.sh

$(BUILD_DIR)/build.ninja: | deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)

configure: $(BUILD_DIR)/build.ninja

build: deps configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600

demo: build
	bash scripts/demo.sh $(BUILD_DIR)

cluster-demo: build
	bash scripts/cluster.sh $(BUILD_DIR)

bench: build
	bash scripts/bench.sh $(BUILD_DIR)

fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) JOBS=$(JOBS) bash scripts/fuzz.sh

clean:
	rm -rf $(BUILD_DIR)
