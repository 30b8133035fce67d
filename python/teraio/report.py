"""teraio report: plots and an HTML page explaining where time and memory go, and the summary
of a multi-rank run's Offloader reports.

Every number in the trace report comes from libteraio through teraio._core (Analysis, simulate,
sweep, hw_json: the functions behind ``teraio analyze``, ``simulate``, ``sweep`` and ``hw show``),
so the report agrees with the tools without running them: it starts no other process.

    python -m teraio.report TRACE --hw paper-2xh100nvl -o report/
    teraio report TRACE --hw paper-2xh100nvl -o report/      # the same, from the C CLI

Each rank of a distributed run writes its Offloader's report with write_rank_report(); given
those files, the same command prints one row per rank and the totals (aggregate()):

    teraio report out/rank0.json out/rank1.json [--json]
"""
from __future__ import annotations

import argparse
import csv
import html
import io
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from teraio import _outfile

BUCKETS = ["<1MB", "1-10MB", "10-100MB", "100MB-1GB", ">=1GB"]
SYSTEM_ORDER = ["ideal", "none", "zero-offload", "zero-infinity", "lru", "g10", "teraio-paper",
                "teraio-ssd", "teraio-mixed", "teraio"]


class ReportError(RuntimeError):
    """A step of the report failed; the message names the command and its error. `code` is the
    exit status of `teraio report` (the CLI's convention: 2 bad input, 3 runtime failure)."""

    def __init__(self, message: str, code: int = 3):
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on a usage error; teraio's commands exit 1 for that (2 is bad input)."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: error: {message}\n")


def cli_path() -> str:
    """The teraio CLI, for the demo and the tests (the report itself runs none): $TERAIO_CLI,
    the venv's scripts dir, the repo's build/, or PATH."""
    env = os.environ.get("TERAIO_CLI")
    if env:
        return env
    candidates = [Path(sys.executable).parent / "teraio",
                  Path(__file__).resolve().parents[2] / "build" / "teraio"]
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    found = shutil.which("teraio")
    if found:
        return found
    raise ReportError("cannot find the teraio CLI: set TERAIO_CLI or run scripts/setup.sh")


def run_cli(*args: str, want_json: bool = True) -> dict | str:
    """Run the CLI (the demo's paper comparison); return its parsed JSON (or stdout). Raises
    ReportError with its stderr."""
    cmd = [cli_path(), *args] + (["--json"] if want_json else [])
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ReportError(f"{' '.join(cmd)} failed (exit {proc.returncode}): "
                          f"{proc.stderr.strip()}",
                          code=proc.returncode if proc.returncode in (1, 2, 3) else 3)
    return json.loads(proc.stdout) if want_json else proc.stdout


def _lib(step: str, fn, *args, **kwargs):
    """Call teraio._core for one step of the report; a teraio.Error becomes a ReportError that
    names the step, with the exit code the CLI gives that status."""
    from teraio import _core

    try:
        return fn(*args, **kwargs)
    except _core.Error as e:
        status, message = e.args[0], e.args[1]
        raise ReportError(f"{step}: {message}",
                          code=2 if _core.status_is_input_error(status) else 3) from None


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(plt, fig, out: Path) -> None:
    """Lay figure fig out, write it to out (120 dpi, through _outfile) and close it."""
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, dpi=120, format=out.suffix.lstrip(".") or "png")
    plt.close(fig)
    _write(out, buf.getvalue())


def _write(path, data) -> None:
    """Write an output file (bytes or text) through _outfile; its refusals become ReportErrors
    with the CLI's exit code."""
    try:
        _outfile.write_bytes(path, data if isinstance(data, bytes) else data.encode("utf-8"))
    except _outfile.OutputError as e:
        raise ReportError(str(e), code=e.code) from None


def _finish(plt, fig, ax, out: Path, title: str, legend: bool = True, **grid) -> None:
    """The plots' common end: title, legend (lower right), a light grid (grid: which lines),
    then _save."""
    ax.set_title(title)
    if legend:
        ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, alpha=0.3, **grid)
    _save(plt, fig, out)


def _read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# ---------------------------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------------------------

