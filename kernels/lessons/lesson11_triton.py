"""Lesson 11's Triton route: lesson 05's bias + GELU and lesson 07's softmax as Triton kernels, registered as ops.

    from kernels import triton_ops
    ops = triton_ops.register()          # torch.ops.triton_routes: bias_gelu(x, bias), softmax(x)

On a GPU the kernels compile for it. Without one they run under Triton's interpreter, which executes
the same Python kernel on the CPU with NumPy (the `sim` backend, CI, a laptop). The interpreter is
chosen by TRITON_INTERPRET=1, and it must be set before `triton` is first imported: Triton's own
library functions (tl.max, tl.sum, ...) are @triton.jit functions too, decorated as Triton is imported,
and a compiled tl.max cannot run inside an interpreted kernel ("Cannot call @triton.jit'd outside of
the scope of a kernel"). This module never sets it (that would change the whole process); the lesson's
first cell does, and `interpreting()` says which mode this process is in.

On a GPU the ops are registered with torch.library.triton_op, which lets torch.compile see into the
kernels. Under the interpreter triton_op runs eagerly, but its fake-tensor pass (torch.compile,
opcheck) runs the interpreter on tensors that have no data and fails; there the ops are registered
with torch.library.custom_op, which calls the kernel, and a fake implementation of the same shape.
"""
from __future__ import annotations

import functools
from types import SimpleNamespace

import torch

from .. import backend as _backend

try:  # the kernels below name `tl`; without Triton this module still imports and says why (missing())
    import triton.language as tl
except ImportError:
    tl = None

NAMESPACE = "triton_routes"
BLOCK = 1024  # elements per program of bias + GELU
MAX_COLS = 65536  # the softmax holds a row in registers: a program of BLOCK >= cols; longer rows are refused


def missing() -> str:
    """Why the Triton route cannot run here ('' when it can): Triton is not installed."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return ("Triton is not installed (a CPU-only `make setup TORCH=cpu` has none; the CUDA build of "
                "PyTorch brings it): the Triton cells and tests are skipped")
    return ""


def _bias_gelu_kernel(x_ptr, bias_ptr, out_ptr, n, C, BLOCK: tl.constexpr):
    """Program p owns elements p*BLOCK ... p*BLOCK + BLOCK - 1 (masked at the end); bias[i % C] per element.
    Reads x once, writes out once: bounded by memory bandwidth, as lesson 05's kernel is."""
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    keep = i < n
    h = tl.load(x_ptr + i, mask=keep).to(tl.float32) + tl.load(bias_ptr + i % C, mask=keep).to(tl.float32)
    u = 0.7978845608028654 * (h + 0.044715 * h * h * h)
    y = h / (1.0 + tl.exp(-2.0 * u))  # h * sigmoid(2u) = 0.5 h (1 + tanh u)
    tl.store(out_ptr + i, y.to(out_ptr.dtype.element_ty), mask=keep)


