"""teraio.Offloader refuses what cannot work before anything is updated, and when it cannot, says
in which state it left the model.

A budget below what one operator needs, or SSD directories without room for what the budget
forces out, is refused when the Offloader is made (a parameter larger than the budget) or in the
profiled step when the optimizer is about to step (before optimizer.step() updates anything:
parameters and optimizer states are exactly as before that step). What can only be known once
the whole step is recorded (a budget given as a fraction of its peak) is raised at its end, and
the error says that the step's update stands.
"""
import hashlib
import os

import pytest

import torch

import teraio  # noqa: E402

from llama_tiny import LlamaConfig, LlamaTiny, make_batch  # noqa: E402
from train_llama_tiny import PRESETS  # noqa: E402


def _setup():
    torch.manual_seed(0)
    cfg = LlamaConfig(**PRESETS["tiny"])
    m = LlamaTiny(cfg, seed=0)
    return cfg, m, torch.optim.AdamW(m.parameters(), lr=1e-3)


def _bytes(t):
    # a copy: Tensor.numpy() makes the storage it shares non-resizable (teraio releases them)
    return t.detach().clone().view(-1).view(torch.uint8).numpy().tobytes()


def _digest(m, opt):
    h = hashlib.sha256()
    for p in m.parameters():
        h.update(_bytes(p))
        for k, v in sorted(opt.state.get(p, {}).items()):
            h.update(k.encode())
            h.update(_bytes(v))
    return h.hexdigest()


