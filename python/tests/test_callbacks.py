"""Python callbacks for log records, events and request reports: each
delivers, an exception it raises is kept and never reaches the library,
and the callback lives as long as the library may call it."""

from __future__ import annotations

import gc
import logging
import threading

import pytest

import kvtier
from kvtier import EventKind, KvtierError, LogLevel, Status

from conftest import keys


@pytest.fixture
def no_log_callback():
    yield
    kvtier.set_log_callback(None)
    kvtier.log_callback_errors.clear()


def store(m: kvtier.Manager, name: str, k: list[bytes]) -> None:
    with m.request(name) as r:
        m.prepare_store(r, k)
        m.complete_store(r, k)


# -- log records ---------------------------------------------------------


def test_log_records_reach_the_callback(no_log_callback):
    lines = []
    kvtier.set_log_callback(lambda *line: lines.append(line), LogLevel.INFO)
    kvtier.Manager(4).close()
    assert any(
        level is LogLevel.INFO and target == "kvtier::config" and "manager built: 4 primary slots" in message
        for level, target, message in lines
    ), lines
    # Records below the level are not delivered; None removes the callback.
    lines.clear()
    kvtier.set_log_callback(lambda *line: lines.append(line), "warn")
    kvtier.Manager(4).close()
    assert lines == []
    kvtier.set_log_callback(lambda *line: lines.append(line), LogLevel.INFO)
    kvtier.set_log_callback(None)
    kvtier.Manager(4).close()
    assert lines == []


def test_log_records_come_on_the_thread_that_did_the_work(no_log_callback):
    threads = []
    kvtier.set_log_callback(lambda *_: threads.append(threading.get_ident()), LogLevel.INFO)
    worker = threading.Thread(target=lambda: kvtier.Manager(4).close())
    worker.start()
    worker.join()
    assert threads == [worker.ident]


def test_a_raising_log_callback_is_kept_not_propagated(no_log_callback, caplog):
    def broken(level, target, message):
        raise ValueError(f"cannot log {target}")

    kvtier.set_log_callback(broken, LogLevel.INFO)
    with caplog.at_level(logging.ERROR, logger="kvtier.callbacks"):
        with kvtier.Manager(4) as m:  # logs at info: the callback raises
            store(m, "r", keys(1))
    assert [str(e) for e in kvtier.log_callback_errors][:1] == ["cannot log kvtier::config"]
    assert "the log callback raised ValueError" in caplog.text


def test_log_to_logging(no_log_callback, caplog):
    kvtier.log_to_logging(LogLevel.INFO)
    with caplog.at_level(logging.INFO, logger="kvtier"):
        kvtier.Manager(4).close()
    assert any(r.name == "kvtier.config" and r.levelno == logging.INFO for r in caplog.records)


def test_log_callback_arguments(no_log_callback):
    with pytest.raises(TypeError, match="callback: expected a callable or None, got int"):
        kvtier.set_log_callback(5)
    with pytest.raises(ValueError, match="max_level: expected a LogLevel"):
        kvtier.set_log_callback(print, "loud")
    with pytest.raises(ValueError, match="max_level: expected a LogLevel"):
        kvtier.set_log_callback(print, 17)


# -- events --------------------------------------------------------------


def test_events_reach_the_callback_as_they_happen():
    with kvtier.Manager(4, event_capacity=64) as m:
        seen = []
        m.set_event_callback(seen.append)
        store(m, "r", keys(2))
        assert [(e.kind, e.tier, e.keys) for e in seen] == [(EventKind.STORED, 0, keys(2))]
        assert m.take_events() == []  # not queued too
        m.set_event_callback(seen.append, also_queue=True)
        store(m, "s", keys(1, 5))
        assert seen[-1].keys == keys(1, 5)
        assert [e.keys for e in m.take_events()] == [keys(1, 5)]
        m.set_event_callback(None)
        store(m, "t", keys(1, 9))
        assert seen[-1].keys == keys(1, 5)
        assert [e.keys for e in m.take_events()] == [keys(1, 9)]


def test_a_raising_event_callback_is_kept_and_the_call_answers():
    with kvtier.Manager(4, event_capacity=64) as m:
        calls = []

        def broken(event):
            calls.append(event)
            raise RuntimeError("sink down")

        m.set_event_callback(broken)
        with m.request("r") as r:
            plan = m.prepare_store(r, keys(2))
            assert m.complete_store(r, keys(2)).ready == 2
        assert plan.slots == [0, 1] and len(calls) == 1
        assert [str(e) for e in m.callback_errors] == ["sink down"]
        # Installed still; the manager answers on.
        store(m, "s", keys(1, 7))
        assert len(calls) == 2 and len(m.callback_errors) == 2


def test_a_callback_calling_the_manager_is_refused_and_kept():
    with kvtier.Manager(4, event_capacity=64) as m:
        m.set_event_callback(lambda event: m.schedule_end())
        store(m, "r", keys(1))
        [error] = m.callback_errors
        assert isinstance(error, KvtierError) and error.status == Status.REENTRANT


def test_callback_errors_keep_the_latest_64():
    with kvtier.Manager(256, event_capacity=256) as m:
        m.set_event_callback(lambda event: 1 / 0)
        for i in range(70):
            store(m, f"r{i}", keys(1, i))
        assert len(m.callback_errors) == 64
        assert all(isinstance(e, ZeroDivisionError) for e in m.callback_errors)


def test_a_callback_lives_while_installed():
    with kvtier.Manager(4, event_capacity=64) as m:
        seen = []

        def install():
            def only_reference(event):  # no other reference than the manager's
                seen.append(event.keys)

            m.set_event_callback(only_reference)

        install()
        gc.collect()
        store(m, "r", keys(1))
        assert seen == [keys(1)]


def test_event_callback_arguments():
    with kvtier.Manager(4, event_capacity=8) as m:
        with pytest.raises(TypeError, match="callback: expected a callable or None, got str"):
            m.set_event_callback("print")
        with pytest.raises(TypeError, match="kvtier_manager_set_event_callback: also_queue: expected a bool"):
            m.set_event_callback(print, also_queue="yes")


# -- request reports -----------------------------------------------------


def test_request_reports():
    with kvtier.Manager(8) as m:
        reports = []
        m.set_request_report_callback(reports.append)
        store(m, "writer", keys(2))
        with m.request("reader") as r:
            answer = m.lookup(r, keys(3))
            ready = keys(3)[: answer.hits]
            m.prepare_load(r, ready)
            m.complete_load(r, ready)
        writer, reader = reports
        assert (writer.name, writer.stored, writer.loaded) == ("writer", 2, 0)
        assert (reader.name, reader.asked, reader.loaded, reader.recomputed) == ("reader", 3, 2, 1)
        assert reader.tier_hits == [2] and reader.tier_served == [2]
        assert reader.request > writer.request > 0
        m.set_request_report_callback(None)
        store(m, "unseen", keys(1, 9))
        assert len(reports) == 2


def test_a_raising_report_callback_is_kept():
    with kvtier.Manager(8) as m:
        m.set_request_report_callback(lambda report: report.no_such_field)
        store(m, "r", keys(1))
        [error] = m.callback_errors
        assert isinstance(error, AttributeError)
        with m.request("s") as s:
            assert m.lookup(s, keys(1)).hits == 1


def test_callbacks_survive_the_managers_close():
    # Closing frees the manager (and its trampolines) only once: no call
    # after it reaches a freed callback.
    m = kvtier.Manager(4, event_capacity=8)
    m.set_event_callback(lambda e: None)
    m.set_request_report_callback(lambda r: None)
    m.close()
    del m
    gc.collect()
