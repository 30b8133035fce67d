"""The Offloader's arguments: sizes, the budget, the process's CPU settings, torch.compile
detection, and warnings attributed to the user's code (teraio.torch.offload)."""
from __future__ import annotations

import contextlib
import os
import sys
import warnings

from teraio import _core

_Error = _core.Error


def _bytes(v, what):
    if v is None:
        return 0
    if isinstance(v, str):
        try:
            return _core.parse_bytes(v)
        except _Error as e:
            raise ValueError(f"{what}: cannot parse {v!r} as a size (e.g. '8GiB'): {e}") from None
    if isinstance(v, (int, float)) and v >= 0:
        return int(v)
    raise ValueError(f"{what}: expected bytes or a size string like '8GiB', got {v!r}")


def _rank():
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except Exception:  # pragma: no cover - torch without distributed
        pass
    return int(os.environ.get("RANK", "0"))


def _warn(message: str) -> None:
    """A RuntimeWarning attributed to the user's code: the first frame outside teraio,
    contextlib and torch (the `with off.step():` line, or the line whose operator started the
    step), however deep inside the step it is raised."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the teraio package
    torch_mod = sys.modules.get("torch")
    skip = (here,) + ((os.path.dirname(os.path.abspath(torch_mod.__file__)) + os.sep,)
                      if getattr(torch_mod, "__file__", None) else ())
    level, f = 2, sys._getframe(1)  # stacklevel 2: _warn's caller
    while f is not None and (f.f_code.co_filename.startswith(skip)
                             or f.f_code.co_filename == contextlib.__file__):
        level += 1
        f = f.f_back
    warnings.warn(message, RuntimeWarning, stacklevel=level)


def _budget_arg(v):
    """memory_budget as (fraction, bytes): a float in (0, 1) is a fraction of the profiled
    peak, an int or a size string is bytes. Any other float is refused rather than rounded (1.5
    would be 1 byte): bytes as a float only where they are a whole number of MiB (8e9). A string
    is read as the user means it: "0.5" or "50%" is a fraction, as 0.5 is; a string that is a
    number without a unit ("1000") is refused (bytes need their unit: "1000B", "8GiB")."""
    hint = ("memory_budget: expected bytes (an int, or a size string like '8GiB') or a fraction "
            f"of the profiled peak (0.5, '0.5' or '50%'), got {v!r}")
    if isinstance(v, bool):
        raise ValueError(hint)
    if isinstance(v, str):
        s = v.strip()
        number = s[:-1].strip() if s.endswith("%") else s
        try:
            f = float(number)
        except ValueError:
            f = None  # a size with its unit: bytes, below
        if f is not None:
            if s.endswith("%"):
                f /= 100
            if 0 < f < 1:
                return f, 0
            raise ValueError(hint + (": a fraction must be in (0, 1), 0% to 100% exclusive"
                                     if s.endswith("%") or "." in s else
                                     ": a size needs its unit ('8GiB', '512MB', '1000B')"))
    if isinstance(v, float):
        if 0 < v < 1:
            return v, 0
        if not (v >= 1 << 20 and v.is_integer()):
            raise ValueError(hint)
        v = int(v)
    n = _bytes(v, "memory_budget")
    if n <= 0:
        raise ValueError("memory_budget: must be > 0 bytes or a fraction in (0, 1) of "
                         "the profiled peak (e.g. memory_budget='8GiB' or 0.5)")
    return None, n


_COMPILE_HELP = (
    "teraio.Offloader runs each module compiled on its own (torch.compile(block) set as a "
    "child, or block.compile(), as TorchTitan compiles each transformer block) as one region "
    "of the step, and moves tensors at region boundaries; it cannot move anything inside a "
    "compiled region, and Dynamo compiles nothing under the Offloader's dispatch mode outside "
    "one. Compile each block instead (for b in model.layers: b.compile()), or train the "
    "uncompiled model (torch.compile(m) returns a wrapper: pass wrapper._orig_mod)")


def _compiled_module(model, split=False):
    """A description of the torch.compile pattern in model that the Offloader refuses, or
    None. With split (when the Offloader is made), the whole model compiled (torch.compile(model),
    model.compile()) is split into its blocks, each compiled on its own with the same options
    (teraio.torch._compile.split_whole), where it has blocks and nothing inside it is compiled
    already; the whole model compiled later, or one that cannot be split, is refused, as is a
    compiled module inside another. The modules compiled on their own are made regions of the
    step (teraio.torch._compile.install) here."""
    if model is None or "torch._dynamo" not in sys.modules:  # nothing compiled without Dynamo
        return None
    try:
        model.named_modules
    except Exception:  # noqa: BLE001 - a model without named_modules()
        return None
    from teraio.torch import _compile

    why = _compile.split_whole(model) if split else _compile.whole_model(model)
    if why is None:
        inner = _compile.nested(model)
        if inner is not None:
            why = f"module {inner} is compiled inside another compiled module"
    if why is None:
        _compile.install(model)
    return why


def _dynamo_tls():
    """Dynamo's thread-local state, where it lists the frames it skipped (None: no Dynamo
    loaded, or a PyTorch without that list)."""
    if "torch._dynamo" not in sys.modules:
        return None
    ef = sys.modules.get("torch._dynamo.eval_frame")
    tls = getattr(ef, "dynamo_tls", None)
    return tls if tls is not None and hasattr(tls, "skip_reasons") else None


def _attempt(fn):
    """fn(); the exception it raised instead of raising it (None: it worked)."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - reported with the step's own failure
        return e
    return None


