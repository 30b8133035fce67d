"""TorchTitan (0.3) under teraio through TorchTitan's extension points (teraio.titan).

TorchTitan's Trainer needs an accelerator: its __init__ sets the CUDA device and measures device
memory, so on CPU it cannot be built (the recipe on a GPU: scripts/gpu_validate.sh, phase
`titan`). Here everything else is TorchTitan's own code on CPU: teraio.titan's config registry
parsed by TorchTitan's ConfigManager (`--module teraio.titan --config llama3_debugmodel
--teraio.*`), and TorchTitan's Llama 3 debug model, its chunked cross-entropy loss, its
OptimizersContainer (AdamW), LR scheduler and train_step (gradient clipping included), with
TorchTitan's --compile (each block and the loss compiled), driven through
OffloadTrainer.train_step: bitwise against the same compiled steps through TorchTitan's own
Trainer.train_step, with bytes offloaded in the steady steps, the budget held and the rank
report written."""
import hashlib
import json
import math
import os
import time

import pytest

torch = pytest.importorskip("torch")
# TorchTitan is not installed into .venv (scripts/setup.sh): it imports triton, and with triton
# installed the Offloader's torch._dynamo checks import it too (+200 MB RSS in every training
# process), which test_torch_memory.py's RSS-drop goals do not allow for. scripts/test.sh runs
# this file in .venv-titan (scripts/setup_titan.sh) with TIO_TITAN_REQUIRED=1: there a missing
# torchtitan or teraio runtime fails the run instead of skipping it.
REQUIRED = os.environ.get("TIO_TITAN_REQUIRED") == "1"
if REQUIRED:
    import torchtitan.trainer  # noqa: E402,F401  (an ImportError here fails the run)
else:
    pytest.importorskip("torchtitan.trainer", reason="torchtitan 0.3.0 is not installed here "
                        "(bash scripts/setup_titan.sh makes .venv-titan with it)")

import teraio  # noqa: E402
from teraio import report, titan  # noqa: E402

if REQUIRED:
    assert hasattr(teraio._core, "Runtime"), "TIO_TITAN_REQUIRED=1: teraio has no runtime"

STEPS = 5
SEQ, BATCH = 64, 2


class _Metrics:
    """Stands in for TorchTitan's MetricsProcessor (which measures CUDA memory): records what
    train_step logs each step."""

    def __init__(self):
        self.logged = []
        self.ntokens_since_last_log = 0
        self.data_loading_times = []

    def should_log(self, step):
        return True

    def log(self, step, global_avg_loss, global_max_loss, grad_norm, extra_metrics=None):
        lrs = sorted((k, v) for k, v in (extra_metrics or {}).items() if k.startswith("lr"))
        self.logged.append((step, global_avg_loss, global_max_loss, grad_norm, lrs))

    def close(self):
        pass


class _Checkpointer:
    enable = False

    def maybe_wait_for_staging(self):
        pass

    def close(self):
        pass


def _config(tmp_path, use_teraio, args=()):
    from torchtitan.config import ConfigManager

    cfg = ConfigManager().parse_args(["--module", "teraio.titan", "--config",
                                      "llama3_debugmodel", "--training.steps", str(STEPS),
                                      "--training.seq_len", str(SEQ),
                                      "--training.local_batch_size", str(BATCH),
                                      "--dump_folder",
                                      str(tmp_path / ("teraio" if use_teraio else "plain")),
                                      *args])
    cfg.teraio.enable = use_teraio
    # the "spmd_types" backend builds a CUDA device mesh: on CPU, TorchTitan's plain one
    cfg.parallelism.spmd_backend = "partial_dtensor"
    return cfg