def _step(cfg, m, opt, off, i):
    with off.step():
        m.loss(make_batch(cfg, 2, 32, i)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


@pytest.mark.parametrize("budget", [1.5, 1.0, 2.0, 100.25, True, float("nan"), float("inf")])
def test_float_budget_is_a_fraction_or_refused(tmp_path, budget):
    _, m, opt = _setup()
    with pytest.raises(ValueError, match=r"memory_budget: expected bytes .* fraction"):
        teraio.Offloader(m, opt, memory_budget=budget, ssd_dirs=[str(tmp_path)])


def test_whole_float_bytes_and_fractions_are_accepted(tmp_path):
    _, m, opt = _setup()
    off = teraio.Offloader(m, opt, memory_budget=8e9, ssd_dirs=[str(tmp_path)])
    assert off.budget == 8_000_000_000 and off.budget_fraction is None
    off.close()
    off = teraio.Offloader(m, opt, memory_budget=0.25, ssd_dirs=[str(tmp_path)])
    assert off.budget_fraction == 0.25
    off.close()


def test_budget_below_a_parameter_is_refused_when_made(tmp_path):
    _, m, opt = _setup()  # embed.weight, head.weight: 512 x 128 float32 = 256 KiB
    with pytest.raises(ValueError, match=r"memory_budget: 64.0 KiB is below the parameter "
                                         r"(embed|head).weight alone"):
        teraio.Offloader(m, opt, memory_budget="64KiB", ssd_dirs=[str(tmp_path)])


@pytest.mark.parametrize("budget,what", [
    ("300KiB", "the optimizer uses at once to update the parameter of shape (512, 128)"),
    ("600KiB", "operator"),  # its working set plus the tensors never moved
])
def test_budget_too_small_is_refused_before_the_update(tmp_path, budget, what):
    # above every parameter, below what an update (300 KiB) or an operator of the forward and
    # backward passes (600 KiB) uses at once: refused in the profiled step when the optimizer
    # is about to step, before it changed anything
    cfg, m, opt = _setup()
    off = teraio.Offloader(m, opt, memory_budget=budget, ssd_dirs=[str(tmp_path)],
                           options=teraio.OffloadOptions(ssd_bandwidth="1GB/s"))
    _step(cfg, m, opt, off, 0)  # warm-up (creates the optimizer states)
    before = _digest(m, opt)
    with pytest.raises(ValueError) as e:
        _step(cfg, m, opt, off, 1)
    msg = str(e.value)
    print("\nerror:", msg)
    assert msg.startswith(f"memory_budget: {budget[:3]} KiB is below what {what}"), msg
    assert "before optimizer.step() updated anything" in msg, msg
    off.restore()
    assert _digest(m, opt) == before
    off.close()


def test_full_ssd_dirs_are_refused_before_the_update(tmp_path, monkeypatch):
    # the directories report no free space: what the budget forces out cannot go anywhere
    cfg, m, opt = _setup()
    off = teraio.Offloader(m, opt, memory_budget=4 << 20, ssd_dirs=[str(tmp_path)],
                           options=teraio.OffloadOptions(ssd_bandwidth="1GB/s",
                                                         bounded_unplanned=False,
                                                         min_tensor_bytes="16KiB"))
    _step(cfg, m, opt, off, 0)
    before = _digest(m, opt)
    real = os.statvfs

    class Full:
        def __init__(self, st):
            self.f_frsize, self.f_bavail = st.f_frsize, 0

    monkeypatch.setattr(os, "statvfs", lambda d: Full(real(d)))
    with pytest.raises(teraio.Error) as e:
        _step(cfg, m, opt, off, 1)
    msg = str(e.value)
    print("\nerror:", msg)
    assert "ssd_dirs" in msg and "free" in msg and "before optimizer.step()" in msg, msg
    off.restore()
    assert _digest(m, opt) == before
    off.close()


def test_too_small_fraction_says_the_update_stands(tmp_path):
    # a fraction of the peak is only known once the whole profiled step ran: the error comes
    # after its update and says so
    cfg, m, opt = _setup()
    off = teraio.Offloader(m, opt, memory_budget=0.02, ssd_dirs=[str(tmp_path)],
                           options=teraio.OffloadOptions(ssd_bandwidth="1GB/s"))
    _step(cfg, m, opt, off, 0)
    with pytest.raises(ValueError) as e:
        _step(cfg, m, opt, off, 1)
    msg = str(e.value)
    print("\nerror:", msg)
    assert "memory_budget" in msg and "that update stands" in msg, msg
    off.close()


class _Boom(Exception):
    pass


class _HalfThenFail(torch.optim.SGD):
    """SGD that, once armed, updates half of the parameters and then fails."""

    armed = False

    def step(self, closure=None):
        if not self.armed:
            return super().step(closure)
        with torch.no_grad():
            ps = [p for g in self.param_groups for p in g["params"]]
            for p in ps[: len(ps) // 2]:
                p.add_(p.grad, alpha=-0.1)
        raise _Boom("the update failed half-way")


@pytest.mark.parametrize("where", ["before", "during", "after", "restore"])
def test_a_failing_step_says_which_state_it_left(tmp_path, monkeypatch, where):
    """An exception inside a planned step (offloaded tensors in flight) carries a note that says
    whether the optimizer's update happened, and whether every offloaded tensor came back."""
    torch.manual_seed(0)
    cfg = LlamaConfig(**PRESETS["tiny"])
    m = LlamaTiny(cfg, seed=0)
    opt = _HalfThenFail(m.parameters(), lr=0.1, momentum=0.9)
    off = teraio.Offloader(m, opt, memory_budget=0.5, ssd_dirs=[str(tmp_path)],
                           options=teraio.OffloadOptions(min_tensor_bytes="16KiB",
                                                         ssd_bandwidth="1GB/s"))
    for i in range(3):  # warm-up, profiled, planned
        _step(cfg, m, opt, off, i)
    assert off.report()["steps_offloaded"] == 1 and off.report()["bytes_offloaded"] > 0
    off.restore()
    before = _digest(m, opt)
    if where == "restore":  # the step fails, and so does bringing its tensors back
        from teraio.torch import _mode

        def broken(self):
            raise teraio.Error(-5, "engine read: injected")

        monkeypatch.setattr(_mode.StepDriver, "restore", broken)
        # and the reads from the copies that follow a failed executor
        monkeypatch.setattr(teraio.Offloader, "_restore_from_copies",
                            lambda self, failure: broken(self))
    opt.armed = where == "during"
    with pytest.raises(_Boom) as e:
        with off.step():
            m.loss(make_batch(cfg, 2, 32, 3)).backward()
            if where in ("before", "restore"):
                raise _Boom("before the update")
            opt.step()
            opt.zero_grad(set_to_none=True)
            raise _Boom("after the update")
    notes = " ".join(getattr(e.value, "__notes__", []))
    print("\nnote:", notes)
    if where == "before":
        assert "failed before optimizer.step(): the parameters and optimizer states are as " \
               "before this step" in notes, notes
        assert "every tensor teraio had offloaded is back in memory" in notes, notes
        off.restore()
        assert _digest(m, opt) == before
    elif where == "during":
        assert "failed during optimizer.step(): some parameters and optimizer states may be " \
               "updated" in notes, notes
    elif where == "after":
        assert "failed after optimizer.step(): this step's update stands" in notes, notes
        off.restore()
        assert _digest(m, opt) != before
    else:
        assert "bringing the offloaded tensors back failed too (" in notes and \
               "injected" in notes and "reload them from a checkpoint" in notes, notes
        monkeypatch.undo()
    if where != "restore":
        opt.armed = False
        _step(cfg, m, opt, off, 4)  # training goes on (the state is what the note said)
        assert not off._in_optim
    off.close()


def test_a_parameter_shared_with_numpy_is_never_moved(tmp_path):
    """Tensor.numpy() makes the storage it shares non-resizable: such a parameter is pinned
    when the step is profiled (training stays bitwise, the rest is offloaded); one made so after
    the plan fails with an error that says what happened and what to do instead."""
    def run(offload, share):
        cfg, m, opt = _setup()
        view = m.head.weight.detach().numpy() if share else None  # noqa: F841 - kept alive
        off = teraio.Offloader(m, opt, memory_budget=0.5, ssd_dirs=[str(tmp_path)],
                               options=teraio.OffloadOptions(min_tensor_bytes="16KiB",
                                                             ssd_bandwidth="1GB/s")) \
            if offload else None
        for i in range(4):
            if off is None:
                m.loss(make_batch(cfg, 2, 32, i)).backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            else:
                _step(cfg, m, opt, off, i)
        rep = None
        if off is not None:
            off.restore()
            rep = off.report()
            off.close()
        return _digest(m, opt), rep

    ref, _ = run(False, False)
    got, rep = run(True, True)
    assert got == ref
    assert rep["steps_offloaded"] == 2 and rep["bytes_offloaded"] > 0, rep

    cfg, m, opt = _setup()
    off = teraio.Offloader(m, opt, memory_budget=0.5, ssd_dirs=[str(tmp_path)],
                           options=teraio.OffloadOptions(min_tensor_bytes="16KiB",
                                                         ssd_bandwidth="1GB/s"))
    for i in range(3):
        _step(cfg, m, opt, off, i)
    off.restore()
    for p in m.parameters():  # after the plan: every parameter's and optimizer state's storage
        for v in [p] + [v for v in opt.state[p].values() if v.dim()]:
            v.detach().numpy()
    with pytest.raises(RuntimeError, match=r"teraio cannot release tensor \d+ .*non-resizable "
                                           r"after the plan was made.*clone\(\)\.numpy\(\)"):
        _step(cfg, m, opt, off, 3)
    off.close()
