"""What guards the offloaded tensors between steps (teraio.torch.offload).

Between steps the Offloader leaves the parameters, gradients and optimizer states it offloaded
with their shapes but no memory (a storage of 0 bytes): a kernel that read one would read no
memory at all. So while any may be offloaded, every way in brings them back first:
- hooks on the model (forward, state_dict(), load_state_dict(), on every submodule) and on the
  optimizer (step(), state_dict(), load_state_dict()) call Offloader.restore();
- any other operator on such a tensor (p.sum(), clip_grad_norm_, an evaluation without the
  model's forward) is seen by a TorchDispatchMode pushed on this thread's mode stack at the
  end of the step (Guard), which calls restore() before the operator runs. Each Offloader's
  guard knows its own tensors (Offloader._offloaded_here, by storage): with several live
  Offloaders (one per model), an operator on one's tensor passes the others' guards and brings
  back that one's only. The guard steps aside at once after that (every tensor is back) and
  leaves the stack at the next hook, step or restore() where it is the innermost mode; where
  it is not (another Offloader's guard entered after it), the next step's end arms it again.
- a global the step left in memory may still have a copy the executor takes for its contents:
  one read back and not modified since, or (CUDA, the stream-ordered executor) one whose write
  goes on into the next step. The next step would release such a tensor without writing it
  again, so an operator that modifies a global between steps (an in-place update outside
  off.step()) calls restore() first too: the executor is dropped with its copies (a write in
  flight is waited for) and the next step's executor writes what it offloads again.
A restore() that fails raises a teraio.Error saying what it could not bring back, never a crash.

One Offloader per model and per optimizer at a time (Owners): a second one would see the first
one's offloaded tensors as tensors of 0 bytes.
"""
from __future__ import annotations

import sys
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode

_OWNERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _storage_bytes(t):
    try:
        return t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError):  # a wrapper subclass without storage
        return -1


def touches_offloaded(args, kwargs, owns):
    """Whether an operator's arguments include a tensor with elements but no memory whose
    storage owns(storage) says one Offloader offloaded (another live Offloader's tensors of 0
    bytes are its own guard's)."""
    stack = [args, kwargs]
    while stack:
        v = stack.pop()
        if isinstance(v, torch.Tensor):
            if v.numel() > 0 and _storage_bytes(v) == 0 and owns(v.untyped_storage()):
                return True
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
    return False


def _storages_written(func, args, kwargs):
    """The data pointers of the storages an operator writes (its schema's mutable arguments)."""
    out = []
    for i, a in enumerate(func._schema.arguments):
        if a.alias_info is None or not a.alias_info.is_write:
            continue
        v = args[i] if i < len(args) else kwargs.get(a.name)
        stack = [v]
        while stack:
            x = stack.pop()
            if isinstance(x, torch.Tensor):
                if _storage_bytes(x) > 0:
                    out.append(x.untyped_storage().data_ptr())
            elif isinstance(x, (list, tuple)):
                stack.extend(x)
    return out


class Guard(TorchDispatchMode):
    """Pushed at the end of a step while tensors may be offloaded: the first operator that uses a
    tensor its Offloader offloaded (Offloader._offloaded_here), or modifies a global the executor
    holds in memory (`held`: the data pointers of their storages), brings every tensor of that
    Offloader back (restore) before it runs. Other Offloaders' tensors pass through to their
    own guards, wherever those are on the stack."""

    def __init__(self, off, held=()):
        super().__init__()
        me = weakref.ref(self)

        def gone(_ref):
            # the Offloader was collected without close() (dropped after a step that raised):
            # off the stack, or every later operator of the process would run through here
            g = me()
            if g is not None:
                g.orphaned()

        self.off = weakref.ref(off, gone)
        self.armed = True
        self.done = False  # its Offloader is closed or collected: leaves at the next sweep()
        self.held = frozenset(held)

    def rearm(self, held):
        """Guard again, at the end of a step whose start could not take this guard off the
        stack (another Offloader's guard entered after it): the step offloaded anew."""
        self.armed = True
        self.held = frozenset(held)

    def orphaned(self):
        """Its Offloader is closed or gone: the guard has nothing left to guard."""
        self.armed = False
        self.done = True
        sweep()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        # held for the call: while this runs the guard is off the stack, where its Offloader's
        # collection could not find it (sweep)
        off = self.off()
        kwargs = kwargs or {}
        if self.armed and off is not None and (
                touches_offloaded(args, kwargs, off._offloaded_here) or (
                self.held and not self.held.isdisjoint(
                    _storages_written(func, args, kwargs)))):
            # Offloader.save() building its object: a view (state_dict()'s detach) reads nothing
            if not (off._saver.active and getattr(func, "is_view", False)):
                off._bring_back(f"the operator {func} between steps")
        return func(*args, **kwargs)