def _softmax_kernel(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
    """Program r owns row r, held whole in registers (BLOCK >= cols, padded with -inf): one read, one write.
    A row of all -inf gives zeros (lesson 07's definition), not NaN."""
    row = tl.program_id(0).to(tl.int64)
    c = tl.arange(0, BLOCK)
    keep = c < cols
    x = tl.load(x_ptr + row * cols + c, mask=keep, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    m = tl.where(m == -float("inf"), 0.0, m)  # an all -inf row: exp(-inf - 0) = 0, not exp(NaN)
    e = tl.exp(x - m)
    s = tl.sum(e, axis=0)
    y = e / tl.where(s > 0.0, s, 1.0)  # s = 0 only where every e is 0: the row stays 0
    tl.store(out_ptr + row * cols + c, y.to(out_ptr.dtype.element_ty), mask=keep)


def interpreting() -> bool:
    """Whether Triton in this process runs kernels under its interpreter (TRITON_INTERPRET=1 when it was imported)."""
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(tl.max, InterpretedFunction)


@functools.cache
def _jitted(name: str):
    """The kernel `name`, decorated once per process (compiled, or for the interpreter)."""
    import triton

    return triton.jit({"bias_gelu": _bias_gelu_kernel, "softmax": _softmax_kernel}[name])


def _kernel(name: str, t: torch.Tensor):
    """The kernel for a tensor's device: a CPU tensor needs the interpreter, a CUDA tensor the compiler."""
    if t.device.type == "cpu" and not interpreting():
        raise RuntimeError("Triton kernels run on CPU tensors only under Triton's interpreter, and Triton was "
                           "imported without it: set os.environ['TRITON_INTERPRET'] = '1' before anything imports "
                           "triton (in Jupyter: restart the kernel and set it in the first cell)")
    if t.device.type == "cuda" and interpreting():
        raise RuntimeError("Triton was imported with TRITON_INTERPRET=1, so its kernels run on the CPU only: "
                           "restart the process without it to run them on the GPU")
    return _jitted(name)


def _check(x: torch.Tensor, what: str) -> None:
    """Refuse what the kernels do not handle, saying what was expected."""
    if x.dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"{what} must be float32 or bfloat16, got {x.dtype}")
    if not x.is_contiguous():
        raise ValueError(f"{what} must be contiguous")


def bias_gelu_launch(x: torch.Tensor, bias: torch.Tensor, out: torch.Tensor, wrap=lambda k: k) -> None:
    """Launch the bias + GELU kernel into `out` (wrap: torch.library.wrap_triton inside a triton_op)."""
    import triton

    _check(x, "x")
    if bias.shape != x.shape[-1:] or bias.dtype != x.dtype or bias.device != x.device:
        raise ValueError(f"bias must be a {x.dtype} tensor of shape [{x.shape[-1]}] on {x.device}, "
                         f"got {bias.dtype} {list(bias.shape)} on {bias.device}")
    n = x.numel()
    if n:
        wrap(_kernel("bias_gelu", x))[(triton.cdiv(n, BLOCK),)](x, bias.contiguous(), out, n, x.shape[-1], BLOCK=BLOCK)


def softmax_launch(x: torch.Tensor, out: torch.Tensor, wrap=lambda k: k) -> None:
    """Launch the softmax kernel over the rows of a 2-D x into `out`."""
    import triton

    _check(x, "x")
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D (rows, cols), got shape {list(x.shape)}")
    rows, cols = x.shape
    if cols > MAX_COLS:
        raise ValueError(f"rows of at most {MAX_COLS} columns fit in one program's registers, got {cols}")
    if x.numel():
        block = triton.next_power_of_2(cols)
        warps = 4 if block < 2048 else 8 if block < 4096 else 16  # more warps for longer rows: fewer values per thread
        wrap(_kernel("softmax", x))[(rows,)](x, out, cols, BLOCK=block, num_warps=warps)


_ops: SimpleNamespace | None = None


def register(backend: str | None = None) -> SimpleNamespace:
    """Register the ops torch.ops.triton_routes.bias_gelu and .softmax (once per process) and return them.

    With backend `cuda` (default: cuda with a GPU) they are triton_ops; with `sim` custom_ops whose
    kernels run under Triton's interpreter (see the module's docstring for why).
    """
    global _ops
    why = missing()
    if why:
        raise RuntimeError(why)
    be = _backend.resolve(backend)
    if _ops is not None:
        if _ops.backend != be:
            raise RuntimeError(f"the Triton ops are registered for {_ops.backend} in this process; restart the "
                               f"process to register them for {be}")
        return _ops
    if be == "cuda":
        from torch.library import triton_op, wrap_triton

        @triton_op(f"{NAMESPACE}::bias_gelu", mutates_args={})
        def bias_gelu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
            out = torch.empty_like(x)
            bias_gelu_launch(x, bias, out, wrap_triton)
            return out

        @triton_op(f"{NAMESPACE}::softmax", mutates_args={})
        def softmax(x: torch.Tensor) -> torch.Tensor:
            out = torch.empty_like(x)
            softmax_launch(x, out, wrap_triton)
            return out
    else:
        @torch.library.custom_op(f"{NAMESPACE}::bias_gelu", mutates_args=())
        def bias_gelu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
            out = torch.empty_like(x)
            bias_gelu_launch(x, bias, out)
            return out

        @torch.library.custom_op(f"{NAMESPACE}::softmax", mutates_args=())
        def softmax(x: torch.Tensor) -> torch.Tensor:
            out = torch.empty_like(x)
            softmax_launch(x, out)
            return out

        bias_gelu.register_fake(lambda x, bias: torch.empty_like(x))
        softmax.register_fake(lambda x: torch.empty_like(x))
    ops = getattr(torch.ops, NAMESPACE)
    _ops = SimpleNamespace(backend=be, bias_gelu=ops.bias_gelu, softmax=ops.softmax)
    return _ops
