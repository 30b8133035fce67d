"""Hugging Face Trainer under teraio (teraio.hf.OffloadCallback): a tiny Llama built from a
config (random weights, no downloads) trained on a synthetic dataset of 7 batches for 2 epochs
with gradient_accumulation_steps=2 (so each epoch ends with a step of 1 micro-batch, another kind
of step with its own plan), saving a checkpoint every 3 steps and evaluating every 4, with and
without the callback; the logged losses, gradient norms and evaluation losses, every file of
the checkpoints and the final parameters must be bitwise equal, teraio must offload, and the
tracked peak must stay within the budget. The saves after steps 3 and 6 (no evaluation before
them) are streamed (Offloader.streamed_saves()): every tensor offloaded when the step ended is
still offloaded when the Trainer's on_save runs, and the save's peak stays within the budget;
the run then resumes from checkpoint-6 under a new callback and must end with the same
parameters. The runs share a fresh interpreter, plain PyTorch first (the Offloader installs
the process's CPU allocator). scripts/setup.sh installs transformers; without it this file skips."""
import json
import os
import subprocess
import sys
import tempfile

import pytest

STEPS = 8  # 2 epochs of 4 optimizer steps: 2, 2, 2 and 1 micro-batches
BUDGET = 4_800_000  # bytes; the unconstrained peak is ~9.7 MB

_RUN = r"""
import hashlib, json, os, sys
import torch
from transformers import (LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback,
                          TrainingArguments)

out, budget = sys.argv[1], int(sys.argv[2])


def llama():  # a config of its own each (the Trainer changes its model's: use_cache)
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=512, hidden_size=128, intermediate_size=344, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))


ids = torch.randint(0, 512, (14, 32), generator=torch.Generator().manual_seed(1))
ds = [dict(input_ids=ids[i], labels=ids[i]) for i in range(len(ids))]


# optim="adamw_torch": foreach AdamW, split per parameter by teraio (the fused one is one
# operator over every parameter and state, whose working set is the whole model)
def targs(d, **kw):
    a = dict(output_dir=d, per_device_train_batch_size=2, gradient_accumulation_steps=2,
             num_train_epochs=2, learning_rate=1e-3, logging_steps=1, save_strategy="steps",
             save_steps=3, eval_strategy="steps", eval_steps=4, per_device_eval_batch_size=4,
             report_to=[], use_cpu=True, seed=0, data_seed=0, disable_tqdm=True,
             dataloader_num_workers=0, optim="adamw_torch")
    return TrainingArguments(**dict(a, **kw))


def offloaded(m, opt):  # parameters and optimizer states with no memory now
    ts = list(m.parameters()) + [v for s in opt.state.values() for v in s.values()
                                 if isinstance(v, torch.Tensor)]
    return sum(1 for t in ts if t.numel() and t.untyped_storage().nbytes() == 0)


class Probe(TrainerCallback):  # after OffloadCallback: what it left at each event
    def __init__(self):
        self.at = {}

    def on_step_end(self, args, state, control, model=None, optimizer=None, **kw):
        if control.should_save:
            self.at[state.global_step] = [offloaded(model, optimizer.optimizer)]

    def on_save(self, args, state, control, model=None, optimizer=None, **kw):
        self.at[state.global_step].append(offloaded(model, optimizer.optimizer))


def phash(m):
    h = hashlib.sha256()
    for n, p in m.named_parameters():
        h.update(n.encode())
        h.update(p.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def run(offload):
    # in a folder of its own, output_dir "run" relative: training_args.bin the same in both
    os.chdir(os.path.join(out, "teraio" if offload else "plain"))
    model = llama()
    callbacks = []
    if offload:
        import teraio
        from teraio.hf import OffloadCallback
        opts = teraio.OffloadOptions(min_tensor_bytes="16KiB")
        cb = OffloadCallback(memory_budget=budget, ssd_dirs=[out], options=opts)
        probe = Probe()
        callbacks += [cb, probe]
    trainer = Trainer(model=model, args=targs("run"), train_dataset=ds, eval_dataset=ds[:8],
                      callbacks=callbacks)
    trainer.train()
    logs = [[e["step"], e.get("loss"), e.get("grad_norm"), e.get("eval_loss")]
            for e in trainer.state.log_history if "loss" in e or "eval_loss" in e]
    ckpts = {}
    for c in sorted(os.listdir("run")):
        for f in sorted(os.listdir(os.path.join("run", c))):
            with open(os.path.join("run", c, f), "rb") as fh:
                b = fh.read()
            ckpts[c + "/" + f] = hashlib.sha256(b).hexdigest()
            if f == "trainer_state.json":  # less the evaluations' run times
                st = json.loads(b)
                for e in st["log_history"]:
                    for k in [k for k in e if k.endswith(("_runtime", "_per_second"))]:
                        del e[k]
                ckpts[c + "/" + f + " (no run times)"] = hashlib.sha256(
                    json.dumps(st, sort_keys=True).encode()).hexdigest()
    rep = resumed = None
    if offload:
        rep = {k: v for k, v in cb.offloader.report().items() if k not in ("plan", "engine")}
        rep["last_divergence"] = cb.offloader.last_divergence
        rep["probe"] = probe.at
        cb.close()
        # resume from the streamed checkpoint-6 under a new callback: steps 7 and 8 again
        m2 = llama()
        cb2 = OffloadCallback(memory_budget=budget, ssd_dirs=[out], options=opts)
        t2 = Trainer(model=m2, args=targs("resumed", save_strategy="no", eval_strategy="no"),
                     train_dataset=ds, callbacks=[cb2])
        t2.train(resume_from_checkpoint=os.path.join("run", "checkpoint-6"))
        r2 = cb2.offloader.report()
        resumed = [phash(m2), t2.state.global_step,
                   sum(r2[k] for k in ("steps_passthrough", "steps_unplanned",
                                       "steps_profiled", "steps_offloaded"))]
        cb2.close()
    return dict(logs=logs, ckpts=ckpts, params=phash(model), report=rep, resumed=resumed)


# plain first: the Offloader installs the process's CPU allocator (until close())
os.mkdir(os.path.join(out, "plain"))
os.mkdir(os.path.join(out, "teraio"))
print(json.dumps([run(False), run(True)]))
"""


