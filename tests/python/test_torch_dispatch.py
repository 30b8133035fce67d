"""The per-operator path in C (teraio._core.OpFast, used by FastStepDriver) against the Python
reference (StepDriver(fast=False)): same recorded program, identity stable across steps,
divergence detected with the same messages, results unchanged."""

import pytest

import torch

import teraio  # noqa: E402
from teraio.torch._mode import (  # noqa: E402
    FREE_KERNEL,
    FastStepDriver,
    StepDriver,
    StepMode,
    collect_globals,
)


def _runtime(prog):
    """An executor with a plan that moves nothing: every operator still goes through it."""
    trace = teraio._core.Trace.build(prog.tensors, prog.kernels, {"source": "test"})
    plan = teraio._core.Plan.build(trace, "none", [])
    eng = teraio._core.Engine([], 1 << 20)
    return teraio._core.Runtime(trace, plan, eng)


def _model():
    from llama_tiny import LlamaConfig, LlamaTiny, make_batch
    from train_llama_tiny import PRESETS

    cfg = LlamaConfig(**PRESETS["tiny"])
    model = LlamaTiny(cfg, seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)

    def step(i):
        loss = model.loss(make_batch(cfg, 2, 16, i))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    return model, opt, step


def _record(model, opt, step, i, fast):
    d = StepDriver(collect_globals(model, opt), record=True, fast=fast)
    with StepMode(d):
        step(i)
    d.end()
    return d


def test_cpu_uses_the_c_path(monkeypatch):
    monkeypatch.delenv("TERAIO_TORCH_DISPATCH", raising=False)
    assert type(StepDriver([], record=True)) is FastStepDriver
    assert type(StepDriver([], record=True, fast=False)) is StepDriver
    monkeypatch.setenv("TERAIO_TORCH_DISPATCH", "python")
    assert type(StepDriver([], record=True)) is StepDriver
    assert type(StepDriver([], record=True, fast=True)) is FastStepDriver
    assert type(StepDriver([], record=True, cuda=True)) is StepDriver


def test_recording_matches_the_python_reference():
    model, opt, step = _model()
    step(0)  # optimizer state exists from here on
    ref = _record(model, opt, step, 1, fast=False)
    got = _record(model, opt, step, 2, fast=True)
    assert type(got) is FastStepDriver and type(ref) is StepDriver
    assert got.prog.n_globals == ref.prog.n_globals > 0
    assert got.prog.tensors == ref.prog.tensors
    # durations differ from run to run; names, flags and uses must not
    strip = [(n, f, u) for (n, _, f, u) in ref.prog.kernels]
    assert [(n, f, u) for (n, _, f, u) in got.prog.kernels] == strip
    assert any(n == FREE_KERNEL for n, _, _ in strip)  # zero_grad frees gradients late
    assert len(strip) > 100


def test_identity_stable_across_steps_and_training_unchanged():
    model, opt, step = _model()
    step(0)
    prog = _record(model, opt, step, 1, fast=True).prog
    rt = _runtime(prog)
    for i in range(2, 5):
        g = collect_globals(model, opt)
        d = StepDriver(g, record=False, program=prog, runtime=rt, fast=True)
        assert type(d) is FastStepDriver
        # globals: ids by registration order
        for tid, (_, st, _) in enumerate(g):
            t = torch.empty(0, dtype=torch.uint8).set_(st)
            assert d.fast.id_of(t) == tid
        with StepMode(d):
            step(i)
        d.end()
        assert d.diverged is None, d.diverged
        assert d.k == len(prog.kernels)
    # the same steps without the mode give the same parameters (bitwise)
    model2, opt2, step2 = _model()
    for i in range(5):
        step2(i)
    for (n, p), (_, q) in zip(model.named_parameters(), model2.named_parameters()):
        assert torch.equal(p, q), n


def _run_chain(ops, fast, program=None, runtime=None):
    x = torch.zeros(16)
    d = StepDriver([], record=program is None, program=program, runtime=runtime, fast=fast)
    with StepMode(d):
        for op in ops:
            x = op(x)
    d.end()
    return d, x


ADD = lambda x: torch.add(x, 1)  # noqa: E731
MUL = lambda x: torch.mul(x, 2)  # noqa: E731
REP1 = lambda x: x.repeat(1)  # noqa: E731
REP2 = lambda x: x.repeat(2)[:16]  # noqa: E731


