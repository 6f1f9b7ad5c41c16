"""Lesson 12 on the GPU: the attention kernels against eager PyTorch, torch.compile, every backend of PyTorch's
scaled_dot_product_attention and FlexAttention, in one run.

bf16, 16384 tokens per batch (B = 16384 / T), head dimension 128 with 16 heads and 64 with 32 (a model width of
2048 either way), causal and not: the forward at sequence lengths T from 1024 to 16384 at D 128 and at T = 2048 and
8192 at D 64, the backward at T = 2048 and 8192 (where the bars are). TFLOP/s count the multiplies of the two
products, 4 B H T^2 D for the forward (half of it when causal) and 2.5 times that for the backward (its five
products against the forward's two), as FlashAttention's papers count them. The rows:

    eager            softmax(q k^T * scale, masked) v written out in PyTorch: the T x T matrix in memory
    torch.compile    the same, compiled (Inductor)
    torch sdpa ...   F.scaled_dot_product_attention restricted to one backend: flash (FlashAttention 2's
                     kernels), efficient (memory-efficient, from xFormers), cudnn
    torch flex       FlexAttention under torch.compile, with a causal block mask where causal
    attentionN       the lesson's kernels (attention1 and attention2 only at T = 1024: they are the slow rungs;
                     attention4, Hopper's wgmma and TMA, on a 9.x GPU)

Then grouped-query attention at T = 4096, D 128, causal (16 query heads, 4 kv heads; enable_gqa=True for SDPA and
FlexAttention, k and v repeated for eager), forward and backward. Then lesson 10's model (width 768, 12 heads of 64,
6 blocks), a training step at T = 1024 and 4096 (8192 tokens), with SDPA's attention (eager, compiled, and eager held
to its flash backend: by itself SDPA takes cuDNN's Hopper kernels on an H100) and with this lesson's op (eager and
compiled); then the two compiled steps' kernel times alone ("kernels only") and the two compiled with
mode="reduce-overhead" ("CUDA graphs", where the model's bar is): without graphs these steps wait on the host that
launches their kernels.

The backward rows time the backward alone (the forward's graph kept): autograd of eager and of the compiled
forward (eager up to T = 2048: its graph at 8192 does not fit beside the others), each SDPA backend's, and the
lesson's attention_backward2 (dQ by atomics), 3 (deterministic), 4 (3 on Hopper's wgmma and TMA) and 5 (dQ inside
attention_backward4's dK/dV kernel, added up by bulk reductions).
`python -m kernels.benchmarks.lesson12 --quick` times the rows with bars (T = 2048 and 8192, both head sizes,
causal and not) and prints PASS or MISS for each; it writes no CSV.
"""
from __future__ import annotations

import dataclasses
import statistics
import sys
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from ..bench import FAILED_CHECK, NOT_COMPARABLE, Row, bench, compile_static, copy_bandwidth, plot, table, time_ms, write_csv
from ..build import load
from ..gates import runnable
from ..lessons import lesson12, op_gates
from ..lessons.lesson12 import default_scale, register_attention
from ..paths import reference_file
from . import Bar, print_quick, quick_main

TOKENS = 16384
SEQUENCES = (1024, 2048, 4096, 8192, 16384)
QUICK_SEQUENCES = (2048, 8192)
HEADS = {128: 16, 64: 32}  # head dimension: heads (a width of 2048)
DTYPE = torch.bfloat16
SLOW = ("attention1", "attention2")  # timed only at the shortest sequence
# the tensor-core variants, as kernels/lessons/lesson12.py declares them (those with a GPU gate), in its order
_GATED = {v.name for v in lesson12.VARIANTS if v.needs is not None}
FORWARD = tuple(name for name in lesson12.FORWARD if name in _GATED)
BACKWARD = tuple(name for name in lesson12.BACKWARD if name in _GATED)
# Eager's graph keeps five T x T matrices for its backward (34 GB at T = 8192, B = 2, 16 heads), too many beside the
# compiled and SDPA graphs of the same benchmark on an 80 GB GPU: its backward row stops at T = 2048.
EAGER_BACKWARD_UP_TO = 2048
# the variant the functional attention_backward runs on these inputs (an H100; attention_backward4 under
# torch.use_deterministic_algorithms(True))
BACKWARD_OP = "attention_backward5"
GQA_SEQUENCE, GQA_GROUPS = 4096, 4  # the grouped-query rows: causal, D 128, 4 query heads per kv head
NEEDS = op_gates(reference_file("12"))  # what a GPU below a variant's gate lacks is left out of the timings


