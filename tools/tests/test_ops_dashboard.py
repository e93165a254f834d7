"""packaging/grafana/kvtier.json and packaging/prometheus/kvtier-rules.yml
against the metric families kvtier really exports:

- every family name the dashboard and the rules use (a histogram's
  `_bucket`, `_sum` and `_count` series under its family) is in
  docs/metrics.md's family tables, and every recording rule the dashboard
  uses is recorded in the rules, so a renamed family or rule fails here;
- a real Prometheus scrapes a real kvtier `/metrics` endpoint (a manager
  made from JSON with a metrics listener, the primary tier, an fs tier
  and a redis tier with back-pressure on whose server does not answer,
  through the Python package over target/release/libkvtier.so) with the
  rules loaded, while a short workload runs; then every panel's
  expression, with the dashboard's variables replaced by concrete values,
  is an instant query that succeeds and (unless it ends in a `> 0` filter
  that drops zero rates) returns series, every variable's label_values()
  selector matches series, every recording rule and every alert's
  expression (without its threshold) has series, and the recorded hit
  ratios are the endpoint's counters divided.

The second part needs prometheus (Debian's prometheus package; `make
test-ops` installs it when run as root) and the library (`make lib`):
skipped without them, failed under KVTIER_REQUIRE_ALL=1."""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DASHBOARD = os.path.join(ROOT, "packaging", "grafana", "kvtier.json")
RULES = os.path.join(ROOT, "packaging", "prometheus", "kvtier-rules.yml")
METRICS_DOC = os.path.join(ROOT, "docs", "metrics.md")
LIBRARY = os.path.join(ROOT, "target", "release", "libkvtier.so")

#: What the dashboard's variables become in the queries sent here.
VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "${instance}": ".*",
    "$instance": ".*",
    "${tier}": ".*",
    "$tier": ".*",
}

FAMILY_ROW = re.compile(r"^\| `(kvtier_[a-z0-9_]+)` \| (counter|gauge|histogram) \|", re.M)
FAMILY_NAME = re.compile(r"(?<![A-Za-z0-9_:])kvtier_[a-z0-9_]+")
RECORDED_NAME = re.compile(r"(?<![A-Za-z0-9_:])kvtier:[a-z0-9_:]+")
LABEL_VALUES = re.compile(r"^label_values\((.*),\s*([a-z_]+)\)$")


def skip_or_fail(why):
    """Skips the test, or fails it under KVTIER_REQUIRE_ALL=1."""
    if os.environ.get("KVTIER_REQUIRE_ALL") == "1":
        raise AssertionError(f"{why}, and KVTIER_REQUIRE_ALL=1 requires every test to run")
    raise unittest.SkipTest(why)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def documented_families():
    """{family: type} of docs/metrics.md's tables."""
    return dict(FAMILY_ROW.findall(read(METRICS_DOC)))


def dashboard():
    return json.loads(read(DASHBOARD))


def panels(dash):
    """Every panel, those inside rows included."""
    for p in dash["panels"]:
        yield p
        yield from p.get("panels", [])


def expressions(dash):
    """(panel title, expression) of every query of every panel."""
    return [(p["title"], t["expr"]) for p in panels(dash) for t in p.get("targets", [])]


def variable_queries(dash):
    """(variable name, query) of the dashboard's query variables."""
    out = []
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]
            out.append((v["name"], q["query"] if isinstance(q, dict) else q))
    return out


def recorded_rules():
    return set(re.findall(r"^\s*- record: (\S+)$", read(RULES), re.M))


def alert_expressions():
    """{alert: expression} of the rules file (an `expr:` on its line, or a
    folded `>-` block below it)."""
    out, lines = {}, read(RULES).splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^\s*- alert: (\S+)$", line)
        if not m:
            continue
        j = next(k for k in range(i + 1, len(lines)) if lines[k].strip().startswith("expr:"))
        expr = lines[j].split("expr:", 1)[1].strip()
        if expr == ">-":
            indent = len(lines[j + 1]) - len(lines[j + 1].lstrip())
            body = []
            for k in range(j + 1, len(lines)):
                if len(lines[k]) - len(lines[k].lstrip()) < indent or not lines[k].strip():
                    break
                body.append(lines[k].strip())
            expr = " ".join(body)
        out[m.group(1)] = expr
    return out


