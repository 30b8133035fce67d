"""FSDP2 (torch.distributed.fsdp.fully_shard) under teraio.Offloader.

What FSDP2 does with memory, per FSDPParam (torch 2.13, _fully_shard/_fsdp_param.py):
- the sharded parameter is a DTensor whose local tensor is a view of `_sharded_param_data`
  (the padded shard); it lives across steps and only the optimizer writes it. teraio manages it
  like any parameter (collect_globals unwraps DTensor._local_tensor); the optimizer states
  (DTensors too) and the sharded gradients likewise.
- the unsharded parameter is a view of `all_gather_outputs[i]`, storages made once in the first
  forward and then freed and re-allocated by FSDP itself with `untyped_storage().resize_()` (not
  an operator: the dispatcher never sees it) around every forward and backward. teraio must
  never own those: a pointer handed to the executor would be freed behind its back. They are
  kept out of the globals (`GlobalsView`) and pinned in the trace (`pin_owned`): the executor
  never moves them; identity is by StorageImpl, which a resize keeps, so a re-allocated buffer is
  the same pinned tensor, never a managed one.
- the all-gather and reduce-scatter buffers go through c10d operators and are pinned like every
  buffer of a collective (_mode.py, K_COMM / F_PINNED).
- DTensor operators (the optimizer's foreach updates on sharded parameters) reach the dispatch
  mode with DTensor arguments: the mode declines them (NotImplemented, `has_subclass`), DTensor
  runs its C++ dispatch and the per-shard operators on plain local tensors reach the mode.

Refused: DTensor parameters FSDP does not manage (tensor parallel without FSDP), FSDP over
DTensor parameters (2-D FSDP + TP), all-gather extensions (fsdp_pre_all_gather: FSDP resizes
their inner tensors too) and FSDP's own CPU offload (two offloaders of one tensor).
"""
from __future__ import annotations

import torch

_PLAIN_DISPATCH = torch._C._disabled_torch_dispatch_impl


def has_subclass(types) -> bool:
    """True when an operator has tensor-subclass arguments with their own __torch_dispatch__
    (DTensor): the mode returns NotImplemented so that the subclass unwraps them and the
    operators on its plain inner tensors come back through the mode."""
    for t in types:
        if getattr(t, "__torch_dispatch__", _PLAIN_DISPATCH) is not _PLAIN_DISPATCH:
            return True
    return False


def _is_dtensor(p) -> bool:
    return hasattr(p, "_local_tensor") or hasattr(p, "device_mesh")


def fsdp_params(model):
    """Every FSDPParam of the fully_shard modules in model (empty without FSDP2)."""
    out = []
    if model is None or not hasattr(model, "modules"):
        return out
    for m in model.modules():
        get = getattr(m, "_get_fsdp_state", None)
        if get is None:
            continue
        try:
            state = get()
        except Exception:  # noqa: BLE001 - not an FSDP2 module after all
            continue
        for group in getattr(state, "_fsdp_param_groups", None) or ():
            out.extend(group.fsdp_params)
    return out


def owned_storages(fps) -> dict:
    """{StorageImpl address: a tensor on it} of what FSDP allocates, frees and re-allocates
    itself: the all-gather outputs (the unsharded parameters' storage), extension inner tensors
    and the post-forward shards."""
    out = {}
    for fp in fps:
        ts = list(getattr(fp, "all_gather_outputs", ()) or ())
        ts += list(getattr(fp, "_unsharded_inner_tensors", ()) or ())
        ts.append(getattr(fp, "_sharded_post_forward_param_data", None))
        ts.append(fp.__dict__.get("_unsharded_param"))
        for t in ts:
            if isinstance(t, torch.Tensor):
                local = getattr(t, "_local_tensor", None)
                t = local if isinstance(local, torch.Tensor) else t
                out.setdefault(t.untyped_storage()._cdata, t.detach())
    return out


def trace_id(driver, t):
    """The trace id a step driver gave t's storage, or None: from the C dispatch object when the
    driver has one (its identity table lives there), else from the driver's own table."""
    fast = getattr(driver, "fast", None)
    if fast is not None and hasattr(fast, "id_of"):
        return fast.id_of(t)
    return driver.ids.get(t.untyped_storage()._cdata)


