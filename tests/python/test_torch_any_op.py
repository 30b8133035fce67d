"""Any aten operator, with an Offloader alive and inside its steps, gives what plain PyTorch gives.

With OffloadOptions(cpu_allocator=True), the Offloader installs teraio's CPU allocator for the whole
process: every tensor of 1 MiB or more, whoever makes it, comes from teraio's block cache, and
oneDNN's scratchpads and other users of c10's raw interface (raw_allocate / raw_deallocate)
go through it too. The battery below runs a broad sample of operators (activations, convolutions,
normalizations, reductions, indexing, bfloat16 and float16 math, complex, autograd through them),
big enough that their tensors come from the cache, in three fresh interpreters: plain PyTorch;
with an Offloader made (outside steps); and inside the Offloader's steps (warm-up, profiled and
planned) while it trains a small model. Every result, and the training, must be bitwise equal to
plain PyTorch's.
"""
import json
import os
import subprocess
import sys

import pytest

_BATTERY = r"""
import hashlib, json, math, os, sys, tempfile, warnings
import torch
import torch.nn.functional as F

torch.manual_seed(0)
torch.set_num_threads(2)


def digest(x):
    h = hashlib.sha256()
    for t in (x if isinstance(x, (list, tuple)) else [x]):
        if t is None:
            continue
        t = t.detach().contiguous()
        if t.is_complex():
            t = torch.view_as_real(t).contiguous()
        if t.dtype == torch.bool:
            t = t.to(torch.uint8)
        h.update(str((t.dtype, tuple(t.shape))).encode())
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def with_grad(fn, *xs):
    # the operator's forward and its backward (autograd's kernels) on fresh leaves
    xs = [x.detach().clone().requires_grad_(True) for x in xs]
    out = fn(*xs)
    (out.float() * 1.5).sum().backward()
    return [out] + [x.grad for x in xs]


def battery():
    g = torch.Generator().manual_seed(1234)
    rn = lambda *s, dt=torch.float32: torch.randn(*s, generator=g).to(dt)
    x = rn(512, 1024)                      # 2 MiB: from teraio's cache when installed
    w = rn(1024, 768)
    img = rn(8, 16, 64, 64)                 # 2 MiB
    k = rn(32, 16, 3, 3)
    seq = rn(8, 64, 1024)
    idx = torch.randint(0, 512, (4096,), generator=g)
    perm = torch.randperm(512, generator=g)  # index_put with duplicates adds in any order
    ops = {
        # activations
        "relu": lambda: F.relu(x), "gelu": lambda: F.gelu(x),
        "gelu_tanh": lambda: F.gelu(x, approximate="tanh"), "silu": lambda: F.silu(x),
        "sigmoid": lambda: torch.sigmoid(x), "tanh": lambda: torch.tanh(x),
        "softmax": lambda: F.softmax(x, -1), "log_softmax": lambda: F.log_softmax(x, -1),
        "elu": lambda: F.elu(x), "leaky_relu": lambda: F.leaky_relu(x, 0.1),
        "hardswish": lambda: F.hardswish(x), "mish": lambda: F.mish(x),
        "softplus": lambda: F.softplus(x), "erf": lambda: torch.erf(x),
        "gelu_grad": lambda: with_grad(F.gelu, x),
        "silu_grad": lambda: with_grad(F.silu, x),
        # convolutions and pooling (oneDNN)
        "conv1d": lambda: F.conv1d(seq.transpose(1, 2)[:, :64], rn(128, 64, 5), padding=2),
        "conv2d": lambda: F.conv2d(img, k, padding=1),
        "conv2d_grad": lambda: with_grad(lambda a, b: F.conv2d(a, b, padding=1), img, k),
        "conv2d_depthwise": lambda: F.conv2d(img, rn(16, 1, 3, 3), groups=16),
        "conv2d_strided": lambda: F.conv2d(img, rn(64, 16, 5, 5), stride=2, padding=2),
        "conv_transpose2d": lambda: F.conv_transpose2d(img, rn(16, 8, 4, 4), stride=2),
        "conv3d": lambda: F.conv3d(rn(2, 8, 16, 32, 32), rn(16, 8, 3, 3, 3)),
        "max_pool2d": lambda: F.max_pool2d(img, 2), "avg_pool2d": lambda: F.avg_pool2d(img, 3),
        "adaptive_avg_pool2d": lambda: F.adaptive_avg_pool2d(img, 7),
        "interpolate": lambda: F.interpolate(img, scale_factor=2, mode="bilinear"),
        # normalizations
        "layer_norm": lambda: F.layer_norm(seq, (1024,)),
        "layer_norm_grad": lambda: with_grad(lambda a: F.layer_norm(a, (1024,)), seq),
        "rms_norm": lambda: F.rms_norm(seq, (1024,)),
        "batch_norm": lambda: F.batch_norm(img, None, None, training=True),
        "batch_norm_grad": lambda: with_grad(
            lambda a: F.batch_norm(a, None, None, training=True), img),
        "group_norm": lambda: F.group_norm(img, 4),
        "instance_norm": lambda: F.instance_norm(img),
        # reductions
        "sum": lambda: x.sum(0), "mean": lambda: seq.mean((0, 1)), "var": lambda: x.var(1),
        "std": lambda: x.std(0), "max": lambda: x.max(1), "argmax": lambda: x.argmax(0),
        "cumsum": lambda: x.cumsum(1), "prod": lambda: (x * 0.01 + 1).prod(1),
        "logsumexp": lambda: torch.logsumexp(x, 1), "norm": lambda: torch.linalg.norm(x, dim=1),
        "topk": lambda: torch.topk(x, 16, dim=1), "sort": lambda: torch.sort(x, dim=1),
        "amax": lambda: seq.amax(-1), "all_any": lambda: [(x > 0).all(1), (x > 3).any(0)],
        # indexing
        "index_select": lambda: x.index_select(0, idx),
        "gather": lambda: torch.gather(x, 1, idx.view(4, 1024) % 1024),
        "scatter_add": lambda: torch.zeros(512, 1024).scatter_add(
            0, idx.view(4, 1024) % 512, x[:4]),
        "index_add": lambda: torch.zeros(512, 1024).index_add(0, idx[:512], x),
        "masked_fill": lambda: x.masked_fill(x > 0.5, -1.0),
        "index_put": lambda: x.clone().index_put_((perm,), x, accumulate=True),
        "advanced_index": lambda: x[idx % 512, :256],
        "where": lambda: torch.where(x > 0, x, -0.5 * x),
        "nonzero": lambda: torch.nonzero(x > 2.0),
        "embedding": lambda: F.embedding(idx.view(8, 512) % 512, x),
        "embedding_grad": lambda: with_grad(lambda e: F.embedding(idx.view(8, 512) % 512, e), x),
        "cat_stack": lambda: [torch.cat([x, x], 1), torch.stack([x, x])],
        "cross_entropy_grad": lambda: with_grad(
            lambda a: F.cross_entropy(a, idx[:512] % 1024), x),
        # matmul family, float32
        "mm": lambda: x @ w, "bmm": lambda: torch.bmm(seq.transpose(1, 2), seq),
        "addmm": lambda: torch.addmm(w[0], x, w), "einsum": lambda: torch.einsum(
            "bsd,bte->bst", seq[:, :, :128], seq[:, :, :128]),
        "linear_grad": lambda: with_grad(F.linear, x, w.t().contiguous()),
        "sdpa": lambda: F.scaled_dot_product_attention(
            seq.view(8, 64, 8, 128).transpose(1, 2), seq.view(8, 64, 8, 128).transpose(1, 2),
            seq.view(8, 64, 8, 128).transpose(1, 2), is_causal=True),
        # bfloat16 and float16 math
        "bf16_mm": lambda: x.bfloat16() @ w.bfloat16(),
        "bf16_autocast_linear": lambda: _autocast(lambda: F.linear(x, w.t())),
        "bf16_autocast_conv2d": lambda: _autocast(lambda: F.conv2d(img, k, padding=1)),
        "bf16_autocast_grad": lambda: _autocast(
            lambda: with_grad(lambda a, b: F.gelu(a @ b), x, w)),
        "bf16_gelu_layer_norm": lambda: [F.gelu(x.bfloat16()),
                                         F.layer_norm(seq.bfloat16(), (1024,))],
        "bf16_softmax": lambda: F.softmax(x.bfloat16(), -1),
        "fp16_math": lambda: [x.half() + x.half(), x.half() * 0.5, x.half().sum(1),
                              F.relu(x.half())],
        "fp16_mm": lambda: x.half() @ w.half(),
        "fp16_conv2d": lambda: F.conv2d(img.half(), k.half(), padding=1),
        # complex
        "fft": lambda: torch.fft.fft(x), "rfft2": lambda: torch.fft.rfft2(img),
        "ifft_roundtrip": lambda: torch.fft.ifft(torch.fft.fft(seq[0])),
        "complex_math": lambda: _complex(),
        # linear algebra (LAPACK)
        "solve": lambda: torch.linalg.solve(rn(256, 256) + 256 * torch.eye(256), rn(256, 512)),
        "qr": lambda: torch.linalg.qr(rn(512, 256)),
        "cholesky": lambda: torch.linalg.cholesky(_spd()),
    }
    return {name: digest(fn()) for name, fn in ops.items()}


def _autocast(fn):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return fn()


def _complex():
    g = torch.Generator().manual_seed(7)
    a = torch.complex(torch.randn(512, 512, generator=g), torch.randn(512, 512, generator=g))
    return [a * a.conj(), a.abs(), a.angle(), a @ a, torch.exp(a)]


def _spd():
    g = torch.Generator().manual_seed(9)
    a = torch.randn(512, 512, generator=g)
    return a @ a.t() + 512 * torch.eye(512)


def model_and_opt():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.GELU(),
                            torch.nn.LayerNorm(1024), torch.nn.Linear(1024, 1024))
    return m, torch.optim.AdamW(m.parameters(), lr=1e-3)


def train_step(m, opt, i):
    g = torch.Generator().manual_seed(100 + i)
    loss = m(torch.randn(256, 1024, generator=g)).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


def params(m):
    return digest([p for p in m.parameters()])


mode = sys.argv[1]
STEPS = 4  # warm-up, profiled, 2 planned
out = {"outside": battery()}
m, opt = model_and_opt()
off = None
if mode == "offloader":
    import teraio
    warnings.simplefilter("error", RuntimeWarning)  # a divergence would warn: fail instead
    off = teraio.Offloader(m, opt, memory_budget=0.6, ssd_dirs=[tempfile.mkdtemp()],
                           options=teraio.OffloadOptions(cpu_allocator=True,
                                                         min_tensor_bytes="256KiB"))
    out["outside"] = battery()  # the Offloader's allocator is the process's now
losses, steps = [], []
for i in range(STEPS):
    if off is None:
        losses.append(train_step(m, opt, i))
        steps.append(battery())
    else:
        with off.step():
            losses.append(train_step(m, opt, i))
            steps.append(battery())
out["steps"] = steps
out["losses"] = losses
if off is not None:
    off.restore()
    rep = off.report()
    out["report"] = {k: rep[k] for k in ("steps_offloaded", "bytes_offloaded", "steps_diverged",
                                         "unplanned_bytes_offloaded")}
    out["cpu_allocator"] = rep["cpu_allocator"]
out["params"] = params(m)
print(json.dumps(out))
"""


