#!/usr/bin/env bash
# The Python package's tests (python/tests, the abuse suite included) over
# libkvtier built with AddressSanitizer (nightly Rust, -Zbuild-std, as
# tools/sanitize.sh builds it), the ASan runtime preloaded into python: a
# heap overflow or use after free anywhere in the library fails the run.
# Child interpreters the tests start inherit the same environment.
#
#   tools/sanitize-python.sh [NIGHTLY] [pytest arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
nightly=${1:-nightly}
shift || true
triple=$(rustc -vV | sed -n 's/^host: //p')
features=${FEATURES:-redis-tier,redis-tls}
libdir="$PWD/target/address/$triple/release"
python=${PYTHON:-python3}

echo "== libkvtier with -Zsanitizer=address ($nightly, -Zbuild-std)"
RUSTFLAGS="-Zsanitizer=address" cargo "+$nightly" build -q -Zbuild-std --target "$triple" --release \
  -p kvtier-capi --features "$features" --target-dir "target/address" --lib

# The node server the tests start is an ordinary build: an instrumented
# kvtierd (tools/sanitize.sh builds one beside the library) carries its own
# ASan runtime, which the preloaded one below would clash with.
cargo build -q --release -p kvtier-capi --features "$features" --bin kvtierd
export KVTIER_SERVER_BINARY="$PWD/target/release/kvtierd"

runtime=$(${CC:-gcc} -print-file-name=libasan.so)
[ -f "$runtime" ] || { echo "the ASan runtime (libasan.so) was not found: install gcc" >&2; exit 1; }

# Leaks are not checked: the interpreter keeps much of what it allocates
# until exit.  Any other report ends the process with exit code 99.
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:exitcode=99"
# test_install builds the package with cargo in a new virtualenv: nothing
# of it runs the library, and the preloaded runtime would be in cargo.
echo "== pytest python/tests over the ASan library"
KVTIER_LIBRARY="$libdir/libkvtier.so" LD_PRELOAD="$runtime" PYTHONPATH="$PWD/python" \
  "$python" -m pytest -q -p no:cacheprovider python/tests --ignore=python/tests/test_install.py "$@"
