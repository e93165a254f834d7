"""The guard of a shared C handle (`kvtier._handle.Handle`): no call runs on
a freed handle, the handle is freed once, and `take` gets it untouched.
Each case runs on the guard without a lock (a build with the GIL) and on
the locked one (calls that take turns; every call of a free-threaded
build)."""

from __future__ import annotations

import threading

import pytest

from kvtier import KvtierError, Status
from kvtier._handle import GIL, Handle

PTR = object()  # stands in for the C pointer


def handle(exclusive: bool) -> tuple[Handle, list[object]]:
    freed: list[object] = []
    return Handle(PTR, freed.append, "thing", exclusive=exclusive), freed


GUARDS = pytest.mark.parametrize("exclusive", [False, True], ids=["unlocked", "locked"])


def test_the_guard_takes_no_lock_only_with_the_gil_and_overlapping_calls():
    assert Handle(PTR, lambda p: None, "thing").fast is GIL
    assert Handle(PTR, lambda p: None, "thing", exclusive=True).fast is False


@GUARDS
def test_a_close_while_a_call_is_inside_frees_once_when_it_leaves(exclusive):
    h, freed = handle(exclusive)
    seen = []

    def inside(ptr):
        h.close()
        seen.append((ptr, list(freed)))
        return 7

    assert h.call(inside) == 7
    assert seen == [(PTR, [])]  # not freed under the call
    assert freed == [PTR]
    h.close()
    assert freed == [PTR]


@GUARDS
def test_a_call_after_close_raises_closed_and_never_runs(exclusive):
    h, freed = handle(exclusive)
    h.close()
    ran = []
    with pytest.raises(KvtierError) as info:
        h.call(ran.append)
    assert info.value.status == Status.CLOSED
    assert ran == [] and freed == [PTR] and not h.inside


@GUARDS
def test_a_failing_call_still_leaves_the_handle(exclusive):
    h, freed = handle(exclusive)

    def fails(ptr):
        h.close()
        raise ValueError("no")

    with pytest.raises(ValueError):
        h.call(fails)
    assert freed == [PTR] and not h.inside


@GUARDS
def test_take_waiting_for_a_call_gets_the_handle_and_nothing_frees_it(exclusive):
    h, freed = handle(exclusive)
    ptr = h.enter()
    taken = []
    taker = threading.Thread(target=lambda: taken.append(h.take()))
    taker.start()
    # `take` marks the handle closing under its lock, then waits (letting
    # the lock go), so the call below leaves while it waits.
    while not h.closing:
        pass
    h.leave()
    taker.join()
    assert ptr is PTR and taken == [PTR] and freed == []
    assert h.take() is None


@GUARDS
def test_closes_racing_calls_of_other_threads_free_once_after_the_last_call(exclusive):
    for _ in range(50):
        h, freed = handle(exclusive)
        start = threading.Barrier(5)
        bad = []

        def work():
            start.wait()
            for _ in range(200):
                try:
                    h.call(lambda ptr: bad.append(ptr) if freed or ptr is not PTR else None)
                except KvtierError:
                    return

        pool = [threading.Thread(target=work) for _ in range(4)]
        for t in pool:
            t.start()
        start.wait()
        h.close()
        for t in pool:
            t.join()
        assert bad == [] and freed == [PTR] and not h.inside
