"""A recorded step's program (teraio.torch._mode.StepProgram) once planned: the C trace its plan
is made from is the one its liveness reads (built once per plan, not once per question), and
what it answers equals a trace built afresh from the program."""

import teraio  # noqa: E402
from teraio import _core  # noqa: E402

from train_llama_tiny import train  # noqa: E402


class _CountingCore:
    """teraio._core, with Trace.build counted."""

    def __init__(self, builds):
        real = _core.Trace

        class Trace:
            load = staticmethod(real.load)

            @staticmethod
            def build(*args):
                builds.append(len(args[0]))
                return real.build(*args)

        self.Trace = Trace

    def __getattr__(self, name):
        return getattr(_core, name)


def test_one_trace_per_plan(tmp_path, monkeypatch):
    import teraio.torch._planning as planning
    from teraio.torch import _mode

    builds = []
    core = _CountingCore(builds)
    monkeypatch.setattr(planning, "_core", core)
    monkeypatch.setattr(_mode, "_c", core)
    # memory_budget as a fraction: the budget is the plan's unconstrained peak times 0.5, then
    # the minimum-budget check, the plan, and the executor's release points all need liveness
    _, _, off = train("tiny", 3, offload=dict(
        memory_budget=0.5, ssd_dirs=[str(tmp_path)],
        options=teraio.OffloadOptions(min_tensor_bytes="16KiB")))
    monkeypatch.undo()
    plans = off._report.counts["replans"]
    assert plans >= 1
    assert off._report.counts["steps_offloaded"] >= 1
    assert len(builds) == plans, builds

    prog = off._prog
    assert prog.trace is off._trace
    fresh = _core.Trace.build(prog.tensors, prog.kernels, {})
    movable = off._planner.movable_ids(prog)
    for skip, exclude in [(None, None), (_mode.FREE_KERNEL, None), (None, movable)]:
        want = _core.liveness(fresh, skip, exclude)
        assert prog.liveness(skip_kernel=skip, exclude=exclude) == want
        assert prog.liveness(skip_kernel=skip, exclude=exclude) == want  # kept, unchanged
    assert prog.peak_resident() == max(_core.liveness(fresh, None, None)[2])