def _start(mode):
    env = dict(os.environ, OMP_NUM_THREADS="2")
    return mode, subprocess.Popen([sys.executable, "-c", _BATTERY, mode], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env)


def _result(started):
    mode, p = started
    try:
        out, err = p.communicate(timeout=600)
    finally:
        p.kill()
    # an allocator assertion aborts the interpreter (SIGABRT): returncode -6, the reason in stderr
    assert p.returncode == 0, f"{mode}: exit {p.returncode}\n{err[-4000:]}"
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def runs():
    # both interpreters at once (each is deterministic at its 2 threads; CI time)
    started = [_start("plain"), _start("offloader")]
    return [_result(s) for s in started]


def test_operators_with_an_offloader_alive_and_inside_steps(runs):
    plain, got = runs
    ref = plain["outside"]
    assert len(ref) > 80
    for name, d in ref.items():
        assert got["outside"][name] == d, f"{name}: outside the steps, with an Offloader alive"
    assert plain["steps"][0] == ref  # the battery is deterministic in plain PyTorch
    for i, (mine, theirs) in enumerate(zip(got["steps"], plain["steps"])):
        for name, d in theirs.items():
            assert mine[name] == d, f"{name}: inside step {i}"
    assert got["losses"] == plain["losses"]
    assert got["params"] == plain["params"]
    rep = got["report"]
    assert rep["steps_offloaded"] == 2 and rep["steps_diverged"] == 0, rep
    assert rep["bytes_offloaded"] > 0, rep
    ca = got["cpu_allocator"]
    assert ca is not None and ca["installed"] is True, ca
    assert ca["hot_hits"] + ca["cold_hits"] > 0, ca  # the operators' tensors came from the cache