def substitute(expr):
    for name in sorted(VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, VARIABLES[name])
    assert "$" not in expr, f"a variable left in {expr}"
    return expr


def family_of(name, families):
    """The documented family a series name belongs to, or None."""
    if name in families:
        return name
    for suffix in ("_bucket", "_sum", "_count"):
        base = name[: -len(suffix)]
        if name.endswith(suffix) and families.get(base) == "histogram":
            return base
    return None


class Names(unittest.TestCase):
    """The names the dashboard and the rules use exist."""

    def setUp(self):
        self.families = documented_families()
        self.assertGreater(len(self.families), 100, "docs/metrics.md's family tables not found")

    def check_names(self, where, text):
        names = set(FAMILY_NAME.findall(text))
        self.assertTrue(names, where)
        unknown = sorted(n for n in names if family_of(n, self.families) is None)
        self.assertEqual(unknown, [], f"{where} uses families docs/metrics.md does not list")

    def test_every_family_the_rules_use_is_documented(self):
        self.check_names("kvtier-rules.yml", read(RULES))

    def test_every_family_the_dashboard_uses_is_documented(self):
        dash = dashboard()
        text = "\n".join(e for _, e in expressions(dash)) + "\n" + "\n".join(q for _, q in variable_queries(dash))
        self.check_names("kvtier.json", text)

    def test_every_recording_rule_the_dashboard_uses_is_recorded(self):
        recorded = recorded_rules()
        used = {n for _, e in expressions(dashboard()) for n in RECORDED_NAME.findall(e)}
        self.assertTrue(used)
        self.assertEqual(sorted(used - recorded), [], "not recorded in kvtier-rules.yml")

    def test_a_renamed_family_is_caught(self):
        self.assertIsNone(family_of("kvtier_tier_job_failure_total", self.families))
        self.assertIsNone(family_of("kvtier_tier_events_dropped_total_bucket", self.families))
        self.assertEqual(family_of("kvtier_tier_job_duration_seconds_bucket", self.families),
                         "kvtier_tier_job_duration_seconds")

    def test_the_dashboard_shape(self):
        dash = dashboard()
        self.assertGreaterEqual(dash["schemaVersion"], 36)
        variables = {v["name"]: v for v in dash["templating"]["list"]}
        self.assertEqual((variables["datasource"]["type"], variables["datasource"]["query"]), ("datasource", "prometheus"))
        for name in ("instance", "tier"):
            self.assertEqual(variables[name]["datasource"]["uid"], "${datasource}")
        ids = [p["id"] for p in panels(dash)]
        self.assertEqual(len(ids), len(set(ids)), "panel ids repeat")
        for p in panels(dash):
            if p["type"] == "row":
                continue
            self.assertEqual(p["datasource"], {"type": "prometheus", "uid": "${datasource}"}, p["title"])
            self.assertTrue(p["targets"], p["title"])
            for t in p["targets"]:
                self.assertEqual(t["datasource"]["uid"], "${datasource}", p["title"])
                self.assertTrue(t["legendFormat"], p["title"])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        return json.load(e)


