"""scripts/gpu_validate.sh without a GPU: its syntax, the table that scripts/gpu_train_summary.py
makes of the runs (fed real CPU runs of the example script), and the whole script rehearsed on the
CPU (TIO_GPU_REHEARSE=1): its phases, per-run timeouts, deadline and tables."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EX = os.path.join(ROOT, "examples", "train_llama_tiny.py")
SUMMARY = os.path.join(ROOT, "scripts", "gpu_train_summary.py")


def test_validate_script_parses():
    for f in ("gpu_validate.sh", "gpu_prepare.sh"):
        subprocess.run(["bash", "-n", os.path.join(ROOT, "scripts", f)], check=True)


def _run(*args):
    out = subprocess.run([sys.executable, EX, "--json", "--steps", "4", "--steady-after", "2",
                          *args], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def _summary(tmp_path, runs):
    path = tmp_path / "train.json"
    with open(path, "w") as f:
        for name, args, result in runs:
            f.write(json.dumps({"run": name, "args": args, "result": result}) + "\n")
    p = subprocess.run([sys.executable, SUMMARY, str(path)], capture_output=True, text=True)
    return p.returncode, p.stdout


@pytest.fixture(scope="module")
def cpu_runs():
    """A plain run and a teraio run on the host tier, of the tiny preset on the CPU."""
    return (_run("--preset", "tiny"),
            _run("--preset", "tiny", "--budget", "0.5", "--host-memory", "64MiB",
                 "--min-tensor-bytes", "16KiB"))


def test_summary_table(tmp_path, cpu_runs):
    plain, host = cpu_runs
    oom = {"oom": True, "steps_done": 1, "error": "CUDA out of memory", "cuda_max_allocated_bytes":
           3 << 20}
    rc, out = _summary(tmp_path, [("plain", "--preset tiny", plain),
                                  ("a_host", "--preset tiny --budget 0.5", host),
                                  ("c_plain_capped", "--preset tiny --gpu-memory-cap 1GiB", oom)])
    lines = out.splitlines()
    assert rc == 0, out
    assert lines[0].startswith("| run | result vs plain |") and len(lines) >= 5
    assert "a_host" in lines[3] and "IDENTICAL" in lines[3] and "x |" in lines[3]
    pred = host["report"]["predicted_step_s"]
    assert pred > 0 and f"{pred * 1e3:.0f} ms" in lines[3]
    assert "out of memory after 1 step(s)" in lines[4]
    # a run whose losses differ fails the summary, and so does a run that left no result
    bad = dict(host, losses=[x + 1e-3 for x in host["losses"]])
    rc, out = _summary(tmp_path, [("plain", "--preset tiny", plain),
                                  ("a_host", "--preset tiny --budget 0.5", bad)])
    assert rc == 1 and "DIFFERENT" in out
    rc, out = _summary(tmp_path, [("plain", "--preset tiny", plain),
                                  ("b_ssd", "--preset tiny --budget 0.5", None)])
    assert rc == 1 and "FAILED" in out
    # a capped plain run that completed does not show (c): the cap was too large
    rc, out = _summary(tmp_path, [("plain", "--preset tiny", plain),
                                  ("c_plain_capped", "--preset tiny --gpu-memory-cap 1GiB", plain)])
    assert rc == 1 and "NOT out of memory" in out


def test_summary_counters(tmp_path, cpu_runs):
    """The second table: Offloader.report()'s stall and thread counters per offloaded step."""
    plain, host = cpu_runs
    rep = dict(host["report"], steps_offloaded=2, stall_s=0.5, demand_stall_s=0.2,
               io_issue_s=0.03, demand_offloads=7, urgent_reads=3, deferred_prefetches=0,
               over_budget_kernels=1)
    rc, out = _summary(tmp_path, [("plain", "--preset tiny", plain),
                                  ("a_host", "--preset tiny --budget 0.5", dict(host, report=rep))])
    assert rc == 0, out
    lines = out.splitlines()
    i = lines.index("| run | wall | stall: demand / other | thread issuing I/O | demand offloads "
                    "| urgent reads | deferred prefetches | over-budget kernels |")
    assert lines[i + 2] == "| plain |  |  |  |  |  |  |  |"
    assert lines[i + 3] == ("| a_host |  | 100.0 / 150.0 ms/step | 15.0 ms/step | 3.5/step "
                            "| 1.5/step | 0.0/step | 0.5/step |")


def test_summary_checkpoints(tmp_path, cpu_runs):
    """The third table: a teraio run's checkpoint against the plain run's of the same preset and
    --save-after; different bytes, or no plain checkpoint, fail the summary."""
    plain, host = cpu_runs
    p = dict(plain, save_sha256="ab" * 32, save_seconds=0.5)
    rows = [("plain", "--preset tiny --save-after 3", p)]
    same = dict(host, save_sha256="ab" * 32, save_seconds=0.25)
    rc, out = _summary(tmp_path, rows + [("a_host", "--preset tiny --budget 0.5 --save-after 3",
                                          same)])
    assert rc == 0, out
    ck = _table_rows(out, "| run | checkpoint vs plain")
    assert ck["a_host"][1:3] == ["IDENTICAL bytes (3)", "0.25 s"]
    other = dict(host, save_sha256="cd" * 32, save_seconds=0.25)
    rc, out = _summary(tmp_path, rows + [("a_host", "--preset tiny --budget 0.5 --save-after 3",
                                          other)])
    assert rc == 1 and "DIFFERENT bytes (3)" in out
    rc, out = _summary(tmp_path, rows + [("a_host", "--preset tiny --budget 0.5 --save-after 2",
                                          same)])
    assert rc == 1 and "no plain run with --save-after 2" in out


