"""The 2-rank spawn helper itself (tests/python/_dist.py): a rank that aborts once is retried
once, with a warning; one that aborts every time fails the test."""
import os
import signal

import pytest
from _dist import _init_mark, aborted_ranks, init_failed, spawn_ranks


def _abort_once(rank, world, init, out_dir):
    marker = os.path.join(out_dir, f"aborted{rank}")
    if rank == 1 and not os.path.exists(marker):
        open(marker, "w").close()
        os.abort()
    return {"rank": rank}


def _abort_dump_crashes_once(rank, world, init, out_dir):
    # what CI met: the abort's dump of every thread crashed, so the rank died of SIGSEGV with
    # the abort's first line in its fault log (faulthandler writes it there)
    marker = os.path.join(out_dir, f"crashed{rank}")
    if rank == 1 and not os.path.exists(marker):
        open(marker, "w").close()
        with open(os.path.join(out_dir, f"fault{rank}.log"), "a") as f:
            f.write("Fatal Python error: Aborted\n\n")
        os.kill(os.getpid(), signal.SIGSEGV)
    return {"rank": rank}


def _abort_always(rank, world, init, out_dir):
    if rank == 1:
        os.abort()
    return {"rank": rank}


def test_a_rank_that_aborts_once_is_retried_with_a_warning(tmp_path):
    with pytest.warns(RuntimeWarning, match="rank 1 aborted .SIGABRT. on attempt 1"):
        res = spawn_ranks(_abort_once, tmp_path)
    assert res == [{"rank": 0}, {"rank": 1}]


def test_a_rank_whose_abort_dump_crashes_is_retried(tmp_path):
    with pytest.warns(RuntimeWarning, match="rank 1 aborted .SIGABRT. on attempt 1"):
        res = spawn_ranks(_abort_dump_crashes_once, tmp_path)
    assert res == [{"rank": 0}, {"rank": 1}]


def test_a_rank_that_always_aborts_fails(tmp_path):
    import torch.multiprocessing as mp

    with pytest.warns(RuntimeWarning, match="retrying once"):
        with pytest.raises(mp.ProcessExitedException, match="SIGABRT"):
            spawn_ranks(_abort_always, tmp_path)


class _Dead:
    def __init__(self, exitcode):
        self.exitcode = exitcode
        self.joined = False

    def join(self):
        self.joined = True


def test_the_aborted_rank_is_found_whichever_failure_the_join_saw_first():
    # The race the spawn helper met: rank 1 aborts, rank 0 then raises ("Connection closed by
    # peer", exit status 1), and the join reports rank 0's exception because it is listed
    # first. The abort is still found, by the exit statuses of all ranks.
    procs = [_Dead(1), _Dead(-6)]
    assert aborted_ranks(procs) == [1]
    assert all(p.joined for p in procs)
    assert aborted_ranks([_Dead(1), _Dead(-15)]) == []
    assert aborted_ranks([_Dead(0), _Dead(0)]) == []


def test_a_failed_connection_at_init_is_told_by_its_mark(tmp_path):
    # a rank whose gloo could not connect the ranks marks it before raising (_worker); only a
    # mark of a rank in the group counts
    assert not init_failed(str(tmp_path), 2)
    open(_init_mark(str(tmp_path), 2), "w").close()
    assert not init_failed(str(tmp_path), 2)
    open(_init_mark(str(tmp_path), 1), "w").close()
    assert init_failed(str(tmp_path), 2)


def test_a_signal_after_an_abort_in_the_fault_log_is_an_abort(tmp_path):
    (tmp_path / "fault0.log").write_text("Fatal Python error: Aborted\n\nThread 0x...")
    (tmp_path / "fault1.log").write_text("Fatal Python error: Segmentation fault\n")
    assert aborted_ranks([_Dead(-11), _Dead(-11)], tmp_path) == [0]
    assert aborted_ranks([_Dead(-11), _Dead(-6)], tmp_path) == [0, 1]
    assert aborted_ranks([_Dead(0), _Dead(-11)], tmp_path) == []
