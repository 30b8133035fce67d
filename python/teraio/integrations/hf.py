"""Hugging Face Trainer under a teraio.Offloader: one TrainerCallback.

    from teraio.hf import OffloadCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds,
                      callbacks=[OffloadCallback(memory_budget=0.5, ssd_dirs=["/mnt/nvme/tio"])])
    trainer.train()

The callback makes the Offloader when training begins (the Trainer's model and its optimizer,
unwrapped from Accelerate's AcceleratedOptimizer) and brackets each optimizer step with
off.step(): from on_step_begin (before the first micro-batch's forward) to on_step_end (after
optimizer.step(), the scheduler and zero_grad), so all gradient_accumulation_steps micro-batches
and the update are one step to teraio. The Trainer fetches the micro-batches before
on_step_begin, and logs, evaluates and saves after on_step_end, outside the step. Where the
number of batches per epoch is not a multiple of gradient_accumulation_steps, each epoch's last
step has fewer micro-batches: the callback passes the number of micro-batches as the step's
kind (Offloader.step(kind=...)), so that step gets its own plan.

Checkpoints: where the Trainer's flow decided in on_step_end to save without evaluating first,
the callback opens Offloader.streamed_saves() until on_save: the Trainer's own calls
(save_pretrained's safetensors file, torch.save of the optimizer's and scheduler's state dicts,
the RNG states and arguments) write the files they write with every tensor in memory, the
offloaded tensors read from their tier one at a time, so the save holds what stays in memory
between steps plus the largest offloaded tensor (report()["save_peak_bytes"]). Before an evaluation (and a save
after it) and at the end of training the callback calls off.restore(), so that the Trainer
reads parameters that are all in memory.

Needs `transformers` (imported here, not by `import teraio`).
"""
from __future__ import annotations

from transformers import TrainerCallback


class OffloadCallback(TrainerCallback):
    """A TrainerCallback that runs each optimizer step of a Trainer under a teraio.Offloader.

    kwargs: the Offloader's keyword arguments (memory_budget is required; ssd_dirs, host_memory,
    options=teraio.OffloadOptions(...)). After training, `.offloader` is the Offloader (report()
    has the counters); close() closes it. The Trainer has no event for an exception: if train() raises
    inside a step, that step stays open (its dispatch mode active) until close(), which brings
    every tensor back and ends it; `with OffloadCallback(...) as cb:` calls close() on the way
    out."""

    def __init__(self, **kwargs):
        if "memory_budget" not in kwargs:
            raise TypeError("OffloadCallback: memory_budget is required (as for "
                            "teraio.Offloader)")
        self.kwargs = kwargs
        self.offloader = None
        self._ctx = None
        self._batches = None  # the training dataloader's batches per epoch, where it has a len
        self._window = None  # the Offloader.streamed_saves() open from on_step_end to on_save

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kw):
        import teraio

        if self.offloader is not None:  # a second train() on the same callback: a fresh plan
            self.close()
        if model is None:
            raise RuntimeError("OffloadCallback: the Trainer passed no model to on_train_begin")
        # Accelerate wraps the optimizer; the Offloader hooks the real one's step()
        opt = getattr(optimizer, "optimizer", optimizer)
        self.offloader = teraio.Offloader(model, opt, **self.kwargs)
        try:
            self._batches = len(kw.get("train_dataloader"))
        except TypeError:  # an iterable dataset (or none): every step is taken as a full one
            self._batches = None

    def _micro_batches(self, args, state):
        """Micro-batches the coming optimizer step runs: gradient_accumulation_steps, fewer in an
        epoch's last step (the Trainer's split: ceil(batches / accumulation) steps per epoch)."""
        acc = max(1, int(args.gradient_accumulation_steps))
        n = self._batches
        if not n:
            return acc
        per_epoch = -(-n // acc)
        if state.global_step % per_epoch == per_epoch - 1:
            return n - acc * (per_epoch - 1)
        return acc

    def on_step_begin(self, args, state, control, **kw):
        self._close_window()
        if self._ctx is not None:  # a step that never ended (train() raised): bring it back
            self._abort()
        self._ctx = self.offloader.step(kind=self._micro_batches(args, state))
        self._ctx.__enter__()

    def _exit(self):
        ctx, self._ctx = self._ctx, None
        ctx.__exit__(None, None, None)

    def _abort(self):
        ctx, self._ctx = self._ctx, None
        err = RuntimeError("OffloadCallback: the Trainer left a step unfinished")
        ctx.__exit__(RuntimeError, err, None)

    def on_step_end(self, args, state, control, **kw):
        if self._ctx is not None:
            self._exit()
        # DefaultFlowCallback (first in the Trainer's list) has set these for this step; the
        # Trainer logs, evaluates, then saves
        if control.should_save and not control.should_evaluate:
            self._window = self.offloader.streamed_saves()
            self._window.open()
        elif control.should_save or control.should_evaluate or control.should_training_stop:
            self.offloader.restore()

    def _close_window(self):
        w, self._window = self._window, None
        if w is not None:
            w.close()

    def on_save(self, args, state, control, **kw):
        self._close_window()

    def on_evaluate(self, args, state, control, **kw):
        self._close_window()

    def on_train_end(self, args, state, control, **kw):
        self._close_window()
        if self._ctx is not None:
            self._exit()
        if self.offloader is not None:
            self.offloader.restore()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        """Restore everything and release the Offloader's engine (its swap files)."""
        self._close_window()
        if self._ctx is not None:
            self._abort()
        if self.offloader is not None:
            self.offloader.close()
