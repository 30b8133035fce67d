"""Between steps: every use of the model or optimizer sees its tensors whole (brought back, or a
clear error), never a crash; one Offloader per model and optimizer; no step after close() nor
inside a step. Each case runs in a child process (tests/python/_between.py) and compares with
the same code run on plain PyTorch in that child."""
import pytest

from _between import run_case  # noqa: E402

# three steps (warm-up, profiled, planned) under the Offloader and plainly, ready to compare
SETUP = """
m, o = fresh()
off = make_off(m, o, budget=0.2)  # parameters, gradients and states offloaded
train(m, o, off, 3)
n_off = offloaded(m, o)
print("offloaded between steps:", n_off)
assert n_off > 0, "nothing offloaded: the case would test nothing"
pm, po = fresh()
train(pm, po, None, 3)
"""


def _ok(body, tmp_path):
    rc, out = run_case(SETUP + body, tmp_path)
    assert rc == 0, f"child exited with {rc}:\n{out[-4000:]}"
    assert "CASE OK" in out, out[-4000:]
    return out


def test_optimizer_step_between_steps(tmp_path):
    _ok("""
o.step(); po.step()
assert digest(m.state_dict()) == digest(pm.state_dict())
train(m, o, off, 2, start=3); train(pm, po, None, 2, start=3)
assert digest(m.state_dict()) == digest(pm.state_dict())
print("CASE OK")
""", tmp_path)


def test_evaluation_between_steps(tmp_path):
    _ok("""
m.eval(); pm.eval()
with torch.no_grad():
    a = m.loss(batch(100)).item()
    b = pm.loss(batch(100)).item()
assert a == b, (a, b)
m.train(); pm.train()
train(m, o, off, 2, start=3); train(pm, po, None, 2, start=3)
assert digest(m.state_dict()) == digest(pm.state_dict())
print("CASE OK")
""", tmp_path)


def test_state_dicts_between_steps_are_whole(tmp_path):
    _ok("""
assert digest(m.state_dict()) == digest(pm.state_dict())
assert digest(o.state_dict()) == digest(po.state_dict())
train(m, o, off, 2, start=3); train(pm, po, None, 2, start=3)
assert offloaded(m, o) > 0
assert digest(o.state_dict()) == digest(po.state_dict())
assert digest(m.state_dict()) == digest(pm.state_dict())
print("CASE OK")
""", tmp_path)


def test_load_state_dict_between_steps(tmp_path):
    _ok("""
sd_m = {k: v.clone() for k, v in pm.state_dict().items()}
import copy
sd_o = copy.deepcopy(po.state_dict())
train(pm, po, None, 1, start=3)  # the plain one moves on, then both go back to the same point
pm.load_state_dict(sd_m); po.load_state_dict(copy.deepcopy(sd_o))
m.load_state_dict(sd_m); o.load_state_dict(copy.deepcopy(sd_o))
train(m, o, off, 3, start=3); train(pm, po, None, 3, start=3)
assert digest(m.state_dict()) == digest(pm.state_dict())
assert digest(o.state_dict()) == digest(po.state_dict())
print("CASE OK")
""", tmp_path)


@pytest.mark.parametrize("kind", ["param", "grad", "state"])
def test_every_offloaded_kind_read_directly(tmp_path, kind):
    """An operator on an offloaded tensor itself (not through a hook) brings it back."""
    _ok(f"""
mine = [(n, t) for n, t in tensors(m, o) if n.startswith("{kind} ")]
plain = dict((n + str(i), t) for i, (n, t) in enumerate(tensors(pm, po)) if n.startswith("{kind} "))
idx = [i for i, (n, t) in enumerate(mine) if t.untyped_storage().nbytes() == 0 and t.numel()]
assert idx, "no {kind} is offloaded between steps"
i = idx[0]
name, t = mine[i]
ref = [t2 for n2, t2 in tensors(pm, po) if n2.startswith("{kind} ")][i]
assert torch.equal(t.double().sum(), ref.double().sum()), name
assert offloaded(m, o) == 0
print("CASE OK")
""", tmp_path)


def test_second_offloader_refused_until_close(tmp_path):
    out = _ok("""
for args in ((m, o), (m, None)):
    try:
        make_off(*args)
    except ValueError as e:
        print("REFUSED", e)
        assert "close()" in str(e), e
    else:
        raise AssertionError("a second Offloader was accepted")
off.close()
assert offloaded(m, o) == 0
off2 = make_off(m, o)
train(m, o, off2, 4, start=3); train(pm, po, None, 4, start=3)
assert offloaded(m, o) > 0
off2.restore()
assert digest(m.state_dict()) == digest(pm.state_dict())
print("CASE OK")
""", tmp_path)
    assert out.count("REFUSED") == 2


def test_step_after_close_and_nested_step_refused(tmp_path):
    _ok("""
try:
    with off.step():
        with off.step():
            pass
except RuntimeError as e:
    assert "nest" in str(e), e
else:
    raise AssertionError("a nested step was accepted")
off.close()
off.close()  # a second close does nothing
try:
    with off.step():
        pass
except RuntimeError as e:
    assert "closed" in str(e), e
else:
    raise AssertionError("a step after close() was accepted")
assert offloaded(m, o) == 0
train(m, o, None, 1, start=3); train(pm, po, None, 1, start=3)
assert digest(m.state_dict()) == digest(pm.state_dict())
print("CASE OK")
""", tmp_path)


def test_resume_from_checkpoint_keeps_offloading(tmp_path):
    """torch.load gives storages that cannot be resized: the Offloader copies them once (adopts
    them) so that a resumed run offloads at the budget that worked before."""
    _ok("""
path = os.path.join(TMP, "ckpt.pt")
torch.save({"model": m.state_dict(), "opt": o.state_dict()}, path)
off.close()
ck = torch.load(path)
ppath = os.path.join(TMP, "plain.pt")
torch.save({"model": pm.state_dict(), "opt": po.state_dict()}, ppath)
pck = torch.load(ppath)
m2, o2 = fresh()
m2.load_state_dict(ck["model"]); o2.load_state_dict(ck["opt"])
pm2, po2 = fresh()
pm2.load_state_dict(pck["model"]); po2.load_state_dict(pck["opt"])
assert any(not t.untyped_storage().resizable() for _, t in tensors(m2, o2))
off2 = make_off(m2, o2, budget=0.2)
train(m2, o2, off2, 4, start=3); train(pm2, po2, None, 4, start=3)
n = offloaded(m2, o2)
print("offloaded after resuming:", n)
assert n > 0
assert digest(o2.state_dict()) == digest(po2.state_dict())
assert digest(m2.state_dict()) == digest(pm2.state_dict())
print("CASE OK")
""", tmp_path)

