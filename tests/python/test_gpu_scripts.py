"""scripts/gpu_validate.sh's pieces that run without a GPU: its syntax, and the table that
scripts/gpu_train_summary.py makes of the runs (fed real CPU runs of the example script)."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

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


def test_summary_table(tmp_path):
    plain = _run("--preset", "tiny")
    host = _run("--preset", "tiny", "--budget", "0.5", "--host-memory", "64MiB",
                "--min-tensor-bytes", "16KiB")
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
