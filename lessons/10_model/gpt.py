"""A small GPT-style model in plain PyTorch, and the same model with the lessons' kernels swapped in.

    import gpt
    cfg = gpt.Config(d_model=32, n_head=2, n_layer=2, seq_len=16)
    eager = gpt.GPT(cfg)                                   # layernorm, attention, MLP as nanoGPT writes them
    kernels = gpt.custom_kernels()                         # lessons 05, 07, 08 as torch.library ops
    custom = gpt.twin(eager, kernels)                      # the same weights, the custom ops
    sdpa = gpt.twin(eager, gpt.SDPA)                       # nanoGPT's default: F.scaled_dot_product_attention

Both models are one class; only the three fusable pieces differ (a `Kernels` table): layernorm
(lesson 08's op), scale + causal mask + softmax of the attention scores (lesson 07's softmax7, through
the glue in attention_softmax.py, the exercise) and bias + GELU (lesson 05's op). Every matmul goes
through torch (cuBLAS on a GPU). The tokens are bytes of a text that ships with Python.

Each swappable piece runs inside a profiler range named "part: <what>" (`swappable`), in the eager and the
custom model alike, so that a profile can say which part of the step an op's time belongs to
(step_profile.time_by_part). Without a profiler running, `swappable` opens no range at all.
"""
from __future__ import annotations

import contextlib
import inspect
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import record_function

from kernels import load
from kernels.benchmarks.lesson05 import register_fused_ops
from kernels.lessons.lesson08 import EPS, register_layernorm
from kernels.lessons.lesson10 import GLUE, register_glue

VOCAB = 256  # byte-level tokens: every text is its own encoding
RANGE = "part: "  # the prefix of the profiler ranges around the swappable pieces
ATTENTION, LAYERNORM, BIAS_GELU = "attention: scale, mask, softmax", "layernorm", "bias + GELU"


def swappable(part: str):
    """The profiler range "part: <part>" around a piece a model may swap, while a profiler records. Otherwise,
    and under torch.compile (which would drop the range with a warning), a context that does nothing."""
    if torch.compiler.is_compiling() or not torch.autograd._profiler_enabled():
        return contextlib.nullcontext()
    return record_function(RANGE + part)


@dataclass(frozen=True)
class Config:
    """The model's sizes: width, heads, blocks, and the longest sequence it sees."""

    d_model: int = 32
    n_head: int = 2
    n_layer: int = 2
    seq_len: int = 16

    def __post_init__(self):
        for name in ("d_model", "n_head", "n_layer", "seq_len"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive int, got {getattr(self, name)!r}")
        if self.d_model % self.n_head:
            raise ValueError(f"d_model ({self.d_model}) must be a multiple of n_head ({self.n_head}): "
                             "each head gets d_model / n_head columns")


@dataclass(frozen=True)
class Kernels:
    """The three pieces a model may swap: layernorm(x2d, w, b), attention(q, k, v, scale) and bias_gelu(h2d, b).
    layernorm and bias_gelu take 2-D contiguous rows (of the residual stream, of the MLP's hidden layer);
    attention takes q, k and v as (batch, heads, time, head width) and returns causal_softmax(q k^T * scale) v,
    (batch, heads, time, head width). An attention that computes the probabilities runs their scale, mask and
    softmax inside swappable(ATTENTION), and leaves the two matmuls outside it.
    """

    name: str
    layernorm: Callable
    attention: Callable
    bias_gelu: Callable


def _eager_layernorm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, EPS)


def causal_softmax_eager(scores: torch.Tensor, scale: float, q_len: int) -> torch.Tensor:
    """softmax(scores * scale) with key j > query i masked, for scores (..., q_len, keys), as nanoGPT's non-flash
    path writes it: a multiply, a masked_fill and a softmax, each a pass over the scores."""
    s = scores.reshape(-1, q_len, scores.shape[-1]) * scale
    mask = torch.ones(q_len, scores.shape[-1], dtype=torch.bool, device=scores.device).tril()
    return torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1).view(scores.shape)