def push(guard):
    sweep()
    guard.__enter__()


def _in_mode_handler():
    """Whether this thread is inside a dispatch mode's __torch_dispatch__: that mode is off
    the stack until it returns, so the innermost mode on the stack is not the innermost one."""
    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_name == "__torch_dispatch__":
            return True
        f = f.f_back
    return False


def sweep():
    """Take off this thread's mode stack the guards whose Offloader is closed or collected
    (Guard.done), while one is the innermost mode. Each leaves through its own __exit__, in
    the order the modes entered: PyTorch restores there the process-wide flag by which Dynamo
    runs every frame eagerly while a dispatch mode is active, so a guard taken off out of
    order would leave that flag set (torch.compile would compile nothing for the rest of the
    process). One under another mode (a later Offloader's guard or step) stays, inert, until a
    later sweep finds it innermost: at a step's start and end, at close(), or when another
    Offloader is collected. Not inside a mode's __torch_dispatch__ (collection can run there),
    where the mode that runs is off the stack and would be put back above."""
    if _in_mode_handler():
        return
    while True:
        g = _get_current_dispatch_mode()
        if not isinstance(g, Guard) or not g.done:
            return
        g.__exit__(None, None, None)


def pop(guard):
    """Take guard off this thread's mode stack if it is the innermost mode; False if it is not
    (another mode entered after it is still active: it stays, unarmed, until a later call)."""
    guard.armed = False
    if _get_current_dispatch_mode() is guard:
        guard.__exit__(None, None, None)
        sweep()  # a guard it covered whose Offloader went meanwhile
        return True
    return False


def claim(off, objs):
    """Refuse a second Offloader on a model or optimizer that an open one holds."""
    for what, obj in objs:
        if obj is None:
            continue
        ref = _OWNERS.get(obj)
        prev = ref() if ref is not None else None
        if prev is not None and prev is not off and not prev._closed:
            raise ValueError(
                f"{what}: another teraio.Offloader is open on this {what} and may hold some of "
                f"its tensors offloaded (they have no memory outside its steps): call close() on "
                f"that Offloader first (it brings every tensor back, as restore() does, and "
                f"releases its files), then make the new one")


def register(off, objs):
    for _, obj in objs:
        if obj is not None:
            _OWNERS[obj] = weakref.ref(off)


def release(off, objs):
    for _, obj in objs:
        if obj is not None:
            ref = _OWNERS.get(obj)
            if ref is not None and ref() is off:
                del _OWNERS[obj]


def adopt_storages(optimizer):
    """Give the optimizer states whose storage cannot be resized (what optimizer.load_state_dict()
    keeps of a torch.load'ed state dict) a resizable copy, so that they can be offloaded: the
    same values in the same tensors (tensors that shared a storage share the copy). Returns how
    many storages were copied. Parameters are left alone: one shared with numpy (or another view
    of its memory that the user or a DDP/FSDP wrapper keeps) must stay the same memory."""
    tensors = []
    if optimizer is not None:
        for s in optimizer.state.values():
            if isinstance(s, dict):
                tensors.extend(v for v in s.values() if isinstance(v, torch.Tensor))
    copies = {}
    for t in tensors:
        if type(t) not in (torch.Tensor, torch.nn.Parameter) or t.numel() == 0:
            continue
        st = t.untyped_storage()
        if st.resizable() or st.nbytes() == 0:
            continue
        new = copies.get(st._cdata)
        if new is None:
            new = copies[st._cdata] = (st, torch.UntypedStorage(st.nbytes(), device=st.device))
            new[1].copy_(st)
        with torch.no_grad():
            t.set_(new[1], t.storage_offset(), t.size(), t.stride())
    return len(copies)
