"""Multi-node runs: the per-rank placeholders of ssd_dirs ("{rank}", "{local_rank}") resolve
from the rank and $LOCAL_RANK, as torchrun sets them on every node; bad values are refused
with a message naming them. (The 2-rank run with these placeholders:
test_report_aggregate.py.)"""
import pytest

import torch

import teraio  # noqa: E402
from teraio import _ranks  # noqa: E402


def _off(ssd, rank):
    m = torch.nn.Linear(64, 64)
    return teraio.Offloader(m, torch.optim.SGD(m.parameters(), lr=0.1), memory_budget=0.5,
                            ssd_dirs=[ssd],
                            options=teraio.OffloadOptions(rank=rank, cpu_allocator=False))


def test_local_rank_from_torchrun(tmp_path, monkeypatch):
    # rank 5 of a 2-node x 4-GPU run is local rank 1 on the second node
    (tmp_path / "nvme1" / "r5").mkdir(parents=True)
    monkeypatch.setenv("LOCAL_RANK", "1")
    off = _off(str(tmp_path / "nvme{local_rank}" / "r{rank}"), 5)
    assert off.ssd_dirs == [str(tmp_path / "nvme1" / "r5")]
    off.close()


def test_local_rank_without_torchrun(tmp_path, monkeypatch):
    # one node without torchrun (mp.spawn): the local rank is the rank
    (tmp_path / "d3").mkdir()
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    off = _off(str(tmp_path / "d{local_rank}"), 3)
    assert off.ssd_dirs == [str(tmp_path / "d3")]
    off.close()


def test_bad_placeholders(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "two")
    with pytest.raises(ValueError, match="LOCAL_RANK='two' in the environment is not"):
        _off(str(tmp_path / "d{local_rank}"), 0)
    monkeypatch.setenv("LOCAL_RANK", "-1")
    with pytest.raises(ValueError, match="LOCAL_RANK='-1'"):
        _ranks.local_rank(0)
    monkeypatch.setenv("LOCAL_RANK", "0")
    with pytest.raises(ValueError, match=r"ssd_dirs: .*d\{ranks\}' has a placeholder other"):
        _off(str(tmp_path / "d{ranks}"), 0)
    # LOCAL_RANK is read only where "{local_rank}" is used
    monkeypatch.setenv("LOCAL_RANK", "bad")
    assert _ranks.expand("/x/{rank}", 2) == "/x/2"
