#!/bin/sh
# Regenerates tests/replay-expected/ from vLLM 0.33's own managers.
#
#   tools/replay-expected.sh VLLM_ROOT WORKLOAD_GEN [CASE_FILTER]
#
# VLLM_ROOT: a directory holding the vllm/ package of the vLLM 0.33.0 wheel
# (pip download vllm==0.33.0 --no-deps, then unzip the wheel there).
# WORKLOAD_GEN: the workload generator, target/release/kvtier-workload.
# CASE_FILTER: an optional grep pattern; only the cases of
# tools/replay-cases.txt that match it are regenerated.
#
# For every case it writes the workload (once per preset and seed), runs
# tools/vllm_replay.py with the case's flags and writes the counters to
# tests/replay-expected/<preset>-s<seed>-<blocks>-<policy>-<tiers>[-hit-pending].json;
# a case with --positions instead checks that vLLM's counters with positions
# equal the file of the same case without them.
set -eu
if [ $# -lt 2 ]; then
    echo "usage: $0 VLLM_ROOT WORKLOAD_GEN [CASE_FILTER]" >&2
    exit 2
fi
vllm_root=$1
gen=$2
filter=${3:-.}
here=$(cd "$(dirname "$0")" && pwd)
out="$here/../tests/replay-expected"
mkdir -p "$out"
wl=$(mktemp -d)
trap 'rm -rf "$wl"' EXIT

grep -v '^#' "$here/replay-cases.txt" | grep -e "$filter" | while read -r preset seed blocks policy tiers extra; do
    [ -n "$preset" ] || continue
    w="$wl/$preset-$seed.txt"
    [ -f "$w" ] || "$gen" --preset "$preset" --seed "$seed" --out "$w"
    name="$preset-s$seed-$blocks-$policy-$tiers"
    case " $extra " in *" --hit-pending "*) name="$name-hit-pending" ;; esac
    case " $extra " in
    *" --positions "*)
        # Checks the file of the case without --positions (listed before
        # it): vLLM's counters with positions must be the same.
        echo "$name (positions)" >&2
        python3 "$here/vllm_replay.py" --vllm-root "$vllm_root" --workload "$w" \
            --blocks "$blocks" --policy "$policy" --batch 16 --tiers "$tiers" $extra \
            --expected-out "$wl/positions.json" >/dev/null
        cmp -s "$wl/positions.json" "$out/$name.json" || {
            echo "$name: vLLM's counters with --positions differ from $out/$name.json" >&2
            exit 1
        }
        ;;
    *)
        echo "$name" >&2
        python3 "$here/vllm_replay.py" --vllm-root "$vllm_root" --workload "$w" \
            --blocks "$blocks" --policy "$policy" --batch 16 --tiers "$tiers" $extra \
            --expected-out "$out/$name.json" >/dev/null
        ;;
    esac
done
