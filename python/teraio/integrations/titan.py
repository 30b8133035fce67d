"""TorchTitan under a teraio.Offloader, through TorchTitan's own extension points.

TorchTitan (the `torchtitan` package, 0.3) builds its Trainer from a config registry: a module
with functions that return a Trainer.Config, chosen with `--module` and `--config`. This module
is such a registry. Its configs build OffloadTrainer, a Trainer subclass whose train_step runs
under `with offloader.step():`, so one TorchTitan step (its gradient-accumulation micro-batches
or, with pipeline parallelism, its whole schedule step, then gradient clipping, the optimizer
and the LR scheduler) is one step to teraio. No TorchTitan file is changed:

    torchrun --nproc_per_node 1 -m torchtitan.train --module teraio.titan \\
        --config llama3_debugmodel --teraio.memory_budget 0.5 \\
        --teraio.ssd_dirs /mnt/nvme0/tio-{local_rank} --training.steps 20

`--teraio.*` options (TeraioConfig below) are the Offloader's; the rest are TorchTitan's. Each
rank writes its report (teraio.report.write_rank_report) to `--teraio.report` (default
<dump_folder>/teraio/rank{rank}.json); `teraio report <dump_folder>/teraio/rank*.json`
aggregates them. Before a checkpoint save, a validation and the end of training the trainer
calls offloader.restore(), so that TorchTitan reads parameters that are all in memory.

The configs here train on synthetic tokens (SyntheticTokenizer, SyntheticDataLoader): the
TorchTitan wheel ships neither its test tokenizer nor its c4_test data set, and teraio's test
machines have no network. Pass TorchTitan's own `--dataloader`/`--hf_assets_path` options for
real data. Limits: one model part and one optimizer per rank (pipeline schedules with one
stage per rank, e.g. 1F1B and GPipe; not the interleaved ones) and no CUDA graphs (the configs
set training.disable_cuda_graphs). With --compile.enable each transformer block TorchTitan
compiles runs as a region of the step, and so does its compiled loss (loss_regions).
TorchTitan 0.3 runs on an accelerator only: on CPU its Trainer cannot be built, and
teraio's CPU tests drive OffloadTrainer.train_step on TorchTitan's model, loss, optimizer and
LR scheduler directly (tests/python/test_titan.py; with 2 pipeline stages over gloo,
tests/python/test_titan_pp.py); scripts/gpu_validate.sh's `titan` phase runs the recipe above.
With pipeline parallelism on torch 2.13 the trainer wraps its schedule (adapt_pp_schedule).

Needs `torchtitan` (imported here, not by `import teraio`).
"""
from __future__ import annotations

import dataclasses
import inspect
import os
import time
from dataclasses import dataclass, field

import torch
from torchtitan.components.dataloader import BaseDataLoader
from torchtitan.components.tokenizer import BaseTokenizer
from torchtitan.tools.logging import logger
from torchtitan.trainer import Trainer

import teraio
from teraio import _ranks


@dataclass(kw_only=True, slots=True)
class TeraioConfig:
    """The Offloader's options (`--teraio.<name>` on TorchTitan's command line)."""

    enable: bool = True
    """Run each train step under a teraio.Offloader (--teraio.no-enable: TorchTitan's own
    train step, still recording what it logs)."""

    memory_budget: str = "0.5"
    """Tracked tensor bytes to stay under: a size ("8GiB") or a fraction in (0, 1) of the
    unconstrained peak measured in the profiled step."""

    ssd_dirs: list[str] = field(default_factory=list)
    """Directories of the SSD tier, comma separated; "{rank}" and "{local_rank}" are replaced
    per rank. Empty: host memory only (then host_memory must be set)."""

    host_memory: str = "0"
    """Bytes of the pinned host tier ("16GiB"; "0": SSD only)."""

    min_tensor_bytes: str = "1MiB"
    """Smaller tensors are never moved."""

    policy: str = "teraio"
    """Planner policy (teraio, teraio-ssd, teraio-mixed, ...)."""

    report: str = ""
    """Where each rank writes its report (JSON); "{rank}", "{local_rank}" are replaced.
    Default: <dump_folder>/teraio/rank{rank}.json."""


def _budget(v: str):
    """"0.5" -> 0.5 (a fraction), "1000000" -> 1000000 (bytes), "8GiB" -> itself (the
    Offloader parses sizes and names what it cannot parse)."""
    try:
        f = float(v)
    except ValueError:
        return v
    if 0 < f < 1:
        return f
    if f >= 1 and f.is_integer():
        return int(f)
    raise ValueError(f"--teraio.memory_budget: {v!r} is neither a fraction in (0, 1) nor a "
                     "whole number of bytes (or a size like '8GiB')")


