# kvtier: the single entry point for C users and CI.
#
#   make            cargo release build, then the C/C++ programs into build/
#   make test       every test: cargo tests, then ctest
#   make demo       the main job, end to end
#   make header     regenerate include/kvtier.h from the sources
#   make install PREFIX=/usr/local

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

.PHONY: all lib c test test-rust test-c demo header install clean cmake-available redis-available

all: lib c

lib:
	$(CARGO) build --release $(CARGO_FEATURES)
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

redis-available:
	@command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 && command -v openssl >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "redis-server or openssl is missing: installing them with apt-get"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server openssl >/dev/null) || exit 1; \
	  else \
	    echo "redis-server or openssl is missing: install them (Debian: sudo apt-get install -y redis-server openssl); the redis tier tests skip without them"; \
	  fi; }

test-rust: redis-available
	$(CARGO) test $(CARGO_FEATURES)

test-c: c redis-available
	ctest --test-dir $(BUILD) --output-on-failure

demo: all
	$(BUILD)/bin/hello

header:
	KVTIER_REGENERATE_HEADER=1 $(CARGO) test $(CARGO_FEATURES) --test header

install: all
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib
	install -m 644 include/kvtier.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(LIBDIR)/libkvtier.so $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/libkvtier.so
	install -m 644 $(LIBDIR)/libkvtier.a $(DESTDIR)$(PREFIX)/lib/

clean:
	$(CARGO) clean
	rm -rf $(BUILD)