def _local_nbytes(t):
    """Bytes of t's own storage view: a DTensor's (FSDP2) local shard, not the whole."""
    local = getattr(t, "_local_tensor", None)
    t = local if local is not None else t
    return t.numel() * t.element_size()


def _after_update(e, updated):
    """e (ValueError or teraio.Error from planning at the end of a profiled step), saying in
    which state the step left the model."""
    note = ("; raised at the end of the profiled step, after its optimizer.step(): that update "
            "stands (do not apply this batch again)" if updated else
            "; raised at the end of the profiled step")
    if isinstance(e, _Error) and len(e.args) >= 2:
        return _Error(e.args[0], str(e.args[1]) + note)
    return type(e)(str(e) + note)


def _mmap_threshold_arg(v, what="cpu_mmap_threshold"):
    """cpu_mmap_threshold as bytes (None stays None, "auto" stays "auto"), within what glibc
    accepts."""
    if v is None or v == "auto":
        return v
    n = _bytes(v, what)
    if not 0 <= n <= 32 << 20:
        raise ValueError(f"{what}: {v!r} is outside glibc's range, 0 to 32 MiB "
                         "(e.g. '64KiB'; None leaves malloc alone)")
    return n


def _rate_arg(v, what, also=""):
    """A rate in bytes per second from a string ("2GB/s") or a number > 0."""
    rate = 0.0
    try:
        rate = _core.parse_rate(v) if isinstance(v, str) else float(v)
    except (_Error, TypeError, ValueError):
        pass
    if isinstance(v, bool) or not rate > 0:
        raise ValueError(f"{what}: expected {also}a rate like '2GB/s', got {v!r}")
    return rate


def _prefault_arg(v):
    """cpu_prefault as a bool: "auto" is True where the CPUs this process may run on are at least
    two per rank on this node (LOCAL_WORLD_SIZE, set by torchrun; 1 without it): a spare one."""
    if v == "auto":
        try:
            n = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            n = os.cpu_count() or 1
        try:
            ranks = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
        except ValueError:
            ranks = 1
        return n >= 2 * ranks
    if not isinstance(v, bool):
        raise ValueError(f"cpu_prefault: expected True, False or 'auto', got {v!r}")
    return v


_WARNED = set()


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        _warn(message)


def _on_cuda(model):
    """Whether the model's parameters live on a CUDA device."""
    try:
        return any(p.is_cuda for p in model.parameters())
    except Exception:  # noqa: BLE001 - a model without parameters()
        return False


def _device_backend(model):
    """The engine backend for a model whose parameters live on a CUDA device: "auto" would pick
    the fastest host-memory backend (uring), which cannot move device memory. GPUDirect Storage
    (cufile) when its probe says it can run here, else cuda (pinned bounce buffers). None (auto)
    for CPU models."""
    if not _on_cuda(model):
        return None
    available = {b["name"] for b in _core.probe() if b["available"]}
    return "cufile" if "cufile" in available else "cuda"