def _trainer(cfg):
    """An OffloadTrainer with the components TorchTitan's Trainer.__init__ builds for one rank
    without parallelism (its steps: model, loss, optimizers, LR schedulers, data), on CPU."""
    from torchtitan.components.loss import ChunkedLossWrapper
    from torchtitan.distributed import ParallelDims
    from torchtitan.distributed import utils as dist_utils

    tr = titan.OffloadTrainer.__new__(titan.OffloadTrainer)
    tr.offloader, tr.step_s = None, []
    tr.config = cfg
    tr.parallel_dims = ParallelDims.from_config(cfg.parallelism, 1)
    mcfg = cfg.model_spec.model
    mcfg.update_from_config(config=cfg)
    tr.model_config = mcfg
    with torch.device("meta"):
        model = mcfg.build()
    model.to_empty(device="cpu")
    torch.manual_seed(0)
    with torch.no_grad():
        model.init_weights(buffer_device=None)
    model.train()
    cc = cfg.compile
    if cc.enable and "model" in cc.components:  # as TorchTitan's parallelize_llama does
        from torchtitan.distributed.compile import apply_compile

        apply_compile(model, compile_config=cc, parallel_dims=tr.parallel_dims)
    tr.model_parts = [model]
    tr.loss_fn = cfg.loss.build(compile_config=cfg.compile)
    assert isinstance(tr.loss_fn, ChunkedLossWrapper)
    tr.loss_fn.set_lm_head(model.lm_head)
    model._skip_lm_head = True
    tr.optimizers = cfg.optimizer.build(model_parts=tr.model_parts)
    tr.lr_schedulers = cfg.lr_scheduler.build(optimizers=tr.optimizers,
                                              training_steps=cfg.training.steps)
    tr.metrics_processor = _Metrics()
    tr.logged = []
    tr.record_metrics()
    tr.checkpointer = _Checkpointer()
    tr.device = torch.device("cpu")
    tr.gradient_accumulation_steps = 1
    tr.num_pipeline_parallel_microbatches = 1
    tr.train_context = dist_utils.get_spmd_context(parallel_dims=tr.parallel_dims)
    tr.fwd_bwd_fn = tr._forward_backward_body
    tr.step = tr.ntokens_seen = 0
    tok = cfg.tokenizer.build(tokenizer_path=cfg.hf_assets_path)
    tr.dataloader = cfg.dataloader.build(dp_world_size=1, dp_rank=0, tokenizer=tok,
                                         seq_len=cfg.training.seq_len,
                                         local_batch_size=cfg.training.local_batch_size)
    tr.make_offloader()
    return tr


def _train(tmp_path, use_teraio, args=()):
    """TorchTitan's train loop (Trainer.train without its CUDA-only process-group timeouts)."""
    t0 = time.perf_counter()
    tr = _trainer(_config(tmp_path, use_teraio, args))
    t1 = time.perf_counter()
    data = tr.batch_generator(tr.dataloader)
    while tr.should_continue_training():
        tr.step += 1
        tr.train_step(data)
    print(f"\n{'teraio' if use_teraio else 'plain'}: built in {t1 - t0:.1f} s, "
          f"{STEPS} steps in {time.perf_counter() - t1:.1f} s")
    h = hashlib.sha256()
    for n, p in tr.model_parts[0].named_parameters():
        h.update(n.encode())
        h.update(p.detach().contiguous().numpy().tobytes())
    for st in tr.optimizers.optimizers[0].state.values():
        for k in sorted(st):
            h.update(st[k].detach().contiguous().numpy().tobytes())
    off = tr.offloader
    rep = off.report() if off else None
    tr.close()
    return dict(logged=tr.metrics_processor.logged, digest=h.hexdigest(), report=rep,
                step_s=tr.step_s, trainer=tr)


