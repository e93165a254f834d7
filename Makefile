# kvtier: the single entry point for C users and CI.
#
#   make            cargo release build, then the C/C++ programs into build/
#   make test       every test: fmt and clippy, cargo tests, ctest, the Python package's tests and its wheel,
#                   the Grafana dashboard and the Prometheus rules
#   make test-vllm  vLLM 0.33's own manager tests against kvtier (and vLLM's managers)
#   make test-vllm-connector  vLLM 0.33's offloading-connector tests with kvtier's spec
#                   (and vLLM's), and the spec's worker side, with torch (not in `make test`)
#   make demo       the main job, end to end
#   make demo-server  the node server kvtierd and two engine processes sharing its blocks
#   make header     regenerate include/kvtier.h from the sources
#   make abi        record the header's ABI in abi/kvtier.abi (after a version change)
#   make bench      every benchmark: JSON results in build/bench/, one summary table
#   make install PREFIX=/usr/local
#   make faults     the fault runs, long: crashes, damaged files, full disk, redis faults
#   make server-faults  the node server's fault runs, long: engines and the server killed, bad peers
#   make mutants FILES="crates/kvtier/src/a.rs ..." | BASE=origin/main   mutation testing

CARGO  ?= cargo
BUILD  ?= build
PREFIX ?= /usr/local
LIBDIR := $(CURDIR)/target/release
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
MINOR   := $(word 2,$(subst ., ,$(VERSION)))
SONAME  := libkvtier.so.0.$(MINOR)
# Cargo features of every build and test: the built-in redis tier and its
# TLS support (their tests start redis-server and make certificates with
# openssl, both installed by `redis-available` when missing).
FEATURES ?= redis-tier,redis-tls
CARGO_FEATURES := $(if $(FEATURES),--features $(FEATURES))

.PHONY: all lib c test test-lint test-imports test-rust test-c test-python test-wheel test-ops wheel-build-deps test-vllm test-vllm-connector python-test-deps demo demo-server header abi install install-files clean cmake-available test-deps redis-available libcxx-available bench bench-vs-vllm prometheus-available \
	nightly-available test-sanitizers test-asan test-python-asan test-tsan test-miri soak faults server-faults mutants mutants-available

all: lib c

# The C crate (crates/kvtier-capi): libkvtier.so, libkvtier.a,
# kvtier-inspect and kvtierd in target/release/.
lib:
	$(CARGO) build --release -p kvtier-capi $(CARGO_FEATURES)
	$(CARGO) build --release -p kvtier-workload
	ln -sf libkvtier.so $(LIBDIR)/$(SONAME)

cmake-available:
	@command -v cmake >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "cmake is missing: installing it with apt-get"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake >/dev/null) || exit 1; \
	  else \
	    echo "cmake is missing: install it (Debian: sudo apt-get install -y cmake)"; exit 1; \
	  fi; }

c: lib cmake-available
	cmake -S examples -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DKVTIER_ROOT=$(CURDIR) >/dev/null
	cmake --build $(BUILD) -j 2

# A test whose tool is missing (redis-server, openssl, Prometheus, promtool,
# clang with libc++, a tmpfs it may mount, root) fails under `make test`
# instead of skipping (KVTIER_REQUIRE_ALL=1, through the test kit's
# require module and python/tests/conftest.py); `make test
# KVTIER_REQUIRE_ALL=0` lets them skip.  The prerequisites below install
# the tools when run as root.
test: export KVTIER_REQUIRE_ALL ?= 1
test: all test-lint test-imports test-rust test-c test-python test-wheel test-ops

# Formatting and clippy's lints, every target of every package, warnings
# as errors; the core (library and tests) also without the redis tier (its features
# are optional, and code only the redis tier uses must not warn without it).
test-lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets $(CARGO_FEATURES) -- -D warnings
	$(CARGO) clippy -p kvtier --all-targets -- -D warnings

# No import circle between the modules of either crate's src/, and no
# import from a lower layer to a higher one (tools/check-imports.py follows
# every `use` line and path; it exits 1 on either), and the checker's own
# tests (with those of the benchmark summary, tools/bench-summary.py).
test-imports:
	$(PYTHON) tools/check-imports.py
	$(PYTHON) -m unittest -q tools/tests/test_check_imports.py tools/tests/test_bench_summary.py