def plot_memory(memory_csv: Path, capacity: int, out: Path, title: str) -> dict:
    """Paper Figure 1: per kernel, memory of all (resident) and of active tensors as a fraction
    of GPU capacity, log scale."""
    rows = _read_csv(memory_csv)
    k = [int(r["kernel"]) for r in rows]
    res = [int(r["resident_bytes"]) for r in rows]
    act = [int(r["active_bytes"]) for r in rows]
    cap = capacity or max(res) or 1
    # Active memory swings by orders of magnitude from one kernel to the next; draw its
    # per-bin maximum and mean (bins of ~N/1500 kernels) so that the curve stays readable.
    step = max(1, len(k) // 1500)
    bx, bmax, bmean = [], [], []
    for i in range(0, len(k), step):
        chunk = act[i:i + step]
        bx.append(k[i])
        bmax.append(max(chunk) / cap)
        bmean.append(sum(chunk) / len(chunk) / cap)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.plot(k, [r / cap for r in res], label="all tensors (resident if nothing is offloaded)",
            lw=1.2, color="#1f77b4")
    ax.plot(bx, bmax, label="active tensors, max per bin", lw=0.8, color="#d62728")
    ax.plot(bx, bmean, label="active tensors, mean per bin", lw=0.8, color="#ff9896")
    ax.axhline(1.0, color="black", ls="--", lw=1, label="GPU capacity")
    ax.set_yscale("log")
    ax.set_xlabel("kernel index in one training iteration")
    ax.set_ylabel("memory / GPU capacity")
    _finish(plt, fig, ax, out, title, which="both")
    return {"kernels": len(k), "capacity_bytes": cap}


def plot_cdf(cdf_csv: Path, out: Path, title: str, counts: dict | None = None) -> None:
    """Paper Figure 2: CDF of inactive-period length (us, log scale) per tensor-size bucket."""
    rows = _read_csv(cdf_csv)
    series: dict[str, tuple[list[float], list[float]]] = {}
    for r in rows:
        xs, ys = series.setdefault(r["bucket"], ([], []))
        xs.append(max(int(r["duration_ns"]) / 1000.0, 1e-3))
        ys.append(float(r["fraction"]))
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    for b in BUCKETS:
        if b in series:
            xs, ys = series[b]
            n = (counts or {}).get(b, len(xs))
            ax.step(xs, ys, where="post", label=f"{b} ({n} periods)")
    ax.axvline(1e4, color="black", ls=":", lw=1, label="10 ms")
    ax.set_xscale("log")
    ax.set_xlabel("inactive period length (us)")
    ax.set_ylabel("CDF of inactive periods")
    ax.set_ylim(0, 1.02)
    _finish(plt, fig, ax, out, title, which="both")


def plot_sweep(points: list[dict], out: Path, title: str) -> None:
    """Paper Figure 3: normalized throughput against migration bandwidth."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    by_label: dict[str, list[tuple[float, float]]] = {}
    for p in points:
        y = 0.0 if p.get("oom") else float(p["fraction_of_ideal"])
        by_label.setdefault(p.get("label", "teraio"), []).append((p["bandwidth_Bps"] / 1e9, y))
    for label, pts in by_label.items():
        pts.sort()
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=label)
    ax.axvspan(32, 48, color="green", alpha=0.1, label="paper: 32-48 GB/s is enough")
    ax.set_xlabel("migration bandwidth per GPU (GB/s)")
    ax.set_ylabel("throughput / ideal")
    ax.set_ylim(0, 1.05)
    _finish(plt, fig, ax, out, title)


def plot_throughput(rows: list[dict], out: Path, title: str) -> None:
    """Throughput bars (tokens/s) of each system, OOM marked, fraction of ideal on top."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4))
    names = [r["system"] for r in rows]
    vals = [0.0 if r.get("oom") else float(r.get("tokens_per_s") or 0.0) for r in rows]
    colors = ["#7f7f7f" if n == "ideal" else "#2ca02c" if n.startswith("teraio") else "#1f77b4"
              for n in names]
    bars = ax.bar(names, vals, color=colors)
    for b, r in zip(bars, rows):
        label = "OOM" if r.get("oom") else f"{100 * float(r.get('fraction_of_ideal', 0)):.0f}%"
        ax.annotate(label, (b.get_x() + b.get_width() / 2, b.get_height()),
                    ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("tokens/s (simulated)")
    ax.set_xlabel("system (label: % of ideal)")
    ax.tick_params(axis="x", rotation=30)
    _finish(plt, fig, ax, out, title, legend=False, axis="y")


def plot_timeline(sim_dir: Path, capacity: int, out: Path, title: str) -> None:
    """One simulated iteration: GPU memory per kernel (top) and migration bandwidth per channel
    (bottom), from the simulator's kernels.csv (start_s, gpu_bytes) and bandwidth.csv
    (t_s and one *_Bps column per channel)."""
    kern = _read_csv(sim_dir / "kernels.csv")
    bw = _read_csv(sim_dir / "bandwidth.csv")
    if not kern:
        raise ReportError(f"{sim_dir / 'kernels.csv'} is empty")
    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    ax1.plot([float(r["start_s"]) for r in kern], [int(r["gpu_bytes"]) / 1e9 for r in kern],
             label="GPU memory in use", lw=1)
    if capacity:
        ax1.axhline(capacity / 1e9, color="black", ls="--", lw=1, label="capacity")
    ax1.set_ylabel("GB")
    ax1.legend(fontsize=8, loc="upper right")
    ax1.grid(True, alpha=0.3)
    if bw:
        t = [float(r["t_s"]) for r in bw]
        for col in bw[0]:
            if col.endswith("_Bps"):
                ax2.plot(t, [float(r[col]) / 1e9 for r in bw], lw=0.8,
                         label=col[:-4].replace("_", " "))
    ax2.set_ylabel("GB/s")
    ax2.set_xlabel("time in the iteration (s)")
    if ax2.get_legend_handles_labels()[0]:
        ax2.legend(fontsize=8, loc="upper right")
    else:  # everything fits: the plan moves nothing
        ax2.text(0.5, 0.5, "no migration traffic (nothing is moved)", ha="center",
                 va="center", transform=ax2.transAxes)
    ax2.grid(True, alpha=0.3)
    fig.suptitle(title)
    _save(plt, fig, out)


# ---------------------------------------------------------------------------------------------
# The page
# ---------------------------------------------------------------------------------------------

@dataclass
class Section:
    title: str
    text: str = ""
    image: str | None = None
    table: list[list[str]] | None = None


@dataclass
class Page:
    title: str
    sections: list[Section] = field(default_factory=list)

    def write(self, out_dir: Path) -> Path:
        parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>"
                 f"{html.escape(self.title)}</title><style>body{{font-family:sans-serif;"
                 f"max-width:1000px;margin:2em auto;}}table{{border-collapse:collapse}}"
                 f"td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}"
                 f"img{{max-width:100%}}</style></head><body>",
                 f"<h1>{html.escape(self.title)}</h1>"]
        md = [f"# {self.title}\n"]
        for s in self.sections:
            parts.append(f"<h2>{html.escape(s.title)}</h2>")
            md.append(f"\n## {s.title}\n")
            if s.text:
                parts.append(f"<p>{html.escape(s.text)}</p>")
                md.append(s.text + "\n")
            if s.image:
                parts.append(f"<img src='{html.escape(s.image)}' alt='{html.escape(s.title)}'>")
                md.append(f"\n![{s.title}]({s.image})\n")
            if s.table:
                head, *body = s.table
                parts.append("<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in head)
                             + "</tr>")
                for row in body:
                    parts.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row)
                                 + "</tr>")
                parts.append("</table>")
                md.append("\n| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n")
                for row in body:
                    md.append("| " + " | ".join(row) + " |\n")
        parts.append("</body></html>")
        _write(out_dir / "index.html", "".join(parts))
        _write(out_dir / "report.md", "".join(md))
        return out_dir / "index.html"