def _run():
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.access("/dev/shm", os.W_OK)
                                     else None) as d:
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                   TOKENIZERS_PARALLELISM="false")
        p = subprocess.run([sys.executable, "-c", _RUN, d, str(BUDGET)],
                           capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stderr[-4000:]}"
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_trainer_gradient_accumulation_bitwise_and_offloading():
    plain, got = _run()
    rep = got["report"]
    print(f"\nplain  {plain['logs']}\nteraio {got['logs']}\nreport {rep}")
    assert [x[0] for x in plain["logs"] if x[1] is not None] == list(range(1, STEPS + 1))
    assert [x[0] for x in plain["logs"] if x[3] is not None] == [4, STEPS]
    assert got["logs"] == plain["logs"]  # every loss, gradient norm and eval loss, exactly
    # checkpoints after steps 3 and 6 and at the end, every file the Trainer writes: model
    # (safetensors), optimizer states, scheduler, RNG states, arguments, config; all bitwise
    # equal but trainer_state.json after an evaluation (6 and 8), whose log has the
    # evaluation's run time: equal without those entries
    names = {k.split("/")[1] for k in plain["ckpts"]}
    assert {"model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth",
            "training_args.bin", "trainer_state.json", "config.json"} <= names, names
    assert sorted(got["ckpts"]) == sorted(plain["ckpts"])
    assert len(plain["ckpts"]) == 3 * len(names), plain["ckpts"]
    differ = sorted(k for k in plain["ckpts"] if got["ckpts"][k] != plain["ckpts"][k])
    assert differ == [f"checkpoint-{i}/trainer_state.json" for i in (6, 8)], differ
    assert got["params"] == plain["params"]
    # 1 warm-up step, 1 profiled of each kind (2 and 1 micro-batches), the rest planned, none
    # diverged
    assert rep["steps_profiled"] == 2 and rep["steps_offloaded"] == STEPS - 3, rep
    assert rep["steps_diverged"] == 0, rep
    assert rep["bytes_offloaded"] > 0, rep
    assert 0 < rep["peak_managed_bytes"] <= rep["memory_budget"], rep
    # the budget binds: below 60% of the unconstrained peak of the last plan's kind (the
    # 1-micro-batch step, the smaller of the two)
    assert rep["memory_budget"] <= 0.6 * rep["unconstrained_peak_bytes"], rep
    assert rep["unplanned_peak_bytes"] <= rep["memory_budget"], rep
    # the saves after steps 3 and 6 streamed: what was offloaded when the step ended still is
    # when the Trainer has saved (nothing brought back), within the budget; the one after the
    # evaluation at step 8 writes from memory (the evaluation brought everything back)
    probe = rep["probe"]
    assert probe["3"][0] > 0 and probe["6"][0] > 0 and probe["8"] == [0, 0], probe
    assert probe["3"][1] == probe["3"][0] and probe["6"][1] == probe["6"][0], probe
    assert 0 < rep["save_peak_bytes"] <= rep["memory_budget"], rep
    # resumed from the streamed checkpoint-6: steps 7 and 8 again, the same parameters
    assert got["resumed"] == [plain["params"], STEPS, 2], got["resumed"]