def _eager_attention(q, k, v, scale):
    scores = q @ k.transpose(-2, -1)
    with swappable(ATTENTION):
        att = causal_softmax_eager(scores, scale, q.shape[-2])
    return att @ v


def _eager_bias_gelu(h, b):
    return F.gelu(h + b, approximate="tanh")


def _sdpa_attention(q, k, v, scale):
    # one fused op (FlashAttention where the GPU and dtype allow it): the matmuls, the mask and the softmax
    # together, so no range separates them; the (time x time) scores never reach global memory
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)


EAGER = Kernels("eager", _eager_layernorm, _eager_attention, _eager_bias_gelu)
SDPA = Kernels("sdpa", _eager_layernorm, _sdpa_attention, _eager_bias_gelu)  # nanoGPT's default attention


def fused_attention(causal_softmax: Callable) -> Callable:
    """attention(q, k, v, scale) through a fused op causal_softmax(scores2d, scale, q_len).

    The scale goes on q, before the matmul, and the op gets scale 1: the op's backward would otherwise
    multiply the (time x time) gradient of every head by the scale in a pass of its own, while q holds
    time / head width times fewer elements (16x at 1024 tokens and 64-wide heads). A power-of-two scale
    (1/8 for 64-wide heads) changes no bits.
    """
    def attention(q, k, v, scale):
        B, H, T, _ = q.shape
        with swappable(ATTENTION):
            q = q * scale
        scores = q @ k.transpose(-2, -1)  # a fresh contiguous (B, H, T, T): its rows view as 2-D for free
        with swappable(ATTENTION):
            att = causal_softmax(scores.view(-1, T), 1.0, T).view(B, H, T, T)
        return att @ v
    return attention


_custom: dict[tuple, Kernels] = {}


def custom_kernels(glue: str | Path = GLUE, backend: str | None = None) -> Kernels:
    """The lessons' kernels as differentiable torch.library ops: lesson 08's layernorm, lesson 05's bias_gelu,
    and lesson 07's softmax7 through the glue file's op (by default the worked answer of the exercise)."""
    softmax_op = register_glue(glue, backend)
    ext05, ext08 = load("05", backend, quiet=True), load("08", backend, quiet=True)
    if (softmax_op, ext05.ns, ext08.ns) not in _custom:  # one table per build, so torch.compile sees the same functions
        register_fused_ops(ext05)
        register_layernorm(ext08)

        def layernorm(x, w, b):
            return ext08.layernorm(x, w, b, EPS)[0]

        def bias_gelu(h, b):
            return ext05.bias_gelu(h, b, True)

        _custom[(softmax_op, ext05.ns, ext08.ns)] = Kernels("custom", layernorm, fused_attention(softmax_op), bias_gelu)
    return _custom[(softmax_op, ext05.ns, ext08.ns)]