def _same_choice(chosen: str, named: str, op: str) -> None:
    """The bars name the kernel the functional op runs (the op says which): refuse to measure when they part. On a GPU
    that is not a 9.x, the Hopper variants are left out of the timings and the functional ops run backward3/attention3:
    no bar applies there."""
    if torch.cuda.get_device_capability()[0] != 9:
        return
    if chosen != named:
        raise RuntimeError(f"the functional {op} runs {chosen} on the benchmark's inputs, but the bars name {named}: "
                           "change the benchmark's FORWARD[-1] / BACKWARD_OP to match")


def _name(t: int, d: int, causal: bool, what: str, groups: int = 1) -> str:
    gqa = f" GQA {HEADS[d]}/{HEADS[d] // groups}" if groups > 1 else ""
    return f"attention {what} T={t} D={d}{' causal' if causal else ''}{gqa} bf16"


def _eager(causal: bool) -> Callable:
    def attend(q, k, v):
        if k.shape[1] != q.shape[1]:  # grouped-query heads: each kv head repeated for its group of query heads
            k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
        s = (q @ k.transpose(-1, -2)) * default_scale(q)
        if causal:
            t = q.shape[2]
            s = s.masked_fill(torch.ones(t, t, device=q.device, dtype=torch.bool).triu(1), float("-inf"))
        return torch.softmax(s.float(), dim=-1).to(q.dtype) @ v
    return attend


def _gqa(q: torch.Tensor, k: torch.Tensor) -> dict:
    """enable_gqa=True where q has more heads than k (the argument is new in torch 2.5: left out otherwise)."""
    return {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}


def _sdpa(backend, causal: bool) -> Callable:
    from torch.nn.attention import sdpa_kernel

    def attend(q, k, v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, **_gqa(q, k))
    return attend


def _sdpa_backends() -> dict[str, object]:
    from torch.nn.attention import SDPBackend

    return {"torch sdpa flash": SDPBackend.FLASH_ATTENTION, "torch sdpa efficient": SDPBackend.EFFICIENT_ATTENTION,
            "torch sdpa cudnn": SDPBackend.CUDNN_ATTENTION}


