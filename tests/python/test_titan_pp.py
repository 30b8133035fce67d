"""TorchTitan (0.3) pipeline parallelism under teraio on CPU: 2 stages over gloo, 1F1B.

Each rank builds what TorchTitan's Trainer builds with --parallelism.pipeline_parallel_degree 2
(the Trainer itself needs an accelerator, see test_titan.py): the Llama 3 debug model on the
meta device, split by TorchTitan's own pipelining function (the model spec's pipelining_fn,
pipeline_llm: its stage split, its parallelize_fn on each stage, its PipelineStage and 1F1B
schedule over the "pp" mesh), initialized, with TorchTitan's chunked loss on the last stage,
its OptimizersContainer and LR scheduler; then OffloadTrainer.train_step runs TorchTitan's
train_step (its pipeline forward/backward over 4 micro-batches, gradient clipping across the
pp mesh, optimizer, scheduler) with one Offloader per stage. Bitwise against the same run
without teraio (--teraio.no-enable), each run in its own pair of processes; bytes offloaded
and the budget held on each rank."""
import hashlib
import json
import os

import pytest
import test_titan  # the torchtitan gate (TIO_TITAN_REQUIRED) and its stand-ins
from _dist import spawn_ranks, torch

from teraio import report, titan

STEPS = 5
SEQ, BATCH, MICRO = 64, 4, 1  # 4 micro-batches of 1 sequence per step


def _config(out_dir, use_teraio):
    from torchtitan.config import ConfigManager

    args = ["--module", "teraio.titan", "--config", "llama3_debugmodel",
            "--training.steps", str(STEPS), "--training.seq_len", str(SEQ),
            "--training.local_batch_size", str(BATCH),
            "--training.mixed_precision_param", "float32",
            "--parallelism.pipeline_parallel_degree", "2",
            "--parallelism.pipeline_parallel_schedule", "1F1B",
            "--parallelism.pipeline_parallel_microbatch_size", str(MICRO),
            "--dump_folder", out_dir]
    if use_teraio:
        args += ["--teraio.memory_budget", "0.5", "--teraio.min_tensor_bytes", "64KiB",
                 "--teraio.ssd_dirs", os.path.join(out_dir, "ssd{rank}")]
    else:
        args += ["--teraio.no-enable"]
    cfg = ConfigManager().parse_args(args)
    cfg.parallelism.spmd_backend = "partial_dtensor"  # as in test_titan.py
    return cfg


def _trainer(rank, world, cfg):
    """An OffloadTrainer with the components TorchTitan's Trainer.__init__ builds for one
    pipeline rank (its steps, the pipeline branch), on CPU."""
    from torchtitan.distributed import ParallelDims
    from torchtitan.distributed import utils as dist_utils

    tr = titan.OffloadTrainer.__new__(titan.OffloadTrainer)
    tr.offloader, tr.step_s, tr.logged = None, [], []
    tr.config = cfg
    pd = tr.parallel_dims = ParallelDims.from_config(cfg.parallelism, world)
    assert pd.pp_enabled and pd.pp == 2
    spec = cfg.model_spec
    mcfg = spec.model
    mcfg.update_from_config(config=cfg)
    tr.model_config = mcfg
    with torch.device("meta"):
        model = mcfg.build()
    tr.loss_fn = cfg.loss.build(compile_config=cfg.compile)
    tr.pp_schedule, tr.model_parts, tr.pp_has_first_stage, tr.pp_has_last_stage = \
        spec.pipelining_fn(model, parallel_dims=pd, training=cfg.training,
                           parallelism=cfg.parallelism, compile_config=cfg.compile,
                           ac_config=cfg.activation_checkpoint, dump_folder=cfg.dump_folder,
                           device=torch.device("cpu"), model_config=mcfg,
                           parallelize_fn=spec.parallelize_fn, loss_fn=tr.loss_fn)
    del model
    torch.manual_seed(rank)  # TorchTitan seeds the pp ranks apart
    for m in tr.model_parts:
        m.to_empty(device="cpu")
        with torch.no_grad():
            m.init_weights(buffer_device=None)
        m.train()
    if tr.pp_has_last_stage:
        tr.loss_fn.set_lm_head(tr.model_parts[-1].lm_head)
        tr.model_parts[-1]._skip_lm_head = True
    tr.optimizers = cfg.optimizer.build(model_parts=tr.model_parts)
    tr.lr_schedulers = cfg.lr_scheduler.build(optimizers=tr.optimizers,
                                              training_steps=cfg.training.steps)
    tr.metrics_processor = test_titan._Metrics()
    tr.record_metrics()
    tr.checkpointer = test_titan._Checkpointer()
    tr.device = torch.device("cpu")
    tr.gradient_accumulation_steps = 1
    tr.num_pipeline_parallel_microbatches = BATCH // MICRO
    tr.train_context = dist_utils.get_spmd_context(parallel_dims=pd)
    tr.fwd_bwd_fn = tr._forward_backward_body
    tr.step = tr.ntokens_seen = 0
    tok = cfg.tokenizer.build(tokenizer_path=cfg.hf_assets_path)
    # with pipeline parallelism TorchTitan's loader yields one micro-batch at a time
    tr.dataloader = cfg.dataloader.build(dp_world_size=1, dp_rank=0, tokenizer=tok,
                                         seq_len=SEQ, local_batch_size=MICRO)
    tr.adapt_pp_schedule()
    tr.make_offloader()
    return tr


