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


# two live Offloaders on two models: restore() of each counted, by name
TWO_OFFLOADERS = """
restored = []
def counting(off, name):
    orig = off.restore
    def restore():
        restored.append(name)
        return orig()
    off.restore = restore
counting(off, "first")
m2, o2 = fresh()
off2 = make_off(m2, o2, budget=0.2)
counting(off2, "second")
"""


def test_second_offloaders_tensor_brings_back_only_the_second(tmp_path):
    """Two Offloaders, the first one's guard innermost (its steps ran after the second's): an
    operator on the second one's offloaded parameter brings back the second one's tensors, and
    the first one's stay offloaded (each guard knows only the tensors its Offloader offloaded;
    before, any tensor of 0 bytes was taken for its own)."""
    _ok(TWO_OFFLOADERS + """
off.restore()  # its guard leaves the stack: the second one's goes on it first
train(m2, o2, off2, 3)
train(m, o, off, 2, start=3); train(pm, po, None, 2, start=3)
restored.clear()
n1 = offloaded(m, o)
assert n1 > 0 and offloaded(m2, o2) > 0, (n1, offloaded(m2, o2))
p = next(p for p in m2.parameters() if p.untyped_storage().nbytes() == 0)
p.sum()
assert restored == ["second"], restored
assert offloaded(m2, o2) == 0 and offloaded(m, o) == n1, (offloaded(m2, o2), offloaded(m, o))
off.restore()
assert digest(m.state_dict()) == digest(pm.state_dict())
print("CASE OK")
""", tmp_path)


def test_each_offloader_guarded_when_their_steps_alternate(tmp_path):
    """Two Offloaders whose steps alternate (two models trained in one loop): the first one's
    guard, under the second one's at each of its steps' ends, is armed again there; an
    operator on the first one's offloaded parameter brings back the first one's tensors (before:
    the second one's, then the operator read a tensor of no memory and the process crashed)."""
    _ok(TWO_OFFLOADERS + """
for i in range(3):
    train(m, o, off, 1, start=3 + i); train(pm, po, None, 1, start=3 + i)
    train(m2, o2, off2, 1, start=i)
n2 = offloaded(m2, o2)
assert offloaded(m, o) > 0 and n2 > 0, (offloaded(m, o), n2)
restored.clear()
name, p = next((n, p) for n, p in m.named_parameters() if p.untyped_storage().nbytes() == 0)
total = p.double().sum()
assert restored == ["first"], restored
assert offloaded(m, o) == 0 and offloaded(m2, o2) == n2, (offloaded(m, o), offloaded(m2, o2))
assert torch.equal(total, dict(pm.named_parameters())[name].double().sum()), name
print("CASE OK")
""", tmp_path)


def test_dropped_offloader_leaves_no_guard_behind(tmp_path):
    """An Offloader dropped without close() (as after a step that raised) takes its
    between-steps guard off the dispatch-mode stack: a guard left there would run every later
    operator of the process through Python."""
    _ok("""
import gc
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

def guards():
    return [x for x in _get_current_dispatch_mode_stack() if type(x).__name__ == "Guard"]

assert len(guards()) == 1, guards()  # armed at the end of the last step
del off, m, o
gc.collect()
assert guards() == [], guards()
x = torch.ones(3) * 2
assert x.sum().item() == 6.0
print("CASE OK")
""", tmp_path)


# what a later torch.compile needs of the process: no guard on the dispatch-mode stack, the
# dispatch-mode flag PyTorch keeps beside it cleared (Dynamo runs every frame eagerly while it is
# set), and a compiled function compiled (its backend called) rather than run eagerly
COMPILE_STILL_WORKS = """
import gc
from torch.utils._python_dispatch import (_get_current_dispatch_mode_stack,
                                         is_in_any_mode_without_ignore_compile_internals)

gc.collect()
left = _get_current_dispatch_mode_stack()
assert left == [], left
assert not is_in_any_mode_without_ignore_compile_internals()
graphs = []

def backend(gm, example_inputs):
    graphs.append(gm)
    return gm.forward

f = torch.compile(lambda x: (x * 2).sin(), backend=backend)
y = f(torch.ones(4))
assert torch.equal(y, (torch.ones(4) * 2).sin()), y
assert len(graphs) == 1, "torch.compile ran eagerly: a dispatch mode is still in force"
print("CASE OK")
"""


