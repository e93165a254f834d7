#!/bin/sh
# Instructions per manager call on the three reference replays, counted by
# callgrind (exact and repeatable, unlike wall time on a shared machine).
#
#   tools/callgrind-replay.sh REPLAY WORKLOAD
#
# REPLAY is build/bin/kvtier-replay, WORKLOAD a `medium` workload
# (target/release/kvtier-workload --preset medium --out FILE).  Prints one
# line per replay: policy, blocks, the instructions executed inside
# `kvtier_manager_*` calls (callees included; the replay's own parsing and
# bookkeeping are not counted), the number of manager calls, and
# instructions per call.
set -eu
replay=$1
workload=$2
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for cfg in "lru 16384" "arc 16384" "lru 4096"; do
  set -- $cfg
  valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" \
    --collect-atstart=no '--toggle-collect=kvtier_manager_*' \
    "$replay" --workload "$workload" --blocks "$2" --policy "$1" --batch 16 --tiers mem \
    > "$tmp/replay.json" 2> "$tmp/valgrind.err"
  ir=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$tmp/valgrind.err")
  calls=$(sed -n 's/.*"manager_calls": \([0-9]*\).*/\1/p' "$tmp/replay.json")
  awk -v p="$1" -v b="$2" -v ir="$ir" -v c="$calls" \
    'BEGIN { printf "%s %s: %d instructions, %d manager calls, %.1f per call\n", p, b, ir, c, ir / c }'
done