def _digest(tr):
    h = hashlib.sha256()
    for n, p in tr.model_parts[0].named_parameters():
        t = p.detach()
        t = t.to_local() if hasattr(t, "to_local") else t  # the stage's (1-way) FSDP DTensors
        h.update(n.encode())
        h.update(t.contiguous().numpy().tobytes())
    for st in tr.optimizers.optimizers[0].state.values():
        for k in sorted(st):
            t = st[k].detach()
            t = t.to_local() if hasattr(t, "to_local") else t
            h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()


def _body(rank, world, init, out_dir, use_teraio):
    from torchtitan.distributed import parallel_dims

    # ParallelDims builds its meshes on TorchTitan's device type (CUDA): here CPU, over gloo
    parallel_dims.device_type = "cpu"
    tr = _trainer(rank, world, _config(out_dir, use_teraio))
    data = tr.batch_generator(tr.dataloader)
    while tr.should_continue_training():
        tr.step += 1
        tr.train_step(data)
    off = tr.offloader
    rep = off.report() if off else None
    res = dict(logged=tr.metrics_processor.logged, digest=_digest(tr),
               first=tr.pp_has_first_stage, last=tr.pp_has_last_stage,
               wrapped=type(tr.pp_schedule).__name__,
               schedule=type(tr.pp_schedule.schedule).__name__,
               modules=sorted(n for n, m in tr.model_parts[0].named_children()
                              if m is not None and (not hasattr(m, "__len__") or len(m))),
               report=None if rep is None else {
                   k: rep[k] for k in ("bytes_offloaded", "peak_managed_bytes",
                                       "memory_budget", "unconstrained_peak_bytes",
                                       "steps_offloaded", "steps_diverged")})
    if rep is not None:
        res["report"]["bytes_written"] = rep["engine"]["bytes_written"]
    tr.close()
    return res


def _plain(rank, world, init, out_dir):
    return _body(rank, world, init, out_dir, False)


def _offloaded(rank, world, init, out_dir):
    return _body(rank, world, init, out_dir, True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("titan_pp")
    # each run in its own processes and folder (spawn_ranks' rendezvous file is per folder)
    (d / "plain").mkdir()
    (d / "teraio").mkdir()
    return d, spawn_ranks(_plain, d / "plain"), spawn_ranks(_offloaded, d / "teraio")


def test_titan_pipeline_bitwise_with_teraio(runs):
    d, plain, off = runs
    for r in (0, 1):
        print(f"rank {r}: plain {plain[r]['logged']}\n        teraio {off[r]['logged']}\n"
              f"        {off[r]['report']}")
    # TorchTitan's split: embeddings and the first layers on rank 0, the rest, the final norm
    # and the output projection on rank 1; its 1F1B schedule, fed its micro-batches
    assert [p["first"] for p in plain] == [True, False]
    assert [p["last"] for p in plain] == [False, True]
    assert "tok_embeddings" in plain[0]["modules"] and "lm_head" not in plain[0]["modules"]
    assert "lm_head" in plain[1]["modules"] and "tok_embeddings" not in plain[1]["modules"]
    assert {p["schedule"] for p in plain + off} == {"Schedule1F1B"}
    for r in (0, 1):
        assert len(plain[r]["logged"]) == STEPS
        # the last stage's loss (rank 0 logs TorchTitan's -1), the gradient norm clipped over
        # both stages, the learning rates, then the stage's parameters and AdamW states
        assert off[r]["logged"] == plain[r]["logged"], r
        assert off[r]["digest"] == plain[r]["digest"], r
        assert plain[r]["report"] is None
        rep = off[r]["report"]
        assert rep["steps_offloaded"] == STEPS - 2 and rep["steps_diverged"] == 0, rep
        assert rep["bytes_offloaded"] > 0 and rep["bytes_written"] > 0, rep
        assert 0 < rep["peak_managed_bytes"] <= rep["memory_budget"], rep
        assert rep["memory_budget"] < rep["unconstrained_peak_bytes"], rep
    assert all(s[1] == -1.0 for s in plain[0]["logged"])
    assert all(s[1] > 0 for s in plain[1]["logged"])
    assert plain[0]["logged"][-1][3] == plain[1]["logged"][-1][3]  # one norm for the pipeline


def test_titan_pipeline_rank_reports(runs):
    d, _, off = runs
    paths = [str(d / "teraio" / "teraio" / f"rank{r}.json") for r in (0, 1)]
    for r, p in enumerate(paths):
        rep = json.loads(open(p).read())
        assert rep["rank"] == r and len(rep["titan_steps"]) == STEPS
        assert rep["bytes_offloaded"] == off[r]["report"]["bytes_offloaded"]
        plain = json.loads((d / "plain" / "teraio" / f"rank{r}.json").read_text())
        assert rep["titan_steps"] == plain["titan_steps"]  # what the GPU recipe compares
    agg = report.aggregate(paths)
    assert agg["total"]["budget_held"] and agg["total"]["bytes_offloaded"] > 0, agg["total"]


def test_microbatch_schedule_refuses_several_stages_per_rank():
    with pytest.raises(ValueError, match=r"several stages per rank.*\(1F1B, GPipe\)"):
        titan._MicrobatchSchedule(object())