class Block(nn.Module):
    """x + attention(ln1(x)), then + MLP(ln2(x)); the pieces of `kernels` do layernorm, softmax and bias + GELU."""

    def __init__(self, cfg: Config, kernels: Kernels):
        super().__init__()
        d = cfg.d_model
        self.n_head, self.kernels = cfg.n_head, kernels
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.fc = nn.Linear(d, 4 * d)  # its bias is added by bias_gelu, fused with the GELU
        self.out = nn.Linear(4 * d, d)

    def _ln(self, ln: nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
        return layernorm(self.kernels, ln, x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        H = self.n_head
        q, k, v = self.qkv(self._ln(self.ln1, x)).split(C, dim=2)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))  # (B, H, T, C/H)
        y = self.kernels.attention(q, k, v, 1.0 / math.sqrt(C // H)).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        h = F.linear(self._ln(self.ln2, x), self.fc.weight)
        with swappable(BIAS_GELU):
            h = self.kernels.bias_gelu(h.view(-1, h.shape[-1]), self.fc.bias).view(h.shape)
        return x + self.out(h)


def layernorm(kernels: Kernels, ln: nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
    """kernels.layernorm over the last dimension of x with ln's weight and bias, inside swappable(LAYERNORM)."""
    with swappable(LAYERNORM):
        return kernels.layernorm(x.view(-1, x.shape[-1]), ln.weight, ln.bias).view(x.shape)


class GPT(nn.Module):
    """Token and position embeddings, n_layer blocks, a final layernorm and a linear head over the bytes."""

    def __init__(self, cfg: Config, kernels: Kernels = EAGER):
        super().__init__()
        self.cfg, self.kernels = cfg, kernels
        self.tok = nn.Embedding(VOCAB, cfg.d_model)
        self.pos = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg, kernels) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, VOCAB, bias=False)
        for m in self.modules():  # GPT-2's initialisation: small normal weights, zero biases
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, 256) for byte ids idx (B, T), T <= seq_len."""
        if idx.dim() != 2 or idx.dtype != torch.long:
            raise ValueError(f"idx must be a 2-D (batch, time) tensor of int64 byte ids, got {idx.dim()}-D "
                             f"{idx.dtype}")
        T = idx.shape[1]
        if not 1 <= T <= self.cfg.seq_len:
            raise ValueError(f"sequences must have 1 to seq_len ({self.cfg.seq_len}) tokens, got {T}")
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(layernorm(self.kernels, self.ln_f, x))


def twin(model: GPT, kernels: Kernels) -> GPT:
    """A copy of `model` (same weights, dtype and device) that runs with `kernels`."""
    p = next(model.parameters())
    other = GPT(model.cfg, kernels).to(device=p.device, dtype=p.dtype)
    other.load_state_dict(model.state_dict())
    return other


def text_bytes(device=None) -> torch.Tensor:
    """The bytes of the source of Python's `inspect` module (about 125 KB, on every Python install) as int64 ids."""
    data = inspect.getsource(inspect).encode()
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device=device, dtype=torch.long)


def batches(data: torch.Tensor, batch: int, seq_len: int, steps: int, seed: int = 0):
    """`steps` (inputs, targets) pairs of `batch` random windows of `data`; targets are inputs shifted by one byte."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        starts = torch.randint(0, len(data) - seq_len - 1, (batch,), generator=g).to(data.device)
        rows = starts[:, None] + torch.arange(seq_len + 1, device=data.device)
        window = data[rows]
        yield window[:, :-1], window[:, 1:]


def loss_of(model: Callable, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the next byte."""
    logits = model(x)
    return F.cross_entropy(logits.view(-1, VOCAB).float(), y.reshape(-1))


def trainer(model: GPT, batch: int = 8, lr: float = 3e-3, step_fn: Callable | None = None, seed: int = 0,
            steps: int = 10**9) -> Callable[[], torch.Tensor]:
    """A function that runs one AdamW step on the next byte windows of text_bytes() and returns its loss (a
    tensor: reading it as a number would wait for the GPU). step_fn (default: model itself) runs the forward,
    e.g. torch.compile(model). The same seed gives every model the same batches."""
    fn = model if step_fn is None else step_fn
    p = next(model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)
    data = batches(text_bytes(p.device), batch, model.cfg.seq_len, steps, seed)

    def step() -> torch.Tensor:
        x, y = next(data)
        loss = loss_of(fn, x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()
    return step


def train(model: GPT, steps: int, batch: int = 8, lr: float = 3e-3, step_fn: Callable | None = None,
          seed: int = 0) -> list[float]:
    """`steps` steps of trainer(...); returns the loss of every step."""
    step = trainer(model, batch, lr, step_fn, seed, steps)
    losses = [step() for _ in range(steps)]
    return [float(v) for v in torch.stack(losses).cpu()]  # one sync at the end, not one .item() per step
