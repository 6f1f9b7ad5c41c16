"""Lesson 05 on the GPU: fused elementwise kernels against eager PyTorch and torch.compile, in one run.

Every tensor holds 2^28 elements (a 65536 x 4096 matrix: 1 GiB in float32, 512 MiB in bfloat16).
GB/s count the ideal bytes: each input read once, each output written once, as a fused kernel
does; eager PyTorch moves more (its intermediates), which is why its GB/s look low.
The training-step benchmarks time forward + backward through autograd (`fused_ops` below).

The store experiment (`python -m kernels.benchmarks.lesson05 --stores` alone, or as part of `make bench
LESSON=05`) times relu_add_bias2 and bias_gelu3 twice each: as written (a plain 16-byte store) and built
from a copy of 05_fused.cu whose 16-byte store is `__stcs` (a streaming store: evict-first in the caches),
so the two differ in that one instruction. The lesson keeps `__stcs` only if it wins here.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from ..check import close
from ..bench import Row, bench, compile_static, copy_bandwidth, plot, table
from ..build import load
from ..paths import INCLUDE, REFERENCE, ROOT

ROWS, COLS = 65536, 4096  # 2^28 elements
DTYPES = (torch.float32, torch.bfloat16)
SHORT = {torch.float32: "fp32", torch.bfloat16: "bf16"}


_REGISTERED: set[str] = set()  # the extension namespaces whose fused ops already have fake and autograd kernels


def register_fused_ops(ext) -> None:
    """Give lesson 05's functional ops fake kernels and derivatives (lesson 03's route), once per build."""
    if ext.ns in _REGISTERED:
        return
    ns = ext.ns

    @torch.library.register_fake(f"{ns}::relu_add_bias")
    def _(x, y, bias):
        return torch.empty_like(x)

    @torch.library.register_fake(f"{ns}::relu_add_bias_backward")
    def _(grad, x):
        return torch.empty_like(x), x.new_empty(x.shape[-1])

    @torch.library.register_fake(f"{ns}::bias_gelu")
    def _(x, bias, tanh):
        return torch.empty_like(x)

    @torch.library.register_fake(f"{ns}::bias_gelu_backward")
    def _(grad, x, bias, tanh):
        return torch.empty_like(x), torch.empty_like(bias)

    def relu_setup(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])  # x only: relu's gradient needs the sign of x

    def relu_backward(ctx, grad):
        (x,) = ctx.saved_tensors
        grad = grad.contiguous()  # autograd may pass an expanded (stride-0) gradient
        dx, dbias = ext.relu_add_bias_backward(grad, x)
        return dx, grad, dbias  # d out / d y is 1: y's gradient is grad itself

    def gelu_setup(ctx, inputs, output):
        x, bias, tanh = inputs
        ctx.save_for_backward(x, bias)  # not the output: the backward recomputes gelu'(x + bias)
        ctx.tanh = tanh

    def gelu_backward(ctx, grad):
        x, bias = ctx.saved_tensors
        dx, dbias = ext.bias_gelu_backward(grad.contiguous(), x, bias, ctx.tanh)
        return dx, dbias, None  # no gradient for the flag

    torch.library.register_autograd(f"{ns}::relu_add_bias", relu_backward, setup_context=relu_setup)
    torch.library.register_autograd(f"{ns}::bias_gelu", gelu_backward, setup_context=gelu_setup)
    _REGISTERED.add(ns)


def fused_ops(ext, swiglu_ext=None) -> dict[str, Callable]:
    """The fused kernels as differentiable functions: relu_add_bias(x, y, bias), bias_gelu(x, bias, tanh), swiglu(a, b).

    relu_add_bias and bias_gelu are the extension's functional ops with fake kernels and derivatives
    registered, so torch.compile traces them; swiglu (the exercise's out-variant ops) is an eager-only
    autograd.Function.
    """
    register_fused_ops(ext)
    ops = {"relu_add_bias": ext.relu_add_bias, "bias_gelu": ext.bias_gelu}
    if swiglu_ext is not None:
        class SwiGLU(torch.autograd.Function):
            @staticmethod
            def forward(ctx, a, b):
                out = torch.empty_like(a)
                swiglu_ext.swiglu(a, b, out)
                ctx.save_for_backward(a, b)
                return out

            @staticmethod
            def backward(ctx, grad):
                a, b = ctx.saved_tensors
                da, db = torch.empty_like(a), torch.empty_like(b)
                swiglu_ext.swiglu_backward(grad.contiguous(), a, b, da, db)
                return da, db

        ops["swiglu"] = SwiGLU.apply
    return ops


def _train_step(fn: Callable, inputs: tuple, grad: torch.Tensor) -> Callable[[], object]:
    """A zero-argument callable: forward through fn, then backward to every input that needs a gradient."""
    wrt = tuple(t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad)
    return lambda: torch.autograd.grad(fn(*inputs), wrt, grad)


def _inputs(dt: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x and y of [ROWS, COLS] and a bias of [COLS], random, on the GPU."""
    x = torch.randn(ROWS, COLS, device="cuda", dtype=dt)
    return x, torch.randn_like(x), torch.randn(COLS, device="cuda", dtype=dt)


def _forward_benches(ext, sw, copy: float, out_dir: Path) -> list[Row]:
    csv = out_dir / "lesson05.csv"
    rows = []
    for dt in DTYPES:
        s = SHORT[dt]
        x, y, b = _inputs(dt)
        out = torch.empty_like(x)
        n, e = x.numel(), x.element_size()

        def relu_ref(x, y, b):
            return torch.relu(x) + y + b

        def relu_ok() -> bool:
            ext.relu_add_bias2(x, y, b, out)
            return close(out, relu_ref(x.float(), y.float(), b.float()))

        rows += bench(f"relu(x) + y + bias {s}", {"relu_add_bias1": lambda: ext.relu_add_bias1(x, y, b, out),
                                                  "relu_add_bias2": lambda: ext.relu_add_bias2(x, y, b, out)},
                      bytes=3 * n * e + COLS * e, torch_fn=relu_ref, args=(x, y, b), copy_gbps=copy, check=relu_ok,
                      csv_path=csv, plot_path=out_dir / f"lesson05_relu_add_bias_{s}.png", show=False)
        for tanh in (True, False):
            kind = "tanh" if tanh else "erf"

            def gelu_ref(x, b, approximate="tanh" if tanh else "none"):
                return F.gelu(x + b, approximate=approximate)

            def gelu_ok(tanh=tanh, gelu_ref=gelu_ref) -> bool:
                ext.bias_gelu3(x, b, tanh, out)
                return close(out, gelu_ref(x.float(), b.float()))

            rows += bench(f"gelu(x + bias) {kind} {s}", {"bias_gelu3": lambda tanh=tanh: ext.bias_gelu3(x, b, tanh, out)},
                          bytes=2 * n * e + COLS * e, torch_fn=gelu_ref, args=(x, b), copy_gbps=copy, check=gelu_ok,
                          csv_path=csv, plot_path=out_dir / f"lesson05_bias_gelu_{kind}_{s}.png", show=False)
        if sw is not None:
            def swiglu_ref(a, b):
                return F.silu(a) * b

            def swiglu_ok() -> bool:
                sw.swiglu(x, y, out)
                return close(out, swiglu_ref(x.float(), y.float()))

            rows += bench(f"silu(a) * b {s}", {"swiglu (exercise)": lambda: sw.swiglu(x, y, out)},
                          bytes=3 * n * e, torch_fn=swiglu_ref, args=(x, y), copy_gbps=copy, check=swiglu_ok,
                          csv_path=csv, plot_path=out_dir / f"lesson05_swiglu_{s}.png", show=False)
        del x, y, b, out
        torch.cuda.empty_cache()
    return rows


def _training_benches(ext, sw, copy: float, out_dir: Path) -> list[Row]:
    """Forward + backward: eager autograd, torch.compile (its forward and backward graphs), the fused ops."""
    csv = out_dir / "lesson05.csv"
    fused = fused_ops(ext, sw)
    rows = []
    for dt in DTYPES:
        s = SHORT[dt]
        x = torch.randn(ROWS, COLS, device="cuda", dtype=dt, requires_grad=True)
        y = torch.randn(ROWS, COLS, device="cuda", dtype=dt, requires_grad=True)
        b = torch.randn(COLS, device="cuda", dtype=dt, requires_grad=True)
        g = torch.randn(ROWS, COLS, device="cuda", dtype=dt)
        n, e = x.numel(), x.element_size()
        cases = [
            # name, eager function, its inputs, fused function, ideal bytes (fused: forward + backward)
            ("relu(x) + y + bias", lambda x, y, b: torch.relu(x) + y + b, (x, y, b), fused["relu_add_bias"],
             6 * n * e),  # forward: x, y, out; backward: grad, x, dx (dy is grad itself)
            ("gelu(x + bias) tanh", lambda x, b: F.gelu(x + b, approximate="tanh"), (x, b),
             lambda x, b: fused["bias_gelu"](x, b, True), 5 * n * e),  # forward: x, out; backward: grad, x, dx
        ]
        if sw is not None:
            cases.append(("silu(a) * b", lambda a, b: F.silu(a) * b, (x, y), fused["swiglu"],
                          8 * n * e))  # forward: a, b, out; backward: grad, a, b, da, db
        for name, eager, inputs, fn, nbytes in cases:
            compiled = compile_static(eager)
            variants = {"torch.compile": _train_step(compiled, inputs, g), "fused": _train_step(fn, inputs, g)}
            rows += bench(f"{name} fwd+bwd {s}", variants, bytes=nbytes, torch_fn=_train_step(eager, inputs, g),
                          args=(), compile=False, copy_gbps=copy, csv_path=csv, show=False,
                          plot_path=out_dir / f"lesson05_train_{name.split('(')[0]}_{s}.png")
        del x, y, b, g
        torch.cuda.empty_cache()
    return rows


# The one line that makes every 16-byte store of lesson 05, and the same store with the streaming hint.
PLAIN_STORE = "*reinterpret_cast<uint4*>(p) = bits;"
STREAMING_STORE = "__stcs(reinterpret_cast<uint4*>(p), bits);"
STORES_CSV = "lesson05_stores.csv"  # where --stores alone writes (a full run appends to lesson05.csv)


def streaming_store_source(dest: Path) -> Path:
    """A copy of 05_fused.cu in `dest` whose 16-byte store is __stcs: the benchmark's second variant.

    The store line may sit in 05_fused.cu or in the shared header; whichever holds it is copied with
    that line changed, so the copy's `#include "helpers.cuh"` finds the changed header next to it.
    """
    fused = REFERENCE / "05_fused.cu"
    holders = [f for f in (fused, INCLUDE / "helpers.cuh") if PLAIN_STORE in f.read_text()]
    if len(holders) != 1 or holders[0].read_text().count(PLAIN_STORE) != 1:
        raise RuntimeError(f"expected the line {PLAIN_STORE!r} once, in 05_fused.cu or helpers.cuh: "
                           "update PLAIN_STORE in kernels/benchmarks/lesson05.py to lesson 05's 16-byte store")
    dest.mkdir(parents=True, exist_ok=True)
    header = dest / "helpers.cuh"
    if holders[0] != fused:
        header.write_text(holders[0].read_text().replace(PLAIN_STORE, STREAMING_STORE))
    else:
        header.unlink(missing_ok=True)  # left by an earlier layout: the copy must include the real header
    out = dest / "05_fused_stcs.cu"
    out.write_text(fused.read_text().replace(PLAIN_STORE, STREAMING_STORE))
    return out


def _store_benches(ext, copy: float, out_dir: Path, csv_name: str = "lesson05.csv") -> list[Row]:
    """relu_add_bias2 and bias_gelu3 with plain 16-byte stores and with __stcs, side by side."""
    stcs = load(streaming_store_source(out_dir / "stores"), "cuda")
    rows = []
    for dt in DTYPES:
        s = SHORT[dt]
        x, y, b = _inputs(dt)
        out, out_stcs = torch.empty_like(x), torch.empty_like(x)
        n, e = x.numel(), x.element_size()

        def same(op: str, *args) -> bool:
            getattr(ext, op)(*args, out)
            getattr(stcs, op)(*args, out_stcs)
            return torch.equal(out, out_stcs)  # the hint changes where the bytes go, never what they are

        cases = [("relu_add_bias2", (x, y, b), 3 * n * e + COLS * e), ("bias_gelu3", (x, b, True), 2 * n * e + COLS * e)]
        for op, args, nbytes in cases:
            variants = {f"{op} plain store": lambda op=op, args=args: getattr(ext, op)(*args, out),
                        f"{op} __stcs": lambda op=op, args=args: getattr(stcs, op)(*args, out_stcs)}
            rows += bench(f"16-byte stores {op} {s}", variants, bytes=nbytes, copy_gbps=copy,
                          check=lambda op=op, args=args: same(op, *args), csv_path=out_dir / csv_name,
                          show=False)
        del x, y, b, out, out_stcs
        torch.cuda.empty_cache()
    for name, pair in _pairs(rows).items():
        plain, hinted = pair
        print(f"{name}: plain {plain.ms:.3f} ms, __stcs {hinted.ms:.3f} ms "
              f"(__stcs takes {hinted.ms / plain.ms:.2f} of the plain store's time)")
    return rows


def _pairs(rows: list[Row]) -> dict[str, tuple[Row, Row]]:
    """The (plain store, __stcs) rows of each store benchmark."""
    out: dict[str, tuple[Row, Row]] = {}
    for r in rows:
        if r.variant.endswith("plain store"):
            hinted = [h for h in rows if h.bench == r.bench and h.variant.endswith("__stcs")]
            if hinted:
                out[r.bench] = (r, hinted[0])
    return out


def run(out_dir: Path) -> list[Row]:
    """Every forward variant, every fused training step and the store experiment, fp32 and bf16; CSV and plots into out_dir."""
    ext = load("05", "cuda")
    swiglu_cu = ROOT / "solutions" / "05_fused" / "swiglu.cu"
    sw = load(swiglu_cu, "cuda") if swiglu_cu.exists() else None
    copy = copy_bandwidth()
    rows = _forward_benches(ext, sw, copy, out_dir)
    rows += _training_benches(ext, sw, copy, out_dir)
    rows += _store_benches(ext, copy, out_dir)
    labelled = [dataclasses.replace(r, variant=f"{r.bench}: {r.variant}") for r in rows]
    plot(labelled, copy, out_dir / "lesson05_all.png", show=False)
    print(table(labelled, copy))
    return rows


def main(argv: list[str] | None = None) -> int:
    """`python -m kernels.benchmarks.lesson05 --stores`: the store experiment alone, its table printed."""
    import argparse

    from ..backend import gpu_available
    from . import OUT

    parser = argparse.ArgumentParser(prog="python -m kernels.benchmarks.lesson05", description=main.__doc__)
    parser.add_argument("--stores", action="store_true", help="time plain 16-byte stores against __stcs only")
    args = parser.parse_args(argv)
    if not gpu_available():
        print("this benchmark needs an NVIDIA GPU: the simulator's timings say nothing about caches")
        return 2
    OUT.mkdir(parents=True, exist_ok=True)
    if not args.stores:
        rows = run(OUT)
    else:
        copy = copy_bandwidth()
        (OUT / STORES_CSV).unlink(missing_ok=True)
        rows = _store_benches(load("05", "cuda"), copy, OUT, STORES_CSV)
        print(table(rows, copy))
    print(f"{len(rows)} timings; CSV in {OUT.relative_to(ROOT)}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
