"""The torch.compile patterns teraio.Offloader cannot run are refused with a clear error naming the
pattern and the alternative, never run silently uncompiled (Dynamo compiles nothing while a
TorchDispatchMode is active, so compiled code inside off.step() would run eagerly without a
word). Blocks compiled on their own run as regions of the step (test_torch_compiled_blocks.py);
the whole model compiled before the Offloader is made (torch.compile(m), m.compile()) is split
into its blocks, each compiled with the model's options. Refused:

- the whole model compiled, without blocks (children of an nn.ModuleList or nn.ModuleDict):
  ValueError;
- a compiled block inside a compiled model: ValueError;
- the whole model compiled after the Offloader, without blocks: RuntimeError when the next step
  starts (model.compile()) or at the wrapper's call (torch.compile(model)); with blocks it is
  split and planned anew;
- a compiled function called inside a step: RuntimeError at the optimizer's step, before it
  updates anything (also after blocks compiled with fullgraph=True); wrapped by
  teraio.function_region it is a region, refused where it reads a parameter that is not among
  its arguments.
Also here: retain_graph (with the model compiled after) and activation checkpointing with
compiled blocks, bitwise.
"""
import hashlib

import pytest

import torch

import teraio  # noqa: E402

from llama_tiny import LlamaConfig, LlamaTiny, make_batch  # noqa: E402
from train_llama_tiny import PRESETS  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Each test compiles the blocks of models of its own: Dynamo's caches start empty (its
    recompile limit counts the earlier tests' compiles of the same code otherwise)."""
    import torch._dynamo

    torch._dynamo.reset()


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


def test_whole_compiled_model_is_split_into_its_blocks(tmp_path):
    """torch.compile(model) and model.compile(): each block (a child of the model's
    nn.ModuleList) is compiled on its own with the whole model's options and runs as a region;
    the rest of the model runs uncompiled (per operator, under the Offloader's mode)."""
    from torch._dynamo.eval_frame import innermost_backend

    from teraio.torch._compile import Region, _dynamo_context

    _, m, opt = _setup()
    w = torch.compile(m, backend="aot_eager", dynamic=False)
    off = teraio.Offloader(w, opt, **_kw(tmp_path))
    assert w.__dict__["forward"] == m.__call__  # the wrapper runs the model uncompiled
    for i, b in enumerate(m.layers):
        r = b._compiled_call_impl
        assert isinstance(r, Region) and r.fwd.name == f"teraio.region.fwd[layers.{i}]"
        ctx = _dynamo_context(r.call)
        assert ctx._dynamic is False and not ctx.fullgraph
        # the model's backend (aot_eager, as torch.compile wraps it), wrapped once more
        assert innermost_backend(ctx.callback).compiler_fn is innermost_backend(
            w.dynamo_ctx.callback)
    assert all(getattr(x, "_compiled_call_impl", None) is None
               for x in (m, m.embed, m.norm, m.head))
    off.close()

    _, m, opt = _setup()
    m.compile(backend="aot_eager", fullgraph=True)
    off = teraio.Offloader(m, opt, **_kw(tmp_path))
    assert m._compiled_call_impl is None
    ctx = _dynamo_context(m.layers[1]._compiled_call_impl.call)
    assert ctx.fullgraph and ctx._dynamic is None
    off.close()

    # an argument refused leaves the model compiled whole, as the caller made it
    _, m, opt = _setup()
    w = torch.compile(m, backend="aot_eager")
    with pytest.raises(ValueError, match="memory_budget"):
        teraio.Offloader(w, opt, **dict(_kw(tmp_path), memory_budget=-1))
    assert w.__dict__["forward"] != m.__call__  # still the compiled call
    assert all(getattr(b, "_compiled_call_impl", None) is None for b in m.layers)
    off = teraio.Offloader(w, opt, **_kw(tmp_path))  # and the next Offloader splits it
    assert w.__dict__["forward"] == m.__call__
    off.close()


def test_whole_compiled_model_that_cannot_be_split_is_refused(tmp_path):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with pytest.raises(ValueError, match=r"the whole model is compiled \(torch\.compile\(model\)\)"
                                         r", and it has no blocks \(children of an nn\.ModuleList "
                                         r"or nn\.ModuleDict\).*Compile each block instead"):
        teraio.Offloader(torch.compile(m), opt, **_kw(tmp_path))
    m.compile()
    with pytest.raises(ValueError, match=r"whole model is compiled in place \(model\.compile"
                                         r"\(\)\), and it has no blocks"):
        teraio.Offloader(m, opt, **_kw(tmp_path))


