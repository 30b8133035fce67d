"""torch.compile under teraio.Offloader is refused with a clear error naming the alternative, never
run silently uncompiled: Dynamo compiles nothing while a TorchDispatchMode is active, so a compiled
model or function inside off.step() would run eagerly without a word.

- a model compiled before the Offloader is made (torch.compile(m), m.compile()): ValueError;
- a model compiled after: RuntimeError when the next step starts, before any of its code;
- a compiled function called inside a step: RuntimeError at the optimizer's step, before it
  updates anything.
"""
import hashlib

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


def _kw(tmp_path):
    return dict(memory_budget=0.5, ssd_dirs=[str(tmp_path)],
                options=teraio.OffloadOptions(min_tensor_bytes="16KiB", ssd_bandwidth="1GB/s"))


def _digest(m):
    h = hashlib.sha256()
    for p in m.parameters():
        h.update(p.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def test_compiled_model_is_refused(tmp_path):
    _, m, opt = _setup()
    with pytest.raises(ValueError, match=r"compiled with torch\.compile.*_orig_mod.*"
                                         r"activation checkpointing"):
        teraio.Offloader(torch.compile(m), opt, **_kw(tmp_path))


def test_model_compiled_in_place_is_refused(tmp_path):
    _, m, opt = _setup()
    m.layers[0].compile()
    with pytest.raises(ValueError, match=r"layers\.0 is compiled with torch\.compile"):
        teraio.Offloader(m, opt, **_kw(tmp_path))


def test_model_compiled_after_the_offloader_is_refused_at_the_next_step(tmp_path):
    cfg, m, opt = _setup()
    off = teraio.Offloader(m, opt, **_kw(tmp_path))
    m.compile()
    before = _digest(m)
    with pytest.raises(RuntimeError, match=r"compiled with torch\.compile after the Offloader "
                                           r"was made \(this step did not start\)"):
        with off.step():
            m.loss(make_batch(cfg, 2, 32, 0)).backward()
            opt.step()
    assert _digest(m) == before
    off.close()


def test_compiled_function_inside_a_step_is_refused_before_the_update(tmp_path):
    cfg, m, opt = _setup()
    off = teraio.Offloader(m, opt, **_kw(tmp_path))
    loss_fn = torch.compile(lambda tokens: m.loss(tokens))
    before = _digest(m)
    with pytest.raises(RuntimeError, match=r"torch\.compile'd code was called inside "
                                           r"off\.step\(\) and ran uncompiled.*before "
                                           r"optimizer\.step\(\) updated anything"):
        with off.step():
            loss_fn(make_batch(cfg, 2, 32, 0)).backward()
            opt.step()
    assert _digest(m) == before
    off.close()
