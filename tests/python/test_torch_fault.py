"""A failing disk loses nothing: with the test-only `fault` backend failing every SSD write from
some point on (warm-up, profiled and planned steps), the step's error says what state the model
is in, every parameter and optimizer state is back in memory with the values plain PyTorch has at
that point, and restore() works (it needs only reads). Runs in a child process
(tests/python/_between.py): a crash fails the test instead of ending pytest."""
import re

from _between import run_case  # noqa: E402

# write N fails, and every write after it: points in the warm-up, profiled and planned steps
POINTS = (5, 40, 120, 300, 450, 550, 700, 850)

BODY = """
POINTS = %r
plain = []
pm, po = fresh()
for k in range(7):
    plain.append((digest(pm.state_dict()), digest(po.state_dict())))
    train(pm, po, None, 1, start=k)
for n in POINTS:
    m, o = fresh()
    off = make_off(m, o, budget=0.2, options=dict(
        backend="fault", backend_options="write_fail=%%d,write_fail_count=1000000" %% n))
    done = 0
    try:
        for k in range(6):
            train(m, o, off, 1, start=k)
            done += 1
        print(n, "NOFAIL")
        continue
    except teraio.Error as e:
        notes = " ".join(getattr(e, "__notes__", []))
    empty = offloaded(m, o)
    off.restore()
    after = offloaded(m, o)
    if "before optimizer.step()" in notes:
        whole = plain[done] == (digest(m.state_dict()), digest(o.state_dict()))
    elif "after optimizer.step()" in notes:
        whole = plain[done + 1] == (digest(m.state_dict()), digest(o.state_dict()))
    else:
        whole = "n/a"
    print(n, "STEP", done, "EMPTY", empty, "AFTER", after, "WHOLE", whole,
          "BACK", "every tensor teraio had offloaded is back in memory" in notes, "|", notes)
    off.close()
print("CASE OK")
""" % (POINTS,)


def test_failing_writes_lose_nothing(tmp_path):
    rc, out = run_case(BODY, tmp_path, timeout=900)
    assert rc == 0, f"child exited with {rc}:\n{out[-4000:]}"
    assert "CASE OK" in out, out[-4000:]
    rows = re.findall(r"^(\d+) STEP (\d+) EMPTY (\d+) AFTER (\d+) WHOLE (\S+) BACK (\S+)", out,
                      re.M)
    assert len(rows) >= 6, out[-4000:]  # most points fail a step (the rest train on)
    planned = 0
    for n, step, empty, after, whole, back in rows:
        assert empty == "0" and after == "0", (n, out[-4000:])
        assert whole in ("True", "n/a"), (n, out[-4000:])
        assert back == "True", (n, out[-4000:])
        planned += int(step) >= 2
    assert planned >= 2, out[-4000:]  # failures in planned steps, not only before the plan
