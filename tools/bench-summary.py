#!/usr/bin/env python3
"""Prints one table summarising every benchmark result under a directory.

    python3 tools/bench-summary.py build/bench

Each `*.json` file there is one benchmark's result (one JSON object, as
written by `cargo bench --bench NAME -- --out FILE` or by the replay
driver).  Nested objects and lists are flattened into one row per figure:
`benchmark | case | figure | value`, where the case names the list entry
(by its `name`, `case`, `blocks`, `block_bytes` or `size` field when it has
one).  Replay results show their time and main counters; the files hold
every counter.
"""
import json
import os
import sys

# Fields of a replay result worth a row; the rest stay in the file.
REPLAY_FIELDS = [
    "ns_per_call",
    "wall_s",
    "manager_calls",
    "hit_blocks",
    "stops_miss",
    "stops_pending",
    "blocks_stored",
    "blocks_evicted",
]
# Fields that name a list entry rather than measure something.
LABEL_FIELDS = ["name", "case", "label", "blocks", "block_bytes", "size"]


def is_replay(obj):
    return isinstance(obj, dict) and "manager_calls" in obj and "ns_per_call" in obj


def fmt(value):
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value == 0:
            return "0"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def label_of(entry, index):
    if isinstance(entry, dict):
        for field in LABEL_FIELDS:
            if field in entry and not isinstance(entry[field], (dict, list)):
                return f"{field}={entry[field]}"
    return f"#{index}"


def rows_of(obj, case, figure_prefix, out):
    """Appends (case, figure, value) rows for every scalar leaf of obj."""
    if is_replay(obj):
        for field in REPLAY_FIELDS:
            if field in obj:
                out.append((case, figure_prefix + field, obj[field]))
        return
    if isinstance(obj, dict):
        for key, value in obj.items():
            if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                for i, entry in enumerate(value):
                    sub = label_of(entry, i)
                    sub_case = f"{case} {sub}".strip()
                    rows_of(entry, sub_case, figure_prefix, out)
            elif isinstance(value, (dict, list)):
                rows_of(value, case, f"{figure_prefix}{key}.", out)
            else:
                out.append((case, figure_prefix + key, value))
        return
    if isinstance(obj, list):
        for i, value in enumerate(obj):
            rows_of(value, case, f"{figure_prefix}{i}.", out)
        return
    out.append((case, figure_prefix.rstrip("."), obj))


def drop_list_labels(rows):
    """A list entry's label is already in its case: do not repeat it as a figure."""
    kept = []
    for case, figure, value in rows:
        last = case.rsplit(" ", 1)[-1] if case else ""
        if last == f"{figure}={value}":
            continue
        kept.append((case, figure, value))
    return kept


def main(argv):
    directory = argv[1] if len(argv) > 1 else "build/bench"
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".json"))
    except FileNotFoundError:
        print(f"bench-summary: {directory} does not exist (run `make bench`)", file=sys.stderr)
        return 1
    if not names:
        print(f"bench-summary: no *.json results in {directory}", file=sys.stderr)
        return 1
    table = []
    bad = 0
    for name in names:
        path = os.path.join(directory, name)
        try:
            with open(path) as f:
                obj = json.load(f)
        except (OSError, ValueError) as e:
            print(f"bench-summary: {path}: {e}", file=sys.stderr)
            bad += 1
            continue
        rows = []
        rows_of(obj, "", "", rows)
        for case, figure, value in drop_list_labels(rows):
            table.append((name[: -len(".json")], case, figure, fmt(value)))
    header = ("benchmark", "case", "figure", "value")
    widths = [max(len(r[i]) for r in table + [header]) for i in range(4)]
    line = "  ".join("-" * w for w in widths)
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip())
    print(line)
    previous = None
    for row in table:
        shown = list(row)
        if previous and previous[0] == row[0]:
            shown[0] = ""
            if previous[1] == row[1]:
                shown[1] = ""
        print(
            "  ".join(
                [shown[0].ljust(widths[0]), shown[1].ljust(widths[1]), shown[2].ljust(widths[2]), shown[3].rjust(widths[3])]
            ).rstrip()
        )
        previous = row
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