class OffloadTrainer(Trainer):
    """TorchTitan's Trainer with each train_step under a teraio.Offloader.

    After training `.offloader` is the Offloader and `.step_s` the wall time of each step.
    """

    @dataclass(kw_only=True, slots=True)
    class Config(Trainer.Config):
        teraio: TeraioConfig = field(default_factory=TeraioConfig)

    def __init__(self, config: Config):
        self.offloader = None
        self.step_s = []
        self.logged = []
        super().__init__(config)
        self.record_metrics()
        self.adapt_pp_schedule()
        self.make_offloader()

    def record_metrics(self):
        """Keep what TorchTitan logs each step, (step, loss, max loss, gradient norm), in
        `.logged` and the report (called by __init__): runs with and without teraio compare
        them bit for bit (scripts/gpu_validate.sh, phase titan)."""
        mp = self.metrics_processor
        log = mp.log

        def logged(step, global_avg_loss, global_max_loss, grad_norm, *a, **kw):
            self.logged.append([int(step), float(global_avg_loss), float(global_max_loss),
                                float(grad_norm)])
            return log(step, global_avg_loss, global_max_loss, grad_norm, *a, **kw)

        mp.log = logged

    def adapt_pp_schedule(self):
        """With pipeline parallelism on a torch whose schedules take only whole batches (torch
        2.13: `step(*args, target=...)`), wrap this rank's schedule in _MicrobatchSchedule
        (called by __init__). TorchTitan 0.3 hands its schedule the micro-batches it split
        itself, `step(arg_mbs=, kwarg_mbs=, target_mbs=)`, an API of later torch versions:
        torch 2.13 takes those names as model inputs and fails ("Expecting 4 arg_mbs but got
        1"). Where the schedule takes them, nothing changes."""
        sched = getattr(self, "pp_schedule", None)
        if sched is None or isinstance(sched, _MicrobatchSchedule):
            return
        if "arg_mbs" in inspect.signature(sched.step).parameters:
            return
        self.pp_schedule = _MicrobatchSchedule(sched)

    def make_offloader(self):
        """The Offloader over this rank's model part and its optimizer (called by __init__)."""
        tc = self.config.teraio
        if not tc.enable:
            return None
        if len(self.model_parts) != 1:
            raise ValueError(f"teraio.titan: this rank has {len(self.model_parts)} model parts "
                             "(an interleaved pipeline schedule); the Offloader takes one: use "
                             "a schedule with one stage per rank (1F1B, GPipe)")
        optims = list(getattr(self.optimizers, "optimizers", [self.optimizers]))
        if len(optims) != 1:
            raise ValueError(f"teraio.titan: {len(optims)} optimizers for one model part; the "
                             "Offloader takes one")
        self.loss_regions()
        self.offloader = teraio.Offloader(
            self.model_parts[0], optims[0], memory_budget=_budget(tc.memory_budget),
            ssd_dirs=list(tc.ssd_dirs), host_memory=tc.host_memory,
            options=teraio.OffloadOptions(min_tensor_bytes=tc.min_tensor_bytes, policy=tc.policy))
        logger.info(f"teraio: Offloader on rank {self.offloader.rank}, budget "
                    f"{tc.memory_budget}, ssd_dirs {self.offloader.ssd_dirs}, host_memory "
                    f"{tc.host_memory}")
        return self.offloader

    def loss_regions(self) -> list[str]:
        """With `--compile.enable` and "loss" in `--compile.components`, TorchTitan compiles
        its loss function (`torch.compile(loss.fn)`, inside ChunkedLossWrapper's per-chunk loss
        where chunked): a compiled function, which Dynamo would skip under the Offloader's
        dispatch mode (called by make_offloader). Each is made a region of the step
        (teraio.torch._compile.function_region), as the transformer blocks TorchTitan compiles
        one by one are. Returns the names of the losses made regions."""
        from teraio.torch import _compile

        names = []
        loss, name = getattr(self, "loss_fn", None), "loss"
        while loss is not None:
            fn = getattr(loss, "fn", None)
            if fn is not None and hasattr(fn, "_torchdynamo_orig_callable"):
                loss.fn = _compile.function_region(name, fn)
                names.append(name)
            loss, name = getattr(loss, "loss_fn", None), name + ".loss_fn"
        return names

    def _reads_parameters_after(self, step: int) -> bool:
        """Whether TorchTitan reads the parameters after this step (a checkpoint save, a
        validation, the last step): then everything comes back first."""
        if step >= self.config.training.steps:
            return True
        ck = getattr(self, "checkpointer", None)
        if ck is not None and getattr(ck, "enable", False):
            should = getattr(ck, "_should_save", None)
            if should is None or should(step, last_step=False):
                return True
        val = getattr(self, "validator", None)
        if self.config.validator.enable and val is not None and val.should_validate(step):
            return True
        return False

    def train_step(self, data_iterator):
        t0 = time.perf_counter()
        if self.offloader is None:
            super().train_step(data_iterator)
            self.step_s.append(time.perf_counter() - t0)
            return
        with self.offloader.step():
            super().train_step(data_iterator)
        self.step_s.append(time.perf_counter() - t0)
        r = self.offloader.report()
        logger.info(f"teraio: step {self.step} {self.step_s[-1]:.3f} s, offloaded "
                    f"{teraio.format_bytes(r['bytes_offloaded'])} so far, peak "
                    f"{teraio.format_bytes(r['peak_managed_bytes'])} of budget "
                    f"{teraio.format_bytes(r['memory_budget'])}, stall {r['stall_s']:.3f} s")
        if self._reads_parameters_after(self.step):
            self.offloader.restore()

    def _report_path(self) -> str:
        return self.config.teraio.report or os.path.join(self.config.dump_folder, "teraio",
                                                         "rank{rank}.json")

    def write_report(self) -> str | None:
        """This rank's report (teraio.report.write_rank_report, with `titan_steps`: what
        TorchTitan logged each step) to --teraio.report; returns its path. Without teraio
        (--teraio.no-enable) only {"titan_steps": ..., "rank", "step_s"} is written, for
        comparisons."""
        from teraio import report

        extra = {"titan_steps": self.logged}
        if self.offloader is None:
            import json

            rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
            out = _ranks.expand(self._report_path(), rank, "--teraio.report")
            os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
            with open(out, "w") as f:
                json.dump(dict(extra, rank=rank, step_s=self.step_s), f)
        else:
            out = report.write_rank_report(self.offloader, self._report_path(),
                                           step_s=self.step_s, extra=extra)
        logger.info(f"teraio: report written to {out}")
        return out

    def close(self) -> None:
        try:
            if self.offloader is not None:
                self.offloader.restore()
            self.write_report()
        finally:
            if self.offloader is not None:
                self.offloader.close()
                self.offloader = None
        super().close()


