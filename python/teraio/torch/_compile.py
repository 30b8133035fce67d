"""torch.compile under teraio.Offloader: each compiled block is one kernel of the step's trace.

The Offloader's dispatch mode sees one aten operator at a time, and Dynamo compiles nothing while
a dispatch mode is active. A module compiled on its own (torch.compile(block) set as a child, or
block.compile(), as TorchTitan compiles each transformer block) is therefore run as a region:

- forward: the compiled call runs with the dispatch modes off, as one pseudo-operator of the step
  ("teraio.region.fwd[NAME]") that reads the block's inputs, parameters and buffers and writes
  its outputs and the activations the compiled graph saves for the backward (handed over by
  saved-tensor hooks compiled into the graph, teraio.torch._saved_hooks);
- backward: the compiled backward's autograd node gets a pre-hook and a post-hook. The pre-hook
  runs "teraio.region.bwd[NAME]" (reads the saved activations, what the forward read and the
  incoming gradients: the executor brings them back first) and takes the dispatch modes off
  the stack for the node; the post-hook puts them back and runs "teraio.region.bwd_end[NAME]"
  (reads the same, writes the gradients the node produced).

The planner then plans at that granularity, and the executor offloads and prefetches at region
boundaries: a block's parameters and saved activations can leave between its forward and its
backward, exactly as an eager operator's would. The eager parts of the step (embedding, loss,
optimizer.step) stay per operator. Nothing moves while a region's compiled code runs.

The whole model compiled is split into its blocks (split_whole): when the Offloader is made,
at the next step's start (model.compile() after it), or at a torch.compile(model) wrapper's
first call (wrapper_calling). A compiled function is a region where it is wrapped
(function_region) and reads no parameter but its arguments. Refused by name
(teraio.torch._offload_args._compiled_module, _planning.check_dynamo): a whole model that cannot
be split (no blocks, modules compiled inside it), and compiled code that ran uncompiled inside a
step (Dynamo skips it under the mode: refused at the optimizer's step).
"""
from __future__ import annotations

import contextlib

import torch
from torch.utils._python_dispatch import (_disable_current_modes, _get_current_dispatch_mode,
                                         _pop_mode, _push_mode)

from teraio.torch import _mode, _saved_hooks

_ATTR = "_teraio_region"
# the dispatch modes a region's backward pre-hook took off the stack, until its post-hook puts
# them back; where the node raised (no post-hook), StepMode.__exit__ calls reopen()
_OFF: list = []


def _modes_off():
    """Take every dispatch mode off this thread's stack; returns them, innermost first."""
    return [_pop_mode() for _ in range(torch._C._len_torch_dispatch_stack())]


def _modes_on(modes):
    """Put back the modes _modes_off took, unless the stack holds modes again (the autograd
    engine restores the thread's dispatch state it started the backward with when it leaves)."""
    if torch._C._len_torch_dispatch_stack() == 0:
        for m in reversed(modes):
            _push_mode(m)


def reopen():
    """Put back the dispatch modes a failed region backward left off."""
    while _OFF:
        _modes_on(_OFF.pop())


@contextlib.contextmanager
def _skip_watch_kept():
    """Around a region's compiled call: the list in which Dynamo records the frames it skips
    (dynamo_tls.skip_reasons, which the Offloader watches during a step for compiled code that
    ran uncompiled under its dispatch mode) is the same list after the call. A call compiled
    with fullgraph=True (TorchTitan compiles its blocks so) sets a list of its own and leaves
    None behind, which would blind the watch for the rest of the step."""
    from teraio.torch._offload_args import _dynamo_tls

    tls = _dynamo_tls()
    kept = tls.skip_reasons if tls is not None else None
    try:
        yield
    finally:
        if tls is not None:
            tls.skip_reasons = kept


class _Packet:
    __name__ = "teraio_region"


class RegionOp:
    """A pseudo-operator for the StepDriver: hashable, named, one list argument (the tensors it
    reads), its outputs the tensors it writes. It runs only the closure handed to it with that
    exact list (a meta run by the bounded recorder gets a TypeError: its outputs are unknown)."""

    is_view = False
    overloadpacket = _Packet()
    namespace = "teraio"

    def __init__(self, name):
        self.name = name
        self._pending = None
        _mode._SPEC_CACHE[self] = (((0, "tensors", False, False),), (), False, name, False, self)
        _mode._ARG_CACHE[self] = ([(0, "tensors", False, False)], [], False)

    def __str__(self):
        return self.name

    __repr__ = __str__

    def __call__(self, tensors):
        pending = self._pending
        if pending is None or pending[0] is not tensors:
            raise TypeError(f"{self.name} runs only as part of its compiled region")
        return pending[1]()


