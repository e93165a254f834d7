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
every counter.  The fs tier's restart benchmark (`fs_restart.json`) gets a
table of its own instead, after the summary: each figure by block count, and the
extrapolation to 10^8 blocks.
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


# The restart table's rows: label, the median's field, the MB/s field.
# The times until open returns are not extrapolated (the benchmark gives
# them as measured): their last cell says so.
RESTART_FIGURES = [
    ("filling it through the tier", "fill_s", None),
    ("clean restart: open returned (engine blocked)", "clean_open_s", None),
    ("clean restart: index complete", "clean_rebuilt_s", None),
    ("after a crash: open returned (engine blocked)", "crash_open_s", None),
    ("after a crash: index complete", "crash_rebuilt_s", None),
    ("cat of the files, 1 thread", "seq_read_s", "seq_read_mbps"),
    ("a header per block, 8 threads", "header_read_s", "header_read_mbps"),
]
NOT_EXTRAPOLATED = {"clean_open_s", "crash_open_s"}


def human_seconds(s):
    """A duration as the restart benchmark prints it."""
    if s < 0.01:
        return f"{s * 1e3:.1f} ms"
    if s < 0.1:
        return f"{s * 1e3:.0f} ms"
    if s < 1:
        return f"{s:.2f} s"
    if s < 10:
        return f"{s:.1f} s"
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def count_label(n):
    """10^k for powers of ten, else the number."""
    p, m = 0, int(n)
    while m >= 10 and m % 10 == 0:
        m, p = m // 10, p + 1
    return f"10^{p}" if m == 1 and p > 0 else str(n)


def restart_table(obj):
    """The fs tier restart benchmark's lines: for each layout and block
    size, each figure by block count, then the linear extrapolation to the
    largest size (labelled as such)."""
    runs = obj.get("runs", [])
    extrapolated = obj.get("extrapolated", [])
    counts = sorted({r["blocks"] for r in runs})
    kinds = []
    for r in runs:
        if (r["layout"], r["block_bytes"]) not in kinds:
            kinds.append((r["layout"], r["block_bytes"]))
    target = extrapolated[0]["blocks"] if extrapolated else None
    head = ["layout", "block", "figure"] + [count_label(c) for c in counts]
    if target:
        head.append(f"{count_label(target)} (extrapolated)")
    rows = []
    for layout, block in kinds:
        by_count = {r["blocks"]: r for r in runs if (r["layout"], r["block_bytes"]) == (layout, block)}
        x = next((e for e in extrapolated if (e["layout"], e["block_bytes"]) == (layout, block)), None)
        for label, field, rate in RESTART_FIGURES:
            cells = []
            for c in counts:
                r = by_count.get(c)
                if r is None:
                    cells.append("-")
                elif rate:
                    cells.append(f"{human_seconds(r[field])} ({r[rate]:,.0f} MB/s)")
                else:
                    cells.append(human_seconds(r[field]))
            if target and field in NOT_EXTRAPOLATED:
                cells.append("(as measured)")
            elif target:
                cells.append(human_seconds(x[field]) if x and field in x else "-")
            rows.append([layout, f"{block >> 10} KiB", label] + cells)
        cells = []
        for c in counts:
            r = by_count.get(c)
            b = r and r.get("index_bytes_per_block")
            p = r and r.get("index_peak_bytes_per_block")
            cells.append(f"{b:.0f} ({p:.0f} peak)" if b is not None and p is not None else "-")
        if target:
            gb = x.get("index_gb") if x else None
            peak_gb = x.get("index_peak_gb") if x else None
            if gb is not None and peak_gb is not None:
                cells.append(f"{gb:.1f} GB ({peak_gb:.1f} peak)")
            else:
                cells.append(f"{gb:.1f} GB" if gb is not None else "-")
        rows.append([layout, f"{block >> 10} KiB", "index bytes per block"] + cells)
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    cached = sum(r.get("cached_pages_after_drop", 0) for r in runs)
    sampled = sum(r.get("sampled_pages", 0) for r in runs)
    lines = [
        f"fs tier restart, cold page cache, median of {obj.get('rounds', '?')} rounds"
        f" ({obj.get('dir', '?')}); the last column is a linear extrapolation, not a measurement"
        " (the times until open returned are not extrapolated):",
        "  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip(),
        "  ".join("-" * w for w in widths),
    ]
    previous = None
    for r in rows:
        shown = list(r)
        if previous and previous[:2] == r[:2]:
            shown[0] = shown[1] = ""
        cells = [shown[i].ljust(widths[i]) for i in range(3)]
        cells += [shown[i].rjust(widths[i]) for i in range(3, len(r))]
        lines.append("  ".join(cells).rstrip())
        previous = r
    note = " (the cache was NOT fully dropped)" if cached else ""
    lines.append(f"page cache after each drop: {cached:,} of {sampled:,} sampled pages still cached{note}")
    return lines


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
        if name == "fs_restart.json":
            continue  # a table of its own, below
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
    if table:
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
    restart = os.path.join(directory, "fs_restart.json")
    if os.path.exists(restart):
        try:
            with open(restart) as f:
                lines = restart_table(json.load(f))
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"bench-summary: {restart}: {e}", file=sys.stderr)
            return 1
        if table:
            print()
        print("\n".join(lines))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