class _MicrobatchSchedule:
    """A one-stage-per-rank pipeline schedule (1F1B, GPipe) of torch 2.13 with the step that
    TorchTitan 0.3 calls: the micro-batches come already split, so they go to the schedule's
    own micro-batch loop (`_step_microbatches`, what torch 2.13's step runs after splitting)
    unchanged. Everything else is the schedule's."""

    def __init__(self, schedule):
        from torch.distributed.pipelining.schedules import PipelineScheduleSingle

        if not isinstance(schedule, PipelineScheduleSingle):
            raise ValueError(f"teraio.titan: the pipeline schedule {type(schedule).__name__} "
                             "runs several stages per rank; the Offloader takes one model part "
                             "per rank: use a schedule with one stage per rank (1F1B, GPipe)")
        self.schedule = schedule

    def __getattr__(self, name):
        return getattr(self.schedule, name)

    def step(self, *args, arg_mbs=None, kwarg_mbs=None, target_mbs=None, losses=None,
             return_outputs=True, loss_kwargs=None, **kwargs):
        if args or kwargs:
            raise TypeError("teraio.titan: this schedule takes micro-batches (arg_mbs=, "
                            "kwarg_mbs=, target_mbs=), not a whole batch")
        sched = self.schedule
        if sched._has_backward and not torch.is_grad_enabled():
            raise RuntimeError("pipeline step with backward under torch.no_grad()")
        sched._stage.has_backward = sched._has_backward
        sched._stage.clear_runtime_states()
        sched._step_microbatches(arg_mbs, kwarg_mbs, target_mbs, losses, return_outputs,
                                 loss_kwargs=loss_kwargs)
        if sched._stage.is_last and return_outputs:
            return sched._merge_outputs(sched._stage.output_chunks)
        return None