def test_callback_without_budget_is_refused():
    from teraio.hf import OffloadCallback

    with pytest.raises(TypeError, match="memory_budget is required"):
        OffloadCallback(ssd_dirs=["/tmp"])


_FAIL = r"""
import os, sys, torch
from torch.utils._python_dispatch import _get_current_dispatch_mode
from transformers import (LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback,
                          TrainingArguments)
import teraio
from teraio.hf import OffloadCallback

out = sys.argv[1]
cfg = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=344, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
model = LlamaForCausalLM(cfg)
ids = torch.randint(0, 512, (16, 32), generator=torch.Generator().manual_seed(1))
ds = [dict(input_ids=x, labels=x) for x in ids]


class Boom(TrainerCallback):  # raises inside the fourth step, a planned one
    def on_pre_optimizer_step(self, args, state, control, **kw):
        if state.global_step == 3:
            raise KeyboardInterrupt("boom")


args = TrainingArguments(output_dir=os.path.join(out, "run"), per_device_train_batch_size=2,
                         gradient_accumulation_steps=2, max_steps=4, optim="adamw_torch",
                         use_cpu=True, report_to=[], save_strategy="no", disable_tqdm=True)
raised = False
with OffloadCallback(memory_budget=0.5, ssd_dirs=[out],
                     options=teraio.OffloadOptions(min_tensor_bytes="16KiB")) as cb:
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[cb, Boom()])
    try:
        trainer.train()
    except KeyboardInterrupt:
        raised = True
        open_mode = type(_get_current_dispatch_mode()).__name__
        rep = cb.offloader.report()
print(raised, open_mode, rep["steps_offloaded"], rep["bytes_offloaded"])
print(_get_current_dispatch_mode())
opt = trainer.optimizer.optimizer
short = [n for n, p in model.named_parameters()
         if p.untyped_storage().nbytes() != p.numel() * p.element_size()]
short += [k for p in model.parameters() for k, v in opt.state[p].items()
          if v.untyped_storage().nbytes() != v.numel() * v.element_size()]
print(short)
"""


def test_train_that_raises_inside_a_step_is_closed_by_the_callback(tmp_path):
    """train() raising inside a planned step leaves that step open (the Trainer has no exception
    event); leaving the callback's `with` brings every tensor back and ends the step."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    p = subprocess.run([sys.executable, "-c", _FAIL, str(tmp_path)], capture_output=True,
                       text=True, timeout=300, env=env)
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stderr[-4000:]}"
    lines = p.stdout.strip().splitlines()[-3:]
    print("\n" + "\n".join(lines))
    raised, open_mode, offloaded_steps, offloaded = lines[0].split()
    assert raised == "True" and open_mode == "StepMode"  # the step was still open
    assert int(offloaded_steps) >= 1 and int(offloaded) > 0  # it ran planned, offloading
    assert lines[1] == "None"  # no dispatch mode after the with
    assert lines[2] == "[]"  # every parameter and optimizer state has its bytes back