def test_block_compiled_inside_a_compiled_model_is_refused(tmp_path):
    _, m, opt = _setup()
    m.layers[0].compile()
    m.layers[1].compile()
    with pytest.raises(ValueError, match=r"whole model is compiled \(torch\.compile\(model\)\), "
                                         r"around module layers\.0 compiled on its own"):
        teraio.Offloader(torch.compile(m), opt, **_kw(tmp_path))
    m.layers.compile()  # a module compiled around compiled blocks (not the root)
    with pytest.raises(ValueError, match=r"module layers\.0 is compiled inside another "
                                         r"compiled module"):
        teraio.Offloader(m, opt, **_kw(tmp_path))


def test_compiled_blocks_are_accepted(tmp_path):
    _, m, opt = _setup()
    m.layers[0].compile()
    m.layers[1] = torch.compile(m.layers[1])
    off = teraio.Offloader(m, opt, **_kw(tmp_path))
    from teraio.torch._compile import Region

    assert isinstance(m.layers[0]._compiled_call_impl, Region)
    assert isinstance(m.layers[1].__dict__["forward"], Region)
    assert m.layers[0]._compiled_call_impl.fwd.name == "teraio.region.fwd[layers.0]"
    assert m.layers[1].__dict__["forward"].fwd.name == "teraio.region.fwd[layers.1]"
    off.close()


def _loss_of(model, tokens):  # through the model's (compiled) forward, as a wrapper is called
    logits = model(tokens[:, :-1])
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             tokens[:, 1:].reshape(-1))


def test_model_compiled_after_the_offloader_is_split_and_replanned(tmp_path):
    """The whole model compiled after the Offloader was made, between steps 1 and 2 (before:
    an eager warm-up and profiled step): split into its blocks like a model compiled before
    (model.compile(): at the next step's start, which is a warm-up step again;
    torch.compile(model): at the wrapper's first call, inside step 2, which leaves its plan),
    profiled and planned anew, and then offloading again; bit for bit the same as the same
    training without teraio (the whole model compiled by aot_eager on CPU computes what its
    blocks compiled one by one do). Each step runs two backwards through one graph
    (retain_graph=True): the second reads the activations the compiled blocks saved again (a
    region's backward holds them weakly after its first run: autograd keeps them only for a
    retained graph). Before, the plan released them after the first backward: the second
    failed on an unallocated tensor."""
    import contextlib
    import warnings

    from teraio.torch._compile import Region

    def train(how, offload):
        cfg, m, opt = _setup()
        off = teraio.Offloader(m, opt, **_kw(tmp_path)) if offload else None
        model, losses, per = m, [], []
        for i in range(5):
            if i == 2 and how == "model.compile":
                m.compile(backend="aot_eager")
            elif i == 2:
                model = torch.compile(m, backend="aot_eager")
            with off.step() if off else contextlib.nullcontext():
                loss = _loss_of(model, make_batch(cfg, 4, 32, i))
                loss.backward(retain_graph=True)  # and again through the same graph
                (loss * 0.5).backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
            per.append(off.report()["bytes_offloaded"] if off else 0)
        out = dict(losses=losses, params=_digest(m), per=per, m=m)
        if off is not None:
            out["report"], out["prog"] = off.report(), off._prog
            off.close()
        return out

    plain = train("torch.compile", False)
    for how in ("model.compile", "torch.compile"):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got = train(how, True)
        said = [str(x.message) for x in w if "compiled whole" in str(x.message)]
        assert len(said) == 1 and how in said[0], said
        assert got["losses"] == plain["losses"], how
        assert got["params"] == plain["params"], how
        m, rep, per = got["m"], got["report"], got["per"]
        assert all(isinstance(b._compiled_call_impl, Region) for b in m.layers)
        assert {"teraio.region.fwd[layers.0]", "teraio.region.bwd_end[layers.1]"} <= {
            k[0] for k in got["prog"].kernels}
        # after the split: one more warm-up step (model.compile) or a step that left its plan
        # (torch.compile), one profiled step, and the last step offloaded at the blocks'
        # boundaries
        assert per[4] > per[3], (how, per)
        assert rep["steps_profiled"] == 2 and rep["steps_offloaded"] == 1, (how, rep)
        assert rep["steps_diverged"] == (how == "torch.compile"), (how, rep)