def test_io_fault_in_a_step_leaves_torch_compile_working(tmp_path):
    """A step that raised (every read fails: the engine's fault backend) brings every tensor
    back and leaves no guard: the Offloader dropped without close() while the exception (and
    with it the Offloader) is still alive, and a second one failing the same way, leave the
    process as it was for torch.compile. Before, each left a guard on the dispatch-mode stack,
    the first one under the second's, where collecting its Offloader could not take it off, and
    Dynamo then compiled nothing for the rest of the process."""
    rc, out = run_case("""
def failing():
    m, o = fresh()
    off = make_off(m, o, budget=0.2, options=dict(
        backend="fault", backend_options="read_fail=5,read_fail_count=1000000"))
    try:
        train(m, o, off, 4)
    except teraio.Error as e:
        print("step failed:", str(e)[:120])
        assert "reading back" in str(e), e
        return e, off
    raise AssertionError("no step failed")

first = failing()   # kept alive, as a caught exception's traceback keeps its frames
second = failing()
first = None
gc_collect = __import__("gc").collect
gc_collect()        # the first Offloader collected while the second one is still alive
second = None
""" + COMPILE_STILL_WORKS, tmp_path)
    assert rc == 0, f"child exited with {rc}:\n{out[-4000:]}"
    assert "CASE OK" in out, out[-4000:]


def test_offloader_dropped_under_another_leaves_torch_compile_working(tmp_path):
    """Two Offloaders on two models, each with tensors offloaded between steps: the first one
    dropped without close() while the second one's guard is above its own on the stack (its
    guard cannot leave the stack then) is taken off as soon as it is the innermost mode again
    (here: the second one's close()), with PyTorch's dispatch-mode flag restored."""
    _ok("""
m2, o2 = fresh()
off2 = make_off(m2, o2, budget=0.2)
train(m2, o2, off2, 3)
del off, m, o
__import__("gc").collect()   # the first Offloader's guard is under the second one's
off2.close()
""" + COMPILE_STILL_WORKS, tmp_path)


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


