"""The 2-rank spawn helper itself (tests/python/_dist.py): a rank that aborts once is retried
once, with a warning; one that aborts every time fails the test."""
import os

import pytest
from _dist import needs_gloo, spawn_ranks


def _abort_once(rank, world, init, out_dir):
    marker = os.path.join(out_dir, f"aborted{rank}")
    if rank == 1 and not os.path.exists(marker):
        open(marker, "w").close()
        os.abort()
    return {"rank": rank}


def _abort_always(rank, world, init, out_dir):
    if rank == 1:
        os.abort()
    return {"rank": rank}


@needs_gloo
def test_a_rank_that_aborts_once_is_retried_with_a_warning(tmp_path):
    with pytest.warns(RuntimeWarning, match="rank 1 aborted .SIGABRT. on attempt 1"):
        res = spawn_ranks(_abort_once, tmp_path)
    assert res == [{"rank": 0}, {"rank": 1}]


@needs_gloo
def test_a_rank_that_always_aborts_fails(tmp_path):
    import torch.multiprocessing as mp

    with pytest.warns(RuntimeWarning, match="retrying once"):
        with pytest.raises(mp.ProcessExitedException, match="SIGABRT"):
            spawn_ranks(_abort_always, tmp_path)
