# kvtier: the single entry point for C users and CI.
#
#   make            cargo release build, then the C/C++ programs into build/
#   make test       every test: cargo tests, then ctest
#   make demo       the main job, end to end
#   make header     regenerate include/kvtier.h from the sources
#   make bench      every benchmark: JSON results in build/bench/, one summary table
#   make install PREFIX=/usr/local

CARGO  ?= cargo
BUILD  ?= build
PREFIX ?= /usr/local
LIBDIR := $(CURDIR)/target/release
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
MINOR   := $(word 2,$(subst ., ,$(VERSION)))
SONAME  := libkvtier.so.0.$(MINOR)

.PHONY: all lib c test test-rust test-c demo header install clean cmake-available bench

all: lib c

lib:
	$(CARGO) build --release
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

test: all test-rust test-c

test-rust:
	$(CARGO) test

test-c: c
	ctest --test-dir $(BUILD) --output-on-failure

demo: all
	$(BUILD)/bin/hello

header:
	KVTIER_REGENERATE_HEADER=1 $(CARGO) test --test header

install: all
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib
	install -m 644 include/kvtier.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(LIBDIR)/libkvtier.so $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/libkvtier.so
	install -m 644 $(LIBDIR)/libkvtier.a $(DESTDIR)$(PREFIX)/lib/

clean:
	$(CARGO) clean
	rm -rf $(BUILD)

# Benchmarks: every cargo bench target in benches/ (each run as
# `cargo bench --bench NAME -- --out build/bench/NAME.json`), then the
# control-plane replays and the scaling run (tools/bench-replay.sh), then one
# summary table of every build/bench/*.json.
BENCH_DIR   := $(abspath $(BUILD))/bench
BENCH_NAMES := $(sort $(basename $(notdir $(wildcard benches/*.rs))))

bench: all
	@mkdir -p $(BENCH_DIR) && rm -f $(BENCH_DIR)/*.json
	@for b in $(BENCH_NAMES); do \
	  echo "== cargo bench --bench $$b -- --out $(BENCH_DIR)/$$b.json"; \
	  $(CARGO) bench -q --bench $$b -- --out $(BENCH_DIR)/$$b.json || exit 1; \
	done
	@sh tools/bench-replay.sh $(abspath $(BUILD))/bin/kvtier-replay $(LIBDIR)/kvtier-workload $(BENCH_DIR)
	@echo
	@python3 tools/bench-summary.py $(BENCH_DIR)