# The Python package (python/, `pip install ./python`): its pytest suite,
# over the library `make lib` built (the package finds target/release
# from a source checkout), and one fresh-virtualenv install.
PYTHON ?= python3
python-test-deps:
	@$(PYTHON) -c 'import cffi, numpy, pytest, prometheus_client, typing_extensions' 2>/dev/null || $(PYTHON) -m pip install --quiet cffi numpy pytest prometheus-client typing-extensions

test-python: lib python-test-deps
	PYTHONPATH=$(CURDIR)/python $(PYTHON) -m pytest -q -p no:cacheprovider python/tests

# The wheel as a user without Rust gets it: `pip wheel ./python` over the
# library `make lib` built (cargo does not run again; the bundled copy is
# stripped), installed into a fresh virtual environment, then every
# example of docs/python.md run against the installed package from a
# scratch directory outside the source tree, with no cargo or rustc on
# PATH (about 10 s).  Offline: the
# wheel is built without an isolated build environment (setuptools and
# wheel from the host, installed here when missing) and the environment
# takes cffi from the host's site-packages.  Its files: $(BUILD)/wheel.
WHEEL_DIR := $(abspath $(BUILD))/wheel
wheel-build-deps:
	@$(PYTHON) -c 'import setuptools, wheel, sys; sys.exit(int(setuptools.__version__.split(".")[0]) < 64)' 2>/dev/null || \
	  $(PYTHON) -m pip install --quiet 'setuptools>=64' wheel

