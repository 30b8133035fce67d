"""Changing shapes: one plan per step signature (sequence-length buckets), made once and reused,
and switches between plans that leave stored tensors where they are.

The reference is plain PyTorch on the same seeded data (bitwise). Memory is checked with the
Offloader's own accounting (tracked resident bytes), not RSS.
"""
import contextlib
import os
import warnings

import pytest

import torch

import teraio  # noqa: E402

from llama_tiny import LlamaConfig, LlamaTiny, make_batch  # noqa: E402
from train_llama_tiny import PRESETS, param_digest, train  # noqa: E402

BUCKETS = [16, 32, 48]
SEQS = [BUCKETS[i % 3] for i in range(3)] + [32, 16, 48, 48, 16, 32, 16, 48, 32, 32, 16, 48]
BUDGET = 5 << 20  # tracked bytes; the tiny model's unconstrained peak is ~8 MiB at 32 tokens


def _moved(rep):
    return rep["bytes_offloaded"] + rep["unplanned_bytes_offloaded"]


def test_sequence_length_buckets_get_one_plan_each(fast_dir):
    """Buckets of 16/32/48 tokens in an irregular order over 15 steps: each bucket is profiled
    once (within the budget) and planned once, every later step of a bucket runs its plan
    (no divergence, bytes offloaded in every bucket), the tracked resident bytes stay within
    the budget in every step, and the results are plain PyTorch's, bitwise."""
    ref, model_ref, _ = train("tiny", len(SEQS), seqs=SEQS)
    per_step = []

    def on_step(i, off):
        rep = off.report()
        per_step.append(dict(seq=SEQS[i], moved=_moved(rep), offloaded=rep["steps_offloaded"],
                             peak=rep["peak_managed_bytes"],
                             unplanned_peak=rep["unplanned_peak_bytes"]))

    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got, model, off = train("tiny", len(SEQS), seqs=SEQS, on_step=on_step,
                                offload=dict(
                                    memory_budget=BUDGET, ssd_dirs=[fast_dir], host_memory="2MiB",
                                    options=teraio.OffloadOptions(min_tensor_bytes="16KiB")))
    rep = off.report()
    msgs = [str(x.message) for x in w if "teraio" in str(x.message)]
    print(f"\nbytes moved {_moved(rep)} (planned {rep['bytes_offloaded']}, unplanned "
          f"{rep['unplanned_bytes_offloaded']}), read back {rep['bytes_prefetched']} + "
          f"{rep['unplanned_bytes_read']}; tracked peak planned {rep['peak_managed_bytes']}, "
          f"unplanned {rep['unplanned_peak_bytes']} (budget {BUDGET}); counts "
          f"{ {k: rep[k] for k in ('steps_profiled', 'steps_offloaded', 'steps_diverged', 'replans')} }"
          f"\nwarnings: {msgs}")
    assert got == ref
    assert param_digest(model) == param_digest(model_ref)
    # one plan per bucket, made once, never dropped
    assert rep["replans"] == len(BUCKETS), rep
    assert rep["steps_profiled"] == len(BUCKETS)
    assert rep["steps_diverged"] == 0, msgs
    assert rep["steps_offloaded"] == len(SEQS) - 1 - len(BUCKETS)  # 1 warm-up step
    assert len(off._step_kinds.plans) == len(BUCKETS)
    # every planned step of every bucket offloaded bytes
    prev = per_step[0]
    planned = {}
    for s in per_step[1:]:
        if s["offloaded"] > prev["offloaded"]:
            assert s["moved"] > prev["moved"], (s, prev)
            planned[s["seq"]] = planned.get(s["seq"], 0) + 1
        prev = s
    assert sorted(planned) == BUCKETS, planned
    # within the budget in every step: the tracked peaks are maxima over all steps so far
    for s in per_step:
        assert 0 < s["unplanned_peak"] <= BUDGET, s
        assert s["peak"] <= BUDGET, s
    assert rep["unconstrained_peak_bytes"] > BUDGET  # the budget did bind


def test_more_kinds_than_max_plans_run_unplanned_within_the_budget(fast_dir):
    """Beyond max_plans a new signature is not planned: it runs without a plan, kept within the
    budget reactively, with one warning; the existing plans keep working."""
    seqs = [16, 16, 32, 48, 16, 48, 32]
    ref, model_ref, _ = train("tiny", len(seqs), seqs=seqs)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got, model, off = train("tiny", len(seqs), seqs=seqs,
                                offload=dict(
                                    memory_budget=BUDGET, ssd_dirs=[fast_dir],
                                    options=teraio.OffloadOptions(min_tensor_bytes="16KiB",
                                                                  max_plans=2)))
    rep = off.report()
    msgs = [str(x.message) for x in w if "max_plans" in str(x.message)]
    # the warning points at the caller's code, not at teraio or contextlib
    files = {os.path.basename(x.filename) for x in w if "max_plans" in str(x.message)}
    assert files == {"train_llama_tiny.py"}, files  # the batch, made inside the step
    assert got == ref
    assert param_digest(model) == param_digest(model_ref)
    assert rep["replans"] == 2 and rep["steps_diverged"] == 0
    assert rep["steps_unplanned"] == 2  # the two 48-token steps
    assert len(msgs) == 1, msgs
    assert 0 < rep["unplanned_peak_bytes"] <= BUDGET
    assert rep["peak_managed_bytes"] <= BUDGET
    with pytest.raises(ValueError, match="max_plans"):
        teraio.Offloader(model, None, memory_budget=BUDGET, ssd_dirs=[fast_dir],
                         options=teraio.OffloadOptions(max_plans=0))


