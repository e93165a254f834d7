#!/bin/sh
# ctest wrapper of the redis_tier example: starts redis-server on a free
# loopback port, runs the example with KVTIER_REDIS_ADDR set, stops the
# server.  Exits 77 (ctest: skipped) when redis-server is not installed,
# or 1 (failed) then under KVTIER_REQUIRE_ALL=1.
prog="$1"
server=$(command -v redis-server || true)
if [ -z "$server" ]; then
  echo "redis_tier: SKIPPED: redis-server is not installed (apt-get install -y redis-server; make test does this)"
  if [ "${KVTIER_REQUIRE_ALL:-}" = 1 ]; then
    echo "redis_tier: KVTIER_REQUIRE_ALL=1 requires every test to run"
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
try=0
while [ $try -lt 20 ]; do
  try=$((try + 1))
  port=$(( 20000 + ( $$ * 7 + try * 997 ) % 30000 ))
  "$server" --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
    --logfile "$dir/redis.log" --daemonize no >/dev/null 2>&1 &
  pid=$!
  up=0
  i=0
  while [ $i -lt 100 ]; do
    i=$((i + 1))
    if ! kill -0 "$pid" 2>/dev/null; then break; fi   # exited: port taken
    if redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null | grep -q PONG; then up=1; break; fi
    sleep 0.05
  done
  if [ $up = 1 ]; then break; fi
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; pid=""
done
if [ -z "$pid" ]; then
  echo "redis_tier: could not start redis-server on a free port:"; cat "$dir/redis.log" 2>/dev/null
  exit 1
fi
KVTIER_REDIS_ADDR="127.0.0.1:$port" "$prog"