def test_streamed_save_is_plain_bytes_within_budget_and_resumes(tmp_path):
    """Offloader.save() between steps writes torch.save's bytes (a path and a file object; the
    model, the optimizer states, tensors offloaded and not) while the offloaded tensors stay
    offloaded, within the budget where torch.save(state_dict()) is not; resuming from its file
    at the same budget keeps offloading (torch.load gives storages that cannot be resized: the
    Offloader adopts them) and trains as plain PyTorch does. Then what it refuses and how it
    fails: inside a step, a missing directory, a full disk, a corrupt SSD copy (checksums)."""
    _ok("""
import errno
_torch_save = torch.save
budget = off.report()["memory_budget"]
def resident(m, o):
    return sum({t.untyped_storage()._cdata: t.untyped_storage().nbytes()
                for _, t in tensors(m, o)}.values())
def both(m, o):
    return {"model": m.state_dict(), "opt": o.state_dict(), "step": 3}
ck_dir, plain_dir = os.path.join(TMP, "ck"), os.path.join(TMP, "plain")
os.makedirs(ck_dir); os.makedirs(plain_dir)
path, ppath = os.path.join(ck_dir, "ckpt.pt"), os.path.join(plain_dir, "ckpt.pt")
torch.save(both(pm, po), ppath)
pbuf = io.BytesIO(); torch.save(both(pm, po), pbuf)
n_before, res_before = offloaded(m, o), resident(m, o)
assert res_before + 1 < budget, (res_before, budget)
off.save(lambda: both(m, o), path)
buf = io.BytesIO(); off.save(lambda: both(m, o), buf)
assert offloaded(m, o) == n_before, "the save brought offloaded tensors back"
peak = off.report()["save_peak_bytes"]
print("budget", budget, "resident", res_before, "save peak", peak)
assert res_before < peak <= budget, (res_before, peak, budget)
assert open(path, "rb").read() == open(ppath, "rb").read(), "path: not torch.save's bytes"
assert buf.getvalue() == pbuf.getvalue(), "file object: not torch.save's bytes"
assert sorted(os.listdir(ck_dir)) == ["ckpt.pt"], os.listdir(ck_dir)
# streamed_saves() (what teraio.hf's callback opens around a Trainer's save): torch.save and
# safetensors' save_file of the state dicts write the plain bytes, streamed
from safetensors.torch import save_file
w_dir = os.path.join(TMP, "window"); os.makedirs(w_dir)
save_file(pm.state_dict(), os.path.join(plain_dir, "m.st"), metadata={"format": "pt"})
torch.save(po.state_dict(), os.path.join(plain_dir, "o.pt"))
with off.streamed_saves() as w:
    save_file(m.state_dict(), os.path.join(w_dir, "m.st"), metadata={"format": "pt"})
    torch.save(o.state_dict(), os.path.join(w_dir, "o.pt"))
    assert offloaded(m, o) == n_before, "streamed_saves() brought offloaded tensors back"
    assert w.streamed_bytes > 0 and w.brought_back == 0, (w.streamed_bytes, w.brought_back)
    # an operator (not a view) on an offloaded tensor while it has a placeholder (as in a
    # model's save_pretrained()) brings every tensor back before it runs: the true values
    name, p = next((k, v) for k, v in m.named_parameters() if v.untyped_storage().nbytes() == 0)
    with w._scope():
        assert p.untyped_storage().nbytes() == p.numel() * p.element_size()
        total = p.sum()
    assert w.brought_back == 1 and offloaded(m, o) == 0, (w.brought_back, offloaded(m, o))
    assert torch.equal(total, dict(pm.named_parameters())[name].sum()), name
assert save_file is __import__("safetensors.torch").torch.save_file and torch.save is _torch_save
for f in ("m.st", "o.pt"):
    assert open(os.path.join(w_dir, f), "rb").read() == \
        open(os.path.join(plain_dir, f), "rb").read(), f
assert sorted(os.listdir(w_dir)) == ["m.st", "o.pt"], os.listdir(w_dir)
# torch.save(state_dict()) (the hooks bring every tensor back) holds more than the budget
sd = both(m, o)
assert offloaded(m, o) == 0 and resident(m, o) > budget, (offloaded(m, o), resident(m, o), budget)
hbuf = io.BytesIO(); torch.save(sd, hbuf)
assert hbuf.getvalue() == pbuf.getvalue()
del sd, hbuf

# refused inside a step (that step still runs), and on its twin
with off.step():
    o.zero_grad(set_to_none=False)
    m.loss(batch(3)).backward()
    try:
        off.save(lambda: both(m, o), path)
    except RuntimeError as e:
        assert "inside a step" in str(e), e
        print("REFUSED", e)
    else:
        raise AssertionError("save() inside a step was accepted")
    o.step()
train(pm, po, None, 1, start=3)
assert offloaded(m, o) > 0
try:
    off.save(lambda: both(m, o), os.path.join(TMP, "missing", "ckpt.pt"))
except FileNotFoundError as e:
    assert "nothing was written" in " ".join(getattr(e, "__notes__", [])), e.__notes__
else:
    raise AssertionError("a save into a missing directory succeeded")
class Full(io.RawIOBase):
    def writable(self):
        return True
    def write(self, b):
        raise OSError(errno.ENOSPC, "No space left on device")
try:
    off.save(lambda: both(m, o), Full())
except OSError as e:
    assert e.errno == errno.ENOSPC and e.__notes__, e
else:
    raise AssertionError("a save to a full file succeeded")
assert offloaded(m, o) > 0
assert digest(m.state_dict()) == digest(pm.state_dict())
assert digest(o.state_dict()) == digest(po.state_dict())
off.close()

# resume from the streamed file at the same budget
ck, pck = torch.load(path), torch.load(ppath)
m2, o2 = fresh()
m2.load_state_dict(ck["model"]); o2.load_state_dict(ck["opt"])
pm2, po2 = fresh()
pm2.load_state_dict(pck["model"]); po2.load_state_dict(pck["opt"])
assert any(not t.untyped_storage().resizable() for _, t in tensors(m2, o2))
off2 = make_off(m2, o2, budget=0.2)
train(m2, o2, off2, 3, start=3); train(pm2, po2, None, 3, start=3)
n = offloaded(m2, o2)
print("offloaded after resuming:", n)
assert n > 0
off2.save(lambda: both(m2, o2), path)
torch.save(both(pm2, po2), ppath)
assert open(path, "rb").read() == open(ppath, "rb").read()
assert offloaded(m2, o2) == n

# a corrupt copy on the SSD (every byte of the tier's swap files, which have no name, flipped
# through this process's descriptors): the checksums catch it
d2 = os.path.realpath(off2.ssd_dirs[0])
def target(fd):
    try:
        return os.readlink(os.path.join("/proc/self/fd", fd))
    except OSError:  # the descriptor listdir itself used
        return ""
files = [os.path.join("/proc/self/fd", fd) for fd in os.listdir("/proc/self/fd")
         if target(fd).startswith(d2 + "/")]
assert files, os.listdir("/proc/self/fd")
for p in files:
    with open(p, "r+b") as fh:
        data = fh.read()
        fh.seek(0)
        fh.write(data.translate(bytes(range(255, -1, -1))))
try:
    off2.save(lambda: both(m2, o2), path)
except teraio.Error as e:
    print("CORRUPT", e)
    assert "Offloader.save()" in str(e) and "nothing was written" in str(e), e
else:
    raise AssertionError("a save from a corrupt tier succeeded")
assert open(path, "rb").read() == open(ppath, "rb").read(), "the previous checkpoint changed"
assert sorted(os.listdir(ck_dir)) == ["ckpt.pt"], os.listdir(ck_dir)
print("CASE OK")
""", tmp_path)