def _step_mode():
    """The Offloader's StepMode when it is the innermost dispatch mode, else None."""
    m = _get_current_dispatch_mode()
    return m if isinstance(m, _mode.StepMode) else None


def _run_op(mode, op, tensors, fn):
    """Run fn as operator op of the step (mode's driver), reading tensors; fn's list of tensors
    are the operator's outputs."""
    op._pending = (tensors, fn)
    try:
        if mode._dispatch is not None:
            return mode._dispatch(op, (tensors,), {})
        return mode.driver.dispatch(op, (tensors,), {})
    finally:
        op._pending = None


def _tensors(v, acc):
    if isinstance(v, torch.Tensor):
        acc.append(v)
    elif isinstance(v, (list, tuple)):
        for x in v:
            _tensors(x, acc)
    elif isinstance(v, dict):
        for x in v.values():
            _tensors(x, acc)
    return acc


class Region:
    """One compiled module of the model (or a compiled function, module None: it reads only
    its arguments), run as a region of the step."""

    def __init__(self, name, module, call):
        self.name = name
        self.module = module
        self.call = call  # the compiled callable
        self.fwd = RegionOp(f"teraio.region.fwd[{name}]")
        self.bwd = RegionOp(f"teraio.region.bwd[{name}]")
        self.bwd_end = RegionOp(f"teraio.region.bwd_end[{name}]")

    def __call__(self, *args, **kwargs):
        mode = _step_mode()
        if mode is None:  # outside off.step(): the compiled call as it is (the same hooks)
            with _saved_hooks.hooks():
                return self.call(*args, **kwargs)
        state = ([] if self.module is None else
                 list(self.module.parameters()) + list(self.module.buffers()))
        reads = _tensors((args, kwargs), []) + state
        box = {}
        saved = []  # the activations the compiled forward packs (_saved_hooks.collect)

        def run():
            with _disable_current_modes(), _skip_watch_kept(), _saved_hooks.collect(saved):
                box["out"] = self.call(*args, **kwargs)
            return _tensors(box["out"], []) + saved

        _run_op(mode, self.fwd, reads, run)
        out = box["out"]
        if self.module is None:
            _check_function_reads(self.name, out, reads)
        nodes = {}
        for t in _tensors(out, []):
            if t.grad_fn is not None:
                nodes[id(t.grad_fn)] = t.grad_fn
        # the backward reads what the graph saved: its activations, and the graph inputs it
        # saved (not packed), which are among what the region read: all of that, so that
        # nothing the backward may use is moved out during it
        bwd_reads = saved + reads
        for node in nodes.values():
            self._hook_backward(node, bwd_reads)
        return out

    def _hook_backward(self, node, saved):
        import weakref

        region = self
        live = {}
        # weakly: the node holds these hooks; a strong reference back would keep the node and
        # what it saved alive after autograd let go of the graph
        node_ref = weakref.ref(node)

        def pre(grad_outputs):
            mode = _step_mode()
            if mode is None:  # a backward outside off.step(): nothing to do
                return None
            # after a first backward through the node (a retained graph), what autograd still
            # keeps in it: the activations the forward's graph saved reached the region as other
            # tensor objects than those autograd holds, so weak references to them may be dead
            again = _node_saved(node_ref()) if live.get("ran") else []
            reads = _saved_now(saved) + again + _tensors(grad_outputs, [])
            _run_op(mode, region.bwd, reads, list)
            modes = _modes_off()
            _OFF.append(modes)
            live["mode"], live["off"], live["reads"] = mode, modes, reads
            return None

        def post(grad_inputs, grad_outputs):
            modes = live.pop("off", None)
            if modes is None or not _OFF or _OFF[-1] is not modes:
                return None
            _modes_on(_OFF.pop())
            mode, reads = live.pop("mode"), live.pop("reads")
            grads = _tensors(grad_inputs, [])
            _run_op(mode, region.bwd_end, reads, lambda: grads)
            _hold_weakly(saved)
            live["ran"] = True
            return None

        node.register_prehook(pre)
        node.register_hook(post)


