"""teraio report: plots and an HTML page explaining where time and memory go.

Every number in the report comes from the teraio CLI's own ``--json`` / ``--csv`` outputs
(``teraio analyze``, ``simulate``, ``sweep``), so the report always agrees with the tools.

    python -m teraio.report TRACE --hw paper-2xh100nvl -o report/
    teraio report TRACE --hw paper-2xh100nvl -o report/      # the same, from the C CLI
"""
from __future__ import annotations

import argparse
import csv
import html
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

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
    """The teraio CLI: $TERAIO_CLI, the venv's scripts dir, the repo's build/, or PATH."""
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
    """Run the CLI; return its parsed JSON (or stdout). Raises ReportError with its stderr."""
    cmd = [cli_path(), *args] + (["--json"] if want_json else [])
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ReportError(f"{' '.join(cmd)} failed (exit {proc.returncode}): "
                          f"{proc.stderr.strip()}",
                          code=proc.returncode if proc.returncode in (1, 2, 3) else 3)
    return json.loads(proc.stdout) if want_json else proc.stdout


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


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
    ax.set_title(title)
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
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
    ax.set_title(title)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


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
    ax.set_title(title)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


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
    ax.set_title(title)
    ax.tick_params(axis="x", rotation=30)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


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
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


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
        (out_dir / "index.html").write_text("".join(parts))
        (out_dir / "report.md").write_text("".join(md))
        return out_dir / "index.html"


def fmt_pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def characterization(trace: str, capacity: int, out_dir: Path, name: str, page: Page) -> dict:
    """Figures 1 and 2 for one trace; returns the analysis summary (teraio analyze --json)."""
    csv_dir = out_dir / f"{name}-analysis"
    args = ["analyze", trace, "--csv", str(csv_dir)]
    if capacity:
        args += ["--capacity", str(capacity)]
    summary = run_cli(*args)
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
    rows = []
    for p in policies:
        r = run_cli("simulate", trace, "--hw", hw, "--policy", p)
        r["system"] = p
        rows.append(r)
    if plan:
        r = run_cli("simulate", trace, "--hw", hw, "--plan", plan)
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
    series_dir = out_dir / f"{name}-sim"
    src = ["--plan", plan] if plan else ["--policy", policy]
    res = run_cli("simulate", trace, "--hw", hw, *src, "--csv", str(series_dir))
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
    res = run_cli("sweep", trace, "--hw", hw)
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
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = name or Path(trace).stem
    hw_info = run_cli("hw", "show", hw)
    capacity = int(hw_info.get("gpu_memory_bytes", 0))
    page = Page(f"teraio report: {name} on {hw}")
    characterization(trace, capacity, out, name, page)
    simulation(trace, hw, policies or ["ideal", "zero-offload", "zero-infinity", "teraio-ssd",
                                       "teraio-mixed"], plan, out, name, page)
    if do_sweep:
        sweep(trace, hw, out, name, page)
    return page.write(out)


def main(argv: list[str] | None = None) -> int:
    ap = _Parser(
        prog="teraio report",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Plots and an HTML page for a trace, a plan and a hardware description.",
        epilog="example: teraio report llama3-8b.tio --hw paper-2xh100nvl -o report/\n\n"
               "exit codes (every command): 0 success; 1 usage error; 2 bad input or output\n"
               "path (the step that failed said which); 3 runtime failure (see\n"
               "docs/user-guide.md#exit-codes)")
    ap.add_argument("trace", help="trace file (.tio or .json)")
    ap.add_argument("--hw", default="paper-2xh100nvl", help="hardware preset or JSON file")
    ap.add_argument("--plan", help="a plan file to show beside the policies")
    ap.add_argument("--policies", default="ideal,zero-offload,zero-infinity,teraio-ssd,"
                    "teraio-mixed", help="comma-separated systems to simulate")
    ap.add_argument("--no-sweep", action="store_true", help="skip the bandwidth sweep")
    ap.add_argument("-o", "--out", default="report", help="output folder (default: report)")
    a = ap.parse_args(argv)
    try:
        index = make_report(a.trace, a.hw, a.out, plan=a.plan,
                            policies=[p for p in a.policies.split(",") if p],
                            do_sweep=not a.no_sweep)
    except ReportError as e:
        print(f"teraio report: {e}", file=sys.stderr)
        return e.code
    print(f"report written to {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
