"""The layout fingerprint of the built-in tiers from Python: an fs
directory adopts the first fingerprint and refuses another, naming both;
the vLLM layer's helper gives its built-in tiers the engine's."""

import pytest

import kvtier
from kvtier import KvtierError, Status


def test_an_fs_directory_adopts_the_first_fingerprint_and_refuses_another(tmp_path, region_name):
    blocks = tmp_path / "blocks"
    with kvtier.Region(region_name, 4, 4096, directory=str(tmp_path)) as region:
        with kvtier.Manager(4, region=region) as m:
            m.add_fs_tier(blocks, layout_fingerprint="m|bf16|16", direct_io=False, read_threads=1, write_threads=1)
        assert (blocks / "kvtier-layout").read_text() == "m|bf16|16\n"
        with kvtier.Manager(4, region=region) as m:
            with pytest.raises(KvtierError) as e:
                m.add_fs_tier(blocks, layout_fingerprint="m|fp8|16", read_threads=1, write_threads=1)
            assert e.value.status == Status.INVALID_ARGUMENT
            assert '"m|bf16|16"' in str(e.value) and '"m|fp8|16"' in str(e.value)
            # The same fingerprint, and none at all, open it.
            m.add_fs_tier(blocks, layout_fingerprint="m|bf16|16", direct_io=False, read_threads=1, write_threads=1)
            m.add_fs_tier(blocks, direct_io=False, read_threads=1, write_threads=1, max_age_ms=60_000)
