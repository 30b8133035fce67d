#!/usr/bin/env python3
"""Benchmarks of the PyTorch layer (numbers go to docs/bench/torch.md, never to assertions).

1. Hook overhead per operator (us), on a chain of 2,000 cheap operators: plain, under a bare
   TorchDispatchMode that only calls the operator (the floor of any Python dispatch mode), and
   under the recording and executing modes (plan with no moves: identity, plan check and the C
   executor calls still run), each with the C per-operator path (teraio._core.OpFast) and with
   the Python reference (StepDriver(fast=False)); interleaved, median and min of --reps (>= 7).
   Then the same on one training step of the example model.
2. End-to-end CPU training throughput (tokens/s over the steady-state steps) and peak RSS, each
   configuration in its own process: no offloading; teraio at 50% of the unconstrained peak (SSD
   tier in --ssd-dir; "teraio-py": the same with the Python per-operator path);
   torch.autograd.graph.save_on_cpu; activation checkpointing of every block; "baremode": no
   offloading under a TorchDispatchMode that only calls the operator (the floor of any Python
   dispatch mode, teraio included); "blockcache": no offloading, PyTorch's CPU tensors of >= 1 MiB
   from teraio's block cache (the Offloader's cpu_allocator) following its peak from the start:
   what the allocator alone does to plain training.
   Configurations are interleaved round by round; the load average is recorded with each run,
   and per step the training thread's CPU time (main_cpu_s), its time runnable but off a CPU
   (main_runq_s), its system time and minor page faults (main_sys_s, main_minflt) and the VM's
   steal time (steal_s: what the host took from this VM's vCPUs).
   --variant NAME=JSON adds a teraio configuration with extra Offloader arguments as mode NAME
   (memory_budget, ssd_dirs, host_memory, or fields of teraio.OffloadOptions; "no_torch_alloc":
   true runs as a plain pip install does, without teraio._torch_alloc).
   teraio's configurations also report the simulator's prediction of their step
   (Offloader.predicted_step_s: the profiled trace and the plan on the hardware the Offloader
   planned for) and its error against the measured median step (prediction_error).
   Every configuration runs with MALLOC_MMAP_THRESHOLD_=65536 (freed tensor memory goes back to
   the OS, so that RSS measures tensors); a mode name with "@glibc" appended (plain@glibc,
   teraio@glibc) runs that configuration with glibc's malloc defaults instead, what a user gets
   without setting anything (teraio then sets the threshold itself: cpu_mmap_threshold);
   "@thp" sets THP_MEM_ALLOC_ENABLE=1 for that configuration (PyTorch advises huge pages for its
   CPU tensors of >= 2 MiB), "@glibc+thp" both.

    python bench/torch_bench.py --preset small --ssd-dir /tmp/tio-bench --reps 7
    python bench/torch_bench.py --preset medium --config '{"dim": 768}' --seq 512 --threads 1
    python bench/torch_bench.py --preset medium --seq 512 --threads 1 --skip-micro \
        --modes plain,teraio,teraio-c4 --variant 'teraio-c4={"io_chunk": "4MiB"}'
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))


def no_move_runtime(prog):
    """An executor over a recorded step with a plan that moves nothing: it runs, moves nothing."""
    import teraio

    trace = teraio._core.Trace.build(prog.tensors, prog.kernels, {"source": "bench"})
    plan = teraio._core.Plan.build(trace, "none", [])
    eng = teraio._core.Engine([], 1 << 20)
    return teraio._core.Runtime(trace, plan, eng)


@functools.lru_cache(maxsize=None)
def bare_mode_class():
    """A TorchDispatchMode that only calls the operator: the floor of any Python dispatch mode,
    which teraio (a dispatch mode) cannot go below."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Bare(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    return Bare


