"""Shared regions: creator and joiner see the same bytes; worker views."""

import kvtier


def test_joiner_sees_the_creators_bytes(tmp_path, region_name):
    with kvtier.Region(region_name, 4, 8192, worker_bytes=4096, directory=str(tmp_path)) as creator:
        with kvtier.Region(region_name, 4, 8192, worker_bytes=4096, directory=str(tmp_path), open="join") as joiner:
            assert (creator.role, joiner.role) == ("creator", "joiner")
            creator.worker_array(1)[3, :4] = [9, 8, 7, 6]
            assert bytes(joiner.slot(3)[4096:4100]) == bytes([9, 8, 7, 6])
            view = joiner.worker_view(1)
            assert (view.offset, view.stride, view.length, view.rows) == (4096, 8192, 4096, 4)


def test_a_different_layout_cannot_join(tmp_path, region_name):
    with kvtier.Region(region_name, 4, 8192, directory=str(tmp_path)):
        try:
            kvtier.Region(region_name, 8, 8192, directory=str(tmp_path), open="join")
        except kvtier.KvtierError as e:
            assert e.status == kvtier.Status.INVALID_ARGUMENT
        else:
            raise AssertionError("joined with another layout")