def _hold_weakly(saved):
    """After a region's backward node ran: the tensors its forward saved are held weakly from
    now on. Autograd keeps them (through the node) only where the graph is retained
    (backward(retain_graph=True)), for a next backward through the node, which reads them
    again; otherwise they go when autograd releases them, as an eager operator's would."""
    import weakref

    saved[:] = [weakref.ref(t) if isinstance(t, torch.Tensor) else t for t in saved]


def _node_saved(node):
    """The tensors autograd keeps in `node` for its backward (an AOTAutograd node's context),
    or none where it keeps none any more (a graph not retained, after its backward). Read only
    for a second backward through the node: reading them runs their unpack hooks (under
    activation checkpointing around the region: a recomputation), which a retained graph
    under checkpointing does not have (PyTorch refuses that with compiled blocks)."""
    if node is None:
        return []
    try:
        got = getattr(node, "saved_tensors", ())
    except RuntimeError:  # freed after an earlier backward
        return []
    return [t for t in got if isinstance(t, torch.Tensor)]


def _saved_now(saved):
    """The tensors a region's forward saved that are still alive (saved: the tensors, or weak
    references to them after a backward through the region, _hold_weakly)."""
    out = []
    for x in saved:
        t = x if isinstance(x, torch.Tensor) else x()
        if t is not None:
            out.append(t)
    return out


def _check_function_reads(name, out, reads):
    """A function region reads only its arguments: RuntimeError where its compiled graphs
    read a tensor that autograd accumulates a gradient into (a parameter) that is not one of
    them (reached through a closure or a global, e.g. torch.compile(lambda t: model.loss(t))):
    the plan did not hold it in memory for the region. Seen on the autograd graph the call
    made, walked from its outputs back to its arguments' own nodes; raised in the forward,
    before any update."""
    mine = {id(t) for t in reads}
    stop = {id(t.grad_fn) for t in reads if t.grad_fn is not None}
    todo = [t.grad_fn for t in _tensors(out, []) if t.grad_fn is not None]
    seen = set()
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen or id(node) in stop:
            continue
        seen.add(id(node))
        v = getattr(node, "variable", None)
        if v is not None and id(v) not in mine:
            raise RuntimeError(
                f"function region {name}: its compiled function read a tensor that is not "
                f"one of its arguments (shape {tuple(v.shape)}, requires grad: a parameter "
                "reached through a closure or a global); a function region reads only its "
                "arguments. Pass the tensors it reads as arguments, or compile the module "
                "that holds them (block.compile()) instead")
        todo.extend(n for n, _ in node.next_functions)


def function_region(name, fn):
    """fn (a function compiled with torch.compile) as a region of any Offloader's step: the
    returned callable runs fn as one pseudo-operator inside off.step() (reading its arguments,
    writing its outputs and saved tensors), and fn as it is outside. Idempotent. fn must read
    no tensor but its arguments (a parameter it reads otherwise is refused at its call:
    _check_function_reads). Public as teraio.function_region."""
    if getattr(fn, _ATTR, None) is not None:
        return fn
    region = Region(name, None, fn)
    setattr(region, _ATTR, region)
    return region


def _compiled_children(model):
    """[(name, module, kind)] of the modules of model compiled on their own: kind "wrapper"
    (torch.compile(m), an OptimizedModule) or "in_place" (m.compile()). A whole model split
    into its blocks (split_whole) is not one of them: its blocks are."""
    from torch._dynamo.eval_frame import OptimizedModule

    out = []
    for name, m in model.named_modules():
        if isinstance(m, OptimizedModule):
            if _SPLIT not in m.__dict__:
                out.append((name, m, "wrapper"))
        elif getattr(m, "_compiled_call_impl", None) is not None:
            out.append((name, m, "in_place"))
    return out


def whole_model(model):
    """The description of model's compilation where the whole model is compiled (no region
    boundary inside it; not yet split into its blocks by split_whole), else None."""
    import sys

    if model is None or "torch._dynamo" not in sys.modules:
        return None
    from torch._dynamo.eval_frame import OptimizedModule

    if isinstance(model, OptimizedModule):
        if _SPLIT in model.__dict__:
            return None
        return "the whole model is compiled (torch.compile(model))"
    if getattr(model, "_compiled_call_impl", None) is not None:
        return "the whole model is compiled in place (model.compile())"
    return None