def micro_overhead(reps, n_ops=2000):
    """Per-operator cost of the hook on a chain of cheap operators (x = x + 1 on 16 floats)."""
    import torch
    import teraio
    from teraio.torch._mode import StepDriver, StepMode

    Bare = bare_mode_class()

    x0 = torch.zeros(16)

    def chain():
        x = x0
        for _ in range(n_ops):
            x = torch.add(x, 1)
        return x

    d = StepDriver([], record=True, fast=False)
    with StepMode(d):
        chain()
    d.end()
    prog = d.prog
    rt = no_move_runtime(prog)

    def bare():
        with Bare():
            chain()

    def record(fast):
        d = StepDriver([], record=True, fast=fast)
        with StepMode(d):
            chain()
        d.end()

    def execute(fast):
        d = StepDriver([], record=False, program=prog, runtime=rt, fast=fast)
        with StepMode(d):
            chain()
        d.end()
        assert d.diverged is None, d.diverged

    def executor_only():
        rt.begin()
        for k in range(n_ops):
            rt.before(k)
            rt.ready(k)
            rt.after(k)
        rt.end()

    runs = {"plain": chain, "bare_mode": bare,
            "record_c": lambda: record(True), "execute_c": lambda: execute(True),
            "record_py": lambda: record(False), "execute_py": lambda: execute(False),
            "executor_calls_only": executor_only}
    has_c = hasattr(teraio._core, "OpFast")
    t = {k: [] for k in runs if has_c or not k.endswith("_c")}
    cpu = {k: [] for k in t}  # the thread's CPU time: steadier than wall time on a shared machine
    for _ in range(reps):
        for k in t:
            t0, c0 = time.perf_counter(), time.thread_time()
            runs[k]()
            cpu[k].append((time.thread_time() - c0) / n_ops * 1e6)
            t[k].append((time.perf_counter() - t0) / n_ops * 1e6)
    med = {k: statistics.median(v) for k, v in t.items()}
    cmed = {k: statistics.median(v) for k, v in cpu.items()}
    return {"micro_us_per_op_median": med, "micro_us_per_op_min": {k: min(v) for k, v in t.items()},
            "overhead_vs_plain_median": {k: med[k] - med["plain"] for k in med if k != "plain"},
            "micro_cpu_us_per_op_median": cmed,
            "cpu_overhead_vs_bare_mode_median": {k: cmed[k] - cmed["bare_mode"] for k in cmed
                                                 if k not in ("plain", "bare_mode",
                                                              "executor_calls_only")},
            "load_avg": os.getloadavg()}


def model_config(preset, overrides):
    from llama_tiny import LlamaConfig
    from train_llama_tiny import PRESETS

    return LlamaConfig(**dict(PRESETS[preset], **(overrides or {})))


def hook_overhead(preset, reps, batch, seq, overrides=None):
    import torch

    import teraio
    from llama_tiny import LlamaTiny, make_batch
    from teraio.torch._mode import StepDriver, StepMode, collect_globals

    cfg = model_config(preset, overrides)
    model = LlamaTiny(cfg)
    opt = torch.optim.AdamW(model.parameters(), foreach=False)

    def step(i):
        loss = model.loss(make_batch(cfg, batch, seq, i))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step(0)
    # a plan with no moves, from a recorded step: the executor runs but moves nothing
    d = StepDriver(collect_globals(model, opt), record=True)
    with StepMode(d):
        step(1)
    d.end()
    prog = d.prog
    rt = no_move_runtime(prog)
    Bare = bare_mode_class()

    def under(mode_fn):
        def run(i):
            d = mode_fn()
            if d is None:
                with Bare():
                    step(i)
                return
            with StepMode(d):
                step(i)
            d.end()
            assert d.diverged is None, d.diverged
        return run

    g = lambda: collect_globals(model, opt)  # noqa: E731
    runs = {"plain": step, "bare_mode": under(lambda: None),
            "record_c": under(lambda: StepDriver(g(), record=True)),
            "execute_c": under(lambda: StepDriver(g(), record=False, program=prog, runtime=rt)),
            "record_py": under(lambda: StepDriver(g(), record=True, fast=False)),
            "execute_py": under(lambda: StepDriver(g(), record=False, program=prog, runtime=rt,
                                                   fast=False))}
    wall = {k: [] for k in runs}
    cpu = {k: [] for k in runs}
    for i in range(reps):
        for k, f in runs.items():
            t0, c0 = time.perf_counter(), time.process_time()
            f(2 + i)
            wall[k].append(time.perf_counter() - t0)
            cpu[k].append(time.process_time() - c0)
    n = len(prog.kernels)
    mw = {k: statistics.median(v) for k, v in wall.items()}
    mc = {k: statistics.median(v) for k, v in cpu.items()}
    return {
        "preset": preset, "config": overrides, "operators": n, "step_s_median": mw,
        "step_cpu_s_median": mc,
        "cpu_us_per_op_over_plain": {k: (mc[k] - mc["plain"]) / n * 1e6 for k in mc},
        "cpu_us_per_op_over_plain_min": {k: (min(cpu[k]) - min(cpu["plain"])) / n * 1e6
                                         for k in cpu},
        "wall_us_per_op_over_plain": {k: (mw[k] - mw["plain"]) / n * 1e6 for k in mw},
        "load_avg": os.getloadavg(),
    }