test-wheel: lib python-test-deps wheel-build-deps
	@rm -rf $(WHEEL_DIR) && mkdir -p $(WHEEL_DIR)/dist
	KVTIER_PREBUILT_LIBRARY=$(LIBDIR)/libkvtier.so $(PYTHON) -m pip wheel --quiet --no-deps --no-build-isolation \
	  --disable-pip-version-check -w $(WHEEL_DIR)/dist ./python
	$(PYTHON) -m venv --system-site-packages $(WHEEL_DIR)/venv
	run=$$(mktemp -d) && cd $$run && env -u PYTHONPATH -u KVTIER_LIBRARY -u KVTIER_HEADER \
	  PATH="$$(printf '%s' "$$PATH" | tr ':' '\n' | while read -r d; do \
	    [ -x "$$d/cargo" ] || [ -x "$$d/rustc" ] || printf '%s:' "$$d"; done)" sh -c '\
	  if command -v cargo >/dev/null || command -v rustc >/dev/null; then echo "test-wheel: a Rust toolchain is still on PATH"; exit 1; fi; \
	  $(WHEEL_DIR)/venv/bin/python -m pip install --quiet --disable-pip-version-check --no-index --no-deps \
	    --ignore-installed $(WHEEL_DIR)/dist/kvtier-*.whl && \
	  $(WHEEL_DIR)/venv/bin/python -c "import cffi" && \
	  $(WHEEL_DIR)/venv/bin/python $(CURDIR)/python/tests/doc_examples.py $(CURDIR)/docs/python.md --installed'; \
	  status=$$?; cd / && rm -rf $$run; exit $$status
	@ls -l $(WHEEL_DIR)/dist/*.whl

# vLLM 0.33.0's manager tests (cpu/test_manager.py and
# tiering/test_tiering_offloading.py) against kvtier's managers and, for
# comparison, vLLM's own (VLLM_MANAGERS=kvtier|vllm|both); the wheel and the
# source archive are downloaded into $(BUILD)/vllm once.
VLLM_MANAGERS ?= both
test-vllm: lib python-test-deps
	$(PYTHON) tools/vllm_tests/run.py --managers $(VLLM_MANAGERS) --build-dir $(abspath $(BUILD))/vllm

# vLLM 0.33.0's offloading-connector unit tests
# (tests/v1/kv_connector/unit/offloading_connector/, 655 items) with vLLM's
# specs and with kvtier's spec loaded by name in their place, then
# python/tests/test_vllm_worker.py (the spec's worker side through vLLM's CPU
# worker), on the CPU with the real torch and vLLM: a virtual environment
# made once in $(VLLM_VENV) (torch 2.14.0 and vLLM 0.33.0 without their
# dependencies, then tools/vllm_tests/connector-requirements.txt: about
# 6.5 GiB and 3 to 5 minutes).  See docs/vllm.md.
VLLM_VENV ?= $(BUILD)/vllm-torch-venv
VLLM_SIDES ?= both
test-vllm-connector: lib
	$(PYTHON) tools/vllm_tests/run_connector.py --side $(VLLM_SIDES) --build-dir $(abspath $(BUILD))/vllm --venv $(abspath $(VLLM_VENV))

redis-available:
	@command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 && command -v openssl >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "redis-server or openssl is missing: installing them with apt-get"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server openssl >/dev/null) || exit 1; \
	  else \
	    echo "redis-server or openssl is missing: install them (Debian: sudo apt-get install -y redis-server openssl); the redis tier tests skip without them (fail under KVTIER_REQUIRE_ALL=1)"; \
	  fi; }

# promtool (checks the metrics text) and prometheus (scrapes the metrics
# endpoint in a test) come in Debian's prometheus package; their tests
# skip with a message without them (fail under KVTIER_REQUIRE_ALL=1).
prometheus-available:
	@command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "promtool or prometheus is missing: installing Debian's prometheus package with apt-get"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null) || \
	      echo "installing prometheus failed; the promtool and Prometheus tests skip (fail under KVTIER_REQUIRE_ALL=1)"; \
	  else \
	    echo "promtool or prometheus is missing: install them (Debian: sudo apt-get install -y prometheus); their tests skip without them (fail under KVTIER_REQUIRE_ALL=1)"; \
	  fi; }

# The Grafana dashboard and the Prometheus rules (packaging/grafana,
# packaging/prometheus; docs/metrics.md): promtool checks the rules and
# runs their unit tests (every alert firing and silent, every recording
# rule's values), then tools/tests/test_ops_rules.py (mutants of the rules
# must fail those tests) and tools/tests/test_ops_dashboard.py (every
# family name used is documented; every panel's query runs on a real
# Prometheus scraping a kvtier /metrics endpoint).  Without promtool or
# prometheus they skip with a message (fail under KVTIER_REQUIRE_ALL=1).
test-ops: lib prometheus-available python-test-deps
	@if command -v promtool >/dev/null 2>&1; then \
	  promtool check rules packaging/prometheus/kvtier-rules.yml && \
	  promtool test rules packaging/prometheus/tests/*.yml || exit 1; \
	elif [ "$$KVTIER_REQUIRE_ALL" = 1 ]; then \
	  echo "test-ops: promtool is not installed, and KVTIER_REQUIRE_ALL=1 requires every test to run"; exit 1; \
	else \
	  echo "SKIPPED: promtool is not installed (Debian: sudo apt-get install -y prometheus): the rules are not checked"; \
	fi
	$(PYTHON) -m unittest -v tools/tests/test_ops_rules.py tools/tests/test_ops_dashboard.py

# Every package of the workspace (docs/internals.md): the core, the C crate,
# the test kit and the workload generator.  The debug libkvtier.so is built
# first, for the C crate's tests/symbols.rs.  Both crates' docs are
# checked: the C crate's in target/doc/kvtier, the core's in
# target/doc/kvtier_core.
test-rust: redis-available prometheus-available test-deps
	$(CARGO) build $(CARGO_FEATURES) --lib
	$(CARGO) test --workspace $(CARGO_FEATURES)
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps -p kvtier-capi $(CARGO_FEATURES)
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps -p kvtier $(CARGO_FEATURES)

# Tools the tests use beyond the toolchain: the reference Prometheus parser.
test-deps:
	@python3 -c 'import prometheus_client' 2>/dev/null || python3 -m pip install --quiet prometheus-client

# clang with libc++, for the C++ header's libc++ build in the install test.
libcxx-available:
	@command -v clang++ >/dev/null 2>&1 && test -n "$$(ls /usr/lib/llvm-*/lib/libc++.so 2>/dev/null)" || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "clang or libc++ is missing: installing them with apt-get"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang libc++-dev libc++abi-dev >/dev/null) || exit 1; \
	  else \
	    echo "clang or libc++ is missing: install them (Debian: sudo apt-get install -y clang libc++-dev libc++abi-dev); the libc++ build is skipped without them (fails under KVTIER_REQUIRE_ALL=1)"; \
	  fi; }

