#!/bin/sh
# ctest wrapper of cxx/server_connect.cpp: starts kvtierd (the binary
# built beside libkvtier.so) on a socket in a new directory, runs the
# program with its path, stops the server.  Exits 77 (ctest: skipped)
# when kvtierd is not built, or 1 (failed) then under KVTIER_REQUIRE_ALL=1.
prog="$1"
server="$2"
if [ ! -x "$server" ]; then
  echo "server_connect: SKIPPED: no kvtierd at $server (make lib builds it)"
  if [ "${KVTIER_REQUIRE_ALL:-}" = 1 ]; then
    echo "server_connect: KVTIER_REQUIRE_ALL=1 requires every test to run"
    exit 1
  fi
  exit 77
fi
dir=$(mktemp -d)
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi
  rm -rf "$dir"
}
trap cleanup EXIT
cat >"$dir/kvtierd.json" <<JSON
{"block_bytes": 4096, "primary": {"capacity": 16},
 "region": {"name": "server-connect-$$", "directory": "$dir"},
 "server": {"fingerprint": "model-a"}}
JSON
"$server" --config "$dir/kvtierd.json" --socket "$dir/s.sock" 2>"$dir/kvtierd.log" &
pid=$!
i=0
while [ ! -S "$dir/s.sock" ] && [ $i -lt 600 ]; do
  if ! kill -0 "$pid" 2>/dev/null; then break; fi
  i=$((i + 1))
  sleep 0.05
done
if [ ! -S "$dir/s.sock" ]; then
  echo "server_connect: kvtierd did not start:"; cat "$dir/kvtierd.log"
  exit 1
fi
"$prog" "$dir/s.sock"