def _validate(tmp_path, phases=None, **env):
    """scripts/gpu_validate.sh rehearsed on the CPU (TIO_GPU_REHEARSE=1): its exit status, its
    console output and OUTDIR."""
    out = tmp_path / "out"
    e = dict(os.environ, TIO_GPU_REHEARSE="1", TIO_GPU_WORK=str(tmp_path / "work"),
             PYTHON=sys.executable, **env)
    e.pop("OUT", None)
    args = ["bash", os.path.join(ROOT, "scripts", "gpu_validate.sh"), str(out)]
    if phases:
        args.append(phases)
    p = subprocess.run(args, env=e, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr, out


def _table_rows(text, first):
    """The rows of the Markdown table whose header starts with `first`, by run name."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first))
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = cells
    return rows


def test_rehearsal_runs_every_phase(tmp_path):
    """The default phases on the CPU: the package built into the work folder, the runs of the
    rehearsal's set, each phase's time and both tables in summary.txt, each run's row printed as it
    completed."""
    rc, log, out = _validate(tmp_path)
    assert rc == 0, log
    summary = (out / "summary.txt").read_text()
    for phase in ("env", "install", "train"):
        assert f"phase {phase}: ok (" in summary, summary
    assert "REHEARSAL on the CPU" in summary
    runs = [json.loads(line) for line in (out / "train.json").read_text().splitlines()]
    assert [r["run"] for r in runs] == ["plain", "a_host", "b_ssd", "c_teraio"]
    assert all(r["result"] is not None and r["wall_s"] >= 0 for r in runs)
    table = _table_rows(summary, "| run | result vs plain |")
    assert table["plain"][1] == "baseline"
    assert table["a_host"][1] == "losses and parameters IDENTICAL", table["a_host"]
    for name in ("b_ssd", "c_teraio"):  # 5 steps, the baseline 6
        assert table[name][1] == "losses of 5 steps IDENTICAL", table[name]
    # every teraio run moved bytes in its offloaded steps: "out / in MiB", both above zero
    for name in ("a_host", "b_ssd", "c_teraio"):
        moved = [float(x) for x in table[name][6].replace("MiB", "").split("/")]
        assert min(moved) > 0, table[name]
    counters = _table_rows(summary, "| run | wall |")
    assert set(counters) == {"plain", "a_host", "b_ssd", "c_teraio"}
    assert counters["a_host"][2].endswith("ms/step") and counters["plain"][2] == ""
    # (d): the checkpoint after step 3, Offloader.save()'s bytes against torch.save's
    ck = _table_rows(summary, "| run | checkpoint vs plain")
    assert set(ck) == {"plain", "a_host"}
    assert ck["plain"][1] == "torch.save, the reference (3)"
    assert ck["a_host"][1] == "IDENTICAL bytes (3)", ck["a_host"]
    # the teraio package the install phase built is the one the runs imported
    assert str(tmp_path / "work" / "site") in (out / "install.log").read_text()
    # rows on the console as each run completed, then the whole summary
    assert log.index("| a_host |") < log.index("phase train: ok")
    assert log.rstrip().endswith("all phases passed")


def test_rehearsal_run_cut_off_leaves_a_table(tmp_path):
    """A run that outlives its limit is cut off by its timeout; the runs after it still run,
    the table says which run was cut off, and the phase and the script fail."""
    runs = ("slow:3 --preset tiny --budget 0.5 --host-memory 64MiB --steps 100000\n"
            "plain:60 --preset tiny\n")
    rc, log, out = _validate(tmp_path, "train", TIO_GPU_RUNS=runs)
    assert rc == 1, log
    summary = (out / "summary.txt").read_text()
    assert "phase train: FAILED" in summary, summary
    table = _table_rows(summary, "| run | result vs plain |")
    assert table["slow"][1].startswith("CUT OFF at its limit of 3 s"), table["slow"]
    assert table["plain"][1] == "baseline"
    slow = json.loads((out / "train.json").read_text().splitlines()[0])
    assert slow["timed_out"] is True and slow["result"] is None


def test_rehearsal_deadline_skips_what_does_not_fit(tmp_path):
    """With the deadline spent, phases are not started: the summary says so, exit 1."""
    rc, log, out = _validate(tmp_path, "train", TIO_GPU_DEADLINE_S="14")
    assert rc == 1, log
    summary = (out / "summary.txt").read_text()
    assert "phase train: SKIPPED (no time left before the 14 s deadline)" in summary, summary