test-c: c redis-available libcxx-available
	ctest --test-dir $(BUILD) --output-on-failure

# The demo: the `medium` chat workload (written once into $(BUILD)/workloads/)
# replayed with real bytes through a 4096-slot primary tier of 16 KiB blocks
# in /dev/shm and the fs tier in a new directory under $${TMPDIR:-/tmp}.
DEMO_WORKLOAD := $(BUILD)/workloads/medium.txt
DEMO_FLAGS    ?= --slots 4096 --block-kib 16 --batch 16 --fs-threads 4 --require-promotions

demo: all
	@test -s $(DEMO_WORKLOAD) || { mkdir -p $(dir $(DEMO_WORKLOAD)) && \
	  $(LIBDIR)/kvtier-workload --preset medium --out $(DEMO_WORKLOAD).part && \
	  mv $(DEMO_WORKLOAD).part $(DEMO_WORKLOAD); }
	$(BUILD)/bin/kvtier-demo --workload $(DEMO_WORKLOAD) $(DEMO_FLAGS)

# The node server: kvtierd started on a socket in a fresh directory under
# /tmp, two engine processes connected to it (kvtier_manager_connect) that
# store blocks and load the ones the other stored, every byte checked, the
# server's client list (kvtier-inspect server), then SIGTERM
# (tools/kvtierd-check.c; ctest runs its other checks).
demo-server: all
	$(BUILD)/bin/kvtierd-check --kvtierd $(LIBDIR)/kvtierd --inspect $(LIBDIR)/kvtier-inspect demo

header:
	KVTIER_REGENERATE_HEADER=1 $(CARGO) test -p kvtier-capi $(CARGO_FEATURES) --test header

# The ABI listing crates/kvtier-capi/tests/abi.rs compares the header with: a change of a
# signature, layout or constant fails it until KVTIER_VERSION_MINOR (the
# minor version in Cargo.toml) changes; this then records the new ABI.
abi:
	KVTIER_REGENERATE_ABI=1 $(CARGO) test -p kvtier-capi $(CARGO_FEATURES) --test abi

install: all install-files

# Copies what `make` built into $(PREFIX): headers, the kvtier-inspect
# tool and the node server kvtierd (bin/), libraries without their
# debug information (the build keeps it for profiling), pkg-config and CMake
# package files.  Builds nothing.  NATIVE_LIBS are what the static library
# needs besides libc (`rustc --print native-static-libs`), with gcc's
# static unwinder (-lgcc_eh) in place of libgcc_s, so that `-static` links.
NATIVE_LIBS := -lgcc_eh -lutil -lrt -lpthread -lm -ldl
STRIP ?= strip
CMAKEDIR := $(DESTDIR)$(PREFIX)/lib/cmake/kvtier
install-files:
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(CMAKEDIR) $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(LIBDIR)/kvtier-inspect $(DESTDIR)$(PREFIX)/bin/
	$(STRIP) --strip-unneeded $(DESTDIR)$(PREFIX)/bin/kvtier-inspect
	install -m 755 $(LIBDIR)/kvtierd $(DESTDIR)$(PREFIX)/bin/
	$(STRIP) --strip-unneeded $(DESTDIR)$(PREFIX)/bin/kvtierd
	install -m 644 include/kvtier.h $(DESTDIR)$(PREFIX)/include/
	if [ -f include/kvtier.hpp ]; then install -m 644 include/kvtier.hpp $(DESTDIR)$(PREFIX)/include/; fi
	install -m 755 $(LIBDIR)/libkvtier.so $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	$(STRIP) --strip-unneeded $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/libkvtier.so
	install -m 644 $(LIBDIR)/libkvtier.a $(DESTDIR)$(PREFIX)/lib/
	$(STRIP) --strip-debug $(DESTDIR)$(PREFIX)/lib/libkvtier.a
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' -e 's|@NATIVE_LIBS@|$(NATIVE_LIBS)|' \
	  packaging/kvtier.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/kvtier.pc
	sed -e 's|@SONAME@|$(SONAME)|g' -e 's|@NATIVE_LIBS_CMAKE@|$(subst -l,,$(subst $(eval) ,;,$(NATIVE_LIBS)))|' \
	  packaging/kvtierConfig.cmake.in > $(CMAKEDIR)/kvtierConfig.cmake
	sed -e 's|@VERSION@|$(VERSION)|' -e 's|@MAJOR@|$(word 1,$(subst ., ,$(VERSION)))|' \
	  packaging/kvtierConfigVersion.cmake.in > $(CMAKEDIR)/kvtierConfigVersion.cmake