def test_streamed_saves_of_other_models_threads_and_unlisted_objects(tmp_path):
    """Inside streamed_saves(): a model that is not a PreTrainedModel saved through the Hugging
    Face Trainer (its state dict through safetensors' save_file) writes plain PyTorch's bytes;
    a save on another thread of what holds offloaded tensors is refused (it would be written
    short) while the window's thread saves on; a torch.save whose object's storages cannot be
    listed brings every tensor back first and writes the whole file."""
    _ok("""
import threading
from transformers import Trainer, TrainingArguments
n_before = offloaded(m, o)

# the Trainer's save of a model that is not a PreTrainedModel: save_file of its state dict
def trainer_save(model, d):
    t = Trainer(model=model, args=TrainingArguments(output_dir=d, use_cpu=True, report_to=[]))
    t.save_model(d)
    with open(os.path.join(d, "model.safetensors"), "rb") as fh:
        return fh.read()
plain = trainer_save(pm, os.path.join(TMP, "plain-trainer"))
assert offloaded(m, o) == n_before, "making the Trainer brought tensors back"
with off.streamed_saves() as w:
    got = trainer_save(m, os.path.join(TMP, "trainer"))
    assert offloaded(m, o) == n_before and w.brought_back == 0, (offloaded(m, o), w.brought_back)
    assert w.streamed_bytes > 0
assert got == plain, "the Trainer's model.safetensors differs from plain PyTorch's"

# another thread: refused where it would write offloaded tensors, the rest passes
other = os.path.join(TMP, "other.pt")
res = {}
def save_elsewhere():
    from safetensors.torch import save_file
    for name, call in (("torch.save", lambda: torch.save(o.state_dict(), other)),
                       ("save_file", lambda: save_file(dict(m.state_dict()), other))):
        try:
            call()
            res[name] = None
        except RuntimeError as e:
            res[name] = str(e)
    torch.save({"step": 3}, other + ".meta")
mine = os.path.join(TMP, "mine.pt")
with off.streamed_saves() as w:
    t = threading.Thread(target=save_elsewhere)
    t.start(); t.join()
    torch.save(o.state_dict(), mine)
    assert offloaded(m, o) == n_before and w.brought_back == 0
print("OTHER THREAD", res)
for name in ("torch.save", "save_file"):
    assert res[name] and "another thread" in res[name], (name, res[name])
assert not os.path.exists(other) and torch.load(other + ".meta") == {"step": 3}
os.makedirs(os.path.join(TMP, "plain"))
pmine = os.path.join(TMP, "plain", "mine.pt")  # the same name: torch.save records it
torch.save(po.state_dict(), pmine)
assert open(mine, "rb").read() == open(pmine, "rb").read()

# an object whose storages cannot be listed (its pickling fails once: the listing's pass)
class OnceBroken:
    calls = 0
    def __init__(self, sd):
        self.sd = sd
    def __reduce__(self):
        OnceBroken.calls += 1
        if OnceBroken.calls == 1:
            raise TypeError("not listed this time")
        return (dict, (), None, None, iter(self.sd.items()))
OnceBroken.calls = 1
torch.save(OnceBroken(po.state_dict()), pmine)
OnceBroken.calls = 0
with off.streamed_saves() as w:
    torch.save(OnceBroken(o.state_dict()), mine)
    assert w.brought_back == 1 and offloaded(m, o) == 0, (w.brought_back, offloaded(m, o))
assert open(mine, "rb").read() == open(pmine, "rb").read(), "written short"
print("CASE OK")
""", tmp_path)
