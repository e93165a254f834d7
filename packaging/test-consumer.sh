#!/bin/sh
# Installs kvtier into a scratch prefix, then builds and runs consumers
# against it: with CMake's find_package(kvtier CONFIG) (kvtier::kvtier,
# kvtier::shared, kvtier::static), with pkg-config (shared, static, and
# fully static with -static), and the C++ header with libstdc++ and, where
# clang and libc++ are installed, libc++.  Checks the installed libraries
# carry no debug information and prints their sizes.
# Usage: test-consumer.sh ROOT WORKDIR
set -eu
root=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
prefix="$work/prefix"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n1)

make -s -C "$root" install-files PREFIX="$prefix"

# The inspection tool is installed beside the library and runs.
"$prefix/bin/kvtier-inspect" fs "$work" --json >/dev/null
# So is the node server (its usage: exit status 2).
rc=0; "$prefix/bin/kvtierd" --help 2>/dev/null || rc=$?
[ "$rc" = 2 ] || { echo "install_consumer: $prefix/bin/kvtierd --help: status $rc" >&2; exit 1; }

# Stripped: no DWARF sections in what was installed.
for lib in "$prefix"/lib/libkvtier.so.* "$prefix/lib/libkvtier.a"; do
  if readelf -S "$lib" 2>/dev/null | grep -q '\.debug_info'; then
    echo "install_consumer: $lib still has debug information" >&2
    exit 1
  fi
done
echo "installed sizes (bytes): $(stat -c '%n=%s' "$prefix"/lib/libkvtier.so.* "$prefix/lib/libkvtier.a" | sed "s|$prefix/lib/||g" | tr '\n' ' ')"

# CMake package.
cmake -S "$root/packaging/consumer" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" \
  -DKVTIER_EXPECTED_VERSION="$version" >/dev/null
cmake --build "$work/cmake" >/dev/null
LD_LIBRARY_PATH="$prefix/lib" "$work/cmake/consumer_kvtier"
LD_LIBRARY_PATH="$prefix/lib" "$work/cmake/consumer_shared"
"$work/cmake/consumer_static"

# pkg-config: shared, static (the archive with Libs.private), fully static.
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
main_c="$root/packaging/consumer/main.c"
cc -Wall -Wextra -Werror -o "$work/pc_shared" "$main_c" $(pkg-config --cflags --libs kvtier)
LD_LIBRARY_PATH="$prefix/lib" "$work/pc_shared"
cc -Wall -Wextra -Werror -o "$work/pc_static" "$main_c" $(pkg-config --cflags kvtier) \
  "$prefix/lib/libkvtier.a" $(pkg-config --static --libs-only-l kvtier | sed 's/-lkvtier//')
"$work/pc_static"
cc -static -Wall -Wextra -Werror -o "$work/pc_full_static" "$main_c" \
  $(pkg-config --static --cflags --libs kvtier) 2>"$work/static-link.txt" || {
  cat "$work/static-link.txt" >&2
  exit 1
}
"$work/pc_full_static"

# The C++ layer is installed too and builds with the same flags.
main_cpp="$root/packaging/consumer/main.cpp"
c++ -std=c++17 -Wall -Wextra -Werror -o "$work/pc_cxx" "$main_cpp" $(pkg-config --cflags --libs kvtier)
LD_LIBRARY_PATH="$prefix/lib" "$work/pc_cxx"
if command -v clang++ >/dev/null 2>&1 && echo '#include <version>' |
  clang++ -std=c++17 -stdlib=libc++ -x c++ -fsyntax-only - 2>/dev/null; then
  clang++ -std=c++17 -stdlib=libc++ -Wall -Wextra -Werror -o "$work/pc_cxx_libcxx" "$main_cpp" \
    $(pkg-config --cflags --libs kvtier)
  LD_LIBRARY_PATH="$prefix/lib" "$work/pc_cxx_libcxx"
  # Below C++17 the header says so instead of failing somewhere inside.
  if clang++ -std=c++14 -stdlib=libc++ -fsyntax-only $(pkg-config --cflags kvtier) "$main_cpp" \
    >"$work/cxx14.txt" 2>&1 || ! grep -q 'kvtier.hpp needs C++17' "$work/cxx14.txt"; then
    echo "install_consumer: kvtier.hpp below C++17 did not stop with its own #error" >&2
    cat "$work/cxx14.txt" >&2
    exit 1
  fi
elif [ "${KVTIER_REQUIRE_ALL:-}" = 1 ]; then
  echo "install_consumer: clang++ with libc++ is not installed, and KVTIER_REQUIRE_ALL=1 requires the libc++ build" >&2
  exit 1
else
  echo "install_consumer: SKIPPED the libc++ build (clang++ with libc++ not installed)"
fi
echo "install_consumer: ok"