_SPLIT = "_teraio_split"  # in a whole-model wrapper's __dict__: split into its blocks


def _dynamo_context(fn):
    """The Dynamo context (torch._dynamo.eval_frame._TorchDynamoContext) that made fn, a
    torch.compile'd callable (model.compile()'s _compiled_call_impl), or None: it holds the
    compile's options, reached through the get_compiler_config closure torch.compile gives fn."""
    get = getattr(fn, "get_compiler_config", None)
    for cell in getattr(get, "__closure__", None) or ():
        try:
            c = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if hasattr(c, "callback") and hasattr(c, "fullgraph") and hasattr(c, "_dynamic"):
            return c
    return None


def blocks(root):
    """[(name, module)]: the blocks of root, the children with parameters of its outermost
    nn.ModuleList and nn.ModuleDict containers (a transformer's layers)."""
    from torch import nn

    out = []

    def walk(prefix, m):
        for name, c in m.named_children():
            if isinstance(c, (nn.ModuleList, nn.ModuleDict)):
                out.extend((f"{prefix}{name}.{n}", b) for n, b in c.named_children()
                           if next(b.parameters(), None) is not None)
            else:
                walk(f"{prefix}{name}.", c)

    walk("", root)
    return out


def split_whole(model):
    """Where the whole model is compiled (torch.compile(model), model.compile()) and nothing
    inside it is: compile each of its blocks on its own with the same options (backend, mode,
    fullgraph, dynamic) and run the rest of the model uncompiled, so that each block is a
    region of the step (install). Returns None (done, or nothing to split), or why the model
    cannot be split: then the whole model stays compiled, and is refused."""
    import sys

    if model is None or "torch._dynamo" not in sys.modules:
        return None
    from torch._dynamo.eval_frame import OptimizedModule, innermost_backend

    why = whole_model(model)
    if why is None:
        return None
    if isinstance(model, OptimizedModule):
        root, ctx = model._orig_mod, getattr(model, "dynamo_ctx", None)
    else:
        root, ctx = model, _dynamo_context(model._compiled_call_impl)
    if ctx is None or not callable(ctx.callback):
        return why + ", and its compile options cannot be read"
    inner = [n for n, m in root.named_modules() if n and (
        isinstance(m, OptimizedModule) or getattr(m, "_compiled_call_impl", None) is not None)]
    if inner:
        return why + f", around module {inner[0]} compiled on its own"
    parts = blocks(root)
    if not parts:
        return why + (", and it has no blocks (children of an nn.ModuleList or nn.ModuleDict) "
                      "to compile one by one")
    opts = dict(backend=innermost_backend(ctx.callback), fullgraph=bool(ctx.fullgraph),
                dynamic=ctx._dynamic)
    for _, b in parts:
        b.compile(**opts)
    if isinstance(model, OptimizedModule):
        model.__dict__["forward"] = root.__call__
        model.__dict__[_SPLIT] = [n for n, _ in parts]
    else:
        model._compiled_call_impl = None
    return None


def wrapper_calling(model):
    """In a forward pre-hook of model: the torch.compile(model) wrapper (an OptimizedModule
    whose _orig_mod is model, not split yet) whose call this is, else None. A wrapper made after
    the Offloader is not referenced by the model: it is found on the stack of the call, once
    Dynamo says a wrapper is being called (_is_in_optimized_module)."""
    import sys

    ef = sys.modules.get("torch._dynamo.eval_frame")
    if ef is None or not ef._is_in_optimized_module():
        return None
    f = sys._getframe(1)
    for _ in range(64):
        if f is None:
            break
        if "self" in f.f_code.co_varnames:
            s = f.f_locals.get("self")
            if isinstance(s, ef.OptimizedModule) and getattr(s, "_orig_mod", None) is model \
                    and _SPLIT not in s.__dict__:
                return s
        f = f.f_back
    return None


def run_split_call_eagerly(skips):
    """In the model's forward pre-hook, where the torch.compile(model) wrapper whose call this
    is is about to be split into its blocks: the rest of this call runs as after the split, the
    model's own code per operator and its blocks as regions. Dynamo's frame callback, which the
    wrapper set for its call, is taken off until the wrapper returns (its exit puts back what
    was before), so the model's eager frames are not reported as skipped; the frames it already
    skipped on the way here (teraio's own hooks) are dropped from skips, the list the step
    watches."""
    import os
    import sys

    sys.modules["torch._dynamo.eval_frame"].set_eval_frame(None)
    if skips:
        own = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
        skips[:] = [r for r in skips if own not in r]


