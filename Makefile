# The two Quick-start commands (see README.md):
#   make run    set up, build (release) and run `tessera simulate` on its embedded default
#   make test   set up, build (dev), build the test control plane, and run every test
# Others: make build, make test-unit (no control plane), make soak (the 5-minute fault-injection
# soak; make test runs a 150-s one: see docs/development.md), make bench, make asan, make tsan,
# make fuzz.

JOBS ?= $(shell nproc)
CTEST_ARGS ?=

.PHONY: setup build run dev test test-unit soak controlplane bench asan tsan fuzz clean

setup:
	./scripts/setup.sh

build: setup
	cmake --preset release >/dev/null
	cmake --build --preset release -j $(JOBS)

# Builds only the `tessera` binary (and what it links), then runs it.
run: setup
	cmake --preset release >/dev/null
	cmake --build --preset release -j $(JOBS) --target tessera
	./build/release/tessera simulate

dev: setup
	cmake --preset dev >/dev/null
	cmake --build --preset dev -j $(JOBS)

controlplane: setup
	./test/controlplane/build.sh
	./test/helm/build.sh
	./test/kueue/build.sh

test: dev controlplane
	ctest --preset dev -j $(JOBS) $(CTEST_ARGS)

test-unit: dev
	ctest --preset unit -j $(JOBS) $(CTEST_ARGS)

soak: dev controlplane
	ctest --preset soak $(CTEST_ARGS)

bench: build
	./bench/run_all.sh

asan: setup
	cmake --preset asan-ubsan >/dev/null
	cmake --build --preset asan-ubsan -j $(JOBS)
	ctest --preset asan-ubsan -j $(JOBS)

# ThreadSanitizer over the tests labelled `tsan` (the multi-threaded parts).
tsan: setup
	cmake --preset tsan >/dev/null
	cmake --build --preset tsan -j $(JOBS) --target tsan_tests
	ctest --preset tsan -j $(JOBS)

# Builds the libFuzzer targets and fuzzes each for FUZZ_SECONDS (fuzz/run.sh).
FUZZ_SECONDS ?= 30
fuzz: setup
	cmake --preset fuzz >/dev/null
	cmake --build --preset fuzz -j $(JOBS)
	./fuzz/run.sh $(FUZZ_SECONDS)

clean:
	rm -rf build