@pytest.mark.parametrize("case,expect", [
    ([ADD] * 5 + [MUL] + [ADD] * 4,
     "operator 5 is aten.mul.Tensor, the plan expects aten.add.Tensor"),
    ([ADD] * 11, "operator 10 is aten.add.Tensor, the plan expects the end of the step"),
    ([ADD] * 9, "the step ended after 9 operators, the plan has 10"),
    ([ADD] * 3 + [REP2] + [ADD] * 6, "operator 3 (aten.repeat.default) output 0 has 128 bytes"),
])
def test_divergence_detected_with_the_reference_messages(case, expect):
    plan_ops = [ADD] * 3 + [REP1] + [ADD] * 6 if "repeat" in expect else [ADD] * 10
    rec, _ = _run_chain(plan_ops, fast=True)
    plain = torch.zeros(16)
    for op in case:
        plain = op(plain)
    msgs = []
    for fast in (True, False):
        d, x = _run_chain(case, fast, program=rec.prog, runtime=_runtime(rec.prog))
        assert d.diverged is not None and expect in d.diverged, (fast, d.diverged)
        assert torch.equal(x, plain)  # the rest of the step ran plainly, same values
        msgs.append(d.diverged)
    assert msgs[0] == msgs[1]


def test_divergence_on_different_tensors():
    """Same operator names, but operator 4 reads a tensor made outside the step (a new id where
    the plan has the chain's previous output)."""
    other = torch.ones(16)
    rec, _ = _run_chain([ADD] * 8, fast=True)
    case = [ADD] * 4 + [lambda x: torch.add(other, 1)] + [ADD] * 3
    for fast in (True, False):
        d, x = _run_chain(case, fast, program=rec.prog, runtime=_runtime(rec.prog))
        assert d.diverged == "operator 4 (aten.add.Tensor) uses different tensors than planned"
        assert torch.equal(x, torch.ones(16) + 4)


def test_in_place_and_out_variants_record_writes():
    """Write modes: an in-place operator writes its argument (RW), out= writes the out tensor."""
    x = torch.zeros(16)
    y = torch.empty(16)
    progs = []
    for fast in (True, False):
        d = StepDriver([], record=True, fast=fast)
        with StepMode(d):
            x.add_(1)
            torch.mul(x, 2, out=y)
        d.end()
        progs.append([(n, f, u) for (n, _, f, u) in d.prog.kernels])
    assert progs[0] == progs[1]
    assert progs[0][0] == ("aten.add_.Tensor", 0, (0, 3))
    assert progs[0][1] == ("aten.mul.out", 0, (0, 1, 1, 3))


def test_driver_is_collected_after_the_step():
    """The C object, its driver and the storages' weak references form a cycle: the garbage
    collector must be able to free it (tp_traverse / tp_clear), and a storage that dies after
    that must not crash the weakref callback."""
    import gc
    import weakref

    keep = torch.zeros(64)
    d, _ = _run_chain([ADD] * 4, fast=True)
    with StepMode(d):
        torch.add(keep, 1)
    ref = weakref.ref(d)
    del d
    gc.collect()
    assert ref() is None
    del keep  # its storage's weak reference belonged to the freed object
    gc.collect()


def _many_live_then_shuffled_deaths():
    """300 storages alive at once (views among them), then freed in a fixed shuffled order, each
    death between two operators: the identity table grows past its first size and its entries
    are removed in an order unrelated to their insertion."""
    import random

    xs = [torch.full((4,), float(i)) + 1 for i in range(300)]
    views = [xs[i][1:] for i in range(0, 300, 7)]  # same storage, no new id
    order = list(range(300))
    random.Random(5).shuffle(order)
    total = torch.zeros(4)
    for n, i in enumerate(order):
        xs[i] = None  # freed (views keep every 7th alive until the end)
        if n % 3 == 0:
            total = total + 1
    total = total + sum(v.sum() for v in views)
    return total


def test_identity_table_growth_and_shuffled_deaths_match_the_reference():
    got = {}
    for fast in (True, False):
        d = StepDriver([], record=True, fast=fast)
        with StepMode(d):
            out = _many_live_then_shuffled_deaths()
        d.end()
        got[fast] = ([(n, f, u) for (n, _, f, u) in d.prog.kernels], d.prog.tensors, out)
    (kc, tc, oc), (kp, tp, op) = got[True], got[False]
    assert tc == tp and kc == kp and torch.equal(oc, op)
    assert len(tc) > 300
    # late frees of intermediates (past their last use) show up as free markers
    assert sum(1 for n, _, _ in kc if n == FREE_KERNEL) > 100
    # and the program replays through the executor without a divergence (same ids again)
    prog = StepDriver([], record=True, fast=False)
    with StepMode(prog):
        _many_live_then_shuffled_deaths()
    prog.end()
    d = StepDriver([], record=False, program=prog.prog, runtime=_runtime(prog.prog), fast=True)
    with StepMode(d):
        _many_live_then_shuffled_deaths()
    d.end()
    assert d.diverged is None, d.diverged
    assert d.k == len(prog.prog.kernels)
