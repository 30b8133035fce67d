"""The report: every plot is written and is a real image, and the numbers in the report equal
what `teraio simulate --json` prints for the same trace, hardware and policy."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from teraio import report

POLICIES = ["ideal", "none", "teraio-mixed", "lru"]


@pytest.fixture(scope="module")
def small_case(tmp_path_factory):
    d = tmp_path_factory.mktemp("report")
    trace = d / "small.tio"
    subprocess.run([report.cli_path(), "model", "--preset", "small", "-o", str(trace)],
                   check=True, capture_output=True)
    # A GPU a little smaller than the small model's peak (55.4 MB), so teraio must offload.
    hw = d / "hw.json"
    hw.write_text(json.dumps({"base": "cpu-ci", "gpu_memory_bytes": "53MB",
                              "gpu_reserve_bytes": 0}))
    index = report.make_report(str(trace), str(hw), d / "out", policies=POLICIES, name="small")
    return trace, hw, d / "out", index


def test_every_plot_is_a_png(small_case):
    _, _, out, index = small_case
    assert index.is_file() and (out / "report.md").is_file()
    for name in ["small-memory.png", "small-idle-cdf.png", "small-throughput.png",
                 "small-timeline.png", "small-sweep.png"]:
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", name
        assert len(data) > 10_000, f"{name} is suspiciously small ({len(data)} bytes)"
        assert name in index.read_text()


def table_rows(md: str) -> dict[str, list[str]]:
    rows = {}
    for line in md.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 9 and cells[0] in POLICIES:
            rows[cells[0]] = cells
    return rows


def test_report_numbers_equal_simulate_json(small_case):
    trace, hw, out, _ = small_case
    rows = table_rows((out / "report.md").read_text())
    assert set(rows) == set(POLICIES)
    for policy in POLICIES:
        sim = json.loads(subprocess.run(
            [report.cli_path(), "simulate", str(trace), "--hw", str(hw), "--policy", policy,
             "--json"], check=True, capture_output=True, text=True).stdout)
        r = rows[policy]
        assert r[1] == f"{sim['tokens_per_s']:.1f}", policy
        assert r[2] == f"{100 * sim['fraction_of_ideal']:.1f}%", policy
        assert r[3] == f"{sim['iteration_s']:.3f}", policy
        assert r[5] == f"{sim['gpu_peak_bytes'] / 1e9:.1f}", policy
        assert r[8] == ("yes" if sim["oom"] else "no"), policy
    # The case is not trivial: no offloading runs out of memory, teraio does not.
    assert rows["none"][8] == "yes" and rows["teraio-mixed"][8] == "no"


def test_missing_trace_is_a_clear_error(tmp_path):
    with pytest.raises(report.ReportError, match="analyze"):
        report.make_report(str(tmp_path / "nope.tio"), "cpu-ci", tmp_path / "out")
    assert report.main([str(tmp_path / "nope.tio"), "-o", str(tmp_path / "o2")]) == 2


def test_report_follows_the_cli_exit_codes(tmp_path, capsys):
    """1 usage error (argparse's own default is 2, which the CLI keeps for bad input), 2 bad
    input, the failing step's own code otherwise; --help states the convention."""
    trace = Path(__file__).resolve().parents[1] / "data" / "example.tio"
    with pytest.raises(SystemExit) as e:
        report.main([str(trace), "--no-such-option"])
    assert e.value.code == 1
    assert "--no-such-option" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        report.main(["--help"])
    assert e.value.code == 0
    assert "exit codes (every command): 0 success; 1 usage error; 2 bad input" in \
        capsys.readouterr().out.replace("\n", " ")
    # a bad --hw is bad input (the plan step exits 2 and the report passes it on)
    assert report.main([str(trace), "--hw", str(tmp_path / "nosuch.json"),
                        "-o", str(tmp_path / "o3")]) == 2


def test_library_failures_exit_as_the_cli_would():
    """A library failure in a report step gets the CLI's exit code by the library's own rule
    (teraio._core.status_is_input_error, the one cli_exit_code uses): 2 for bad input (values,
    files, plans, budgets, names, unusable paths), 3 for a failure while running."""
    import errno

    from teraio import _core

    cases = {-1000: 2, -1001: 2, -1002: 2, -1007: 2, -1008: 2, -1012: 2, -errno.ENOENT: 2,
             -errno.EISDIR: 2, -errno.ENOTDIR: 2, -errno.ELOOP: 2, -errno.EACCES: 2,
             -errno.EPERM: 2, -1003: 3, -1004: 3, -1009: 3, -1011: 3, -1013: 3,
             -errno.ENOSPC: 3, -errno.EIO: 3}
    for status, code in cases.items():
        assert _core.status_is_input_error(status) is (code == 2), status

        def fail(status=status):
            raise _core.Error(status, "boom")

        with pytest.raises(report.ReportError, match="^the step: boom$") as e:
            report._lib("the step", fail)
        assert e.value.code == code, status


EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "example.tio"


def test_report_runs_no_other_process(tmp_path, monkeypatch):
    """Every number comes from libteraio through teraio._core: no CLI on PATH, none where
    $TERAIO_CLI points, and no process may be started."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("TERAIO_CLI", str(tmp_path / "no-such-teraio"))

    def refuse(*args, **kwargs):
        raise AssertionError(f"the report started a process: {args[0]!r}")

    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)
    out = tmp_path / "out"
    assert report.main([str(EXAMPLE), "--hw", "paper-2xh100nvl", "--policies",
                        "ideal,teraio-ssd", "-o", str(out)]) == 0
    for name in ["example-memory.png", "example-throughput.png", "example-sweep.png"]:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


def test_sweep_equals_the_cli(tmp_path):
    """teraio._core.sweep (the report's) and `teraio sweep --json` give the same points."""
    from teraio import _core

    cli = json.loads(subprocess.run(
        [report.cli_path(), "sweep", str(EXAMPLE), "--hw", "paper-2xh100nvl", "--json"],
        check=True, capture_output=True, text=True).stdout)
    lib = _core.sweep(str(EXAMPLE), "paper-2xh100nvl")
    assert [p["bandwidth_Bps"] for p in lib["points"]] == [4e9, 8e9, 12e9, 16e9, 24e9, 32e9,
                                                          48e9, 64e9]
    assert len(lib["points"]) == len(cli["points"])
    for a, b in zip(lib["points"], cli["points"]):
        assert a["bandwidth_Bps"] == b["bandwidth_Bps"] and a["oom"] == b["oom"]
        assert a["iteration_s"] == pytest.approx(b["iteration_s"], rel=1e-8)
        assert a["fraction_of_ideal"] == pytest.approx(b["fraction_of_ideal"], abs=1e-6)
    no_ssd = tmp_path / "no-ssd.json"
    no_ssd.write_text(json.dumps({"base": "cpu-ci", "ssd_count": 0}))
    with pytest.raises(_core.Error, match="has no SSDs"):
        _core.sweep(str(EXAMPLE), str(no_ssd))


def test_report_command_without_the_cli_on_path(tmp_path):
    """`teraio report` runs the interpreter of $TERAIO_PYTHON (docs/user-guide.md) and passes
    it the arguments; nothing needs the CLI on PATH or in $TERAIO_CLI."""
    cli = Path(report.cli_path()).resolve()
    env = {"PATH": str(tmp_path), "TERAIO_PYTHON": sys.executable}
    proc = subprocess.run([str(cli), "report", str(EXAMPLE), "--hw", "paper-2xh100nvl",
                           "--no-sweep", "--policies", "ideal", "-o", str(tmp_path / "out")],
                          env=env, cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "index.html").is_file()
    # an interpreter without the teraio package: a clear error, exit 3 (runtime failure)
    bare = tmp_path / "bare-python"
    bare.write_text(f'#!/bin/sh\nexec {sys.executable} -I -S "$@"\n')
    bare.chmod(0o755)
    env["TERAIO_PYTHON"] = str(bare)
    proc = subprocess.run([str(cli), "report", str(EXAMPLE)], env=env, cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode == 3
    assert "cannot import the teraio Python package" in proc.stderr
    assert "TERAIO_PYTHON" in proc.stderr and "Traceback" not in proc.stderr
    # no interpreter at all
    env["TERAIO_PYTHON"] = str(tmp_path / "no-such-python")
    proc = subprocess.run([str(cli), "report", str(EXAMPLE)], env=env, cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode == 3 and "cannot run" in proc.stderr