def test_model_compiled_after_the_offloader_that_cannot_be_split_is_refused(tmp_path):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    off = teraio.Offloader(m, opt, **_kw(tmp_path))
    w = torch.compile(m, backend="aot_eager")
    before = _digest(m)
    with pytest.raises(RuntimeError, match=r"whole model is compiled \(torch\.compile\(model\)"
                                           r"\), and it has no blocks .*after the Offloader "
                                           r"was made"):
        with off.step():
            w(torch.randn(8, 64)).sum().backward()
            opt.step()
    m.compile()
    with pytest.raises(RuntimeError, match=r"whole model is compiled in place.*no blocks.*after "
                                           r"the Offloader was made; this step did not start"):
        with off.step():
            m(torch.randn(8, 64)).sum().backward()
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


def test_compiled_function_is_refused_after_fullgraph_regions(tmp_path):
    """The refusal does not depend on what ran before in the step: a block compiled with
    fullgraph=True (as TorchTitan compiles them) runs as a region, and Dynamo's fullgraph call
    replaces the list of skipped frames the Offloader watches with its own (and drops it when it
    returns); a compiled function called after it is still refused, before the update."""
    cfg, m, opt = _setup()
    for b in m.layers:
        b.compile(backend="aot_eager", fullgraph=True)
    off = teraio.Offloader(m, opt, **_kw(tmp_path))

    def ce(logits, t):
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 t.reshape(-1))

    loss_fn = torch.compile(ce, backend="aot_eager")
    tok = make_batch(cfg, 2, 32, 0)
    before = _digest(m)
    with pytest.raises(RuntimeError, match=r"ran uncompiled \(ce \(.*before optimizer\.step"):
        with off.step():
            loss_fn(m(tok[:, :-1]), tok[:, 1:]).backward()
            opt.step()
    assert _digest(m) == before
    off.close()


def _compiled_pair(tmp_path, build, backward, layers=2, steps=4, loss=None):
    """The same training without and with teraio: the example model with `layers` blocks,
    changed by build(model) (its blocks compiled, aot_eager), `steps` steps of
    backward(loss) (loss(model, tokens), model.loss by default). Returns both runs' losses
    and parameters, and teraio's report, bytes offloaded after each step and regions recorded.
    Dynamo's caches are shared by the two runs (the same compiled code)."""
    import contextlib

    loss_of = loss

    def train(offload):
        torch.manual_seed(0)
        cfg = LlamaConfig(**dict(PRESETS["tiny"], layers=layers))
        m = LlamaTiny(cfg, seed=0)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        build(m)
        off = teraio.Offloader(m, opt, **_kw(tmp_path)) if offload else None
        losses, per = [], []
        for i in range(steps):
            with off.step() if off else contextlib.nullcontext():
                tokens = make_batch(cfg, 4, 32, i)
                loss = m.loss(tokens) if loss_of is None else loss_of(m, tokens)
                backward(loss)
                opt.step()
                opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
            per.append(off.report()["bytes_offloaded"] if off else 0)
        out = dict(losses=losses, params=_digest(m), per=per)
        if off is not None:
            out["report"] = off.report()
            out["regions"] = {k[0] for k in off._prog.kernels if k[0].startswith("teraio.")}
            off.close()
        return out

    return train(False), train(True)


def _ce(logits, t):
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), t.reshape(-1))


def test_function_region(tmp_path):
    """A compiled function wrapped by teraio.function_region runs as a region of the step (as
    teraio.titan runs TorchTitan's compiled loss): bit for bit the same as the compiled function
    without teraio, with offloading in the steady steps. One that reads a parameter that is not
    among its arguments (through a closure) is refused at its call, before the update."""
    loss_fn = teraio.function_region("ce", torch.compile(_ce, backend="aot_eager"))
    assert teraio.function_region("ce", loss_fn) is loss_fn  # idempotent

    def build(m):
        pass

    def train_loss(m, tokens):
        return loss_fn(m(tokens[:, :-1]), tokens[:, 1:])

    plain, got = _compiled_pair(tmp_path, build, lambda loss: loss.backward(), loss=train_loss)
    assert got["losses"] == plain["losses"] and got["params"] == plain["params"]
    assert {"teraio.region.fwd[ce]", "teraio.region.bwd_end[ce]"} <= got["regions"]
    assert got["report"]["steps_offloaded"] == 2 and got["per"][3] > got["per"][2], got

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    off = teraio.Offloader(m, opt, **_kw(tmp_path))
    bad = teraio.function_region("loss", torch.compile(lambda x: m(x).square().sum(),
                                                        backend="aot_eager"))
    before = _digest(m)
    with pytest.raises(RuntimeError, match=r"function region loss: its compiled function read "
                                           r"a tensor that is not one of its arguments"):
        with off.step():
            bad(torch.randn(8, 64)).backward()
            opt.step()
    assert _digest(m) == before
    off.close()


