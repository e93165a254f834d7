"""The fs tier over a shared region: bytes go to files and come back."""

import time

import kvtier
from kvtier import LookupResult

from conftest import keys


def test_block_survives_a_reset_through_the_fs_tier(tmp_path, region_name):
    k = keys(2)
    with kvtier.Region(region_name, 4, 4096, directory=str(tmp_path)) as region:
        with kvtier.Manager(4, region=region, promotion_answer="hit_pending", kv_groups=True) as m:
            m.add_fs_tier(str(tmp_path / "blocks"), direct_io=False, read_threads=1, write_threads=1)
            h, _ = m.request_begin("r")
            plan = m.prepare_store(h, k)
            for i, slot in enumerate(plan.slots):
                region.slot(slot)[:5] = b"blk%d!" % i
            m.complete_store(h, k)
            # The cascade to the fs tier runs on its writer thread: a
            # minute only a hang reaches.
            deadline = time.monotonic() + 60
            while m.has_pending_work():
                assert time.monotonic() < deadline, "the cascade never finished"
                m.schedule_end()
                time.sleep(0.001)
            m.reset_cache()
            m.reset_flushed()
            assert m.lookup(h, k).stop in (LookupResult.HIT_PENDING, LookupResult.RETRY)
            # The fs tier reads on a thread of its own: wait for it (a
            # deadline, not a number of steps, so a busy machine passes too).
            deadline = time.monotonic() + 60
            while True:
                m.schedule_end()
                if m.lookup(h, k[:1]).hits == 1:
                    break
                assert time.monotonic() < deadline, "the block never came back from the fs tier"
                time.sleep(0.001)
            [slot] = m.prepare_load(h, k[:1])
            assert bytes(region.slot(slot)[:5]) == b"blk0!"
            m.complete_load(h, k[:1])
            m.request_finished(h)