def _pair(tmp_path_factory, name, args=()):
    """The same training without and with teraio (budget 0.5, SSD tier), TorchTitan's
    arguments `args` added to both."""
    import torch.distributed as dist
    from torchtitan.distributed import parallel_dims

    d = tmp_path_factory.mktemp(name)
    (d / "ssd0").mkdir()
    # train_step asks ParallelDims for the (size 1) pipeline mesh, which it builds on
    # TorchTitan's device type, CUDA: here a CPU mesh over a one-rank gloo group
    dist.init_process_group("gloo", init_method=f"file://{d / 'rendezvous'}", rank=0,
                            world_size=1)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(parallel_dims, "device_type", "cpu")
            plain = _train(d, False, args)
            off = _train(d, True, ["--teraio.memory_budget", "0.5", "--teraio.ssd_dirs",
                                   str(d / "ssd{rank}"), "--teraio.min_tensor_bytes", "64KiB",
                                   *args])
    finally:
        dist.destroy_process_group()
    return d, plain, off


# TorchTitan's --compile, as its parallelize_llama applies it: each transformer block compiled
# on its own (block.compile(fullgraph=True), apply_compile) and the loss function compiled
# (TorchTitan's default --compile.components: model and loss); backend aot_eager (inductor
# compiles C++ on CPU: minutes). Under teraio the blocks and the loss run as regions of the step.
# The eager model through teraio.titan: tests/python/test_titan_pp.py
COMPILE = ["--compile.enable", "--compile.backend", "aot_eager"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    import torch._dynamo

    torch._dynamo.reset()
    return _pair(tmp_path_factory, "titan", COMPILE)


def test_config_registry():
    from torchtitan.config import ConfigManager

    cfg = ConfigManager().parse_args(
        ["--module", "teraio.titan", "--config", "llama3_debugmodel", "--teraio.memory_budget",
         "8GiB", "--teraio.ssd_dirs", "/a/{rank},/b/{local_rank}", "--teraio.host_memory",
         "1GiB", "--parallelism.pipeline_parallel_degree", "2",
         "--parallelism.pipeline_parallel_schedule", "1F1B"])
    assert isinstance(cfg, titan.OffloadTrainer.Config)
    assert type(cfg)._owner is titan.OffloadTrainer  # config.build() makes an OffloadTrainer
    assert cfg.teraio.memory_budget == "8GiB" and cfg.teraio.host_memory == "1GiB"
    assert cfg.teraio.ssd_dirs == ["/a/{rank}", "/b/{local_rank}"]
    assert cfg.parallelism.pipeline_parallel_degree == 2
    assert cfg.training.disable_cuda_graphs and not cfg.checkpoint.enable
    assert isinstance(cfg.dataloader, titan.SyntheticDataLoader.Config)
    assert titan._budget("0.5") == 0.5 and titan._budget("8GiB") == "8GiB"
    assert titan._budget("1000000") == 1000000
    for bad in ("1.5", "0", "-2", "nan"):
        with pytest.raises(ValueError, match="--teraio.memory_budget: .* neither a fraction"):
            titan._budget(bad)
    off = ConfigManager().parse_args(["--module", "teraio.titan", "--config",
                                      "llama3_debugmodel_flex", "--teraio.no-enable"])
    assert off.teraio.enable is False and isinstance(off, titan.OffloadTrainer.Config)


def test_titan_steps_bitwise_with_teraio(runs):
    d, plain, off = runs
    for s in plain["logged"]:
        print("plain ", s)
    for s in off["logged"]:
        print("teraio", s)
    rep = off["report"]
    print({k: v for k, v in rep.items() if k not in ("plan", "engine", "cpu_allocator")})
    assert len(plain["logged"]) == STEPS
    # compiled (Dynamo made graphs), and under teraio each block and the loss is a region
    import torch._dynamo
    from teraio.torch._compile import Region

    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 2
    tr = off["trainer"]
    layers = list(tr.model_parts[0].layers.children())
    assert len(layers) == 6 and all(isinstance(b._compiled_call_impl, Region) for b in layers)
    assert isinstance(tr.loss_fn.loss_fn.fn, Region)
    # losses, max losses, gradient norms and learning rates of every step, then parameters and
    # AdamW states: bit for bit
    assert off["logged"] == plain["logged"]
    assert off["digest"] == plain["digest"]
    assert plain["report"] is None and len(plain["step_s"]) == STEPS
    # 1 warm-up, 1 profiled, the rest offloaded within the budget
    assert rep["steps_offloaded"] == STEPS - 2 and rep["steps_diverged"] == 0, rep
    assert rep["bytes_offloaded"] > 0 and rep["engine"]["bytes_written"] > 0, rep
    assert 0 < rep["peak_managed_bytes"] <= rep["memory_budget"], rep
    assert rep["unplanned_peak_bytes"] <= rep["memory_budget"], rep
    assert rep["memory_budget"] < rep["unconstrained_peak_bytes"], rep


def test_titan_rank_report(runs):
    d, _, off = runs
    path = d / "teraio" / "teraio" / "rank0.json"  # default: <dump_folder>/teraio/rank{rank}
    rep = json.loads(path.read_text())
    assert rep["format"] == "teraio-rank-report" and rep["rank"] == 0
    assert rep["step_s"] == off["step_s"] and len(rep["step_s"]) == STEPS
    assert rep["bytes_offloaded"] == off["report"]["bytes_offloaded"]
    # what TorchTitan logged each step, in both runs' files: what the GPU recipe compares
    plain = json.loads((d / "plain" / "teraio" / "rank0.json").read_text())
    assert "format" not in plain and len(plain["step_s"]) == STEPS
    want = [[s, loss, mx, g] for s, loss, mx, g, _ in off["logged"]]
    assert rep["titan_steps"] == plain["titan_steps"] == want
    agg = report.aggregate([str(path)])
    assert agg["total"]["budget_held"] and agg["total"]["bytes_offloaded"] > 0
    # closed: the Offloader is gone and the parameters are plain tensors again
    assert off["trainer"].offloader is None


def test_refuses_several_model_parts(tmp_path):
    tr = titan.OffloadTrainer.__new__(titan.OffloadTrainer)
    tr.config = _config(tmp_path, True)
    tr.model_parts = [torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)]
    with pytest.raises(ValueError, match=r"2 model parts .*\(1F1B, GPipe\)"):
        tr.make_offloader()