def _vm_hwm_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


BUILTIN_MODES = ("plain", "teraio", "teraio-py", "save_on_cpu", "checkpoint", "baremode",
                 "blockcache")


def _runq_s():
    """Time the calling thread spent runnable but waiting for a CPU (schedstat), in seconds."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def _thread_rusage():
    """(system CPU seconds, minor page faults) of the calling thread so far."""
    import resource

    r = resource.getrusage(resource.RUSAGE_THREAD)
    return r.ru_stime, r.ru_minflt


def _steal_s():
    """CPU time the hypervisor took from this VM's CPUs (all of them; /proc/stat "steal")."""
    try:
        with open("/proc/stat") as f:
            return int(f.readline().split()[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def worker(cfg):
    import contextlib

    import torch

    from llama_tiny import LlamaTiny, make_batch

    if cfg.get("threads"):
        torch.set_num_threads(cfg["threads"])
    c = model_config(cfg["preset"], cfg.get("config"))
    if cfg.get("hf"):  # Hugging Face's Llama of the preset's shape, made locally (no download)
        import transformers

        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=c.vocab, hidden_size=c.dim, intermediate_size=c.ffn,
            num_hidden_layers=c.layers, num_attention_heads=c.heads,
            num_key_value_heads=c.kv_heads, max_position_embeddings=max(cfg["seq"], 64)))
        model.loss = lambda tokens: model(input_ids=tokens, labels=tokens).loss
    else:
        model = LlamaTiny(c)
    opt = torch.optim.AdamW(model.parameters(), foreach=False)
    mode = cfg["mode"].partition("@")[0]  # "@glibc": only the environment differs
    os.makedirs(cfg["ssd_dir"], exist_ok=True)
    off = None
    variant = (cfg.get("variants") or {}).get(mode)
    if mode in ("teraio", "teraio-py") or variant is not None:
        if mode == "teraio-py":  # the Python per-operator path (the reference), for comparison
            os.environ["TERAIO_TORCH_DISPATCH"] = "python"
        import teraio

        # the Offloader as the quickstart makes it (cpu_allocator: the process-wide opt-in)
        kw = dict(memory_budget=0.5, ssd_dirs=[cfg["ssd_dir"]], min_tensor_bytes="256KiB",
                  cpu_allocator=True)
        kw.update(cfg.get("offloader_kw") or {})
        kw.update(variant or {})
        kw.pop("tioalloc", None)
        if kw.pop("no_torch_alloc", False):  # bench-only: as a plain pip install (no C++ part)
            from teraio.torch import _cpu_memory

            _cpu_memory._torch_alloc = lambda: None
            _cpu_memory._torch_alloc_missing = lambda: True
        bc = {k[3:]: bool(kw.pop(k)) for k in ("bc_resize_kept",) if k in kw}
        if bc:  # bench-only: settings of the process's block cache, made before the Offloader's
            import teraio._core as core

            core.block_cache_enable(**bc)
        top = {k: kw.pop(k) for k in ("memory_budget", "ssd_dirs", "host_memory") if k in kw}
        off = teraio.Offloader(model, opt, **top, options=teraio.OffloadOptions(**kw))
    if mode == "blockcache":  # no offloading; PyTorch's CPU tensors from teraio's block cache
        import teraio._core as core
        from teraio import _torch_alloc

        core.block_cache_enable(cache_bytes=0, follow_peak=True)
        _torch_alloc.install(1 << 20)
    if mode == "checkpoint":
        from torch.utils.checkpoint import checkpoint

        for blk in model.layers:
            fwd = blk.forward
            blk.forward = (lambda f: lambda x, cos, sin: checkpoint(f, x, cos, sin,
                                                                    use_reentrant=False))(fwd)
    times, cpu, tcpu, runq, steal, sys_s, faults = [], [], [], [], [], [], []
    warm = 3  # teraio: warm-up, profiling, first offloaded step; the same count for all
    for i in range(cfg["steps"]):
        if i == warm and os.environ.get("TIO_BENCH_PERF_CTL"):  # perf record --control fifo:
            with open(os.environ["TIO_BENCH_PERF_CTL"], "w") as f:  # profile the steady steps
                f.write("enable\n")
        if i == warm and os.path.exists("/proc/self/clear_refs"):
            with open("/proc/self/clear_refs", "w") as f:  # reset VmHWM: steady-state peak
                f.write("5")
        tokens = make_batch(c, cfg["batch"], cfg["seq"], i)
        if off is not None:
            ctx = off.step()
        elif mode == "save_on_cpu":
            ctx = torch.autograd.graph.save_on_cpu(pin_memory=False)
        elif mode == "baremode":  # the dispatch-mode floor, no teraio
            ctx = bare_mode_class()()
        else:
            ctx = contextlib.nullcontext()
        t0, c0, m0, q0 = time.perf_counter(), time.process_time(), time.thread_time(), _runq_s()
        s0, r0 = _steal_s(), _thread_rusage()
        with ctx:
            loss = model.loss(tokens)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            loss.item()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)  # all threads of the process (engine included)
        tcpu.append(time.thread_time() - m0)  # the training thread alone
        runq.append(_runq_s() - q0)  # the training thread waiting for a CPU (preempted)
        steal.append(_steal_s() - s0)  # the VM's CPUs taken by the host (e.g. virtual disk work)
        r1 = _thread_rusage()
        sys_s.append(r1[0] - r0[0])  # the training thread in the kernel (faults, I/O calls)
        faults.append(r1[1] - r0[1])  # its minor page faults (fresh memory touched)
    steady = times[warm:] if len(times) > warm else times
    steady_cpu = cpu[warm:] if len(cpu) > warm else cpu
    out = {"mode": cfg["mode"], "step_s": statistics.median(steady), "steps_s": times,
           "cpu_s": statistics.median(steady_cpu), "steps_cpu_s": cpu,
           "main_cpu_s": statistics.median(tcpu[warm:] or tcpu), "steps_main_cpu_s": tcpu,
           "main_runq_s": statistics.median(runq[warm:] or runq),
           "steal_s": statistics.median(steal[warm:] or steal), "steps_steal_s": steal,
           "main_sys_s": statistics.median(sys_s[warm:] or sys_s),
           "main_minflt": statistics.median(faults[warm:] or faults),
           "tokens_per_s": cfg["batch"] * cfg["seq"] / statistics.median(steady),
           "steady_peak_rss_mib": _vm_hwm_mib(), "load_avg_end": os.getloadavg()}
    if off is not None:
        r = off.report()
        out.update({k: r[k] for k in ("peak_managed_bytes", "unconstrained_peak_bytes",
                                      "memory_budget", "stall_s", "bytes_offloaded",
                                      "steps_offloaded", "steps_diverged")})
        out.update({k: r[k] for k in ("ssd_read_Bps", "ssd_write_Bps") if k in r})
        out["cpu_mmap_threshold"] = r.get("cpu_mmap_threshold")
        out["cpu_allocator"] = r.get("cpu_allocator") is not None
        out["io_crc_errors"] = r.get("io_crc_errors")
        # the simulator's step time for the profiled trace and the plan (Offloader's hardware)
        pred = r.get("predicted_step_s")
        if pred:
            out["predicted_step_s"] = pred
            out["prediction_error"] = pred / out["step_s"] - 1
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="small")
    ap.add_argument("--config", default=None,
                    help="JSON overrides of the preset's LlamaConfig fields, e.g. '{\"dim\": 768}'")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: default)")
    ap.add_argument("--ssd-dir", default="/tmp/tio-bench")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--modes", default="plain,teraio,save_on_cpu,checkpoint")
    ap.add_argument("--skip-micro", action="store_true")
    ap.add_argument("--micro-only", action="store_true",
                    help="only the chain of cheap operators (hook overhead per operator)")
    ap.add_argument("--anchor", default="plain", metavar="MODE",
                    help="the configuration the vs_plain ratios divide by (default: plain; e.g. "
                         "plain@glibc for PyTorch as users run it)")
    ap.add_argument("--thp-alloc", action="store_true",
                    help="run every configuration with THP_MEM_ALLOC_ENABLE=1 (PyTorch then page-aligns "
                         "CPU tensors of >= 2 MiB, which O_DIRECT moves without a staging "
                         "copy, and advises huge pages for them)")
    ap.add_argument("--offloader-kw", default=None,
                    help="JSON of extra teraio.Offloader arguments, e.g. '{\"io_chunk\": \"4MiB\"}'")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=JSON",
                    help="a teraio configuration with extra Offloader arguments, run as mode NAME "
                         "interleaved with the others, e.g. --variant 'teraio-park0={\"backend_"
                         "options\": \"park=0\"}' --modes plain,teraio,teraio-park0")
    ap.add_argument("--hf", action="store_true",
                    help="train Hugging Face's LlamaForCausalLM (transformers) of the preset's "
                         "shape instead of the example model (--skip-micro)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(json.loads(a.worker))
        return
    overrides = json.loads(a.config) if a.config else None
    if a.hf and not a.skip_micro:
        ap.error("--hf: the micro benchmarks use the example model; add --skip-micro")
    if not a.skip_micro:
        if a.threads:
            import torch

            torch.set_num_threads(a.threads)
        print(json.dumps(micro_overhead(max(a.reps, 7))), flush=True)
        if a.micro_only:
            return
        print(json.dumps(hook_overhead(a.preset, a.reps, a.batch, a.seq, overrides)), flush=True)
    os.makedirs(a.ssd_dir, exist_ok=True)
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    if a.thp_alloc:  # PyTorch's CPU allocator: page-aligned, huge-page-advised tensors (all modes)
        env["THP_MEM_ALLOC_ENABLE"] = "1"
    modes = a.modes.split(",")
    variants = {}
    for v in a.variant:
        name, sep, js = v.partition("=")
        if not sep or not name or name in BUILTIN_MODES:
            ap.error(f"--variant {v!r}: expected NAME=JSON with a new mode name")
        try:
            variants[name] = json.loads(js)
        except ValueError as e:
            ap.error(f"--variant {name}: bad JSON: {e}")
        if not isinstance(variants[name], dict):
            ap.error(f"--variant {name}: the JSON must be an object of Offloader arguments")
    for m in modes:
        base, at, how = m.partition("@")
        bad = [x for x in how.split("+") if x not in ("glibc", "thp")] if at else []
        if bad:
            ap.error(f"--modes: {m!r}: modifiers are @glibc (glibc's malloc defaults), @thp "
                     "(THP_MEM_ALLOC_ENABLE=1) or both (@glibc+thp)")
        if base not in BUILTIN_MODES and base not in variants:
            ap.error(f"--modes: unknown mode {base!r} (give it with --variant {base}=JSON)")
    # configurations interleaved round by round, so that load drift on a shared machine hits all
    results = {}
    for rnd in range(a.rounds):
        for mode in modes:
            cfg = dict(preset=a.preset, config=overrides, mode=mode, steps=a.steps,
                       batch=a.batch, seq=a.seq, ssd_dir=a.ssd_dir, threads=a.threads,
                       offloader_kw=json.loads(a.offloader_kw) if a.offloader_kw else None,
                       variants=variants, hf=a.hf)
            load0 = os.getloadavg()
            run_env = dict(env)
            mods = mode.partition("@")[2].split("+")
            if "glibc" in mods:
                run_env.pop("MALLOC_MMAP_THRESHOLD_", None)
            if "thp" in mods:
                run_env["THP_MEM_ALLOC_ENABLE"] = "1"
            r = subprocess.run([sys.executable, __file__, "--worker", json.dumps(cfg)],
                               capture_output=True, text=True, env=run_env)
            if r.returncode != 0:
                print(json.dumps({"mode": mode, "round": rnd, "error": r.stderr[-800:]}),
                      flush=True)
                continue
            res = json.loads(r.stdout.strip().splitlines()[-1])
            res.update(round=rnd, load_avg_start=load0)
            print(json.dumps(res), flush=True)
            results.setdefault(mode, []).append(res)
    anchor = a.anchor if a.anchor in results else "plain"
    plain = [x["step_s"] for x in results.get(anchor, [])]
    base_med = statistics.median(plain) if plain else 0
    base_min = min(plain) if plain else 0
    for mode, runs in results.items():
        steps = [x["step_s"] for x in runs]
        med, lo = statistics.median(steps), min(steps)
        cpus = [x["cpu_s"] for x in runs]
        print(json.dumps({
            "summary": mode, "rounds": len(runs), "step_s_rounds": steps, "step_s_median": med,
            "cpu_s_rounds": cpus, "cpu_s_median": statistics.median(cpus),
            "main_cpu_s_median": statistics.median(x["main_cpu_s"] for x in runs),
            "main_runq_s_median": statistics.median(x.get("main_runq_s", 0) for x in runs),
            "steal_s_median": statistics.median(x.get("steal_s", 0) for x in runs),
            "main_sys_s_median": statistics.median(x.get("main_sys_s", 0) for x in runs),
            "main_minflt_median": statistics.median(x.get("main_minflt", 0) for x in runs),
            "thp_alloc": a.thp_alloc,
            "anchor": anchor,
            "cpu_vs_plain_median": (statistics.median(x["cpu_s"] for x in results[anchor]) /
                                    statistics.median(cpus)) if anchor in results else 0,
            "step_s_min": lo, "vs_plain_median": base_med / med if med else 0,
            "vs_plain_min": base_min / lo if lo else 0,
            "tokens_per_s_median": a.batch * a.seq / med if med else 0,
            "steady_peak_rss_mib": [x["steady_peak_rss_mib"] for x in runs],
            **({"predicted_step_s_median": statistics.median(
                    x["predicted_step_s"] for x in runs),
                "prediction_error_median": statistics.median(x["prediction_error"] for x in runs),
                "prediction_error_rounds": [x["prediction_error"] for x in runs]}
               if all("predicted_step_s" in x for x in runs) else {}),
            **{k: runs[-1][k] for k in ("peak_managed_bytes", "memory_budget",
                                        "unconstrained_peak_bytes") if k in runs[-1]}}),
            flush=True)


if __name__ == "__main__":
    main()
