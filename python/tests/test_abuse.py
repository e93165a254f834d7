"""Abuse of the Python package: whatever Python code passes or does, the
package answers right or raises, and never crashes the interpreter.

Crashes are caught by running the code in a child interpreter and
checking its exit code (a segfault there fails the test, not pytest)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from array import array

import numpy as np
import pytest

import kvtier
from kvtier import EventKind, JobResult, KvtierError, LookupResult, Status

from conftest import keys

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_child(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter with this package on its path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = PYTHON_DIR + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_child_ok(code: str) -> str:
    child = run_child(code)
    assert child.returncode == 0, f"child exited with {child.returncode}\n{child.stdout}\n{child.stderr}"
    return child.stdout


# -- keys ------------------------------------------------------------------


def test_a_key_of_wide_items_is_read_by_its_byte_length():
    wide = array("I", [1, 2, 3])  # 3 items, 12 bytes
    with kvtier.Manager(8) as m:
        h, _ = m.request_begin("r")
        short = bytes(wide)[: len(wide)]  # the 3 bytes a len()-long read sees
        m.prepare_store(h, [short])
        m.complete_store(h, [short])
        assert m.lookup(h, [wide]).hits == 0, "a never-stored key answered HIT"
        m.prepare_store(h, [wide])
        m.complete_store(h, [wide])
        assert m.lookup(h, [bytes(wide)]).hits == 1
        assert m.lookup(h, [np.array([1, 2, 3], dtype=np.uint32)]).hits == 1
        assert m.lookup(h, [memoryview(bytes(wide)).cast("I")]).hits == 1
        assert m.lookup(h, [bytearray(bytes(wide))]).hits == 1


def test_a_primary_tier_key_of_wide_items_is_read_by_its_byte_length():
    wide = array("I", [1, 2, 3])
    with kvtier.Primary(8) as p:
        h = p.request_begin("r")
        short = bytes(wide)[: len(wide)]
        p.prepare_store(h, [short])
        p.complete_store(h, [short])
        assert p.lookup([wide]).hits == 0
        assert p.lookup([short]).hits == 1


NOT_KEYS = [
    ("str", "abcd"),
    ("int", 7),
    ("None", None),
    ("float", 1.5),
    ("list", [1, 2, 3]),
    ("object", object()),
    ("non-contiguous", memoryview(b"abcdefgh")[::2]),
    ("non-contiguous numpy", np.arange(16, dtype=np.uint8)[::2]),
    ("Fortran-ordered numpy", np.asfortranarray(np.arange(16, dtype=np.uint8).reshape(4, 4))),
]


def manager_calls(m, h):
    """Every `Manager` method that takes keys, as f(keys)."""
    return {
        "lookup": lambda ks: m.lookup(h, ks),
        "prepare_load": lambda ks: m.prepare_load(h, ks),
        "complete_load": lambda ks: m.complete_load(h, ks),
        "touch": lambda ks: m.touch(h, ks),
        "set_positions": lambda ks: m.set_positions(h, ks, [16] * len(ks)),
        "prepare_store": lambda ks: m.prepare_store(h, ks),
        "complete_store": lambda ks: m.complete_store(h, ks),
        "complete_job": lambda ks: m.complete_job(1, 99, False, succeeded_keys=ks),
    }


def primary_calls(p, h):
    """Every `Primary` method that takes keys, as f(keys)."""
    return {
        "lookup": lambda ks: p.lookup(ks),
        "prepare_load": lambda ks: p.prepare_load(h, ks),
        "complete_load": lambda ks: p.complete_load(h, ks),
        "touch": lambda ks: p.touch(h, ks),
        "set_positions": lambda ks: p.set_positions(h, ks, [16] * len(ks)),
        "prepare_store": lambda ks: p.prepare_store(h, ks),
        "complete_store": lambda ks: p.complete_store(h, ks),
    }


@pytest.mark.parametrize("label,bad", NOT_KEYS, ids=[n for n, _ in NOT_KEYS])
def test_a_value_that_is_not_a_key_is_a_type_error_naming_it(label, bad):
    with kvtier.Manager(4) as m, kvtier.Primary(4) as p:
        m.add_tier(NullTier())
        h, _ = m.request_begin("r")
        ph = p.request_begin("r")
        calls = {f"Manager.{n}": f for n, f in manager_calls(m, h).items()}
        calls.update({f"Primary.{n}": f for n, f in primary_calls(p, ph).items()})
        for name, call in calls.items():
            with pytest.raises(TypeError) as info:
                call([keys(1)[0], bad])
            assert type(bad).__name__ in str(info.value), (name, str(info.value))
            assert "key 1" in str(info.value), (name, str(info.value))


@pytest.mark.parametrize("bad", ["abcd", b"abcd", 5, None, object()], ids=["str", "bytes", "int", "None", "object"])
def test_keys_that_are_not_a_list_of_keys_are_a_type_error(bad):
    with kvtier.Manager(4) as m:
        h, _ = m.request_begin("r")
        for name, call in manager_calls(m, h).items():
            if name == "set_positions" or (name == "complete_job" and bad is None):
                continue  # complete_job's succeeded_keys=None: none listed
            with pytest.raises(TypeError):
                call(bad)


def test_keys_out_of_the_key_length_range_are_invalid_keys():
    with kvtier.Manager(4) as m:
        h, _ = m.request_begin("r")
        for bad in (b"", b"x" * 65, b"x" * 4000):
            for name, call in manager_calls(m, h).items():
                if name == "complete_job":
                    continue
                with pytest.raises(KvtierError) as info:
                    call([bad])
                assert info.value.status == Status.INVALID_KEY, name


# -- every argument of every public method, wrong ------------------------

WRONG = [None, "x", 1.5, -1, 2**70, object(), [object()], b"\xff"]


def method_table(m, p, h, ph):
    """name -> (callable, the arguments that are right)."""
    k = keys(1)
    return {
        "Manager.lookup": (m.lookup, (h, k)),
        "Manager.prepare_load": (m.prepare_load, (h, k)),
        "Manager.complete_load": (m.complete_load, (h, k)),
        "Manager.touch": (m.touch, (h, k)),
        "Manager.set_positions": (m.set_positions, (h, k, [16])),
        "Manager.prepare_store": (m.prepare_store, (h, k)),
        "Manager.complete_store": (m.complete_store, (h, k, True)),
        "Manager.request_finished": (m.request_finished, (h,)),
        "Manager.request_begin": (m.request_begin, ("name",)),
        "Manager.complete_job": (m.complete_job, (1, 5, True)),
        "Manager.read_tier_stats": (m.read_tier_stats, (0,)),
        "Manager.add_tier": (m.add_tier, (NullTier(),)),
        "Manager.add_fs_tier": (m.add_fs_tier, ("/nonexistent/kvtier-abuse",)),
        "Primary.lookup": (p.lookup, (k,)),
        "Primary.prepare_load": (p.prepare_load, (ph, k)),
        "Primary.complete_load": (p.complete_load, (ph, k)),
        "Primary.touch": (p.touch, (ph, k)),
        "Primary.set_positions": (p.set_positions, (ph, k, [16])),
        "Primary.prepare_store": (p.prepare_store, (ph, k)),
        "Primary.complete_store": (p.complete_store, (ph, k, True)),
        "Primary.request_finished": (p.request_finished, (ph,)),
        "Primary.request_begin": (p.request_begin, ("name",)),
    }


def test_every_argument_of_every_method_wrong_raises_and_never_crashes():
    with kvtier.Manager(4) as m, kvtier.Primary(4) as p:
        m.add_tier(NullTier())
        h, _ = m.request_begin("r")
        ph = p.request_begin("r")
        cases = 0
        for name, (method, right) in method_table(m, p, h, ph).items():
            for position in range(len(right)):
                for wrong in WRONG:
                    args = list(right)
                    args[position] = wrong
                    cases += 1
                    try:
                        method(*args)
                    except (TypeError, ValueError, OverflowError, KvtierError, AttributeError, KeyError):
                        pass
        assert cases > 300
        # Both still answer right afterwards.
        k = keys(1, 100)
        h2, _ = m.request_begin("after")
        m.prepare_store(h2, k)
        m.complete_store(h2, k)
        assert m.lookup(h2, k).hits == 1


def test_a_wrong_manager_or_primary_option_raises():
    for options in (
        {"capacity": -1},
        {"capacity": "many"},
        {"policy": 3},
        {"policy": "nope"},
        {"promotion_answer": "sometimes"},
        {"event_capacity": 2**70},
    ):
        with pytest.raises((TypeError, ValueError, OverflowError, KvtierError, KeyError, AttributeError)):
            kvtier.Manager(**options)
    for options in ({"capacity": -1}, {"policy": None}, {"policy": "nope"}):
        with pytest.raises((TypeError, ValueError, OverflowError, KvtierError, AttributeError)):
            kvtier.Primary(**options)


def test_a_string_with_a_nul_character_is_refused_not_cut_short():
    # C reads a string up to its first NUL: "lru\0x" would pass as "lru".
    # The manager's options travel as JSON, which carries the NUL: the
    # library's parser refuses the whole string.
    with pytest.raises(KvtierError, match="primary.policy: unknown variant"):
        kvtier.Manager(policy="lru\0x")
    with pytest.raises(ValueError, match="NUL"):
        kvtier.Primary(policy="arc\0")
    m = kvtier.Manager(capacity=4)
    try:
        with pytest.raises(ValueError, match="NUL"):
            m.request_begin("r\0other")
        with pytest.raises(ValueError, match="NUL"):
            m.request_begin("r", params={"k": "v\0w"})
        with pytest.raises(ValueError, match="NUL"):
            m.add_fs_tier("/tmp\0/x")
        h, _ = m.request_begin("r")  # nothing half-made before
        m.request_finished(h)
    finally:
        m.close()
    with pytest.raises(ValueError, match="NUL"):
        kvtier.Region("name\0", slot_count=1, slot_bytes=4096)


# -- misbehaving Python tiers ------------------------------------------


class NullTier(kvtier.Tier):
    """Has nothing; finishes nothing."""

    name = "null"

    def lookup(self, key, request):
        return LookupResult.MISS

    def submit_store(self, job):
        pass

    def submit_load(self, job):
        pass


class EventTier(NullTier):
    """Reports the events it is given, once."""

    name = "events"

    def __init__(self, events):
        super().__init__()
        self.pending = list(events)

    def take_events(self):
        out, self.pending = self.pending, []
        return out


def test_an_oversize_event_key_from_a_python_tier_is_rejected_and_counted():
    # 4000 bytes overwrote the neighbouring entries; 64 KiB and 4 MiB
    # crashed the interpreter: in a child, so a crash fails this test.
    out = assert_child_ok(
        """
        import kvtier
        from kvtier import EventKind, LookupResult

        class T(kvtier.Tier):
            name = "t"
            def __init__(self, events):
                super().__init__()
                self.events = events
            def lookup(self, key, request):
                return LookupResult.MISS
            def submit_store(self, job): pass
            def submit_load(self, job): pass
            def take_events(self):
                out, self.events = self.events, []
                return out

        good = [(EventKind.STORED, bytes([i]) * 8) for i in range(1, 4)]
        for size in (65, 4000, 1 << 16, 4 << 20):
            bad = [(EventKind.STORED, b"\\xee" * size)]
            with kvtier.Manager(4, event_capacity=64) as m:
                m.add_tier(T(good[:1] + bad + good[1:] + [(EventKind.REMOVED, b"")]))
                events = [e for e in m.take_events() if e.tier == 1]
                got = [k for e in events for k in e.keys]
                assert got == [k for _, k in good], (size, got)
                stats = m.read_tier_stats(1)
                assert stats["events_rejected"].value == 2, (size, stats["events_rejected"])
                assert stats["callback_errors"].value >= 2, size
                errors = m.take_errors()
                assert any(f"{size} bytes" in e for e in errors), errors
        print("ok")
        """
    )
    assert out.strip() == "ok"


@pytest.mark.parametrize(
    "event",
    [("STORED", "a str"), (99, b"k" * 8), ("nonsense", b"k" * 8), (EventKind.STORED, 12345), None, 7, (EventKind.STORED,)],
    ids=["str key", "unknown kind", "str kind", "int key", "None", "int", "short tuple"],
)
def test_a_malformed_event_from_a_python_tier_is_rejected_and_counted(event):
    good = (EventKind.STORED, b"g" * 8)
    with kvtier.Manager(4, event_capacity=64) as m:
        tier = EventTier([good, event, good])
        m.add_tier(tier)
        got = [k for e in m.take_events() if e.tier == 1 for k in e.keys]
        assert got == [good[1], good[1]], "the good events around a bad one are kept"
        assert m.read_tier_stats(1)["callback_errors"].value >= 1
        assert m.take_errors(), "the library logged the bad event"


def test_too_many_events_from_a_python_tier_wait_for_the_next_take():
    events = [(EventKind.STORED, i.to_bytes(8, "big")) for i in range(5000)]
    with kvtier.Manager(4, event_capacity=1024) as m:
        m.add_tier(EventTier(events))
        seen = []
        for _ in range(10):
            seen.extend(k for e in m.take_events() if e.tier == 1 for k in e.keys)
        assert seen == [k for _, k in events]


class ResultTier(NullTier):
    """Stores nothing, and reports the results it is given for its jobs."""

    name = "results"

    def __init__(self, make):
        super().__init__()
        self.make = make
        self.jobs = []
        self.done = []

    def submit_store(self, job):
        self.jobs.append(job)
        self.done.extend(self.make(job))

    def poll_finished(self):
        out, self.done = self.done, []
        return out


BAD_RESULTS = {
    "not a JobResult": lambda job: [object(), JobResult(job.id)],
    "negative id": lambda job: [JobResult(-1), JobResult(job.id)],
    "huge id": lambda job: [JobResult(2**70), JobResult(job.id)],
    "str id": lambda job: [JobResult("x"), JobResult(job.id)],
    "negative bytes": lambda job: [JobResult(job.id, bytes=-5)],
    "huge duration": lambda job: [JobResult(job.id, duration_ns=2**80)],
    "str keys": lambda job: [JobResult(job.id, False, succeeded_keys="abc")],
    "int in keys": lambda job: [JobResult(job.id, False, succeeded_keys=[7])],
    "oversize key": lambda job: [JobResult(job.id, False, succeeded_keys=[b"x" * 4000])],
    "not iterable": lambda job: 5,
}


@pytest.mark.parametrize("label", list(BAD_RESULTS))
def test_a_malformed_job_result_from_a_python_tier_fails_its_job_and_is_counted(label):
    with kvtier.Manager(4) as m:
        tier = ResultTier(BAD_RESULTS[label])
        m.add_tier(tier)
        h, _ = m.request_begin("r")
        k = keys(2)
        m.prepare_store(h, k)
        m.complete_store(h, k)
        assert tier.jobs
        for _ in range(4):
            m.schedule_end()
        assert not m.has_pending_work(), "the job was reported, not left in flight"
        stats = m.read_tier_stats(1)
        assert stats["callback_errors"].value + stats["tier_bugs"].value >= 1, label
        assert tier.errors or stats["callback_errors"].value >= 1


class RaisingTier(NullTier):
    """Every optional method raises."""

    name = "raising"

    def __getattribute__(self, name):
        if name in {
            "lookup",
            "poll_finished",
            "touch",
            "on_new_request",
            "on_request_finished",
            "on_schedule_end",
            "has_pending_work",
            "stats",
            "take_events",
        }:

            def boom(*args, **kwargs):
                raise RuntimeError(name)

            return boom
        return super().__getattribute__(name)


class WrongTypesTier(NullTier):
    """Every method answers something of the wrong type."""

    name = "wrong"

    def lookup(self, key, request):
        return "HIT"

    def on_new_request(self, request):
        return 42

    def has_pending_work(self):
        return object()

    def stats(self):
        return {"ok": 1.0, "bad": "many", 7: 1.0, "x" * 200: (1.0, True)}

    def poll_finished(self):
        return None

    def take_events(self):
        return 12


@pytest.mark.parametrize("tier_class", [RaisingTier, WrongTypesTier])
def test_a_tier_that_raises_or_answers_nonsense_costs_no_wrong_answer(tier_class):
    with kvtier.Manager(4, event_capacity=16) as m:
        tier = tier_class()
        m.add_tier(tier)
        h, _ = m.request_begin("r")
        k = keys(2)
        assert m.lookup(h, k).hits == 0
        m.prepare_store(h, k)
        m.complete_store(h, k)
        m.touch(h, k)
        m.schedule_end()
        m.take_events()
        m.read_tier_stats(1)
        m.metrics_prometheus()
        m.request_finished(h)
        assert m.read_tier_stats(1)["callback_errors"].value >= 3
        assert m.lookup(m.request_begin("r2")[0], k).hits == 2


def test_a_stats_callback_that_fails_is_counted():
    class T(NullTier):
        def stats(self):
            raise RuntimeError("no stats")

    with kvtier.Manager(4) as m:
        m.add_tier(T())
        before = m.read_tier_stats(1)["callback_errors"].value
        after = m.read_tier_stats(1)["callback_errors"].value
        assert after > before, "a failing stats callback was ignored silently"


# -- threads ---------------------------------------------------------------


def test_threads_sharing_a_manager_each_get_their_own_answers():
    # Thread t stores `mine` and never `absent`: every lookup of its own
    # must answer exactly that, whatever the other threads do meanwhile.
    threads, rounds, per = 4, 400, 3
    failures: list[str] = []
    with kvtier.Manager(threads * per + 8) as m:
        go = threading.Barrier(threads)

        def work(t: int) -> None:
            try:
                h, _ = m.request_begin(f"t{t}")
                mine = keys(per, 1000 * (t + 1))
                absent = keys(per, 1000 * (t + 1) + 500)
                plan = m.prepare_store(h, mine)
                m.complete_store(h, [mine[j] for j in plan.store_indices])
                go.wait()
                for i in range(rounds):
                    answer = m.lookup(h, mine)
                    if answer.hits != per:
                        failures.append(f"thread {t} round {i}: {answer} for its stored keys")
                    answer = m.lookup(h, absent[t % per :])
                    if answer.hits != 0 or answer.stop != LookupResult.MISS:
                        failures.append(f"thread {t} round {i}: {answer} for absent keys")
                    slots = m.prepare_load(h, mine)
                    if len(set(slots)) != per:
                        failures.append(f"thread {t} round {i}: slots {slots}")
                    m.complete_load(h, mine)
                    plan = m.prepare_store(h, mine)
                    if plan.store_indices or plan.evicted:
                        failures.append(f"thread {t} round {i}: {plan} for resident keys")
                    m.take_events()
                m.request_finished(h)
            except BaseException as e:  # noqa: BLE001 - reported below
                failures.append(f"thread {t}: {e!r}")

        pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
    assert not failures, f"{len(failures)} wrong answers: {failures[:10]}"


def test_threads_sharing_a_primary_tier_cannot_overlap_its_calls():
    failures: list[str] = []
    with kvtier.Primary(64) as p:

        def work(t: int) -> None:
            try:
                mine = keys(3, 1000 * (t + 1))
                for i in range(200):
                    h = p.request_begin(f"t{t}-{i}")
                    plan = p.prepare_store(h, mine)
                    p.complete_store(h, [mine[j] for j in plan.store_indices])
                    if p.lookup(mine).hits != 3:
                        failures.append(f"thread {t} round {i}")
                    p.request_finished(h)
            except BaseException as e:  # noqa: BLE001 - reported below
                failures.append(f"thread {t}: {e!r}")

        pool = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
    assert not failures, failures[:10]


def test_closing_a_manager_while_other_threads_call_it_never_crashes():
    assert_child_ok(
        """
        import threading
        import kvtier
        from kvtier import KvtierError

        def key(i):
            return i.to_bytes(8, "big") + b"\\0\\0\\0\\0"

        for round in range(20):
            m = kvtier.Manager(64)
            go = threading.Event()
            def work(t):
                go.wait()
                try:
                    h, _ = m.request_begin(f"t{t}")
                    for i in range(2000):
                        m.lookup(h, [key(t * 10000 + i)])
                        m.read_stats()
                except KvtierError as e:
                    assert e.status == kvtier.Status.CLOSED, e
            pool = [threading.Thread(target=work, args=(t,)) for t in range(3)]
            for t in pool:
                t.start()
            go.set()
            m.close()
            for t in pool:
                t.join()
        print("ok")
        """
    )


# -- use after close ----------------------------------------------------


def test_a_region_buffer_used_after_close_never_crashes(tmp_path, region_name):
    out = assert_child_ok(
        f"""
        import kvtier
        region = kvtier.Region({region_name!r}, 4, 4096, directory={str(tmp_path)!r})
        view = region.buffer()
        slot = region.slot(1)
        array = region.array()
        try:
            region.close()
        except BufferError as e:
            print("refused:", e)
        view[0] = 1
        slot[0] = 2
        array[3, 0] = 3
        assert view[0] == 1 and bytes(region.slot(1)[:1]) == b"\\x02"
        del view, slot, array
        assert region.close() is False
        try:
            region.buffer()
        except kvtier.KvtierError as e:
            print("closed:", e.status.name)
        """
    )
    assert "refused:" in out and "closed: CLOSED" in out


def test_a_region_dropped_while_its_arrays_live_keeps_the_mapping(tmp_path, region_name):
    out = assert_child_ok(
        f"""
        import gc
        import kvtier
        region = kvtier.Region({region_name!r}, 4, 4096, directory={str(tmp_path)!r})
        array = region.array()
        view = region.slot(2)
        del region
        gc.collect()
        array[:] = 7
        view[0] = 9
        assert int(array.sum()) == 7 * 4 * 4096 + 2
        print("ok")
        """
    )
    assert out.strip() == "ok"


def test_a_closed_manager_or_primary_raises_closed_for_every_call():
    m = kvtier.Manager(4)
    h, _ = m.request_begin("r")
    m.close()
    m.close()  # twice is fine
    for call in manager_calls(m, h).values():
        with pytest.raises(KvtierError) as info:
            call(keys(1))
        assert info.value.status == Status.CLOSED
    for call in (m.read_stats, m.take_events, m.schedule_end, m.metrics_prometheus, m.take_errors):
        with pytest.raises(KvtierError):
            call()
    p = kvtier.Primary(4)
    ph = p.request_begin("r")
    p.close()
    for call in primary_calls(p, ph).values():
        with pytest.raises(KvtierError) as info:
            call(keys(1))
        assert info.value.status == Status.CLOSED


def test_a_tier_that_closes_its_manager_from_a_callback_never_crashes():
    assert_child_ok(
        """
        import kvtier
        from kvtier import LookupResult

        class Closer(kvtier.Tier):
            name = "closer"
            manager = None
            def lookup(self, key, request):
                self.manager.close()
                return LookupResult.MISS
            def submit_store(self, job): pass
            def submit_load(self, job): pass

        tier = Closer()
        m = kvtier.Manager(4)
        tier.manager = m
        m.add_tier(tier)
        h, _ = m.request_begin("r")
        m.lookup(h, [b"k" * 12])
        try:
            m.lookup(h, [b"k" * 12])
        except kvtier.KvtierError as e:
            assert e.status == kvtier.Status.CLOSED
        print("ok")
        """
    )