class Prometheus:
    """A Prometheus server scraping `target` every second with the rules
    loaded, in a temporary directory; `close` kills it."""

    def __init__(self, exe, target, tmp):
        self.port = free_port()
        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w", encoding="utf-8") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    f"rule_files:\n  - {RULES}\n"
                    f"scrape_configs:\n  - job_name: kvtier\n    static_configs:\n      - targets: ['{target}']\n")
        self.log = open(os.path.join(tmp, "prometheus.log"), "w", encoding="utf-8")
        self.child = subprocess.Popen(
            [exe, f"--config.file={config}", f"--storage.tsdb.path={os.path.join(tmp, 'data')}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def api(self, path, **params):
        query = urllib.parse.urlencode(params, doseq=True)
        return get_json(f"http://127.0.0.1:{self.port}/api/v1/{path}?{query}")

    def wait_for(self, expr, timeout=60):
        """The result of instant query `expr` once it has one (None after
        `timeout` seconds); an error answer fails at once."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                answer = self.api("query", query=expr)
            except (urllib.error.URLError, ConnectionError):
                answer = None
            if answer is not None:
                assert answer["status"] == "success", f"{expr}: {answer}"
                if answer["data"]["result"]:
                    return answer["data"]["result"]
            time.sleep(0.25)
        return None

    def close(self):
        self.child.kill()
        self.child.wait()
        self.log.close()


def run_workload(m):
    """Stores 12 blocks, 4 a request, through a 4-slot primary tier
    (evicted there, cascaded to fs and to the unanswering redis tier),
    then asks for them again, 4 a request: each 4 promoted from fs (a
    wait each); then for the last 4 (now in the primary tier) and 2 keys
    no tier has (recomputed).  Events are dropped all along."""
    def settle():
        deadline = time.monotonic() + 10
        while m.has_pending_work():
            assert time.monotonic() < deadline, "work still pending after 10 s"
            m.schedule_end()
            time.sleep(0.002)

    keys = [b"block-%02d" % i for i in range(12)]
    groups = [keys[i:i + 4] for i in range(0, 12, 4)]
    for n, ks in enumerate(groups):
        with m.request(f"store-{n}") as r:
            m.prepare_store(r, ks)
            m.complete_store(r, ks)
        settle()
    for n, ks in enumerate(groups + [groups[-1] + [b"never-stored-0", b"never-stored-1"]]):
        with m.request(f"load-{n}") as r:
            answer = m.lookup(r, ks)
            while not answer.settled:
                m.schedule_end()
                time.sleep(0.002)
                answer = m.lookup(r, ks)
            ready = ks[:answer.hits]
            if ready:
                m.prepare_load(r, ready)
                m.complete_load(r, ready)
        settle()


class RealPrometheus(unittest.TestCase):
    """Every panel's query against a real Prometheus scraping kvtier."""

    @classmethod
    def setUpClass(cls):
        exe = shutil.which("prometheus")
        if exe is None:
            skip_or_fail("prometheus is not installed (Debian: apt-get install -y prometheus; `make test-ops` installs it)")
        if not os.path.exists(LIBRARY) and "KVTIER_LIBRARY" not in os.environ:
            skip_or_fail(f"{LIBRARY} is not built (`make lib`)")
        sys.path.insert(0, os.path.join(ROOT, "python"))
        import kvtier  # noqa: E402 (the package of this checkout)

        cls.tmp = tempfile.TemporaryDirectory()
        port = free_port()
        config = {
            "block_bytes": 4096,
            "primary": {"capacity": 4, "event_capacity": 2},
            "progress": {"wait_steps": 2},
            "tiers": [
                # Room for every block (a 4 KiB block takes 8 KiB on disk).
                {"type": "fs",
                 "options": {"directory": os.path.join(cls.tmp.name, "fs"), "capacity_bytes": 16 * 8192,
                             "read_threads": 1, "write_threads": 1, "direct_io": False}},
                {"type": "redis", "backpressure": {"warmup": 1},
                 "options": {"nodes": [f"127.0.0.1:{free_port()}"], "connections": 1,
                             "connect_timeout_ms": 100, "breaker_failures": 1}},
            ],
            "metrics": {"listen": f"127.0.0.1:{port}"},
        }
        cls.manager = kvtier.Manager.from_json(config)
        cls.endpoint = f"http://127.0.0.1:{port}/metrics"
        cls.prometheus = Prometheus(exe, f"127.0.0.1:{port}", cls.tmp.name)
        try:
            # A first scrape before the workload, so that rates rise.
            if cls.prometheus.wait_for('up{job="kvtier"} == 1') is None:
                raise AssertionError("Prometheus never scraped the endpoint")
            run_workload(cls.manager)
            if cls.prometheus.wait_for('count_over_time(kvtier_manager_requests_finished_total[1m]) > 2 '
                                       'and kvtier_manager_requests_finished_total == 7') is None:
                raise AssertionError("Prometheus never scraped the workload's counters")
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.prometheus.close()
        cls.manager.close()
        cls.tmp.cleanup()

    def test_every_panel_query_succeeds_with_series(self):
        failures = []
        for title, expr in expressions(dashboard()):
            query = substitute(expr)
            may_be_empty = query.rstrip().endswith("> 0")
            result = self.prometheus.wait_for(query, timeout=2 if may_be_empty else 30)
            if result is None and not may_be_empty:
                failures.append(f"{title}: {query}")
        self.assertEqual(failures, [], "queries that never returned series")

    def test_the_recorded_hit_ratios_are_the_endpoints_counters_divided(self):
        # Both counters rose from 0 (scraped before the workload) within
        # the window, so their rates' quotient is that of their values.
        with urllib.request.urlopen(self.endpoint, timeout=10) as r:
            text = r.read().decode()
        asked = float(re.search(r"^kvtier_manager_request_blocks_asked_total (\S+)$", text, re.M).group(1))
        served = {t: float(v) for t, v in
                  re.findall(r'^kvtier_manager_request_blocks_served_total\{tier="([^"]+)"\} (\S+)$', text, re.M)}
        self.assertGreater(asked, 0)
        self.assertEqual((asked, served), (18, {"primary": 4, "fs": 12, "redis": 0}))
        expected = {f'kvtier:tier_hit_ratio:rate5m{{tier="{t}"}}': n / asked for t, n in served.items()}
        expected["kvtier:hit_ratio:rate5m"] = sum(served.values()) / asked
        expected["kvtier:recompute_ratio:rate5m"] = 1 - sum(served.values()) / asked
        # The rules are evaluated every second: until one evaluation has
        # seen the last scrape, the values may be those of an earlier one.
        deadline = time.monotonic() + 30
        while True:
            got = {}
            for name in expected:
                result = self.prometheus.wait_for(name) or []
                got[name] = [float(r["value"][1]) for r in result]
            if all(len(v) == 1 and abs(v[0] - expected[k]) < 1e-9 for k, v in got.items()):
                break
            self.assertLess(time.monotonic(), deadline, f"recorded {got}, expected {expected}")
            time.sleep(0.5)
        tiers = {r["metric"]["tier"] for r in self.prometheus.wait_for("kvtier:tier_hit_ratio:rate5m")}
        self.assertEqual(tiers, set(served))

    def test_every_alert_expression_before_its_threshold_has_series(self):
        # What each alert compares with its threshold exists for the real
        # endpoint's label sets (an fs tier's, the redis tier's, the
        # manager's): a join that matched nothing would never fire.
        exprs = alert_expressions()
        self.assertEqual(len(exprs), 8, exprs)
        missing = []
        for name, expr in exprs.items():
            m = re.match(r"^(.*\S)\s*(?:>|==)\s*[0-9.]+$", expr, re.S)
            self.assertIsNotNone(m, f"{name}: {expr}")
            if self.prometheus.wait_for(m.group(1), timeout=30) is None:
                missing.append(f"{name}: {m.group(1)}")
        self.assertEqual(missing, [], "alert expressions with no series")

    def test_every_recording_rule_has_series(self):
        missing = [r for r in sorted(recorded_rules()) if self.prometheus.wait_for(r, timeout=30) is None]
        self.assertEqual(missing, [], "recording rules with no series")

    def test_every_variable_selector_matches_series(self):
        for name, query in variable_queries(dashboard()):
            m = LABEL_VALUES.match(query)
            self.assertIsNotNone(m, f"${name}: {query}")
            selector, label = substitute(m.group(1)), m.group(2)
            answer = self.prometheus.api("series", **{"match[]": selector})
            self.assertEqual(answer["status"], "success", answer)
            values = {s.get(label) for s in answer["data"]}
            self.assertTrue(values and None not in values, f"${name}: {answer}")

    def test_rules_load_without_errors(self):
        answer = self.prometheus.api("rules")
        self.assertEqual(answer["status"], "success", answer)
        for group in answer["data"]["groups"]:
            for rule in group["rules"]:
                self.assertEqual(rule["health"], "ok", rule)


if __name__ == "__main__":
    unittest.main()
