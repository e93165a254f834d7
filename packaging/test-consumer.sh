#!/bin/sh
# Installs kvtier into a scratch prefix, then builds and runs a consumer
# against it twice: with CMake's find_package(kvtier CONFIG) (shared and
# static targets) and with pkg-config.  Usage: test-consumer.sh ROOT WORKDIR
set -eu
root=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
prefix="$work/prefix"

make -s -C "$root" install-files PREFIX="$prefix"

# CMake package.
cmake -S "$root/packaging/consumer" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cmake" >/dev/null
LD_LIBRARY_PATH="$prefix/lib" "$work/cmake/consumer_shared"
"$work/cmake/consumer_static"

# pkg-config, shared and static.
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
cc -Wall -Wextra -Werror -o "$work/pc_shared" "$root/packaging/consumer/main.c" $(pkg-config --cflags --libs kvtier)
LD_LIBRARY_PATH="$prefix/lib" "$work/pc_shared"
static_libs=$(pkg-config --static --libs-only-l kvtier | sed 's/-lkvtier//')
cc -Wall -Wextra -Werror -o "$work/pc_static" "$root/packaging/consumer/main.c" \
  $(pkg-config --cflags kvtier) "$prefix/lib/libkvtier.a" $static_libs
"$work/pc_static"
# The C++ layer is installed too and builds with the same flags.
c++ -std=c++17 -Wall -Wextra -Werror -o "$work/pc_cxx" "$root/packaging/consumer/main.cpp" $(pkg-config --cflags --libs kvtier)
LD_LIBRARY_PATH="$prefix/lib" "$work/pc_cxx"
echo "install_consumer: ok"
