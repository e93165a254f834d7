#!/usr/bin/env python3
"""Prints one table summarising every benchmark result under a directory.

    python3 tools/bench-summary.py build/bench

Each `*.json` file there is one benchmark's result (one JSON object, as
written by `cargo bench --bench NAME -- --out FILE` or by the replay
driver).  Nested objects and lists are flattened into one row per figure:
`benchmark | case | figure | value`, where the case names the list entry
(by its string fields and identifying numbers such as `blocks` or
`block_bytes`).  Top-level strings (configuration) and lists of plain
numbers (raw samples) get no row.  Replay results show their time and main counters; the files hold
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
# Numeric fields that identify a list entry rather than measure something.
ID_FIELDS = ["blocks", "block_bytes", "slots", "size", "threads"]


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
    """Names a list entry by its string fields and identifying numbers."""
    if not isinstance(entry, dict):
        return f"#{index}"
    parts = []
    for key, value in entry.items():
        if isinstance(value, str):
            parts.append(value if key in ("name", "operation", "case", "label") else f"{key}={value}")
        elif key in ID_FIELDS and isinstance(value, (int, float)) and not isinstance(value, bool):
            parts.append(f"{key}={value}")
    return " ".join(parts) if parts else f"#{index}"


def is_label_field(entry, key):
    value = entry[key]
    return isinstance(value, str) or (
        key in ID_FIELDS and isinstance(value, (int, float)) and not isinstance(value, bool)
    )


def rows_of(obj, case, figure_prefix, out, top=False):
    """Appends (case, figure, value) rows for the measured figures of obj.

    Strings describe a configuration (at the top) or name a list entry, and
    lists of plain numbers are raw samples: neither gets a row.
    """
    if is_replay(obj):
        for field in REPLAY_FIELDS:
            if field in obj:
                out.append((case, figure_prefix + field, obj[field]))
        return
    if isinstance(obj, dict):
        for key, value in obj.items():
            if isinstance(value, list):
                if value and all(isinstance(v, dict) for v in value):
                    for i, entry in enumerate(value):
                        sub_case = f"{case} {label_of(entry, i)}".strip()
                        rows_of(entry, sub_case, figure_prefix, out)
                # a list of numbers: raw samples, summarised elsewhere
            elif isinstance(value, dict):
                rows_of(value, case, f"{figure_prefix}{key}.", out)
            elif isinstance(value, str):
                continue
            elif not top and case and is_label_field(obj, key):
                continue
            else:
                out.append((case, figure_prefix + key, value))


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
        rows_of(obj, "", "", rows, top=True)
        for case, figure, value in rows:
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
                [
                    shown[0].ljust(widths[0]),
                    shown[1].ljust(widths[1]),
                    shown[2].ljust(widths[2]),
                    shown[3].rjust(widths[3]),
                ]
            ).rstrip()
        )
        previous = row
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
