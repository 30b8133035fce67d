"""Part 1 of the demo: train the small Llama-style decoder on the text corpus shipped in the
package, once plainly and once under a memory budget with teraio offloading to a local
directory (SSD tier) and a small host tier, and check that the losses are bitwise equal.

    python -m teraio.demo_training --steps 12 --out /tmp/tio-demo
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from importlib import resources
from pathlib import Path

# Character-level model: bytes are tokens (vocabulary 256).
MODEL = dict(vocab=256, dim=256, layers=4, heads=8, kv_heads=4, ffn=688)
BATCH, SEQ = 8, 128


def corpus_tokens():
    import torch
    text = resources.files("teraio").joinpath("data/corpus.txt").read_bytes()
    return torch.tensor(list(text), dtype=torch.long)


def batch_at(tokens, step: int):
    """A deterministic batch [BATCH, SEQ + 1] of consecutive windows of the corpus."""
    import torch
    n = tokens.numel() - (SEQ + 1)
    stride = 97  # co-prime with typical lengths: windows wander over the whole text
    rows = [tokens[((step * BATCH + j) * stride * 7) % n:][:SEQ + 1] for j in range(BATCH)]
    return torch.stack(rows)


class Progress:
    """A one-line progress bar on stderr when it is a terminal, else one line per step."""

    def __init__(self, label: str, total: int):
        self.label, self.total, self.tty = label, total, sys.stderr.isatty()

    def update(self, i: int, loss: float, note: str = "") -> None:
        done = i + 1
        if self.tty:
            bar = "#" * int(30 * done / self.total)
            print(f"\r  {self.label:<22} [{bar:<30}] {done}/{self.total} loss {loss:.4f} {note}",
                  end="", file=sys.stderr, flush=True)
            if done == self.total:
                print(file=sys.stderr)
        else:
            print(f"  {self.label}: step {done}/{self.total} loss {loss:.4f} {note}", flush=True)


def train(steps: int, offload: dict | None, label: str):
    """Returns (losses, seconds per step, model, offloader or None)."""
    import torch

    from teraio.examples.llama_tiny import LlamaConfig, LlamaTiny, train_steps
    torch.manual_seed(0)
    cfg = LlamaConfig(**MODEL)
    model = LlamaTiny(cfg, seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, foreach=False)
    off = None
    if offload is not None:
        import teraio
        off = teraio.Offloader(model, opt, **offload)
    tokens = corpus_tokens()
    times = []
    bar = Progress(label, steps)
    t0 = [time.perf_counter()]

    def on_step(i, off, loss):
        times.append(time.perf_counter() - t0[0])
        phase = ""
        if off is not None:
            r = off.report()
            phase = ("(offloading)" if r.get("steps_offloaded") else
                     "(profiling)" if r.get("steps_profiled") else "(warm-up)")
        bar.update(i, loss, phase)
        t0[0] = time.perf_counter()

    losses = train_steps(model, opt, off, lambda i: batch_at(tokens, i), steps, on_step)
    return losses, times, model, off


def params_equal(a, b) -> bool:
    import torch
    return all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))


def run(out_dir: str | Path, steps: int = 12, budget: float = 0.5,
        host_memory: str = "24MiB") -> dict:
    """Train with and without teraio; print and return the comparison."""
    import teraio
    from teraio import format_bytes
    swap = Path(out_dir) / "swap"
    swap.mkdir(parents=True, exist_ok=True)
    print(f"model: Llama-style decoder {MODEL}, batch {BATCH} x {SEQ} tokens of the shipped "
          f"corpus, AdamW, {steps} steps on CPU")
    base_losses, base_t, base_model, _ = train(steps, None, "without teraio")
    offload = dict(memory_budget=budget, ssd_dirs=[str(swap)], host_memory=host_memory,
                   options=teraio.OffloadOptions(cpu_allocator=True, min_tensor_bytes="64KiB"))
    tio_losses, tio_t, tio_model, off = train(steps, offload, "with teraio")
    rep = off.report()
    plan = rep.get("plan", {})
    eng = rep.get("engine", {})
    n_off = rep.get("steps_offloaded", 0)
    # Throughput over the steps that ran offloaded (the last n_off), against the same steps
    # of the plain run.
    k = max(1, n_off)
    tps_base = BATCH * SEQ * k / sum(base_t[-k:])
    tps_tio = BATCH * SEQ * k / sum(tio_t[-k:])
    same_losses = [float(x).hex() for x in base_losses] == [float(x).hex() for x in tio_losses]
    same_params = params_equal(base_model, tio_model)
    unconstrained = rep.get("unconstrained_peak_bytes", 0)
    peak = rep.get("peak_managed_bytes", 0)
    result = {
        "steps": steps, "steps_offloaded": n_off, "steps_profiled": rep.get("steps_profiled"),
        "losses": tio_losses, "losses_equal": same_losses, "params_equal": same_params,
        "tokens_per_s_without": tps_base, "tokens_per_s_with": tps_tio,
        "throughput_ratio": tps_tio / tps_base,
        "unconstrained_peak_bytes": unconstrained, "peak_managed_bytes": peak,
        "memory_budget": rep.get("memory_budget"),
        "bytes_offloaded": rep.get("bytes_offloaded"),
        "bytes_prefetched": rep.get("bytes_prefetched"),
        "planned_bytes_to_ssd_per_step": plan.get("bytes_to_ssd", 0),
        "planned_bytes_to_host_per_step": plan.get("bytes_to_host", 0),
        "engine_backend": eng.get("backend"), "stall_s": rep.get("stall_s"),
    }
    print(f"\n  final loss {tio_losses[-1]:.4f} (first {tio_losses[0]:.4f})")
    print(f"  losses bitwise equal to the plain run: {'yes' if same_losses else 'NO'}; "
          f"final parameters equal: {'yes' if same_params else 'NO'}")
    print(f"  tracked tensor memory: peak {format_bytes(peak)} with teraio vs "
          f"{format_bytes(unconstrained)} without (budget {format_bytes(rep['memory_budget'])}"
          f", {100 * (1 - peak / unconstrained) if unconstrained else 0:.0f}% saved)")
    print(f"  throughput over the {k} offloaded steps: {tps_tio:,.0f} tokens/s vs "
          f"{tps_base:,.0f} without ({result['throughput_ratio']:.2f}x); stalls "
          f"{rep.get('stall_s', 0):.3f} s")
    print(f"  moved: {format_bytes(rep['bytes_offloaded'])} offloaded, "
          f"{format_bytes(rep['bytes_prefetched'])} prefetched through the '{eng.get('backend')}'"
          f" engine; per step the plan sends {format_bytes(plan.get('bytes_to_ssd', 0))} to "
          f"the SSD tier ({swap}) and {format_bytes(plan.get('bytes_to_host', 0))} to the host "
          f"tier")
    (Path(out_dir) / "training.json").write_text(json.dumps(result, indent=2))
    if not (same_losses and same_params):
        raise RuntimeError("teraio changed the training result: losses or parameters differ")
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--budget", type=float, default=0.5,
                    help="fraction of the unconstrained peak (default 0.5)")
    ap.add_argument("--out", default="teraio-demo")
    a = ap.parse_args(argv)
    run(a.out, a.steps, a.budget)
    return 0


if __name__ == "__main__":
    sys.exit(main())