def fmt_pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def characterization(trace: str, capacity: int, out_dir: Path, name: str, page: Page) -> dict:
    """Figures 1 and 2 for one trace; returns the analysis summary (teraio analyze --json)."""
    from teraio import _core

    csv_dir = out_dir / f"{name}-analysis"
    analysis = _lib(f"analyze {trace}", _core.Analysis, trace, capacity=capacity)
    _lib(f"analyze {trace}: --csv {csv_dir}", analysis.write_csv, str(csv_dir))
    summary = analysis.summary()
    plot_memory(csv_dir / "memory.csv", capacity, out_dir / f"{name}-memory.png",
                f"{name}: memory per kernel (paper Figure 1)")
    counts = {}
    for i, b in enumerate(summary.get("buckets", [])):
        if isinstance(b, dict):
            counts[b.get("name", BUCKETS[i] if i < len(BUCKETS) else str(i))] = b.get("periods")
    plot_cdf(csv_dir / "cdf.csv", out_dir / f"{name}-idle-cdf.png",
             f"{name}: inactive periods by tensor size (paper Figure 2)", counts)
    page.sections.append(Section(
        f"{name}: active vs resident memory (Observation 1)",
        f"Active tensors use on average {fmt_pct(summary['active_fraction_mean'])} of resident "
        f"memory (max {fmt_pct(summary['active_fraction_max'])}); the paper reports 1.7% mean "
        f"and under 14% max of GPU capacity.", image=f"{name}-memory.png"))
    page.sections.append(Section(
        f"{name}: inactive-period lengths (Observation 2)",
        f"{summary['inactive_periods']} inactive periods; "
        f"{fmt_pct(summary['long_idle_fraction_10mb_1gb'])} of the periods of 10 MB-1 GB tensors "
        f"last longer than 10 ms (paper: over 40%).", image=f"{name}-idle-cdf.png"))
    return summary


