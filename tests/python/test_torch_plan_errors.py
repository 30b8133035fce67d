"""Errors before training: OffloadOptions refuses at construction, naming the option, what would
only fail later (an unknown policy or backend, an io_chunk the engine cannot use); a budget given
as a string is read as the user means it or refused; a plan that cannot be made at the end of
the profiled step brings every offloaded tensor back and says so."""
import pytest

import teraio  # noqa: E402
from teraio.torch._offload_args import _budget_arg  # noqa: E402

from _between import run_case  # noqa: E402


@pytest.mark.parametrize("field,value", [
    ("policy", "no-such-policy"), ("policy", "lru"), ("backend", "nvme"),
    ("io_chunk", "1000"), ("io_chunk", 6000), ("io_queue_depth", 5000),
])
def test_options_refused_at_construction(field, value):
    with pytest.raises(ValueError, match=rf"OffloadOptions\.{field}:"):
        teraio.OffloadOptions(**{field: value})


@pytest.mark.parametrize("field,value", [
    ("policy", "teraio-ssd"), ("policy", "none"), ("backend", "posix"), ("backend", "fault"),
    ("io_chunk", "64KiB"), ("io_queue_depth", 4096),
])
def test_options_accepted(field, value):
    assert getattr(teraio.OffloadOptions(**{field: value}), field) == value


@pytest.mark.parametrize("text,fraction", [("0.5", 0.5), ("50%", 0.5), (" 25 % ", 0.25),
                                           ("0.125", 0.125)])
def test_budget_string_fraction(text, fraction):
    assert _budget_arg(text) == (fraction, 0)


@pytest.mark.parametrize("text", ["1000", "1.5", "0", "0%", "100%", "150%"])
def test_budget_string_without_unit_refused(text):
    with pytest.raises(ValueError, match="memory_budget"):
        _budget_arg(text)


def test_budget_string_with_unit_is_bytes():
    assert _budget_arg("8GiB") == (None, 8 << 30)
    assert _budget_arg("1000B") == (None, 1000)


def test_plan_error_brings_the_model_back(tmp_path):
    """A budget below what an operator needs, found when the plan is made at the end of the
    profiled step (no optimizer: nothing checks it earlier): the error says no plan was made
    and every tensor is back, with the values plain PyTorch has; after close() a new Offloader
    on the same model works."""
    rc, out = run_case("""
def fb(m, off, n):
    import contextlib
    for i in range(n):
        with off.step() if off is not None else contextlib.nullcontext():
            m.loss(batch(i)).backward()

m, o = fresh()
off = make_off(m, None, budget="1MiB", options=dict(min_tensor_bytes="64KiB"))
try:
    fb(m, off, 3)
except ValueError as e:
    notes = " ".join(getattr(e, "__notes__", []))
    print("ERROR", e, "|", notes)
    assert "memory_budget" in str(e)
    assert "no plan was made" in notes and "back in memory" in notes, notes
    assert "close()" in notes, notes
else:
    raise AssertionError("a budget of 1 MiB was accepted")
n = offloaded(m, o)
print("offloaded after the error:", n)
assert n == 0
pm, po = fresh()
fb(pm, None, 2)  # the warm-up and the profiled step of the failed run
assert digest([(p, p.grad) for p in m.parameters()]) == \
    digest([(p, p.grad) for p in pm.parameters()])
off.close()
off2 = make_off(m, o, budget=0.5)
train(m, o, off2, 3, start=2); train(pm, po, None, 3, start=2)
off2.restore()
assert digest(m.state_dict()) == digest(pm.state_dict())
print("CASE OK")
""", tmp_path)
    assert rc == 0, f"child exited with {rc}:\n{out[-4000:]}"
    assert "CASE OK" in out, out[-4000:]
