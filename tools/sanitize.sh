#!/usr/bin/env bash
# Builds libkvtier with a sanitizer (nightly Rust: -Zsanitizer with the
# standard library rebuilt by -Zbuild-std, so std is instrumented too),
# builds every C and C++ program against it with the same -fsanitize, and
# runs them under ctest: the examples, the C-API fuzzer (and two more seeds)
# and the threaded completion tests.
#
#   tools/sanitize.sh address|thread [NIGHTLY]
#
# Output: target/<sanitizer>/ (library), build/<sanitizer>/ (programs).
set -euo pipefail
cd "$(dirname "$0")/.."
san=${1:?usage: tools/sanitize.sh address|thread [toolchain]}
nightly=${2:-nightly}
case "$san" in
  address | thread) ;;
  *) echo "unknown sanitizer $san: address or thread" >&2; exit 2 ;;
esac
triple=$(rustc -vV | sed -n 's/^host: //p')
features=${FEATURES:-redis-tier,redis-tls}
libdir="$PWD/target/$san/$triple/release"
build="build/$san"

echo "== libkvtier and kvtierd with -Zsanitizer=$san ($nightly, -Zbuild-std)"
RUSTFLAGS="-Zsanitizer=$san" cargo "+$nightly" build -q -Zbuild-std --target "$triple" --release \
  -p kvtier-capi --features "$features" --target-dir "target/$san" --lib --bin kvtierd
soname=$(readelf -d "$libdir/libkvtier.so" | sed -n 's/.*SONAME.*\[\(.*\)\].*/\1/p')
[ -n "$soname" ] && ln -sf libkvtier.so "$libdir/$soname"

# ThreadSanitizer: the library's instrumentation (the nightly's LLVM) calls
# entry points an older C compiler's libtsan lacks, so the programs link
# the toolchain's own runtime.  AddressSanitizer's are compatible.
runtime=""
if [ "$san" = thread ]; then
  sysroot=$(rustc "+$nightly" --print sysroot)
  runtime=$(ls "$sysroot/lib/rustlib/$triple/lib/"librustc-*_rt.tsan.a | head -n1)
fi

# The replay checks' workload generator: an ordinary build is enough.
cargo build -q --release -p kvtier-workload
# kvtier-inspect, which the kvtierd checks run (an ordinary build; the
# server they start is the sanitized kvtierd built above).
cargo build -q --release -p kvtier-capi --features "$features" --bin kvtier-inspect
gen="$PWD/target/release/kvtier-workload"

echo "== the C and C++ programs with -fsanitize=$san"
cmake -S examples -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVTIER_ROOT="$PWD" \
  -DKVTIER_LIB_DIR="$libdir" -DKVTIER_SANITIZER="$san" -DKVTIER_SANITIZER_RUNTIME="$runtime" -DKVTIER_WORKLOAD_GEN="$gen" -DKVTIERD="$libdir/kvtierd" >/dev/null
cmake --build "$build" -j 2 >/dev/null

# Reports fail the run: ASan exits non-zero on its own; TSan and leaks too.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
echo "== ctest under $san"
# The medium replays and the demo are the same code paths as the small
# ones, many times over: too slow under a sanitizer for what they add.
ctest --test-dir "$build" --output-on-failure -E 'replay_medium|replay_workload_medium|demo' -j 2

echo "== the fuzzer with other seeds under $san"
"$build/bin/kvtier-fuzz" --seed 11 --ops 100000
"$build/bin/kvtier-fuzz" --seed 12 --ops 30000 --fs

# The node server with the same sanitizer: its protocol fuzz (random and
# mutated frames, huge lengths, idle and silent peers), sharing and bounds,
# and engines killed at random points, each serving from a server in the
# test's own (instrumented) process.
echo "== the node server's tests under $san"
RUSTFLAGS="-Zsanitizer=$san" cargo "+$nightly" test -q -Zbuild-std --target "$triple" \
  -p kvtier --target-dir "target/$san" --test server_fuzz --test server --test server_faults --test server_ring
