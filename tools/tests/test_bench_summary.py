"""tools/bench-summary.py on a made-up result directory: the fs tier
restart benchmark's table (figures by block count, the extrapolation
labelled as one) and the other benchmarks' rows."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench-summary.py")


def run_case(layout, blocks, seconds):
    return {
        "layout": layout, "block_bytes": 4096, "blocks": blocks, "fill_s": seconds,
        "clean_open_s": 0.004, "clean_rebuilt_s": seconds, "crash_open_s": 0.05,
        "crash_rebuilt_s": seconds, "seq_read_s": seconds / 4, "seq_read_mbps": 500.0,
        "header_read_s": seconds / 2, "header_read_mbps": 250.0,
        "index_bytes_per_block": 380.0, "index_peak_bytes_per_block": 490.0,
        "empty_tier_bytes": 300000.0,
        "cached_pages_after_drop": 0, "sampled_pages": 640,
        "samples": {"clean_rebuilt_s": [seconds, seconds]},
    }


RESTART = {
    "bench": "fs_restart", "dir": "/d", "rounds": 2,
    "runs": [run_case("files", 10_000, 0.7), run_case("files", 100_000, 7.2)],
    "extrapolated": [{
        "kind": "extrapolated linearly from 10^5", "layout": "files", "block_bytes": 4096,
        "blocks": 100_000_000, "from_blocks": 100_000, "fill_s": 7200.0,
        "clean_rebuilt_s": 7200.0, "crash_rebuilt_s": 7200.0, "seq_read_s": 1800.0,
        "header_read_s": 3600.0, "index_gb": 38.0, "index_peak_gb": 49.0,
    }],
}


def summary(results):
    with tempfile.TemporaryDirectory() as tmp:
        for name, obj in results.items():
            with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
                json.dump(obj, f)
        p = subprocess.run([sys.executable, SCRIPT, tmp], capture_output=True, text=True, check=False)
        return p.returncode, p.stdout + p.stderr


class RestartTable(unittest.TestCase):
    def test_figures_by_count_with_the_extrapolation_labelled(self):
        code, out = summary({"fs_restart.json": RESTART, "other.json": {"runs": [{"name": "x", "gbps": 1.5}]}})
        self.assertEqual(code, 0, out)
        head = next(line for line in out.splitlines() if line.startswith("layout"))
        self.assertIn("10^4", head)
        self.assertIn("10^5", head)
        self.assertIn("10^8 (extrapolated)", head)
        indexed = next(line for line in out.splitlines() if "clean restart: index complete" in line)
        self.assertEqual(indexed.split()[-6:], ["0.70", "s", "7.2", "s", "2.0", "h"])
        # The time until open returns, apart, as measured at every size.
        opened = next(line for line in out.splitlines() if "clean restart: open returned" in line)
        self.assertEqual(opened.split()[-6:], ["4.0", "ms", "4.0", "ms", "(as", "measured)"])
        crash = next(line for line in out.splitlines() if "after a crash: open returned" in line)
        self.assertEqual(crash.split()[-6:], ["50", "ms", "50", "ms", "(as", "measured)"])
        crash = next(line for line in out.splitlines() if "after a crash: index complete" in line)
        self.assertEqual(crash.split()[-6:], ["0.70", "s", "7.2", "s", "2.0", "h"])
        heap = next(line for line in out.splitlines() if "index bytes per block" in line)
        self.assertIn("380 (490 peak)", heap)
        self.assertIn("38.0 GB (49.0 peak)", heap)
        self.assertIn("0 of 1,280 sampled pages still cached", out)
        # The other benchmark keeps its row; the restart figures are not repeated there.
        self.assertIn("gbps", out)
        self.assertNotIn("clean_rebuilt_s", out)

    def test_a_cache_not_dropped_is_said(self):
        restart = json.loads(json.dumps(RESTART))
        restart["runs"][0]["cached_pages_after_drop"] = 3
        code, out = summary({"fs_restart.json": restart})
        self.assertEqual(code, 0, out)
        self.assertIn("3 of 1,280 sampled pages still cached (the cache was NOT fully dropped)", out)


if __name__ == "__main__":
    unittest.main()
