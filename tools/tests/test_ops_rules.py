"""packaging/prometheus/kvtier-rules.yml: `promtool check rules` accepts
it, its unit tests (packaging/prometheus/tests/*.yml) pass, and each of a
list of mutants of it (a threshold moved either way, a `for:` shortened or
lengthened, a severity changed, a guard against dividing by zero dropped,
another quantile, another window) makes those unit tests fail: they pin
what the rules do, not only that they parse.

Needs promtool (Debian's prometheus package; `make test-ops` installs it
when run as root): skipped without it, failed under KVTIER_REQUIRE_ALL=1."""

import concurrent.futures
import glob
import os
import shutil
import subprocess
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RULES_DIR = os.path.join(ROOT, "packaging", "prometheus")
RULES = os.path.join(RULES_DIR, "kvtier-rules.yml")
TESTS = sorted(glob.glob(os.path.join(RULES_DIR, "tests", "*.yml")))


def promtool():
    """promtool's path; skips the test without it (fails under
    KVTIER_REQUIRE_ALL=1)."""
    found = shutil.which("promtool")
    if found is None:
        why = "promtool is not installed (Debian: apt-get install -y prometheus; `make test-ops` installs it)"
        if os.environ.get("KVTIER_REQUIRE_ALL") == "1":
            raise AssertionError(f"{why}, and KVTIER_REQUIRE_ALL=1 requires every test to run")
        raise unittest.SkipTest(why)
    return found


def rule_block(text, rule):
    """(start, end) of the rule whose first line is `- <rule>` (e.g.
    `alert: KvtierEventsDropped`) in `text`: up to the next rule or group."""
    start = text.index(f"- {rule}\n")
    ends = [i for i in (text.find("\n      - ", start + 1), text.find("\n  - name:", start + 1)) if i >= 0]
    return start, min(ends) if ends else len(text)


def mutate(text, rule, old, new):
    """`text` with `old` replaced by `new` in the rule `rule`, where `old`
    occurs exactly once."""
    start, end = rule_block(text, rule)
    block = text[start:end]
    assert block.count(old) == 1, f"{rule}: {old!r} occurs {block.count(old)} times in\n{block}"
    return text[:start] + block.replace(old, new) + text[end:]


# (rule, text in it, replacement): every one must fail the unit tests.
MUTANTS = [
    ("alert: KvtierTierJobsFailing", "> 0.05", "> 0.07"),
    ("alert: KvtierTierJobsFailing", "> 0.05", "> 0.03"),
    ("alert: KvtierTierJobsFailing", "for: 10m", "for: 5m"),
    ("alert: KvtierTierJobsFailing", "for: 10m", "for: 15m"),
    ("alert: KvtierTierJobsFailing", "severity: warning", "severity: critical"),
    ("alert: KvtierPromotionsStalling", "> 0.1", "> 0.12"),
    ("alert: KvtierPromotionsStalling", "> 0.1", "> 0.08"),
    ("alert: KvtierPromotionsStalling", "for: 10m", "for: 5m"),
    ("alert: KvtierFsTierNearCapacity", "> 0.97", "> 0.99"),
    ("alert: KvtierFsTierNearCapacity", "> 0.97", "> 0.95"),
    ("alert: KvtierFsTierNearCapacity", "for: 15m", "for: 10m"),
    ("alert: KvtierFsTierFull", 'result="rejected_full"', 'result="written"'),
    ("alert: KvtierFsTierFull", 'cause="no_space"', 'cause="io"'),
    ("alert: KvtierFsTierFull", "for: 10m", "for: 5m"),
    ("alert: KvtierFsTierDroppingDamagedBlocks", "kvtier_fs_unreadable_blocks_dropped_total[30m]",
     "kvtier_fs_blocks_found_missing_total[30m]"),
    ("alert: KvtierFsTierDroppingDamagedBlocks", "removed_total[30m]", "removed_total[10m]"),
    ("alert: KvtierFsTierDroppingDamagedBlocks", "> 0", "> 2"),
    ("alert: KvtierFsTierDroppingDamagedBlocks", "for: 1m", "for: 10m"),
    ("alert: KvtierRedisBreakerOpen", "max_over_time(kvtier_redis_breaker_open[1m])", "kvtier_redis_breaker_open"),
    ("alert: KvtierRedisBreakerOpen", "for: 5m", "for: 3m"),
    ("alert: KvtierRedisBreakerOpen", "for: 5m", "for: 10m"),
    ("alert: KvtierEventsDropped", "> 0", "> 0.2"),
    ("alert: KvtierEventsDropped", "for: 10m", "for: 5m"),
    ("alert: KvtierInternalErrors", "> 0", "> 1"),
    ("alert: KvtierInternalErrors", "for: 1m", "for: 5m"),
    ("alert: KvtierInternalErrors", "severity: critical", "severity: warning"),
    ("record: kvtier:hit_ratio:rate5m", "(kvtier:request_blocks_asked:rate5m > 0)", "kvtier:request_blocks_asked:rate5m"),
    ("record: kvtier:hit_ratio:rate5m", "sum without (tier)", "sum without (instance)"),
    ("record: kvtier:tier_hit_ratio:rate5m", "(kvtier:request_blocks_asked:rate5m > 0)", "kvtier:request_blocks_asked:rate5m"),
    ("record: kvtier:recompute_ratio:rate5m", "recomputed_total", "asked_total"),
    ("record: kvtier:promotion_wait_seconds:quantile_rate5m", "histogram_quantile(0.5,", "histogram_quantile(0.9,"),
    ("record: kvtier:wait_timeout_ratio:rate5m", "(rate(kvtier_manager_promotion_wait_seconds_count[5m]) > 0)",
     "rate(kvtier_manager_promotion_wait_seconds_count[5m])"),
    ("record: kvtier:tier_job_failure_ratio:rate5m", "(rate(kvtier_tier_jobs_total[5m]) > 0)",
     "rate(kvtier_tier_jobs_total[5m])"),
    ("record: kvtier:tier_job_duration_seconds:quantile_rate5m", "histogram_quantile(0.5,", "histogram_quantile(0.9,"),
    ("record: kvtier:tier_bytes_usage:ratio", "(kvtier_tier_capacity_bytes > 0)", "kvtier_tier_capacity_bytes"),
    ("record: kvtier:tier_blocks_usage:ratio", "kvtier_tier_blocks /", "kvtier_tier_capacity_blocks /"),
    ("record: kvtier:tier_events_dropped:rate5m", "[5m]", "[1m]"),
]