def simulation(trace: str, hw: str, policies: list[str], plan: str | None, out_dir: Path,
               name: str, page: Page) -> list[dict]:
    """Throughput bars of each policy and the timeline of the first teraio policy (or plan)."""
    from teraio import _core

    rows = []
    for p in policies:
        r = _lib(f"simulate {trace} --policy {p}", _core.simulate, trace, hw=hw, policy=p)
        r["system"] = p
        rows.append(r)
    if plan:
        r = _lib(f"simulate {trace} --plan {plan}", _core.simulate, trace, hw=hw, plan=plan)
        r["system"] = "plan:" + Path(plan).name
        rows.append(r)
    plot_throughput(rows, out_dir / f"{name}-throughput.png",
                    f"{name} on {hw}: simulated throughput")
    table = [["system", "tokens/s", "% of ideal", "iteration (s)", "stall (s)", "GPU peak (GB)",
              "host peak (GB)", "SSD written/iter (GB)", "OOM"]]
    for r in rows:
        table.append([r["system"], f"{r.get('tokens_per_s', 0):.1f}",
                      fmt_pct(r.get("fraction_of_ideal", 0)), f"{r.get('iteration_s', 0):.3f}",
                      f"{r.get('stall_s', 0):.3f}", f"{r.get('gpu_peak_bytes', 0) / 1e9:.1f}",
                      f"{r.get('host_peak_bytes', 0) / 1e9:.1f}",
                      f"{r.get('ssd_bytes_written', 0) / 1e9:.1f}",
                      "yes" if r.get("oom") else "no"])
    page.sections.append(Section(f"{name}: throughput against the baselines",
                                 "Simulated on the same trace and hardware model "
                                 "(teraio simulate --json).",
                                 image=f"{name}-throughput.png", table=table))
    # The timeline of the plan, else of the best teraio policy that ran (not OOM).
    ok = [r["system"] for r in rows if not r.get("oom") and r["system"].startswith("teraio")]
    if plan or ok:
        timeline(trace, hw, None if plan else ok[-1], out_dir, name, page, plan=plan)
    return rows


def timeline(trace: str, hw: str, policy: str | None, out_dir: Path, name: str, page: Page,
             plan: str | None = None) -> bool:
    """GPU memory and migration bandwidth over one simulated iteration of a policy or plan."""
    from teraio import _core

    series_dir = out_dir / f"{name}-sim"
    src = {"plan": plan} if plan else {"policy": policy}
    res = _lib(f"simulate {trace} --csv {series_dir}", _core.simulate, trace, hw=hw,
               csv=str(series_dir), **src)
    if res.get("oom") or not (series_dir / "kernels.csv").is_file():
        return False
    label = f"plan {Path(plan).name}" if plan else policy
    plot_timeline(series_dir, int(res.get("capacity_bytes", 0) or 0),
                  out_dir / f"{name}-timeline.png", f"{name}: one iteration under {label}")
    page.sections.append(Section(f"{name}: GPU memory and migration bandwidth",
                                 f"One simulated steady-state iteration under {label}.",
                                 image=f"{name}-timeline.png"))
    return True