class SyntheticTokenizer(BaseTokenizer):
    """Token ids only (no text): the model's vocabulary size, eos = the last id."""

    @dataclass(kw_only=True, slots=True)
    class Config(BaseTokenizer.Config):
        vocab_size: int = 2048

    def __init__(self, config: Config, *, tokenizer_path: str = "", **kw):
        super().__init__()
        self.vocab_size = config.vocab_size
        self.eos_id = config.vocab_size - 1

    def encode(self, text, *a, **kw) -> list[int]:
        return [int(b) % self.vocab_size for b in str(text).encode()]

    def decode(self, ids, *a, **kw) -> str:
        return " ".join(str(int(i)) for i in ids)

    def get_vocab_size(self) -> int:
        return self.vocab_size


class SyntheticDataLoader(BaseDataLoader):
    """Random token sequences, the same for a seed and data-parallel rank: batch i is drawn from
    a generator seeded with (seed, dp_rank, i), so a restarted loader (load_state_dict) goes on
    where it stopped. Labels are the inputs shifted by one token; each sequence is one
    document (positions 0..seq_len-1, as TorchTitan's own loaders emit them)."""

    @dataclass(kw_only=True, slots=True)
    class Config(BaseDataLoader.Config):
        seed: int = 1234
        vocab_size: int = 2048
        batches: int = 1 << 30  # then DataloaderExhaustedError ends training

    def __init__(self, config: Config, *, dp_world_size: int = 1, dp_rank: int = 0,
                 seq_len: int = 2048, local_batch_size: int = 8, **kw):
        self.config = config
        self.dp_rank = dp_rank
        self.seq_len = seq_len
        self.batch = local_batch_size
        self.i = 0

    def __iter__(self):
        while self.i < self.config.batches:
            g = torch.Generator().manual_seed(
                (self.config.seed * 1_000_003 + self.dp_rank) * 1_000_003 + self.i)
            tok = torch.randint(0, self.config.vocab_size, (self.batch, self.seq_len + 1),
                                generator=g)
            self.i += 1
            pos = torch.arange(self.seq_len).expand(self.batch, self.seq_len).contiguous()
            yield {"input": tok[:, :-1].contiguous(), "positions": pos}, tok[:, 1:].contiguous()

    def state_dict(self):
        return {"i": self.i}

    def load_state_dict(self, state_dict):
        self.i = int(state_dict.get("i", 0))


def _with_teraio(base: Trainer.Config, vocab_size: int) -> OffloadTrainer.Config:
    """`base` as an OffloadTrainer.Config on synthetic tokens, without checkpoints, validation
    or CUDA graphs, with the foreach optimizer: TorchTitan's default, the fused AdamW, updates
    every parameter in one operator, which needs all parameters, gradients and states in memory
    at once; the Offloader splits a _foreach_ operator per tensor."""
    kw = {f.name: getattr(base, f.name) for f in dataclasses.fields(base) if f.init}
    cfg = OffloadTrainer.Config(**kw)
    cfg.tokenizer = SyntheticTokenizer.Config(vocab_size=vocab_size)
    cfg.dataloader = SyntheticDataLoader.Config(vocab_size=vocab_size)
    cfg.checkpoint.enable = False
    cfg.validator.enable = False
    cfg.training.disable_cuda_graphs = True
    cfg.optimizer.implementation = "foreach"
    cfg.training.steps = 20
    return cfg


def llama3_debugmodel_flex() -> OffloadTrainer.Config:
    """TorchTitan's Llama 3 debug model as TorchTitan configures it (6 layers, dim 256,
    vocabulary 2048, sequence 2048, batch 8; FlexAttention, which TorchTitan runs through
    torch.compile) on synthetic tokens, under an Offloader (budget 0.5 of the measured peak)."""
    from torchtitan.models.llama3 import config_registry

    return _with_teraio(config_registry.llama3_debugmodel(), 2048)


def llama3_debugmodel() -> OffloadTrainer.Config:
    """llama3_debugmodel_flex with scaled-dot-product attention (causal) in every layer instead
    of the compiled FlexAttention: on these one-document sequences the same attention, but
    eager, which teraio's operator hooks see whole (and which runs on CPU, without a C++
    compiler for inductor). TorchTitan itself makes this swap in its graph_trainer tests."""
    from torchtitan.models.common.attention import ScaledDotProductAttention

    cfg = llama3_debugmodel_flex()
    for layer in cfg.model_spec.model.layers:
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
    return cfg
