"""The report: every plot is written and is a real image, and the numbers in the report equal
what `teraio simulate --json` prints for the same trace, hardware and policy."""
import json
import subprocess
from pathlib import Path

import pytest

from teraio import report

pytest.importorskip("matplotlib")

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


def test_report_command_runs_its_own_cli(tmp_path):
    """`teraio report` hands Python the path of the CLI that was run (TERAIO_CLI), so a rebuilt
    build/teraio is used rather than an older copy installed in a venv or on PATH."""
    cli = Path(report.cli_path()).resolve()
    fake_py = tmp_path / "py"
    fake_py.write_text('#!/bin/sh\necho "cli=$TERAIO_CLI args=$*"\n')
    fake_py.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "TERAIO_PYTHON": str(fake_py)}
    out = subprocess.run([str(cli), "report", "x.tio", "--hw", "cpu-ci"], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"cli={cli} args=-m teraio.report x.tio --hw cpu-ci"
    # a caller's explicit choice wins
    env["TERAIO_CLI"] = "/some/other/teraio"
    out = subprocess.run([str(cli), "report"], env=env, capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "cli=/some/other/teraio args=-m teraio.report"
