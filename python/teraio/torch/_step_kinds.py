"""Kinds of steps: a step's signature (its first operator's shapes), the placeholder driver
until that operator, and the choice of the plan made for the step's kind (teraio.torch.offload)."""
from __future__ import annotations

from teraio.torch._offload_args import _warn


def _arg_sig(v):
    """What of one operator argument goes into a step signature: a tensor's shape and dtype,
    ints and bools (sizes), the structure of lists; not float values (a scale, a rate)."""
    import torch

    if isinstance(v, torch.Tensor):
        return (tuple(v.shape), str(v.dtype))
    if isinstance(v, (list, tuple)):
        return tuple(_arg_sig(x) for x in v)
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return "float"
    if isinstance(v, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return str(v)
    return type(v).__name__


def _tensor_sig(v):
    import torch

    if isinstance(v, torch.Tensor):
        return (tuple(v.shape), str(v.dtype))
    if isinstance(v, (list, tuple)):
        return tuple(_tensor_sig(x) for x in v)
    return None


def _op_signature(func, args, kwargs):
    """A step's signature: its first operator (after views of parameters), the shapes of its
    tensor arguments and of its outputs (from its meta kernel: a slice of a corpus at another
    offset is the same signature, another length is not); where the outputs cannot be known
    without running it (a generator argument), its integer arguments (sizes) instead."""
    from teraio.torch._bounded import meta_outputs

    kwargs = kwargs or {}
    out = meta_outputs(func, args, kwargs)
    if out is not None:
        return (str(func), tuple(_tensor_sig(a) for a in args),
                tuple(sorted((k, _tensor_sig(v)) for k, v in kwargs.items())), out)
    return (str(func), tuple(_arg_sig(a) for a in args),
            tuple(sorted((k, _arg_sig(v)) for k, v in kwargs.items())))


def _sig_text(sig):
    if sig is None:
        return "none"
    text = f"{sig[0]}{sig[1]}"
    return text if len(text) <= 160 else text[:157] + "..."


class _Pending:
    """The driver of a step until its first operator: that operator's signature selects the
    plan (Offloader._start_step), then the chosen driver takes over. Views of resident tensors
    before it (a Linear's weight.t(), x.view(...), a slice of a corpus at the step's offset) run
    untouched: they move no memory, and a view's shape may vary where the step's does not."""

    passthrough = False
    record = False

    def __init__(self, off, globals_):
        self.off = off
        self.globals_ = globals_
        self.gl = {st._cdata for _, st, _ in globals_}
        self.mode = None

    def _resident_view(self, func, args, kwargs):
        if not getattr(func, "is_view", False):
            return False
        import torch

        from teraio.torch._mode import _iter_args

        seen = False
        for t, w in _iter_args(func, args, kwargs):
            if w or t.untyped_storage().nbytes() == 0:
                return False
            seen = True
        return seen and all(not isinstance(v, torch.Tensor) or v.untyped_storage().nbytes()
                            for v in kwargs.values())

    def dispatch(self, func, args, kwargs):
        if self._resident_view(func, args, kwargs):
            return func(*args, **kwargs)
        off = self.off
        driver = off._start_step(self.globals_, _op_signature(func, args, kwargs))
        off._driver = driver if driver is not None else self
        if driver is None:
            self.dispatch = lambda f, a, kw: f(*a, **kw)
            return func(*args, **kwargs)
        mode = self.mode
        mode.driver = driver
        driver.mode = mode  # FastStepDriver: switches mode._dispatch around an update
        fast = getattr(driver, "fast", None)
        mode._dispatch = fast.dispatch if fast is not None else None
        if mode._dispatch is not None:
            return mode._dispatch(func, args, kwargs)
        return driver.dispatch(func, args, kwargs)


class StepKinds:
    """Offloader methods: one plan per kind of step."""

    def _true_nbytes(self, st):
        """A global's size, offloaded or not (an offloaded storage has 0 bytes now)."""
        nb = st.nbytes()
        if nb:
            return nb
        if self._bounded is not None:
            return self._bounded.true_nbytes(st)
        hit = self._rt_globals.get(st._cdata)
        if hit is not None and hit[0]() is st and self._prog is not None:
            return self._prog.tensors[hit[1]][0]
        return 0

    def _step_key(self, globals_, sig=None):
        """What tells kinds of steps apart: the global tensors that exist at the start
        (parameters, the gradients accumulated so far, optimizer states: their count, sizes and
        kinds), whether the optimizer is expected to step, predicted from the steps seen with
        the same globals and the same number of steps since it last did (gradient accumulation
        over several steps is periodic; a step skipped on overflow is rare, and skipped inside
        the plan that has the update: StepDriver._skip_optim), step(kind=...), and the step's
        signature sig (_op_signature: its first operator's name and argument shapes, e.g. the
        batch's sequence length)."""
        gsig = tuple((self._true_nbytes(st), kind) for _, st, kind in globals_)
        seen = self._opt_seen.get((gsig, self._since_opt))
        opt = self.optimizer is not None and (seen is None or seen[0] >= seen[1])
        if self.optimizer is not None:
            def planned(o):
                return (gsig, o, self._user_kind, sig) in self._plans

            if seen is None and planned(False) and not planned(True):
                # not seen this many steps after an update, and these globals have a plan
                # without one (accumulation: a block like the one before); an update after all
                # runs beyond that plan (Offloader._update_beyond_plan)
                opt = False
            elif not opt and planned(True) and not planned(False):
                opt = True  # a plan with the update: a skipped one is skipped in it
        return gsig, opt, self._user_kind, sig

    def _choose(self, globals_, sig=None):
        """The state of the step about to run ("warmup", "profile", "execute", or "unplanned":
        a new kind of step beyond max_plans, run without a plan); switches to the plan made for
        this kind of step. The executor's stored copies stay where they are on a switch: they
        go to the next executor, or to the bounded path of an unplanned step."""
        self._key = None
        if self._steps < self.warmup_steps:
            return "warmup"
        key = self._key = self._step_key(globals_, sig)
        if self._loaded is not None:  # a plan loaded from a file: for the first step after warm-up
            self._check_globals(globals_, "plan")
            self._plans[key] = self._loaded
            self._note_plan(key, self._loaded[2])
            self._loaded = None
        entry = self._plans.get(key)
        if entry is not None:
            self._plans.move_to_end(key)
            if self._cur_key != key:
                self._runtime_to_bounded()  # its stored globals: for the next executor
                self._trace, self._plan, self._prog = entry
                self._cur_key = key
            info = self._kind_info(key)
            if self.budget_fraction is not None and info.get("memory_budget"):
                self.budget = info["memory_budget"]  # this kind's fraction of its own peak
            return "execute"
        if self._runtime is not None:  # a new kind of step: profiled (the budget kept reactively)
            if self._bounded_ok():
                self._runtime_to_bounded()
            else:
                self._restore_runtime()
                self._drop_runtime()
        self._cur_key = None
        if len(self._plans) >= self.max_plans and key not in self._profiled:
            if not self._plans_full_warned:
                self._plans_full_warned = True
                _warn(f"teraio: step {self._steps}: a new kind of step (step signature "
                      f"{_sig_text(sig)}) beyond max_plans={self.max_plans}: it and further new "
                      "kinds run without a plan (kept within the budget reactively where "
                      "bounded_unplanned applies); raise max_plans, or make fewer distinct "
                      "shapes (e.g. pad sequences to a few bucket lengths)")
            return "unplanned"
        return "profile"

    def _kind_info(self, key):
        """What report() says of one kind of step (kinds): created on first use."""
        info = self._kinds.get(key)
        if info is None:
            gsig, opt, user, sig = key
            info = self._kinds[key] = {
                "signature": _sig_text(sig), "optimizer_steps": bool(opt),
                "kind": None if user is None else repr(user), "globals": len(gsig),
                "memory_budget": 0, "unconstrained_peak_bytes": 0, "peak_managed_bytes": 0,
                "steps_offloaded": 0}
        return info

    def _note_plan(self, key, prog):
        """A plan was made (or loaded) for kind key: its budget and unconstrained peak."""
        info = self._kind_info(key)
        info["unconstrained_peak_bytes"] = prog.peak_resident()
        budget = self.budget
        if self.budget_fraction is not None:
            budget = max(1, int(self.budget_fraction * info["unconstrained_peak_bytes"]))
        info["memory_budget"] = budget

    def _update_beyond_plan(self):
        """optimizer.step() begins in a step whose plan has no update (it was predicted not to
        step: per-micro-batch accumulation, the first time the updating block comes at its
        place in the cycle). Where every operator of the plan has run, its executor ends the
        iteration there and hands its stored globals to the reactive path, and the update runs
        as the steps without a plan do, within the budget (BoundedRecorder): not a divergence,
        nothing is brought back. The next step with this many steps since an update is
        predicted to update, and gets its own plan. Returns whether it did."""
        cur = self._cur
        if cur is None or cur[0] != "execute" or self._key is None or self._key[1]:
            return False
        driver = cur[1]
        if driver is None or driver.record or driver.passthrough or not self._bounded_ok():
            return False
        if driver.dead_pending:
            driver._flush_deaths()
        mode = getattr(driver, "mode", None)
        if mode is None or driver.passthrough or driver.k != len(driver.prog.kernels):
            return False
        driver.end()  # the executor's last transfers: the iteration is whole
        if driver.passthrough:
            return False
        from teraio.torch._bounded import BoundedRecorder
        from teraio.torch._mode import collect_globals

        self._runtime_to_bounded()
        bounded = self._bounded_start()
        tail = BoundedRecorder(collect_globals(self._gmodel, self.optimizer), bounded,
                               split_foreach=self.split_foreach, cuda=self._cuda,
                               in_optim=lambda: self._in_optim)
        mode.driver = tail
        mode._dispatch = None
        self._driver = tail
        self._cur = ("execute", tail, bounded)
        self._counts["updates_beyond_plan"] += 1
        return True

    def _runtime_to_bounded(self):
        """Drop the executor; the globals it has stored keep their copies, which become the
        bounded path's (read back when an operator needs them, or handed to the next executor
        by BoundedMemory.hand_over): a switch between plans moves no byte by itself."""
        rt = self._runtime
        if rt is None:
            return
        b = self._bounded_start()
        for ref, tid in list(self._rt_globals.values()):
            eid = rt.give_stored(tid)
            if eid is not None:
                b.adopt(ref(), self._prog.tensors[tid][0], eid, self._prog.tensors[tid][3])
        self._rt_globals = {}
        self._drop_runtime()

    def _diverged_before(self, reason):
        self._restore_runtime()
        self._note_divergence(reason)

    def _note_divergence(self, reason, mispredicted=False):
        """A step left its plan: it was brought back. A step whose optimizer did not do what
        was predicted (accumulation, a skipped step) keeps the plan: the next step of this
        kind uses its own. Any other reason (shapes, control flow) drops the plan, so that
        the next step of this kind is profiled again."""
        self.last_divergence = reason
        self._counts["steps_diverged"] += 1
        keep = mispredicted and self._cur_key is not None
        _warn(f"teraio: step {self._steps}: {reason}; this step ran without offloading "
              "(every tensor was brought back)" + (
                  "" if keep else " and the next step of this kind re-profiles"))
        self._drop_runtime()
        if not keep and self._cur_key is not None:
            self._plans.pop(self._cur_key, None)
        self._cur_key = None
        self._prog = self._plan = self._trace = None