def _flex(causal: bool, b: int, h: int, t: int, groups: int = 1) -> Callable:
    """FlexAttention compiled for this benchmark's shapes alone. compile_static gives each call a code object of its
    own: compiling flex_attention itself again at every shape would share one cache, which after 8 shapes stops
    compiling and runs FlexAttention unfused (a few TFLOP/s)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    mask = create_block_mask(lambda b_, h_, i, j: j <= i, None, None, t, t, device="cuda") if causal else None
    return compile_static(lambda q, k, v: flex_attention(q, k, v, block_mask=mask, **_gqa(q, k)))


def _flops(b: int, h: int, t: int, d: int, causal: bool) -> int:
    full = 4 * b * h * t * t * d
    return full // 2 if causal else full


def _close(got: torch.Tensor, want: torch.Tensor, rtol: float = 2e-2) -> bool:
    return bool(((got.float() - want.float()).norm() / want.float().norm()).item() < rtol)


def _inputs(t: int, d: int, grad: bool = False, groups: int = 1) -> tuple[torch.Tensor, ...]:
    b, h = TOKENS // t, HEADS[d]
    return tuple(torch.randn(b, heads, t, d, device="cuda", dtype=DTYPE, requires_grad=grad)
                 for heads in (h, h // groups, h // groups))


def _available(fns: dict[str, Callable], q, k, v) -> dict[str, Callable]:
    """The baselines that run on this GPU and these shapes (an SDPA backend may refuse some: it raises)."""
    out = {}
    for label, fn in fns.items():
        try:
            fn(q, k, v)
            out[label] = fn
        except RuntimeError as e:
            print(f"  {label}: not run ({str(e).splitlines()[0][:120]})")
    return out


def time_forward(ext, t: int, d: int, causal: bool, copy: float, out_dir: Path | None, quick: bool,
                 groups: int = 1) -> list[Row]:
    """The forward variants at sequence t and head dimension d (one case of the benchmark; quick: the fast variants
    only), beside eager PyTorch, torch.compile, each SDPA backend and FlexAttention, every result checked against
    SDPA before and after the timing; rows into out_dir's CSV unless out_dir is None. groups > 1: grouped-query
    attention, that many query heads per K/V head."""
    q, k, v = _inputs(t, d, groups=groups)
    b, h = q.shape[:2]
    scale = default_scale(q)
    out = torch.empty_like(q)
    lse = q.new_empty(q.shape[:3], dtype=torch.float32)
    _same_choice(ext.attention_variant(q, k, v), FORWARD[-1], "attention")
    want = F.scaled_dot_product_attention(q, k, v, is_causal=causal, **_gqa(q, k))
    names = runnable([*FORWARD, *(SLOW if t == SEQUENCES[0] and not quick else ())], NEEDS.get, DTYPE)
    baselines = {label: _sdpa(be, causal) for label, be in _sdpa_backends().items()}
    baselines["torch flex"] = _flex(causal, b, h, t, groups)
    baselines = _available(baselines, q, k, v)

    def correct() -> bool:
        ok = []
        for name in names:
            out.fill_(float("nan"))
            getattr(ext, name)(q, k, v, causal, scale, out, lse)
            ok.append(_close(out, want))
        return all(ok) and all(_close(fn(q, k, v), want) for fn in baselines.values())

    variants = {label: (lambda fn=fn: fn(q, k, v)) for label, fn in baselines.items()}
    variants.update({name: (lambda f=getattr(ext, name): f(q, k, v, causal, scale, out, lse)) for name in names})
    files = {} if out_dir is None else {"csv_path": out_dir / "lesson12.csv"}
    return bench(_name(t, d, causal, "fwd", groups), variants, flops=_flops(b, h, t, d, causal),
                 torch_fn=_eager(causal), args=(q, k, v), copy_gbps=copy, check=correct, show=False, **files)


def _backward(ext, t: int, d: int, causal: bool, copy: float, out_dir: Path | None, groups: int = 1) -> list[Row]:
    q, k, v = _inputs(t, d, grad=True, groups=groups)
    b, h = q.shape[:2]
    scale = default_scale(q)
    dout = torch.randn_like(q)
    out, lse = ext.attention(q.detach(), k.detach(), v.detach(), causal, scale)
    qd, kd, vd = q.detach(), k.detach(), v.detach()
    grads = [torch.empty_like(qd), torch.empty_like(kd), torch.empty_like(vd)]
    _same_choice(ext.attention_backward_variant(qd, kd, vd, dout), BACKWARD_OP, "attention_backward")
    fns = {"torch.compile": compile_static(_eager(causal)),
           **{label: _sdpa(be, causal) for label, be in _sdpa_backends().items()}}
    if t <= EAGER_BACKWARD_UP_TO:
        fns = {"eager": _eager(causal), **fns}
    fns = _available(fns, q, k, v)
    graphs = {label: fn(q, k, v) for label, fn in fns.items()}
    first = next((label for label in ("torch sdpa flash", "eager", "torch sdpa efficient", "torch.compile")
                  if label in graphs), None)  # the reference: the flash backend's gradients where it takes the shape
    if first is None:
        raise RuntimeError(f"no reference ran the backward at T={t}, D={d}: {', '.join(fns) or 'none'} were tried")
    want = torch.autograd.grad(graphs[first], (q, k, v), dout, retain_graph=True)

    def backward_of(o):
        return lambda: torch.autograd.grad(o, (q, k, v), dout, retain_graph=True)

    names = runnable(list(BACKWARD), NEEDS.get, DTYPE)

    def correct() -> bool:
        ok = []
        for name in names:
            for g in grads:
                g.fill_(float("nan"))
            getattr(ext, name)(qd, kd, vd, out, lse, dout, causal, scale, *grads)
            ok += [_close(g, w) for g, w in zip(grads, want)]
        return all(ok)

    variants = {label: backward_of(o) for label, o in graphs.items() if label != "eager"}
    variants.update({name: (lambda f=getattr(ext, name): f(qd, kd, vd, out, lse, dout, causal, scale, *grads))
                     for name in names})
    files = {} if out_dir is None else {"csv_path": out_dir / "lesson12.csv"}
    eager = graphs.get("eager")
    return bench(_name(t, d, causal, "bwd", groups), variants, flops=int(2.5 * _flops(b, h, t, d, causal)),
                 torch_fn=backward_of(eager) if eager is not None else None, args=(), compile=False, copy_gbps=copy,
                 check=correct, show=False, **files)


MODEL = dict(d_model=768, n_head=12, n_layer=6)  # lesson 10's benchmark model: heads of 64
MODEL_TOKENS = 8192  # per batch: 8 sequences of 1024, 2 of 4096
MODEL_SEQUENCES = (1024, 4096)
LOSS_TOLERANCE = 2e-2  # two bf16 computations of the model's loss (about 5.5) differ by a few 1e-3


def _model_name(t: int) -> str:
    return f"lesson 10's model, train step, T={t} bf16"


def _model(ext, t: int, copy: float, out_dir: Path | None) -> list[Row]:
    """A training step (forward, backward, fused AdamW) of lesson 10's model with SDPA's attention (eager as the
    baseline, and compiled; and eager with SDPA held to its flash backend: on an H100 SDPA picks cuDNN's Hopper
    kernels by itself) against the same model with this lesson's op, eager and compiled. Checked first: the two
    models' losses agree."""
    from ..lessons.lesson10 import gpt_module
    from ..lessons.lesson12 import model_kernels

    gpt = gpt_module()
    torch.manual_seed(0)
    sdpa = gpt.GPT(gpt.Config(**MODEL, seq_len=t), gpt.SDPA).to(device="cuda", dtype=DTYPE)
    ours = gpt.twin(sdpa, model_kernels(ext))
    x, y = next(gpt.batches(gpt.text_bytes("cuda"), MODEL_TOKENS // t, t, 1))

    def step(model, forward, graphs: bool = False):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

        def run(grads: list | None = None):  # grads: a list to receive copies of the gradients (a check's step)
            if graphs:  # a new step: the graphs may reuse the last step's outputs' memory
                torch.compiler.cudagraph_mark_step_begin()
            loss = gpt.loss_of(forward, x, y)
            loss.backward()
            if grads is not None:
                grads += [p.grad.detach().clone() for p in model.parameters()]
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.detach()
        return run

    with torch.no_grad():
        same = abs(gpt.loss_of(sdpa, x, y).item() - gpt.loss_of(ours, x, y).item()) < LOSS_TOLERANCE
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def flash_only(forward):  # SDPA held to its FlashAttention 2 backend (it picks cuDNN's on an H100 otherwise)
        def run(x):
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return forward(x)
        return run

    # compile_static: each model compiled for this T alone (compiling GPT.forward again at another T would give
    # kernels for dynamic shapes)
    variants = {"torch.compile": step(sdpa, compile_static(sdpa)), "torch sdpa flash": step(sdpa, flash_only(sdpa)),
                "attention op": step(ours, ours), "attention op + compile": step(ours, compile_static(ours))}
    files = {} if out_dir is None else {"csv_path": out_dir / "lesson12.csv"}
    rows = bench(_model_name(t), variants, torch_fn=step(sdpa, sdpa), args=(), compile=False, copy_gbps=copy,
                 check=lambda: same, show=False, **files)
    rows += _kernels_only(t, {k: variants[k] for k in ("torch.compile", "attention op + compile")}, copy, out_dir)
    # the graphed steps: both models from the same weights again, compiled whole (fullgraph: a graph break would leave
    # part of a step to be launched kernel by kernel)
    ours.load_state_dict(sdpa.state_dict())
    models = {"torch.compile": sdpa, "attention op + compile": ours}
    graphed = {label: step(m, compile_static(m, mode="reduce-overhead", fullgraph=True), graphs=True)
               for label, m in models.items()}

    def eager(label: str) -> tuple[float, list[torch.Tensor]]:  # what a graphed step must compute from these weights
        model = models[label]
        loss = gpt.loss_of(model, x, y)
        return loss.item(), [g.detach() for g in torch.autograd.grad(loss, list(model.parameters()))]
    return rows + _graphed(t, graphed, eager, copy, out_dir)


def _kernels_name(t: int) -> str:
    return f"lesson 10's model, train step, T={t} bf16, kernels only"


def _kernels_only(t: int, variants: dict, copy: float, out_dir: Path | None, steps: int = 5) -> list[Row]:
    """The GPU's work in a step of each compiled model: the sum of its kernels' times (the profiler's, over `steps`
    steps). A step this short is partly bound by the host's CPU, which launches its kernels; this figure is what the
    GPU itself spends, and does not move with the host."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    ms = {}
    for label, fn in variants.items():
        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(steps):
                fn()
            torch.cuda.synchronize()
        kernels = [e for e in prof.key_averages() if e.device_type == DeviceType.CUDA and not e.is_user_annotation]
        ms[label] = sum(e.self_device_time_total for e in kernels) / steps / 1e3
    return _compiled_rows(_kernels_name(t), ms, {}, copy, out_dir)


def _compiled_rows(name: str, ms: dict[str, float], notes: dict[str, list[str]], copy: float,
                   out_dir: Path | None) -> list[Row]:
    """The rows of a measure only the compiled steps have (no eager row): each against torch.compile's, written to the
    lesson's CSV."""
    base = ms["torch.compile"]
    rows = [Row(name, label, v, None, None, None, None, base / v if v else None, "; ".join(notes.get(label, [])))
            for label, v in ms.items()]
    if out_dir is not None:
        write_csv(rows, out_dir / "lesson12.csv", copy)
    return rows


def _graphed_name(t: int) -> str:
    return f"lesson 10's model, train step, T={t} bf16, CUDA graphs"


def _graphed(t: int, variants: dict, eager: Callable[[str], tuple[float, list[torch.Tensor]]], copy: float,
             out_dir: Path | None, rounds: int = 4) -> list[Row]:
    """The two compiled steps with torch.compile's mode="reduce-overhead": its forward and backward replayed as CUDA
    graphs, so that the host no longer launches some 300 kernels a step one by one (on an H200 the compiled steps'
    host work took 10-13 ms against 6-8 ms of kernels, and which of the two models it slowed moved from run to run).
    The loss and the fused AdamW step stay eager (a few launches), so the host still leaves gaps between them.
    Timed in turns, A B B A ..., the median of each.

    Checked: each of the first three steps (compiled, recorded, replayed) gives the loss and the gradients that the
    model gives eagerly from the same weights (a row's note says FAILED_CHECK otherwise); and Inductor ran every step
    in its graphs, neither skipping them nor splitting a step into graphed pieces with eager code between (otherwise
    both rows' notes say NOT_COMPARABLE: one side would be timed partly kernel by kernel)."""
    from torch._dynamo.utils import counters

    def ungraphed() -> int:
        return counters["inductor"]["cudagraph_skips"] + counters["inductor"]["cudagraph_partitions"]

    notes: dict[str, list[str]] = {label: [] for label in variants}
    before = ungraphed()
    for label, fn in variants.items():
        agree = True
        for _ in range(3):  # compile, record the graphs, replay them
            want_loss, want = eager(label)
            got: list[torch.Tensor] = []
            agree &= _same_step(fn(got).item(), got, want_loss, want)
        if not agree:
            notes[label].append(FAILED_CHECK + ": its loss or gradients are not the eager model's")
    times: dict[str, list[float]] = {label: [] for label in variants}
    for r in range(rounds):
        for label in list(variants)[::1 if r % 2 == 0 else -1]:
            times[label].append(time_ms(variants[label]))
    if ungraphed() != before:
        for label in variants:
            notes[label].append(NOT_COMPARABLE + ": Inductor ran part of a step outside its CUDA graphs")
    ms = {label: statistics.median(v) for label, v in times.items()}
    return _compiled_rows(_graphed_name(t), ms, notes, copy, out_dir)


def _same_step(loss: float, grads: list[torch.Tensor], want_loss: float, want: list[torch.Tensor]) -> bool:
    """Whether a step's loss and gradients are the reference's, to bf16's precision: the loss within LOSS_TOLERANCE (as
    _model's check of the two models), the gradients within 5% in norm over all parameters and 25% for each one (a
    compiled bf16 step against its eager self: 0.5% and at most 3%, a layernorm's, measured on the CPU; a stale or
    wrong gradient is off by about 100%). A NaN fails."""
    if len(grads) != len(want) or not abs(loss - want_loss) < LOSS_TOLERANCE:
        return False
    diffs = [(g.float() - w.float()).norm() for g, w in zip(grads, want)]
    norms = [w.float().norm() for w in want]
    total = torch.stack(diffs).norm() / torch.stack(norms).norm().clamp_min(1e-12)
    worst = max((d / n.clamp_min(1e-12)).item() for d, n in zip(diffs, norms))
    return bool(total < 0.05) and worst < 0.25


def _all(ext, copy: float, out_dir: Path | None, quick: bool) -> list[Row]:
    """The forward at every sequence length at D 128 (at the bar's lengths at D 64), the backward at the bar's
    lengths, causal and not, then the model's step; the quick run only the bar's lengths."""
    rows = []
    for d in HEADS:
        for t in QUICK_SEQUENCES if quick or d != 128 else SEQUENCES:
            for causal in (False, True):
                rows += time_forward(ext, t, d, causal, copy, out_dir, quick)
                torch.cuda.empty_cache()
                if t in QUICK_SEQUENCES:
                    rows += _backward(ext, t, d, causal, copy, out_dir)
                    torch.cuda.empty_cache()
    if not quick:  # grouped-query heads: 16 query heads share 4 kv heads (as in Llama's larger models, 8 to 1 there)
        rows += time_forward(ext, GQA_SEQUENCE, 128, True, copy, out_dir, quick, groups=GQA_GROUPS)
        rows += _backward(ext, GQA_SEQUENCE, 128, True, copy, out_dir, groups=GQA_GROUPS)
        torch.cuda.empty_cache()
    for t in MODEL_SEQUENCES:
        rows += _model(ext, t, copy, out_dir)
        torch.cuda.empty_cache()
    return rows


def _vs_flash(rows: list[Row]) -> list[Row]:
    """Each lesson kernel's row with its speed against SDPA's flash backend in the same benchmark, in the note."""
    flash = {r.bench: r.ms for r in rows if r.variant == "torch sdpa flash"}
    return [dataclasses.replace(r, note=(r.note + "; " if r.note else "") + f"{flash[r.bench] / r.ms:.2f}x sdpa flash")
            if r.bench in flash and r.variant.startswith("attention") else r for r in rows]


def run(out_dir: Path) -> list[Row]:
    """Every forward and backward benchmark; CSV and a chart of TFLOP/s into out_dir."""
    ext = load("12", "cuda")
    register_attention(ext)
    copy = copy_bandwidth()
    rows = _vs_flash(_all(ext, copy, out_dir, quick=False))
    labelled = [dataclasses.replace(r, variant=f"{r.bench}: {r.variant}") for r in rows]
    plot(labelled, copy, out_dir / "lesson12_all.png", show=False)
    print(table(rows, copy))
    return rows


# The lesson's bars: the final kernels against SDPA's flash backend, bf16, sequences of 2048 and more: the Hopper
# variants on a 9.x GPU, attention3 and attention_backward3 on the others (where the Hopper ones are left out).
_HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
BARS = [
    *(Bar(_name(t, d, c, "fwd"), FORWARD[-1] if _HOPPER else "attention3", "vs:torch sdpa flash", 0.8)
      for d in HEADS for t in QUICK_SEQUENCES for c in (False, True)),
    *(Bar(_name(t, d, c, "bwd"), BACKWARD_OP if _HOPPER else "attention_backward3", "vs:torch sdpa flash", 0.6)
      for d in HEADS for t in QUICK_SEQUENCES for c in (False, True)),
    # the model's bar on its steps under CUDA graphs: launched one kernel at a time, the compiled steps are bound by
    # the host, and their ratio went from 0.82x to 1.47x between runs at T = 4096 (_graphed says more)
    *(Bar(_graphed_name(t), "attention op + compile", "vs_compile", 1.0) for t in MODEL_SEQUENCES),
]


def quick() -> list[Row]:
    """The rows with bars: T = 2048 and 8192, both head sizes, causal and not, forward and backward."""
    ext = load("12", "cuda")
    register_attention(ext)
    copy = copy_bandwidth()
    rows = _vs_flash(_all(ext, copy, None, quick=True))
    print_quick(rows, copy, BARS)
    return rows


if __name__ == "__main__":
    sys.exit(quick_main(quick))
