"""Saved-tensor hooks compiled into a region's graphs: how a compiled block hands teraio the
activations it saves for its backward.

A compiled region's forward runs with a pair of saved-tensor hooks given as FX graph modules
(PACK, UNPACK). AOTAutograd (torch 2.8 and later) traces such hooks into the compiled code
instead of calling them after the compiled forward: PACK becomes part of the forward graph's
epilogue, one call of the operator teraio::region_saved per activation the graph saves, and
UNPACK (the identity) part of the backward graph's prologue. region_saved hands the activation
to the region running on this thread (collect()), whose forward pseudo-operator then writes it:
the planner sees it and the executor offloads it after the block's forward and brings it back
before the block's backward (teraio.torch._compile). So the compiled graph itself tells teraio
what it keeps, on every backend that goes through AOTAutograd (aot_eager, inductor), and the
activation stays where autograd keeps it (PACK returns it unchanged): the executor releases its
storage in place and refills it, as for an eager operator's saved tensor.

What the graph hands over is what AOTAutograd packs: the activations the forward graph computes.
The graph's inputs it saves (the block's parameters, buffers and arguments) are not packed; the
region's backward reads them as the region's own reads. region_saved has no output and is
registered as having a side effect, so that inductor keeps it.

Where the hooks stand in the compiled code: AOTAutograd places PACK after the forward's last
operator and UNPACK before the backward's first, so the moves happen at the region's boundaries;
nothing moves while the compiled code runs (a block's working set must fit the budget whole).

Dynamo guards on the saved-tensor hooks a graph was compiled with: a block called with these
hooks and without them is compiled twice. hooks() therefore puts the same hooks around the
compiled calls outside a step too (where no other saved-tensor hooks are active), where
region_saved finds no region and does nothing.
"""
from __future__ import annotations

import contextlib
import threading

import torch
import torch.fx

_local = threading.local()
# False: the hooks' operator hands nothing over (the regions' activations are then not seen by
# teraio and stay in memory from a block's forward to its backward); for measuring that
ENABLED = True


@torch.library.custom_op("teraio::region_saved", mutates_args=())
def _region_saved(t: torch.Tensor) -> None:
    box = getattr(_local, "box", None)
    if box is not None and ENABLED:
        box.append(t)


@_region_saved.register_fake
def _region_saved_fake(t):
    return None


# no output: without this, inductor's dead-code elimination drops the call
torch.fx.node.has_side_effect(torch.ops.teraio.region_saved.default)


def _pack(t):
    torch.ops.teraio.region_saved(t)
    return t


def _unpack(t):
    return t


PACK = torch.fx.symbolic_trace(_pack)
UNPACK = torch.fx.symbolic_trace(_unpack)


def _other_hooks_active():
    return torch._C._autograd._top_saved_tensors_default_hooks(False) is not None


@contextlib.contextmanager
def collect(box):
    """Run a region's compiled forward: PACK and UNPACK as the saved-tensor hooks, and every
    activation the compiled graph packs appended to box (a list), in the order it packs them."""
    prev = getattr(_local, "box", None)
    _local.box = box
    try:
        with torch.autograd.graph.saved_tensors_hooks(PACK, UNPACK):
            yield
    finally:
        _local.box = prev


def hooks():
    """The same hooks around a compiled call outside a step (so that Dynamo compiles it once),
    unless other saved-tensor hooks are active (they stay in force)."""
    if _other_hooks_active():
        return contextlib.nullcontext()
    return collect(None)