def run_unit_tests(tool, rules_text):
    """`promtool test rules` over copies of the unit tests beside
    `rules_text` written as ../kvtier-rules.yml: (exit status, output)."""
    with tempfile.TemporaryDirectory() as tmp:
        os.mkdir(os.path.join(tmp, "tests"))
        with open(os.path.join(tmp, "kvtier-rules.yml"), "w", encoding="utf-8") as f:
            f.write(rules_text)
        copies = []
        for t in TESTS:
            copies.append(shutil.copy(t, os.path.join(tmp, "tests")))
        p = subprocess.run([tool, "test", "rules", *copies], capture_output=True, text=True, check=False)
        return p.returncode, p.stdout + p.stderr


class Rules(unittest.TestCase):
    def setUp(self):
        self.promtool = promtool()
        with open(RULES, encoding="utf-8") as f:
            self.text = f.read()

    def test_promtool_check_rules_accepts_them(self):
        p = subprocess.run([self.promtool, "check", "rules", RULES], capture_output=True, text=True, check=False)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_unit_tests_pass(self):
        self.assertTrue(TESTS)
        rc, out = run_unit_tests(self.promtool, self.text)
        self.assertEqual(rc, 0, out)

    def test_every_alert_has_a_unit_test_and_its_fields(self):
        tests = ""
        for t in TESTS:
            with open(t, encoding="utf-8") as f:
                tests += f.read()
        alerts = [line.split("alert:")[1].strip() for line in self.text.splitlines() if line.strip().startswith("- alert:")]
        self.assertEqual(len(alerts), 8, alerts)
        for name in alerts:
            start, end = rule_block(self.text, f"alert: {name}")
            block = self.text[start:end]
            for field in ("for:", "severity:", "summary:", "description:"):
                self.assertIn(field, block, name)
            self.assertIn(f"alertname: {name}\n", tests, f"{name} has no alert_rule_test")

    def test_every_mutant_fails_the_unit_tests(self):
        mutants = [mutate(self.text, rule, old, new) for rule, old, new in MUTANTS]
        for mutant in mutants:
            self.assertNotEqual(mutant, self.text)
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            results = list(pool.map(lambda text: run_unit_tests(self.promtool, text), mutants))
        survivors = [f"{rule}: {old!r} -> {new!r}" for (rule, old, new), (rc, _) in zip(MUTANTS, results) if rc == 0]
        self.assertEqual(survivors, [], "mutants the unit tests let through")


if __name__ == "__main__":
    unittest.main()