def sweep(trace: str, hw: str, out_dir: Path, name: str, page: Page) -> list[dict]:
    from teraio import _core

    res = _lib(f"sweep {trace}", _core.sweep, trace, hw)
    points = res["points"]
    plot_sweep(points, out_dir / f"{name}-sweep.png",
               f"{name}: throughput vs migration bandwidth (paper Figure 3)")
    page.sections.append(Section(f"{name}: how much bandwidth is enough",
                                 "Normalized throughput as the migration bandwidth per GPU "
                                 "grows (teraio sweep).", image=f"{name}-sweep.png"))
    return points


def make_report(trace: str, hw: str, out_dir: str | Path, plan: str | None = None,
                policies: list[str] | None = None, name: str | None = None,
                do_sweep: bool = True) -> Path:
    """Write the full report for one trace on one hardware description; returns index.html."""
    try:
        out = Path(_outfile.make_dir(out_dir))
    except _outfile.OutputError as e:
        raise ReportError(str(e), code=e.code) from None
    name = name or Path(trace).stem
    from teraio import _core

    hw_info = json.loads(_lib(f"hw {hw}", _core.hw_json, hw))
    capacity = int(hw_info.get("gpu_memory_bytes", 0))
    page = Page(f"teraio report: {name} on {hw}")
    characterization(trace, capacity, out, name, page)
    simulation(trace, hw, policies or ["ideal", "zero-offload", "zero-infinity", "teraio-ssd",
                                       "teraio-mixed"], plan, out, name, page)
    if do_sweep:
        sweep(trace, hw, out, name, page)
    return page.write(out)


# ---------------------------------------------------------------------------------------------
# Rank reports: one Offloader report per rank, aggregated into one summary
# ---------------------------------------------------------------------------------------------

RANK_REPORT_FORMAT = "teraio-rank-report"
# the keys every Offloader.report() has; a JSON object without them is no rank report
_REPORT_KEYS = ("bytes_offloaded", "peak_managed_bytes", "memory_budget")


def rank_report(off, step_s=None, extra=None) -> dict:
    """`off.report()` with where it ran: format, rank, local_rank, world_size, host, and the
    wall time of each step (`step_s`: seconds per step, measured by the caller around
    `with off.step():`; None: not measured); `extra`: more keys (JSON values) to add."""
    import socket

    from teraio import _ranks

    rep = dict(off.report())
    world = None
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            world = dist.get_world_size()
    except ImportError:  # pragma: no cover - the Offloader needs torch
        pass
    if world is None:  # no process group: what the launcher said, else one process
        try:
            world = int(os.environ.get("WORLD_SIZE", "1"))
        except ValueError:
            world = None
    rep.update(format=RANK_REPORT_FORMAT, rank=off.rank, local_rank=_ranks.local_rank(off.rank),
               world_size=world, host=socket.gethostname(),
               step_s=[float(t) for t in step_s] if step_s is not None else None)
    rep.update(extra or {})
    return rep


def write_rank_report(off, path, step_s=None, extra=None) -> str:
    """Write rank_report(off, step_s, extra) as JSON to `path` ("{rank}" and "{local_rank}"
    are replaced; its folder is made); returns the path written."""
    from teraio import _ranks

    out = Path(_ranks.expand(path, off.rank, "report path"))
    out.parent.mkdir(parents=True, exist_ok=True)
    _outfile.write_text(out, json.dumps(rank_report(off, step_s, extra), indent=1,
                                        default=str) + "\n")
    return str(out)


def _is_rank_report(obj) -> bool:
    return isinstance(obj, dict) and (obj.get("format") == RANK_REPORT_FORMAT
                                      or all(k in obj for k in _REPORT_KEYS))


