#!/bin/sh
# The control-plane benchmarks of `make bench`: workload replays through the
# C ABI and the scaling run.  Writes one JSON file per benchmark into OUTDIR.
#
#   tools/bench-replay.sh REPLAY GENERATOR OUTDIR
#
# REPLAY is build/bin/kvtier-replay, GENERATOR target/release/kvtier-workload.
set -eu
replay=$1
gen=$2
out=$3

if [ ! -x "$replay" ]; then
  echo "== replay: $replay is not built; skipped"
  exit 0
fi
mkdir -p "$out/workloads"
for preset in medium large; do
  "$gen" --preset "$preset" --out "$out/workloads/$preset.txt"
done

# One replay: NAME, then the replay's flags.  Median wall time of 3 runs.
run() {
  name=$1
  shift
  echo "== kvtier-replay $* --repeat 3 > $out/$name.json"
  "$replay" "$@" --repeat 3 > "$out/$name.json"
}

medium="--workload $out/workloads/medium.txt --blocks 16384 --batch 16"
run replay-medium-lru-mem $medium --policy lru --tiers mem
run replay-medium-lru-mem-hit-pending $medium --policy lru --tiers mem --hit-pending
run replay-medium-arc-mem $medium --policy arc --tiers mem
run replay-medium-lru-none $medium --policy lru --tiers none

# Scaling: the same large workload, only the capacity changes.  Hits and
# misses make different numbers of calls at each size (3.3 M at 10^4, 5.1 M
# at 10^6 and up), so each run stops starting batches after the same
# number of calls (SCALING_CALLS, fewer than any size makes): every size
# times the same count of calls, and ns per call compares like with like.
scaling_calls=${SCALING_CALLS:-3000000}
scaling="$out/scaling.json"
tmp="$out/scaling.part"
printf '{"preset": "large", "policy": "lru", "batch": 16, "tiers": "mem", "max_calls": %s, "runs": [' "$scaling_calls" > "$tmp"
sep=""
for blocks in 10000 100000 1000000 10000000; do
  echo "== kvtier-replay --workload $out/workloads/large.txt --blocks $blocks --policy lru --batch 16 --tiers mem --max-calls $scaling_calls --repeat 3"
  result=$("$replay" --workload "$out/workloads/large.txt" --blocks "$blocks" \
    --policy lru --batch 16 --tiers mem --max-calls "$scaling_calls" --repeat 3)
  printf '%s{"blocks": %s, %s' "$sep" "$blocks" "${result#\{}" >> "$tmp"
  sep=", "
done
# The figure: 10^7 over 10^4 in SCALING_PAIRS pairs of runs, each 10^4 then
# 10^7 right after it (the same load on a shared machine), and the median
# pair.  Timing the sizes minutes apart let one unusually fast 10^4 run
# decide the figure.
pairs=${SCALING_PAIRS:-5}
ns_of() {
  "$replay" --workload "$out/workloads/large.txt" --blocks "$1" --policy lru --batch 16 \
    --tiers mem --max-calls "$scaling_calls" | sed -n 's/.*"ns_per_call": *\([0-9.eE+-]*\).*/\1/p'
}
echo "== $pairs pairs: --blocks 10000, then 10000000 (same flags, --max-calls $scaling_calls)"
ratios=""
i=0
while [ "$i" -lt "$pairs" ]; do
  small=$(ns_of 10000)
  large=$(ns_of 10000000)
  ratios="$ratios $(awk -v a="$large" -v b="$small" 'BEGIN { printf "%.3f", a / b }')"
  i=$((i + 1))
done
median=$(printf '%s\n' $ratios | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
list=$(printf '%s\n' $ratios | paste -sd, - | sed 's/,/, /g')
printf '], "pairs_1e7_over_1e4": [%s], "ns_per_call_1e7_over_1e4": %s}\n' "$list" "$median" >> "$tmp"
mv "$tmp" "$scaling"