def test_switching_kinds_leaves_stored_tensors_stored(fast_dir):
    """Two kinds of step (step(kind=...)) alternate: on each switch between their plans, the
    globals the outgoing executor stored stay stored and go to the incoming one; the bytes read
    back at the switch are far below what was stored (before: all of it came back)."""
    cfg = LlamaConfig(**PRESETS["tiny"])

    def run(off):
        torch.manual_seed(0)
        model = LlamaTiny(cfg, seed=0)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        o = off(model, opt) if off else None
        losses, switches = [], []
        prev = None
        for i in range(10):
            kind = "a" if (i // 2) % 2 == 0 else "b"  # a a b b a a b b a a
            switch = o is not None and o._runtime is not None and kind != prev
            prev = kind
            if switch:  # an executor of the other kind holds stored globals now
                stored = o._runtime.stats()["stored_bytes"]
                read0 = o.report()["engine"]["bytes_read"]
            with o.step(kind=kind) if o else contextlib.nullcontext():
                tokens = make_batch(cfg, 2, 32, i)  # the step's first operator: the switch
                if switch:
                    switches.append((i, stored, o.report()["engine"]["bytes_read"] - read0))
                loss = model.loss(tokens)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                losses.append(loss.item())
        if o is not None:
            o.restore()
        return losses, param_digest(model), o, switches

    ref, ref_digest, _, _ = run(None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        got, digest, off, switches = run(lambda m, o: teraio.Offloader(
            m, o, memory_budget=BUDGET, ssd_dirs=[fast_dir],
            options=teraio.OffloadOptions(min_tensor_bytes="16KiB")))
    rep = off.report()
    print(f"\nswitches (step, stored bytes, read back at the switch): {switches}\nreport "
          f"{ {k: rep[k] for k in ('steps_profiled', 'steps_offloaded', 'steps_diverged')} }")
    assert got == ref and digest == ref_digest
    assert rep["steps_profiled"] == 2 and rep["steps_diverged"] == 0
    # switches between two planned kinds: steps 4 (b -> a), 6 (a -> b), 8 (b -> a)
    planned = [s for s in switches if s[0] >= 4]
    assert len(planned) == 3, switches
    for i, stored, read in planned:
        assert stored > 0, switches
        assert read <= stored // 4, switches


def test_report_gives_each_kind_its_budget_and_peak(fast_dir):
    """A fractional budget over three buckets: each kind of step gets half of its own
    unconstrained peak as its budget, and report() says so per kind (budget, unconstrained
    peak, tracked peak of its planned steps), each within its own budget; the top-level
    memory_budget is the largest of them, so the highest tracked peak compares with it. A step
    that diverges afterwards leaves unconstrained_peak_bytes as it was (not 0)."""
    cfg = LlamaConfig(**PRESETS["tiny"])
    torch.manual_seed(0)
    model = LlamaTiny(cfg, seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    seqs = [32, 16, 48, 32, 16, 48, 48, 16, 32]
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        off = teraio.Offloader(model, opt, memory_budget=0.5, ssd_dirs=[fast_dir],
                               options=teraio.OffloadOptions(min_tensor_bytes="16KiB"))
        for i, n in enumerate(seqs + [32]):
            with off.step():
                loss = model.loss(make_batch(cfg, 2, n, i))
                if i == len(seqs):  # the same first operator, then one more: a divergence
                    loss = loss * 1.0
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            if i == len(seqs) - 1:
                before = off.report()
    rep = off.report()
    kinds = before["kinds"]
    print(f"\nkinds {kinds}\nmemory_budget {before['memory_budget']} peak "
          f"{before['peak_managed_bytes']}")
    assert len(kinds) == 3, kinds
    assert len({k["signature"] for k in kinds}) == 3, kinds
    for k in kinds:
        assert k["memory_budget"] == int(0.5 * k["unconstrained_peak_bytes"]), k
        assert k["steps_offloaded"] >= 1, k  # 1 warm-up (32), each kind profiled once
        assert 0 < k["peak_managed_bytes"] <= k["memory_budget"], k
    budgets = sorted(k["memory_budget"] for k in kinds)
    assert budgets[0] < budgets[-1]  # the kinds' budgets differ: 16 to 48 tokens
    assert before["memory_budget"] == budgets[-1]
    assert before["peak_managed_bytes"] <= before["memory_budget"]
    assert rep["steps_diverged"] == 1, [str(x.message) for x in w]
    assert rep["unconstrained_peak_bytes"] == before["unconstrained_peak_bytes"] > 0, rep