clean:
	$(CARGO) clean
	rm -rf $(BUILD)

# Benchmarks: every cargo bench target in crates/*/benches/ (each run as
# `cargo bench -p CRATE --bench NAME -- --out build/bench/NAME.json`), then the
# control-plane replays and the scaling run (tools/bench-replay.sh), then one
# summary table of every build/bench/*.json.  The fs tier restart benchmark
# (fs_restart) measures 10^4 and 10^5 blocks under target/;
# KVTIER_BENCH_RESTART_MAX=1000000 adds 10^6 (about 8 GB of disk per 4 KiB
# case, and minutes).
BENCH_DIR   := $(abspath $(BUILD))/bench
# CRATE/NAME of every benchmark.
BENCHES := $(sort $(patsubst crates/%.rs,%,$(subst /benches/,/,$(wildcard crates/*/benches/*.rs))))

bench: all
	@mkdir -p $(BENCH_DIR) && rm -f $(BENCH_DIR)/*.json
	@for cb in $(BENCHES); do \
	  c=$${cb%%/*}; b=$${cb#*/}; \
	  echo "== cargo bench -p $$c --bench $$b -- --out $(BENCH_DIR)/$$b.json"; \
	  $(CARGO) bench -q -p $$c $(CARGO_FEATURES) --bench $$b -- --out $(BENCH_DIR)/$$b.json || exit 1; \
	done
	@sh tools/bench-replay.sh $(abspath $(BUILD))/bin/kvtier-replay $(LIBDIR)/kvtier-workload $(BENCH_DIR)
	@VLLM_DIR=$(abspath $(BUILD))/vllm sh tools/bench-vs-vllm.sh $(abspath $(BUILD))/bin/kvtier-replay $(LIBDIR)/kvtier-workload $(BENCH_DIR) $(VS_VLLM_ROUNDS)
	@echo
	@python3 tools/bench-summary.py $(BENCH_DIR)

# kvtier beside vLLM 0.33's own managers on the same replays, in one run
# (VS_VLLM_ROUNDS interleaved rounds, default 5; the wheel is downloaded
# into $(BUILD)/vllm once).  Also part of `make bench`.
VS_VLLM_ROUNDS ?= 5
bench-vs-vllm: c
	@VLLM_DIR=$(abspath $(BUILD))/vllm sh tools/bench-vs-vllm.sh $(abspath $(BUILD))/bin/kvtier-replay $(LIBDIR)/kvtier-workload $(BENCH_DIR) $(VS_VLLM_ROUNDS)

# Reliability runs beyond `make test` (docs/reliability.md): sanitizers and
# Miri need a nightly toolchain with rust-src and miri, installed here by
# rustup when missing.
NIGHTLY ?= nightly

nightly-available:
	@rustup component list --installed --toolchain $(NIGHTLY) 2>/dev/null | grep -q '^rust-src' && \
	 rustup component list --installed --toolchain $(NIGHTLY) 2>/dev/null | grep -q '^miri' || { \
	  echo "installing the $(NIGHTLY) toolchain with rust-src and miri (rustup)"; \
	  rustup toolchain install $(NIGHTLY) --profile minimal --component rust-src,miri; }

test-sanitizers: test-asan test-python-asan test-tsan test-miri

# AddressSanitizer, then ThreadSanitizer: the library, the C and C++
# programs, the fuzzer and the threaded completion tests.
test-asan: nightly-available cmake-available
	FEATURES=$(FEATURES) tools/sanitize.sh address $(NIGHTLY)

# The Python package's tests (the abuse suite included) over the library
# built with AddressSanitizer, its runtime preloaded into python.
test-python-asan: nightly-available python-test-deps
	FEATURES=$(FEATURES) PYTHON=$(PYTHON) tools/sanitize-python.sh $(NIGHTLY)

test-tsan: nightly-available cmake-available
	FEATURES=$(FEATURES) tools/sanitize.sh thread $(NIGHTLY)

# Miri: undefined behaviour in the primary tier (index, slots, lists,
# policies) and the key types, through their unit tests: about three
# minutes on 2 cores (tests that loop thousands of times run smaller sizes
# under Miri).  A failing test fails it after the test summary; undefined
# behaviour stops Miri at once, its error under the name of the test.
MIRI_TESTS ?= primary:: key::
test-miri: nightly-available
	MIRIFLAGS="-Zmiri-disable-isolation" $(CARGO) +$(NIGHTLY) miri test -p kvtier --lib -- $(MIRI_TESTS) || \
	  { echo "test-miri: FAILED (a failing test, or undefined behaviour: see above)"; exit 1; }

# The fuzzer for MINUTES minutes (default 5), with and without the fs tier,
# failing if resident memory grows by more than 64 MiB after warm-up.
MINUTES ?= 5
soak: c
	@secs=$$(( $(MINUTES) * 30 )); \
	$(BUILD)/bin/kvtier-fuzz --seed $$(date +%s) --seconds $$secs --rss-limit-mib 64 && \
	$(BUILD)/bin/kvtier-fuzz --seed $$(( $$(date +%s) + 1 )) --seconds $$secs --fs --rss-limit-mib 64

# Fault runs (crates/kvtier/tests/fs_faults.rs, redis_faults.rs): `kill -9`
# of an fs tier writer then a restart verifying every acknowledged block, a
# matrix of damaged block files, a hostile directory
# (crates/kvtier-capi/tests/fs_hostile.rs, beside kvtier-inspect: FIFOs,
# symlinks, churn during scans), a full file system (a small tmpfs; skipped where
# mounting is not permitted), and a redis server killed, corrupted and
# evicted under the tier.  `make test` runs them short (3 rounds each);
# this runs FAULT_ROUNDS rounds (KVTIER_FAULT_SEED=N repeats a run) and
# prints each run's figures, kept in $(BUILD)/faults/figures.txt.
FAULT_ROUNDS ?= 40
FAULT_DIR    := $(abspath $(BUILD))/faults

faults: redis-available
	@mkdir -p $(FAULT_DIR)
	@echo "== KVTIER_FAULT_ROUNDS=$(FAULT_ROUNDS) cargo test --workspace --test fs_faults --test fs_hostile --test redis_faults (log: $(FAULT_DIR)/log.txt)"
	@KVTIER_FAULT_ROUNDS=$(FAULT_ROUNDS) $(CARGO) test --workspace $(CARGO_FEATURES) --test fs_faults --test fs_hostile --test redis_faults \
	  -- --nocapture --test-threads=1 >$(FAULT_DIR)/log.txt 2>&1; rc=$$?; \
	  grep -ho -e 'fault-run .*' -e 'SKIPPED: .*' $(FAULT_DIR)/log.txt | tee $(FAULT_DIR)/figures.txt; \
	  if [ $$rc != 0 ]; then tail -n 60 $(FAULT_DIR)/log.txt; exit $$rc; fi

# The node server's fault runs (crates/kvtier/tests/server_faults.rs,
# server_fuzz.rs): engines `kill -9`ed at random moments while they hold
# pins, planned stores and half-sent messages, the server killed mid-load
# and restarted over its fs tier, random frames and damaged real calls.
# `make test` runs them short; this runs FAULT_ROUNDS rounds
# (KVTIER_FAULT_SEED=N repeats a run), figures in
# $(BUILD)/faults/server-figures.txt.
server-faults:
	@mkdir -p $(FAULT_DIR)
	@echo "== KVTIER_FAULT_ROUNDS=$(FAULT_ROUNDS) cargo test -p kvtier --test server_faults --test server_fuzz (log: $(FAULT_DIR)/server-log.txt)"
	@KVTIER_FAULT_ROUNDS=$(FAULT_ROUNDS) $(CARGO) test -p kvtier $(CARGO_FEATURES) --test server_faults --test server_fuzz \
	  -- --nocapture >$(FAULT_DIR)/server-log.txt 2>&1; rc=$$?; \
	  grep -ho -e 'fault-run .*' -e 'SKIPPED: .*' $(FAULT_DIR)/server-log.txt | tee $(FAULT_DIR)/server-figures.txt; \
	  if [ $$rc != 0 ]; then tail -n 60 $(FAULT_DIR)/server-log.txt; exit $$rc; fi

# Mutation testing with cargo-mutants (installed from crates.io when
# missing): every mutant of the named files, or of the lines this branch
# changed since it left a base revision (committed or not), must make some
# test fail.  Mutants come from every package of the workspace (narrowed by
# FILES or BASE), and each is tested by the whole workspace's tests (the C
# crate's tests check the core too).
#   make mutants FILES="crates/kvtier/src/primary/admission.rs crates/kvtier/src/tiers/fs/format.rs"
#   make mutants BASE=origin/main
# Results in $(BUILD)/mutants/mutants.out (caught.txt, missed.txt, ...).
# MUTANTS_TESTS narrows the tests run against each mutant to the named
# targets ("lib" for the unit tests, else a tests/*.rs name), e.g.
# MUTANTS_TESTS="lib fs_tier fs_faults"; empty runs every test.
# MUTANTS_JOBS builds and tests that many mutants at once;
# MUTANTS_TIMEOUT bounds one mutant's test run, in seconds (a mutant that
# loops is then counted as caught by the timeout); MUTANTS_ARGS are further
# cargo-mutants options (--iterate retries only the mutants missed last time).
MUTANTS_DIR     := $(abspath $(BUILD))/mutants
MUTANTS_JOBS    ?= 1
MUTANTS_TIMEOUT ?= 600
MUTANTS_TESTS   ?=
MUTANTS_ARGS    ?=
MUTANTS_TEST_ARGS := $(foreach t,$(MUTANTS_TESTS),--cargo-arg=$(if $(filter lib,$(t)),--lib,--test=$(t)))

mutants-available:
	@$(CARGO) mutants --version >/dev/null 2>&1 || { \
	  echo "cargo-mutants is missing: installing it with cargo install --locked cargo-mutants"; \
	  $(CARGO) install --locked cargo-mutants || exit 1; }

mutants: mutants-available redis-available test-deps
	@mkdir -p $(MUTANTS_DIR)
	@if [ -n "$(BASE)" ]; then \
	  base=$$(git merge-base $(BASE) HEAD) || exit 1; \
	  git diff $$base >$(MUTANTS_DIR)/base.diff || exit 1; \
	  set -- --in-diff $(MUTANTS_DIR)/base.diff; \
	elif [ -n "$(FILES)" ]; then \
	  set -- $(foreach f,$(FILES),--file $(f)); \
	else \
	  echo 'make mutants: give FILES="crates/kvtier/src/x.rs ..." or BASE=<git revision>'; exit 2; \
	fi; \
	echo "== cargo mutants --workspace --test-workspace=true $$* $(CARGO_FEATURES) --timeout $(MUTANTS_TIMEOUT) --jobs $(MUTANTS_JOBS) --output $(MUTANTS_DIR) $(MUTANTS_TEST_ARGS) $(MUTANTS_ARGS)"; \
	$(CARGO) mutants --workspace --test-workspace=true "$$@" $(CARGO_FEATURES) --timeout $(MUTANTS_TIMEOUT) --jobs $(MUTANTS_JOBS) \
	  --output $(MUTANTS_DIR) $(MUTANTS_TEST_ARGS) $(MUTANTS_ARGS)