def load_rank_report(path) -> dict | None:
    """The rank report in `path`; None where the file is JSON but no rank report (e.g. a JSON
    trace). Raises ReportError (code 2) for a file that cannot be read or is not JSON."""
    p = Path(path)
    try:
        text = p.read_bytes().decode("utf-8")
    except OSError as e:
        raise ReportError(f"{path}: cannot read: {e.strerror}", code=2) from None
    except UnicodeDecodeError as e:
        raise ReportError(f"{path}: not UTF-8 text (byte {e.start})", code=2) from None
    try:
        obj = json.loads(text)
    except RecursionError:
        raise ReportError(f"{path}: JSON nested too deeply", code=2) from None
    except ValueError as e:
        raise ReportError(f"{path}: not JSON ({e})", code=2) from None
    return obj if _is_rank_report(obj) else None


def _maybe_rank_report(path: str) -> dict | None:
    """The rank report in `path`, or None for what is a trace (not .json, or too big to be a
    report: JSON traces can be gigabytes, which this does not parse twice)."""
    try:
        small = path.endswith(".json") and os.path.getsize(path) < (64 << 20)
    except OSError:  # missing: the trace report's own step names it
        return None
    return load_rank_report(path) if small else None


def _median(xs):
    xs = sorted(xs)
    n = len(xs)
    return None if n == 0 else (xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2)


def _num(rep, key, where, kind=int):
    v = rep.get(key, 0)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        raise ReportError(f"{where}: {key} is {v!r}, expected a non-negative number", code=2)
    return kind(v)


def aggregate(reports) -> dict:
    """One summary of several ranks' reports (dicts, or paths of files that write_rank_report
    wrote or that hold an Offloader.report() as JSON).

    Returns {"ranks": [one row per rank, by rank], "total": {...}}. A row: rank, local_rank,
    host, source, steps (planned steps, steps_offloaded), bytes_offloaded, bytes_prefetched,
    ssd_bytes_written, peak_managed_bytes (planned steps), unplanned_peak_bytes (warm-up and
    profiled steps), memory_budget, peak_fraction (the higher peak / budget), budget_held
    (both peaks <= budget), stall_s, steps_diverged, step_s_median and step_s_max (None
    without step times). The total: ranks, hosts, the sums of bytes_offloaded,
    bytes_prefetched, ssd_bytes_written, stall_s and steps_diverged; the max of
    peak_managed_bytes, unplanned_peak_bytes, peak_fraction, stall_s (stall_s_max) and
    step_s_median (step_s_median_max: the slowest rank, which sets the pace of a synchronous
    run); budget_held if every rank held its budget. Raises ReportError (code 2) for no
    reports, a file that is no rank report, or a rank that appears twice."""
    reports = list(reports)
    if not reports:
        raise ReportError("no rank reports given", code=2)
    rows = []
    for i, r in enumerate(reports):
        where = f"report {i}"
        if not isinstance(r, dict):
            where = str(r)
            r = load_rank_report(r)
            if r is None:
                raise ReportError(f"{where}: not an Offloader report (no {', '.join(_REPORT_KEYS)}"
                                  "; each rank writes one with teraio.report.write_rank_report)",
                                  code=2)
        elif not _is_rank_report(r):
            raise ReportError(f"{where}: not an Offloader report (no "
                              f"{', '.join(_REPORT_KEYS)})", code=2)
        budget = _num(r, "memory_budget", where)
        peak = _num(r, "peak_managed_bytes", where)
        upeak = _num(r, "unplanned_peak_bytes", where)
        steps = r.get("step_s")
        if steps is not None and (not isinstance(steps, list) or not all(
                isinstance(t, (int, float)) and not isinstance(t, bool) for t in steps)):
            raise ReportError(f"{where}: step_s is {steps!r}, expected a list of seconds", code=2)
        rank = r.get("rank")
        rows.append({
            "rank": rank if isinstance(rank, int) else None,
            "local_rank": r.get("local_rank"),
            "host": r.get("host"),
            "source": where,
            "steps": _num(r, "steps_offloaded", where),
            "bytes_offloaded": _num(r, "bytes_offloaded", where),
            "bytes_prefetched": _num(r, "bytes_prefetched", where),
            "ssd_bytes_written": _num(r.get("engine") or {}, "bytes_written", where),
            "peak_managed_bytes": peak,
            "unplanned_peak_bytes": upeak,
            "memory_budget": budget,
            "peak_fraction": max(peak, upeak) / budget if budget else None,
            "budget_held": bool(budget) and max(peak, upeak) <= budget,
            "stall_s": _num(r, "stall_s", where, float),
            "steps_diverged": _num(r, "steps_diverged", where),
            "step_s_median": _median(steps) if steps else None,
            "step_s_max": max(steps) if steps else None,
        })
    seen = {}
    for row in rows:
        if row["rank"] is not None:
            if row["rank"] in seen:
                raise ReportError(f"rank {row['rank']} appears twice ({seen[row['rank']]} and "
                                  f"{row['source']})", code=2)
            seen[row["rank"]] = row["source"]
    order = {id(row): i for i, row in enumerate(rows)}
    rows.sort(key=lambda row: (row["rank"] is None, row["rank"] or 0, order[id(row)]))

    def mx(key):
        vals = [row[key] for row in rows if row[key] is not None]
        return max(vals) if vals else None

    total = {
        "ranks": len(rows),
        "hosts": len({row["host"] for row in rows if row["host"] is not None}),
        "bytes_offloaded": sum(row["bytes_offloaded"] for row in rows),
        "bytes_prefetched": sum(row["bytes_prefetched"] for row in rows),
        "ssd_bytes_written": sum(row["ssd_bytes_written"] for row in rows),
        "stall_s": sum(row["stall_s"] for row in rows),
        "stall_s_max": mx("stall_s"),
        "steps_diverged": sum(row["steps_diverged"] for row in rows),
        "peak_managed_bytes": mx("peak_managed_bytes"),
        "unplanned_peak_bytes": mx("unplanned_peak_bytes"),
        "peak_fraction": mx("peak_fraction"),
        "budget_held": all(row["budget_held"] for row in rows),
        "step_s_median_max": mx("step_s_median"),
    }
    return {"ranks": rows, "total": total}


