"""A small Llama-style decoder written from scratch (no downloads), for teraio's examples and tests.

RMSNorm, rotary position embeddings (RoPE), grouped-query attention (GQA), SwiGLU feed-forward,
tied or untied embeddings. Every dimension is configurable; weights are initialised from a seed so
that two runs build bitwise identical models.

    cfg = LlamaConfig(vocab=512, dim=128, layers=2, heads=4, kv_heads=2, ffn=344)
    model = LlamaTiny(cfg, seed=0)
    tokens = make_batch(cfg, batch=2, seq=32, step=0)
    loss = model.loss(tokens)
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class LlamaConfig:
    vocab: int = 512
    dim: int = 128
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 344  # SwiGLU hidden size
    max_seq: int = 256
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tied: bool = False

    def __post_init__(self) -> None:
        if self.dim % self.heads:
            raise ValueError(f"dim {self.dim} must be a multiple of heads {self.heads}")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads {self.heads} must be a multiple of kv_heads {self.kv_heads}")


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(head_dim: int, seq: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    ang = torch.outer(torch.arange(seq, dtype=torch.float32), inv)  # [seq, head_dim/2]
    return torch.cos(ang), torch.sin(ang)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: [batch, heads, seq, head_dim]; rotate pairs (even, odd).
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return out.flatten(-2)


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.heads, self.kv_heads = cfg.heads, cfg.kv_heads
        self.head_dim = cfg.dim // cfg.heads
        self.wq = nn.Linear(cfg.dim, cfg.heads * self.head_dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(cfg.heads * self.head_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = self.heads // self.kv_heads
        if rep > 1:  # GQA: share each K/V head among `rep` query heads
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        mask = torch.full((s, s), float("-inf"), device=x.device).triu(1)
        att = torch.softmax(scores + mask, dim=-1)
        out = (att @ v).transpose(1, 2).reshape(b, s, -1)
        return self.wo(out)


class FeedForward(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.ffn, bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.ffn, bias=False)
        self.w2 = nn.Linear(cfg.ffn, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.ffn = FeedForward(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.ffn(self.ffn_norm(x))


class LlamaTiny(nn.Module):
    def __init__(self, cfg: LlamaConfig, seed: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        gen = torch.Generator().manual_seed(seed)
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.head = nn.Linear(cfg.dim, cfg.vocab, bias=False)
        if cfg.tied:
            self.head.weight = self.embed.weight
        with torch.no_grad():  # deterministic init independent of the global RNG
            for name, p in self.named_parameters():
                if name.endswith("norm.weight"):
                    p.fill_(1.0)
                else:
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        s = tokens.shape[1]
        cos, sin = rope_tables(self.cfg.dim // self.cfg.heads, s, self.cfg.rope_theta)
        if tokens.device.type != "cpu":  # computed on CPU: the same values on every device
            cos, sin = cos.to(tokens.device), sin.to(tokens.device)
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.head(self.norm(x))

    def loss(self, tokens: torch.Tensor) -> torch.Tensor:
        logits = self(tokens[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def make_batch(cfg: LlamaConfig, batch: int, seq: int, step: int, seed: int = 1234) -> torch.Tensor:
    """A deterministic batch of token ids [batch, seq + 1] for training step `step`."""
    gen = torch.Generator().manual_seed(seed * 100003 + step)
    return torch.randint(0, cfg.vocab, (batch, seq + 1), generator=gen)


def train_steps(model: LlamaTiny, opt, off, batch_for_step, steps: int, on_step=None) -> list:
    """The examples' training loop: `steps` steps of forward, backward, optimizer step and
    zero_grad on `batch_for_step(i)`, each inside `off.step()` when an Offloader is given
    (None: plain PyTorch). `on_step(i, off, loss)` runs after each step. Restores every
    offloaded tensor at the end. Returns the losses."""
    losses = []
    for i in range(steps):
        with off.step() if off is not None else contextlib.nullcontext():
            loss = model.loss(batch_for_step(i))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
        if on_step:
            on_step(i, off, losses[-1])
    if off is not None:
        off.restore()
    return losses
