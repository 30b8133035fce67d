"""Kinds of steps: a step's signature (its first operator's shapes), the placeholder driver
until that operator, and the plans by kind of step (StepKinds, one per Offloader)."""
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
    """The Offloader's kinds of steps and their plans. Owns the plans by kind of step
    (plans: key -> (trace, plan, prog), least recently used first, at most max_plans), the
    current kind (key: the running step's, as predicted at its start; cur_key: the kind whose
    plan is current), step(kind=...) (user_kind), the profiled steps per kind so far, what the
    optimizer did after so many steps with the same globals (opt_seen, since_opt: its
    prediction) and what report() says of each kind (info)."""

    def __init__(self, max_plans):
        import collections

        self.max_plans = max_plans
        self.plans = collections.OrderedDict()
        self.cur_key = None
        self.key = None
        self.user_kind = None  # step(kind=...): part of the key
        self.profiled = {}  # steps profiled so far per kind of step
        self.kinds = {}  # per kind of step: what report() says of it (info)
        self.opt_seen = {}  # (globals, steps since the optimizer stepped) -> [stepped, did not]
        self.since_opt = 0
        self.full_warned = False

    def key_of(self, globals_, true_nbytes, has_optimizer, sig=None):
        """What tells kinds of steps apart: the global tensors that exist at the start
        (parameters, the gradients accumulated so far, optimizer states: their count, sizes
        (true_nbytes: offloaded or not) and kinds), whether the optimizer is expected to step,
        predicted from the steps seen with the same globals and the same number of steps since
        it last did (gradient accumulation over several steps is periodic; a step skipped on
        overflow is rare, and skipped inside the plan that has the update:
        StepDriver._skip_optim), step(kind=...), and the step's signature sig (_op_signature:
        its first operator's name and argument shapes, e.g. the batch's sequence length)."""
        gsig = tuple((true_nbytes(st), kind) for _, st, kind in globals_)
        seen = self.opt_seen.get((gsig, self.since_opt))
        opt = has_optimizer and (seen is None or seen[0] >= seen[1])
        if has_optimizer:
            def planned(o):
                return (gsig, o, self.user_kind, sig) in self.plans

            if seen is None and planned(False) and not planned(True):
                # not seen this many steps after an update, and these globals have a plan
                # without one (accumulation: a block like the one before); an update after all
                # runs beyond that plan (Offloader._update_beyond_plan)
                opt = False
            elif not opt and planned(True) and not planned(False):
                opt = True  # a plan with the update: a skipped one is skipped in it
        return gsig, opt, self.user_kind, sig

    def lookup(self, key):
        """The plan (trace, plan, prog) made for kind key, now the most recently used; None."""
        entry = self.plans.get(key)
        if entry is not None:
            self.plans.move_to_end(key)
        return entry

    def full(self, key, steps, sig):
        """Whether a new kind of step (key) is beyond max_plans (it runs without a plan);
        warns once."""
        if len(self.plans) < self.max_plans or key in self.profiled:
            return False
        if not self.full_warned:
            self.full_warned = True
            _warn(f"teraio: step {steps}: a new kind of step (step signature "
                  f"{_sig_text(sig)}) beyond max_plans={self.max_plans}: it and further new "
                  "kinds run without a plan (kept within the budget reactively where "
                  "bounded_unplanned applies); raise max_plans, or make fewer distinct "
                  "shapes (e.g. pad sequences to a few bucket lengths)")
        return True

    def step_done(self, opt_ran, has_optimizer):
        """At a step's end: what the optimizer did after this many steps since it last stepped
        (for the prediction). Returns the kind of step this one turned out to be (None for a
        warm-up step)."""
        key = self.key
        if key is not None:
            seen = self.opt_seen.setdefault((key[0], self.since_opt), [0, 0])
            seen[0 if opt_ran else 1] += 1
            key = (key[0], opt_ran) + key[2:]
        self.since_opt = 0 if opt_ran or not has_optimizer else min(self.since_opt + 1, 64)
        return key

    def profiled_enough(self, key, profile_steps):
        """A profiled step of kind key ended: whether it was the last one to profile."""
        n = self.profiled.get(key, 0) + 1
        self.profiled[key] = n
        if n < profile_steps:
            return False
        self.profiled.pop(key, None)
        return True

    def add(self, key, entry, budget, budget_fraction):
        """A plan (trace, plan, prog) was made (or loaded) for kind key: its budget and
        unconstrained peak go to info."""
        self.plans[key] = entry
        info = self.info(key)
        info["unconstrained_peak_bytes"] = entry[2].peak_resident()
        if budget_fraction is not None:
            budget = max(1, int(budget_fraction * info["unconstrained_peak_bytes"]))
        info["memory_budget"] = budget

    def drop_current(self):
        """The current plan is dropped (the next step of its kind profiles again)."""
        if self.cur_key is not None:
            self.plans.pop(self.cur_key, None)
        self.cur_key = None

    def drop_all(self):
        """Every plan is dropped (the model's compiled regions changed): each kind of step is
        profiled again."""
        self.plans.clear()
        self.profiled.clear()
        self.cur_key = None
        self.key = None

    def info(self, key):
        """What report() says of one kind of step (kinds): created on first use."""
        info = self.kinds.get(key)
        if info is None:
            gsig, opt, user, sig = key
            info = self.kinds[key] = {
                "signature": _sig_text(sig), "optimizer_steps": bool(opt),
                "kind": None if user is None else repr(user), "globals": len(gsig),
                "memory_budget": 0, "unconstrained_peak_bytes": 0, "peak_managed_bytes": 0,
                "steps_offloaded": 0}
        return info

    def note_peak(self, key, peak):
        """An executor of kind key ended with this tracked peak."""
        if key is not None:
            info = self.info(key)
            info["peak_managed_bytes"] = max(info["peak_managed_bytes"], peak)

    def report(self, rt_key=None, rt_peak=0):
        """report()'s kinds: one entry per kind of step that has had a plan: its budget (a
        fraction budget is each kind's fraction of its own unconstrained peak), unconstrained
        peak, the highest tracked peak of its executed steps (rt_peak: the running executor's,
        of kind rt_key), how many of them ran planned."""
        kinds = []
        for key, info in self.kinds.items():
            row = dict(info)
            if rt_key is not None and key == rt_key:
                row["peak_managed_bytes"] = max(row["peak_managed_bytes"], rt_peak)
            kinds.append(row)
        return kinds