def format_aggregate(agg: dict) -> str:
    """The summary as a text table: one row per rank, then the totals."""
    from teraio import format_bytes

    def b(v):
        return format_bytes(int(v))

    def s(v):
        return "-" if v is None else f"{v:.3f}"

    def pct(v):
        return "-" if v is None else f"{100 * v:.0f}%"

    head = ["rank", "host", "steps", "offloaded", "prefetched", "peak", "budget", "peak/budget",
            "held", "stall s", "step s (median)"]
    table = [head]
    for r in agg["ranks"]:
        rank = "?" if r["rank"] is None else str(r["rank"])
        if r["local_rank"] is not None and r["rank"] is not None:
            rank += f" ({r['local_rank']})"
        table.append([rank, str(r["host"] or "-"), str(r["steps"]), b(r["bytes_offloaded"]),
                      b(r["bytes_prefetched"]),
                      b(max(r["peak_managed_bytes"], r["unplanned_peak_bytes"])),
                      b(r["memory_budget"]), pct(r["peak_fraction"]),
                      "yes" if r["budget_held"] else "NO", s(r["stall_s"]),
                      s(r["step_s_median"])])
    t = agg["total"]
    peak = max(t["peak_managed_bytes"] or 0, t["unplanned_peak_bytes"] or 0)
    hosts = f"{t['hosts']} host" + ("s" if t["hosts"] != 1 else "")
    table.append(["total", hosts, "", b(t["bytes_offloaded"]),
                  b(t["bytes_prefetched"]), f"max {b(peak)}", "", f"max {pct(t['peak_fraction'])}",
                  "all" if t["budget_held"] else "NO", s(t["stall_s"]),
                  f"max {s(t['step_s_median_max'])}"])
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    lines = ["  ".join(c.rjust(w) if i >= 2 else c.ljust(w) for i, (c, w) in
                       enumerate(zip(row, widths))).rstrip() for row in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.insert(len(lines) - 1, "  ".join("-" * w for w in widths))
    note = (f"{t['ranks']} ranks; peak: the higher of the planned steps' and the warm-up/profiled "
            f"steps' tracked peak; stall: time the training thread waited for teraio")
    if t["steps_diverged"]:
        note += f"; {t['steps_diverged']} steps diverged from their plan (ran unplanned)"
    return "\n".join(lines) + "\n" + note + "\n"


def aggregate_main(paths: list[str], as_json: bool, out: str | None) -> int:
    try:
        agg = aggregate(paths)
        text = format_aggregate(agg)
    except (TypeError, AttributeError, KeyError, ValueError, OverflowError) as e:
        # a JSON value of a kind no Offloader writes (a list for "engine", an object for "host")
        raise ReportError(f"a rank report holds a value of the wrong kind ({e})", code=2) from None
    if out:
        try:
            d = Path(_outfile.make_dir(out))
        except _outfile.OutputError as e:
            raise ReportError(str(e), code=e.code) from None
        _write(d / "ranks.json", json.dumps(agg, indent=1) + "\n")
        _write(d / "ranks.txt", text)
    print(json.dumps(agg, indent=1) if as_json else text, end="\n" if as_json else "")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = _Parser(
        prog="teraio report",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Plots and an HTML page for a trace, a plan and a hardware description; "
                    "or, given the rank reports of a distributed run (JSON files from "
                    "teraio.report.write_rank_report), one row per rank and the totals.",
        epilog="examples: teraio report llama3-8b.tio --hw paper-2xh100nvl -o report/\n"
               "          teraio report out/rank0.json out/rank1.json [--json]\n\n"
               "exit codes (every command): 0 success; 1 usage error; 2 bad input or output\n"
               "path (the step that failed said which); 3 runtime failure (see\n"
               "docs/user-guide.md#exit-codes)")
    ap.add_argument("inputs", nargs="+", metavar="trace | rank-report",
                    help="one trace file (.tio or .json), or rank reports (.json)")
    ap.add_argument("--json", action="store_true",
                    help="rank reports: print the summary as JSON")
    ap.add_argument("--hw", default="paper-2xh100nvl", help="hardware preset or JSON file")
    ap.add_argument("--plan", help="a plan file to show beside the policies")
    ap.add_argument("--policies", default="ideal,zero-offload,zero-infinity,teraio-ssd,"
                    "teraio-mixed", help="comma-separated systems to simulate")
    ap.add_argument("--no-sweep", action="store_true", help="skip the bandwidth sweep")
    ap.add_argument("-o", "--out", help="output folder (default: report; rank reports: "
                    "ranks.json and ranks.txt there, nothing without -o)")
    a = ap.parse_args(argv)
    # the same rules as the C commands' parser: no empty value, list element or argument
    for opt, val in (("--hw", a.hw), ("--plan", a.plan), ("-o", a.out)):
        if val is not None and not val:
            ap.error(f"{opt}: empty value")
    if any(not p or p != p.strip() for p in a.policies.split(",")):
        ap.error(f"--policies: '{a.policies}' has an empty element or one with spaces around it")
    if any(not p for p in a.inputs):
        ap.error("an argument is empty")
    try:
        ranks = [_maybe_rank_report(p) for p in a.inputs]
        if any(r is not None for r in ranks):
            bad = [p for p, r in zip(a.inputs, ranks) if r is None]
            if bad:
                load_rank_report(bad[0])  # a file that cannot be read or parsed says so
                raise ReportError(f"{bad[0]}: not an Offloader rank report; give one trace, or "
                                  "only rank reports", code=2)
            return aggregate_main(a.inputs, a.json, a.out)
        if len(a.inputs) > 1:
            raise ReportError(f"{len(a.inputs)} inputs and none is a rank report: give one "
                              "trace, or rank reports", code=2)
        if a.json:
            raise ReportError("--json is for rank reports (a trace's report is a folder)",
                              code=1)
        index = make_report(a.inputs[0], a.hw, a.out or "report", plan=a.plan,
                            policies=a.policies.split(","),
                            do_sweep=not a.no_sweep)
    except ReportError as e:
        print(f"teraio report: {e}", file=sys.stderr)
        return e.code
    except RecursionError:  # an input nested deeper than Python follows
        print("teraio report: an input is nested too deeply", file=sys.stderr)
        return 2
    except UnicodeError as e:  # a path or a file that is not UTF-8
        print(f"teraio report: not UTF-8: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # anything read or written outside the steps that name it
        where = f"{e.filename}: " if e.filename else ""
        print(f"teraio report: {where}{e.strerror or e}", file=sys.stderr)
        return 2 if e.errno in _outfile.PATH_ERRNOS else 3
    print(f"report written to {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