def test_gpu_titan_summary(runs, tmp_path):
    """scripts/gpu_titan_summary.py (the GPU recipe's table) on this file's real reports: the
    teraio run as both of the recipe's teraio runs."""
    import shutil
    import subprocess
    import sys

    d, _, _ = runs
    script = os.path.join(os.path.dirname(__file__), "..", "..", "scripts",
                          "gpu_titan_summary.py")
    for name, src in (("plain", "plain"), ("host", "teraio"), ("ssd", "teraio")):
        (tmp_path / name).mkdir()
        shutil.copy(d / src / "teraio" / "rank0.json", tmp_path / name / "rank0.json")
    p = subprocess.run([sys.executable, script, str(tmp_path)], capture_output=True, text=True)
    print(p.stdout)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith(f"titan plain: {STEPS} steps")
    assert "IDENTICAL" in lines[1] and "IDENTICAL" in lines[2] and lines[3] == "titan: ok"
    # a loss one bit off, and a missing run, fail it
    rep = json.loads((tmp_path / "ssd" / "rank0.json").read_text())
    rep["titan_steps"][-1][1] = math.nextafter(rep["titan_steps"][-1][1], math.inf)
    (tmp_path / "ssd" / "rank0.json").write_text(json.dumps(rep))
    (tmp_path / "host" / "rank0.json").unlink()
    p = subprocess.run([sys.executable, script, str(tmp_path)], capture_output=True, text=True)
    assert p.returncode == 1 and "DIFFERENT" in p.stdout and "titan host: no result" in p.stdout
    assert p.stdout.splitlines()[-1] == "titan: FAILED"