class _Checkpointed(torch.nn.Module):
    """A block run under torch.utils.checkpoint (reentrant or not)."""

    def __init__(self, block, reentrant):
        super().__init__()
        self.b, self.reentrant = block, reentrant

    def forward(self, x, cos, sin):
        from torch.utils.checkpoint import checkpoint

        return checkpoint(self.b, x, cos, sin, use_reentrant=self.reentrant)


def test_activation_checkpointing_with_compiled_blocks(tmp_path):
    """Activation checkpointing inside a compiled block (the checkpointed block compiled, as
    TorchTitan applies AC before compiling: the compiled graph recomputes in its backward),
    and torch.utils.checkpoint around a compiled block, non-reentrant and reentrant: bit for bit
    the same as without teraio, offloading at the regions' boundaries. Around a compiled block
    the non-reentrant checkpoint's hooks do not reach into the region: the block's activations
    are saved, and the plan offloads them."""
    def build(m):
        m.layers[0] = _Checkpointed(m.layers[0], False)
        m.layers[0].compile(backend="aot_eager")
        for i, reentrant in ((1, False), (2, True)):
            m.layers[i].compile(backend="aot_eager")
            m.layers[i] = _Checkpointed(m.layers[i], reentrant)

    plain, got = _compiled_pair(tmp_path, build, lambda loss: loss.backward(), layers=3)
    assert got["losses"] == plain["losses"] and got["params"] == plain["params"]
    assert {"teraio.region.fwd[layers.0]", "teraio.region.bwd[layers.1.b]",
            "teraio.region.bwd_end[layers.2.b]"} <= got["regions"], got["regions"]
    rep, per = got["report"], got["per"]
    assert rep["steps_offloaded"] == 2 and rep["steps_diverged"] == 0 and per[3] > per[2], rep


class _Boom(torch.autograd.Function):
    fail = False

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        if _Boom.fail:
            raise RuntimeError("boom in the region's backward")
        return g @ w.t(), x.t() @ g


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(64, 64) * 0.1)

    def forward(self, x):
        return _Boom.apply(x, self.w)


def test_region_backward_that_raises_leaves_the_modes_as_they_were(tmp_path):
    """A region's backward pre-hook turns the dispatch modes off for the node; when the node
    raises, its post-hook never runs: the modes are on again after the step (the autograd engine
    restores the thread's dispatch state when it leaves the backward; the step's mode checks),
    not twice, and the next steps run (planned) as usual."""
    import torch._dynamo  # noqa: F401  (regions are installed where Dynamo is loaded)
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 64), _Block(), torch.nn.Linear(64, 64))
    m[1]._compiled_call_impl = m[1]._call_impl  # stands for block.compile()'s compiled callable
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    off = teraio.Offloader(m, opt, memory_budget=0.9, ssd_dirs=[str(tmp_path)],
                           options=teraio.OffloadOptions(min_tensor_bytes="4KiB"))

    def step():
        with off.step():
            m(torch.randn(32, 64)).square().sum().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

    for _ in range(4):
        step()
    assert off._prog is not None and any(k[0] == "teraio.region.bwd[1]"
                                         for k in off._prog.kernels)
    def stack():
        return [type(x).__name__ for x in _get_current_dispatch_mode_stack()]

    assert stack() == ["Guard"]  # between steps: the Offloader's guard, made anew by each step
    _Boom.fail = True
    try:
        with pytest.raises(RuntimeError, match="boom in the region's backward"):
            step()
    finally:
        _Boom.fail = False
    assert stack() == ["Guard"]
    done = off.report()["steps_offloaded"]
    for _ in range(3):  # the steps after a failed one run, and run planned again
        step()
        assert stack() == ["Guard"]
    assert off.report()["steps_offloaded"] > done
    off.close()
