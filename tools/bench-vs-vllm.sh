#!/bin/sh
# kvtier and vLLM 0.33's own Python managers on the same replays, in the same
# run: ROUNDS interleaved rounds (kvtier, then vLLM) of each replay, the
# median wall time and ns per manager call of each side, and their ratio.
#
#   tools/bench-vs-vllm.sh REPLAY GENERATOR OUTDIR [ROUNDS]
#
# REPLAY is build/bin/kvtier-replay, GENERATOR target/release/kvtier-workload.
# vLLM's wheel is downloaded once into $VLLM_DIR (default build/vllm) with
# pip and unpacked there; only its Python files are read (tools/vllm_replay.py
# explains the stand-ins).  Needs python3 with numpy; skips cleanly without.
set -eu
replay=$1
gen=$2
out=$3
rounds=${4:-5}
vllm_dir=${VLLM_DIR:-build/vllm}

if ! python3 -c 'import numpy' 2>/dev/null; then
  echo "== side by side with vLLM: skipped (python3 with numpy is not installed)"
  exit 0
fi
if [ ! -d "$vllm_dir/wheel/vllm" ]; then
  mkdir -p "$vllm_dir/wheel"
  if ! python3 -m pip download --quiet --no-deps --dest "$vllm_dir" vllm==0.33.0; then
    echo "== side by side with vLLM: skipped (could not download vllm==0.33.0)"
    exit 0
  fi
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
    "$(ls "$vllm_dir"/vllm-0.33.0-*.whl | head -n1)" "$vllm_dir/wheel"
fi
mkdir -p "$out/workloads"
wl="$out/workloads/medium.txt"
[ -s "$wl" ] || "$gen" --preset medium --out "$wl"

# field NAME JSON: the numeric field NAME of a one-line JSON object.
field() {
  printf '%s\n' "$2" | sed -n "s/.*\"$1\": *\([0-9.eE+-]*\).*/\1/p"
}
# median of the numbers on stdin.
median() {
  sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

summary="$out/vs-vllm.json"
printf '{"workload": "medium", "batch": 16, "tiers": "mem", "rounds": %s, "replays": [' "$rounds" > "$summary.part"
sep=""
printf '%-24s %12s %12s %10s %10s %9s\n' replay kvtier_ms vllm_ms kvtier_ns vllm_ns wall_ratio
for case in "lru 16384" "arc 16384" "lru 4096"; do
  set -- $case
  policy=$1
  blocks=$2
  : > "$out/.k" && : > "$out/.v" && : > "$out/.kn" && : > "$out/.vn"
  i=0
  while [ "$i" -lt "$rounds" ]; do
    k=$("$replay" --workload "$wl" --blocks "$blocks" --policy "$policy" --batch 16 --tiers mem)
    v=$(python3 tools/vllm_replay.py --vllm-root "$vllm_dir/wheel" --workload "$wl" \
      --blocks "$blocks" --policy "$policy" --batch 16 --tiers mem)
    field wall_s "$k" >> "$out/.k"
    field wall_s "$v" >> "$out/.v"
    field ns_per_call "$k" >> "$out/.kn"
    field ns_per_call "$v" >> "$out/.vn"
    i=$((i + 1))
  done
  kw=$(median < "$out/.k")
  vw=$(median < "$out/.v")
  kn=$(median < "$out/.kn")
  vn=$(median < "$out/.vn")
  ratio=$(awk -v a="$kw" -v b="$vw" 'BEGIN { printf "%.4f", a / b }')
  name="medium-$policy-$blocks-mem"
  awk -v n="$name" -v kw="$kw" -v vw="$vw" -v kn="$kn" -v vn="$vn" -v r="$ratio" \
    'BEGIN { printf "%-24s %12.1f %12.1f %10.0f %10.0f %8.2f%%\n", n, kw * 1e3, vw * 1e3, kn, vn, r * 100 }'
  printf '%s{"replay": "%s", "kvtier_wall_s": %s, "vllm_wall_s": %s, "kvtier_ns_per_call": %s, "vllm_ns_per_call": %s, "wall_ratio": %s}' \
    "$sep" "$name" "$kw" "$vw" "$kn" "$vn" "$ratio" >> "$summary.part"
  sep=", "
done
rm -f "$out/.k" "$out/.v" "$out/.kn" "$out/.vn"
printf ']}\n' >> "$summary.part"
mv "$summary.part" "$summary"