class GlobalsView:
    """What collect_globals reads instead of an FSDP2 model: its parameters in registration
    order, each FSDP-managed one as its sharded DTensor even while FSDP has swapped the unsharded
    parameter into the module (after a forward without backward), so that the globals are the
    same storages at every step start and never FSDP's own buffers."""

    def __init__(self, model, fps):
        self.model = model
        self.fps = fps
        self._sharded = {}
        for fp in fps:
            self._sharded[id(fp.sharded_param)] = fp
            up = fp.__dict__.get("_unsharded_param")
            if up is not None:
                self._sharded[id(up)] = fp

    def named_parameters(self):
        owned = owned_storages(self.fps)
        seen = set()
        for name, p in self.model.named_parameters():
            fp = self._sharded.get(id(p))
            if fp is None:
                up = None
                for cand in self.fps:  # an unsharded parameter made since construction
                    if cand.__dict__.get("_unsharded_param") is p:
                        up = cand
                        break
                if up is not None:
                    self._sharded[id(p)] = fp = up
            if fp is not None:
                p = fp.sharded_param
            if id(p) in seen:
                continue
            seen.add(id(p))
            if not _is_dtensor(p) and p.untyped_storage()._cdata in owned:
                continue  # an FSDP buffer under another name: never managed
            yield name, p

    def named_buffers(self):
        return self.model.named_buffers()


def globals_model(model, warmup_steps=None):
    """The object collect_globals reads for `model`: the model itself without FSDP2, a
    GlobalsView with it. Raises ValueError for what teraio cannot manage (module docstring)."""
    if model is None or not hasattr(model, "parameters"):
        return model
    fps = fsdp_params(model)
    managed = set()
    for fp in fps:
        managed.add(id(fp.sharded_param))
        up = fp.__dict__.get("_unsharded_param")
        if up is not None:
            managed.add(id(up))
    for name, p in model.named_parameters():
        if _is_dtensor(p) and id(p) not in managed:
            raise ValueError(
                f"model: parameter {name!r} is a DTensor that FSDP2 does not manage (tensor "
                "parallel): teraio.Offloader supports FSDP2 (fully_shard) and DDP, not tensor "
                "parallelism (docs/runtime.md)")
    if not fps:
        return model
    for fp in fps:
        if getattr(fp, "is_dtensor", False):
            raise ValueError(
                f"model: {fp._param_fqn!r} was a DTensor before fully_shard (FSDP + tensor "
                "parallel): teraio.Offloader supports FSDP2 over plain parameters only "
                "(docs/runtime.md)")
        if getattr(fp, "offload_to_cpu", False):
            raise ValueError(
                f"model: {fp._param_fqn!r} uses FSDP's CPUOffloadPolicy: teraio is the offloader; "
                "pass fully_shard(..., offload_policy=None) (docs/runtime.md)")
        if hasattr(fp._sharded_local_tensor, "fsdp_pre_all_gather"):
            raise ValueError(
                f"model: {fp._param_fqn!r} uses an FSDP all-gather extension "
                "(fsdp_pre_all_gather): not supported by teraio.Offloader (docs/runtime.md)")
    if warmup_steps is not None and int(warmup_steps) < 1:
        raise ValueError("warmup_steps: must be >= 1 with FSDP2 (its first forward allocates "
                         "the unsharded parameter buffers, which teraio must see as existing "
                         "buffers, never as tensors of its own)")
    return GlobalsView(model, fps)


def pin_owned(gmodel, driver) -> int:
    """After a profiled step, before planning: flag every FSDP-owned storage the step used as
    PINNED (never moved, never offloaded on demand). They are pinned already when the step
    found them existing (an input); this makes it hold whatever the order. Returns how many
    trace tensors it changed."""
    if not isinstance(gmodel, GlobalsView) or driver is None:
        return 0
    from teraio.torch._mode import F_GLOBAL, F_PINNED

    tensors = driver.prog.tensors
    changed = 0
    for t in owned_storages(gmodel.fps).values():
        tid = trace_id(driver, t)
        if tid is None or tid >= len(tensors):
            continue
        b, kind, flags, name = tensors[tid]
        if flags & F_GLOBAL:
            raise RuntimeError(f"teraio: FSDP buffer {tid} ({name}) was taken as a global tensor")
        if not flags & F_PINNED:
            tensors[tid] = (b, kind, flags | F_PINNED, name)
            changed += 1
    return changed