def nested(model):
    """The name of a compiled module inside another compiled module, else None (its region
    would be inside the outer one's compiled code, where nothing is seen)."""
    kids = _compiled_children(model)
    names = [n for n, _, _ in kids]
    for n in names:
        for o in names:
            if o != n and (o == "" or n.startswith(o + ".")):
                return n
    return None


def install(model):
    """Run every module of model compiled on its own as a region (idempotent). Returns the
    names of the regions."""
    import sys

    if model is None or "torch._dynamo" not in sys.modules:
        return []
    names = []
    for name, m, kind in _compiled_children(model):
        label = name.replace("._orig_mod", "")
        label = label[len("_orig_mod."):] if label.startswith("_orig_mod.") else label
        label = label or type(m).__name__
        names.append(label)
        if kind == "wrapper":
            cur = m.__dict__.get("forward")
            if cur is None or getattr(cur, _ATTR, None) is not None:
                continue
            region = Region(label, m, cur)
            m.__dict__["forward"] = region
            setattr(region, _ATTR, region)
        else:
            cur = m._compiled_call_impl
            if getattr(cur, _ATTR, None) is not None:
                continue
            region = Region(label, m, cur)
            setattr(region, _ATTR, region)
            m._compiled_call_impl = region
    return names


# ---- the whole model compiled after the Offloader was made (Offloader._split_later, ...) -------
def split_later(off):
    """At a step's start: the model compiled whole in place (model.compile()) since the
    Offloader was made is split into its compiled blocks, as when the Offloader is made, and
    planned anew (after_split: this step is a warm-up step, in which the blocks compile);
    RuntimeError, before any of the step's code, where it cannot be split."""
    from teraio.torch._offload_args import _COMPILE_HELP, _compiled_module

    later = whole_model(off.model) is not None
    compiled = _compiled_module(off.model, split=later)
    if compiled is not None:
        raise RuntimeError(f"model: {compiled} (torch.compile, after the Offloader was made; "
                           "this step did not start). " + _COMPILE_HELP)
    if later:
        after_split(off, "model.compile()", warm=True)


def compiled_later(off, module, args):
    """The model's forward pre-hook: a torch.compile(model) wrapper made after the Offloader
    (which holds the model, not the wrapper: the wrapper's first call is where it is seen) is
    split into its compiled blocks there, so that this call's blocks are already regions; the
    step's plan, made for the model run per operator, does not match it (the step diverges:
    everything comes back), and at the step's end every plan is dropped (after_split, from
    Offloader.step). RuntimeError where it cannot be split."""
    if torch.compiler.is_compiling():  # traced into a compiled caller: nothing to do
        return None
    w = wrapper_calling(off.model)
    if w is None:
        return None
    from teraio.torch._offload_args import _COMPILE_HELP

    run_split_call_eagerly(off._dynamo_skips if off._in_step else None)
    why = split_whole(w)
    if why is not None:
        raise RuntimeError(f"model: {why} (torch.compile, after the Offloader was made). "
                           + _COMPILE_HELP)
    install(off.model)
    if off._in_step:
        off._resplit = "torch.compile(model)"
    else:  # between steps, outside Dynamo (a call traced by it returned above)
        after_split(off, "torch.compile(model)", warm=True)
    return None


def after_split(off, how, warm):
    """off's model was split into compiled blocks after the Offloader was made: its plans,
    recorded while it ran per operator, no longer describe its steps. Every offloaded tensor
    comes back and every plan is dropped; with warm (the blocks compile in the next step) the
    next step is a warm-up step again. Then steps are profiled and planned as after the first
    warm-up."""
    from teraio.torch._offload_args import _warn

    off._resplit = None
    off._restore_all()
    off._step_kinds.drop_all()
    off._trace = off._plan = off._prog = off._loaded = None
    if warm:
        off._rewarm = off._steps + off.warmup_steps
    _warn(f"teraio: the model was compiled whole ({how}) after the Offloader was made: split "
          "into its blocks, each compiled on its own and run as a region; "
          + ("the next step is a warm-up step, then steps are profiled again" if warm else
             "the next step is profiled again"))
