"""The vLLM layer's shared-memory file outlives no engine: its name goes
when every process has mapped it, at shutdown or at exit, and a killed
engine's file is removed by the next start (`reclaim_stale_regions`),
which leaves live regions and anything that is not a dead region of this
user alone."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

import kvtier
from conftest import require_root
from kvtier.vllm.reclaim import reclaim_stale_regions
from kvtier.vllm.region import KvtierSharedRegion, region_name

PAGE = 4096
PYTHONPATH = os.path.dirname(os.path.dirname(kvtier.__file__))


def shared(engine_id, directory, rank=None, **kw):
    return KvtierSharedRegion(engine_id, 4, rank, 2 * PAGE, PAGE, directory=str(directory), **kw)


def child(code, directory, engine_id):
    """A Python process running `code` with ``region``, a creator's
    `KvtierSharedRegion` for `engine_id` in `directory`; it prints
    ``ready`` once the region is mapped."""
    script = textwrap.dedent(
        f"""
        import sys, time
        from kvtier.vllm.region import KvtierSharedRegion
        region = KvtierSharedRegion({engine_id!r}, 4, None, {2 * PAGE}, {PAGE}, directory={str(directory)!r})
        print("ready", flush=True)
        """
    ) + textwrap.dedent(code)
    env = dict(os.environ, PYTHONPATH=PYTHONPATH)
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env, text=True)


def killed_region(directory, engine_id):
    """The file of a creator killed with SIGKILL while it mapped it."""
    proc = child("time.sleep(600)\n", directory, engine_id)
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    path = directory / region_name(engine_id)
    assert path.exists()
    return path


def test_cleanup_removes_the_creators_file_and_a_joiners_cleanup_keeps_it(tmp_path):
    creator = shared("e1", tmp_path)
    joiner = shared("e1", tmp_path, rank=0)
    path = tmp_path / region_name("e1")
    joiner.cleanup()
    assert path.exists()
    creator.cleanup()
    assert not path.exists()


def test_a_barrier_removes_the_name_once_passed_and_the_memory_stays(tmp_path):
    passed = []
    region = shared("e2", tmp_path, rank=0, barrier=lambda: passed.append(True))
    assert passed == [True]
    assert list(tmp_path.iterdir()) == []
    region.create_next_worker_view(16)[3, :] = 7
    assert bytes(region.region.slot(3)[:16]) == b"\x07" * 16
    region.cleanup()


def test_the_last_process_to_join_removes_the_name_and_a_creator_keeps_it(tmp_path):
    # The scheduler (no rank) maps the workers' region: the same layout.
    creator = shared("e3", tmp_path, rank=0)
    assert not creator.unlink_if_joined()
    assert (tmp_path / region_name("e3")).exists()
    scheduler = shared("e3", tmp_path)
    assert scheduler.unlink_if_joined()
    assert list(tmp_path.iterdir()) == []
    scheduler.region.slot(1)[0] = 9
    assert creator.region.slot(1)[0] == 9
    scheduler.cleanup()
    creator.cleanup()


def test_a_creator_that_exits_without_cleanup_leaves_no_file(tmp_path):
    # Kept alive by a cycle to the end, as an engine's objects often are.
    proc = child("region.cycle = region\nsys.exit(0)\n", tmp_path, "e4")
    assert proc.stdout.readline() == "ready\n"
    assert proc.wait() == 0
    assert list(tmp_path.iterdir()) == []


def test_a_killed_creators_file_is_reclaimed_by_the_next_start(tmp_path):
    path = killed_region(tmp_path, "e5")
    assert reclaim_stale_regions(str(tmp_path)) == [path.name]
    assert list(tmp_path.iterdir()) == []
    # The next engine maps its own region there as usual.
    region = shared("e6", tmp_path)
    assert reclaim_stale_regions(str(tmp_path)) == []
    region.cleanup()


def test_a_live_region_is_never_reclaimed(tmp_path):
    proc = child("time.sleep(600)\n", tmp_path, "e7")
    try:
        assert proc.stdout.readline() == "ready\n"
        joined = shared("e7", tmp_path, rank=1)
        assert reclaim_stale_regions(str(tmp_path)) == []
        assert (tmp_path / region_name("e7")).exists()
        joined.cleanup()
        assert reclaim_stale_regions(str(tmp_path)) == []
        assert (tmp_path / region_name("e7")).exists()
    finally:
        proc.kill()
        proc.wait()


def test_symlinks_fifos_headerless_files_and_other_prefixes_are_left_alone(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = killed_region(elsewhere, "dead")
    shm = tmp_path / "shm"
    shm.mkdir()
    (shm / "vllm_kvtier_link").symlink_to(target)
    os.mkfifo(shm / "vllm_kvtier_fifo")
    (shm / "vllm_kvtier_plain").write_bytes(b"not a region")
    other = killed_region(shm, "x")
    os.rename(other, shm / "vllm_offload_x.mmap")
    before = sorted(p.name for p in shm.iterdir())
    assert reclaim_stale_regions(str(shm)) == []
    assert sorted(p.name for p in shm.iterdir()) == before
    assert target.exists()


def test_another_users_dead_region_is_left_alone(tmp_path):
    require_root("giving a file to another user")
    path = killed_region(tmp_path, "theirs")
    os.chown(path, 65534, 65534)
    assert reclaim_stale_regions(str(tmp_path)) == []
    assert path.exists()


def test_segment_files_go_with_their_region_and_a_held_segment_keeps_it(tmp_path):
    path = killed_region(tmp_path, "seg")
    segment = tmp_path / (path.name + ".seg1")
    segment.write_bytes(b"\0" * PAGE)
    with open(segment, "rb") as held:
        import fcntl

        fcntl.flock(held, fcntl.LOCK_SH)
        assert reclaim_stale_regions(str(tmp_path)) == []
        assert path.exists() and segment.exists()
    assert reclaim_stale_regions(str(tmp_path)) == [path.name]
    assert list(tmp_path.iterdir()) == []


def test_a_missing_directory_reclaims_nothing(tmp_path):
    assert reclaim_stale_regions(str(tmp_path / "absent")) == []


def test_segments_whose_first_file_is_gone_are_removed_unless_held(tmp_path):
    for name in ("vllm_kvtier_gone.seg1", "vllm_kvtier_gone.seg2", "vllm_kvtier_held.seg1"):
        (tmp_path / name).write_bytes(b"\0" * PAGE)
    with open(tmp_path / "vllm_kvtier_held.seg1", "rb") as held:
        import fcntl

        fcntl.flock(held, fcntl.LOCK_SH)
        assert reclaim_stale_regions(str(tmp_path)) == ["vllm_kvtier_gone"]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["vllm_kvtier_held.seg1"]


def test_the_core_sweep_says_why_it_kept_each_region(tmp_path):
    from kvtier.region import reclaim_stale

    killed_region(tmp_path, "dead")
    proc = child("time.sleep(600)\n", tmp_path, "live")
    try:
        assert proc.stdout.readline() == "ready\n"
        (tmp_path / "vllm_kvtier_plain").write_bytes(b"not a region")
        (tmp_path / "vllm_kvtier_link").symlink_to(tmp_path / "vllm_kvtier_plain")
        found = {r.name: r for r in reclaim_stale("vllm_kvtier_", str(tmp_path))}
        assert {name: r.outcome for name, r in found.items()} == {
            "vllm_kvtier_dead": "removed",
            "vllm_kvtier_link": "not_regular",
            "vllm_kvtier_live": "held",
            "vllm_kvtier_plain": "no_header",
        }
        dead = found["vllm_kvtier_dead"]
        assert dead.removed and dead.reason == "" and dead.first_file
        assert dead.bytes == PAGE + 4 * 2 * PAGE and dead.segment_files == 0
        assert "held by a process" in found["vllm_kvtier_live"].reason
        assert "symlink" in found["vllm_kvtier_link"].reason
    finally:
        proc.kill()
        proc.wait()


def test_a_bad_prefix_is_refused(tmp_path):
    for prefix in ("", "a/b"):
        with pytest.raises(kvtier.KvtierError) as e:
            reclaim_stale_regions(str(tmp_path), prefix)
        assert e.value.status == kvtier.Status.INVALID_ARGUMENT
