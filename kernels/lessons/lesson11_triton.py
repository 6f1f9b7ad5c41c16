"""Lesson 11's Triton route: lesson 05's bias + GELU and lesson 07's softmax as Triton kernels, registered as ops.

    from kernels import triton_ops
    ops = triton_ops.register()          # torch.ops.triton_routes: bias_gelu(x, bias), softmax(x),
                                         #   matmul(a, b, bias=None, gelu=False)

The matmul is lesson 09's tiling written in Triton: a program per BM x BN tile of C, a loop over K in
steps of BK, fp32 accumulation, and lesson 05's bias + GELU fused into the store (the epilogue).

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
    import triton
    import triton.language as tl
except ImportError:
    triton = tl = None
# A helper that a kernel calls must be a Triton function when the kernel is compiled (or interpreted). It is
# decorated as the module is imported, when Triton is, so it runs in the same mode as tl.max (see above).
triton_jit = triton.jit if triton else (lambda fn: fn)

NAMESPACE = "triton_routes"
BLOCK = 1024  # elements per program of bias + GELU
MAX_COLS = 65536  # the softmax holds a row in registers: a program of BLOCK >= cols; longer rows are refused
MATMUL_DTYPES = ("float32", "bfloat16", "float16")  # fp32 runs on the tensor cores as TF32 on a GPU (see below)
GROUP_SIZE_M = 8  # the matmul's programs walk C in bands of 8 tile rows (see _tile_of)


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


@triton_jit
def _tile_of(pid, tiles_m, tiles_n, GROUP_SIZE_M: tl.constexpr):
    """The C tile (row, column) that program `pid` computes, grouped: programs run down a band of GROUP_SIZE_M
    tile rows, column by column, so the first programs share a few rows of A and columns of B while they are in L2.
    Row-major order (pid // tiles_n, pid % tiles_n) would sweep all of B for every row of tiles."""
    per_band = GROUP_SIZE_M * tiles_n  # programs in one band of tile rows
    first_row = (pid // per_band) * GROUP_SIZE_M
    rows = tl.minimum(tiles_m - first_row, GROUP_SIZE_M)  # the last band may be shorter
    return first_row + (pid % per_band) % rows, (pid % per_band) // rows


def _matmul_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K,
                   stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                   HAS_BIAS: tl.constexpr, GELU: tl.constexpr, WIDEN: tl.constexpr, FAST_TANH: tl.constexpr,
                   BM: tl.constexpr,
                   BN: tl.constexpr, BK: tl.constexpr, GROUP_SIZE_M: tl.constexpr):
    """Program p owns a BM x BN tile of C = A @ B (+ bias, GELU): lesson 09's block tile. Each step of the K loop
    loads a BM x BK tile of A and a BK x BN tile of B and multiplies them with tl.dot; Triton stages the tiles
    through shared memory, feeds the tensor cores and pipelines the loads (num_stages), which lesson 09 did by hand.
    Every element is addressed by its strides, so a transposed view (a.t()) is read in place, without a copy."""
    pid_m, pid_n = _tile_of(tl.program_id(0), tl.cdiv(M, BM), tl.cdiv(N, BN), GROUP_SIZE_M)
    rows = pid_m.to(tl.int64) * BM + tl.arange(0, BM)  # 64-bit: rows * stride can pass 2^31
    cols = pid_n.to(tl.int64) * BN + tl.arange(0, BN)
    ks = tl.arange(0, BK)
    a_tile = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak  # BM x BK pointers
    b_tile = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn  # BK x BN pointers
    acc = tl.zeros((BM, BN), dtype=tl.float32)  # fp32 accumulation whatever the inputs
    for k0 in range(0, K, BK):
        # the ragged edges read 0, which adds nothing to the sum (rows past M and columns past N are not stored)
        a = tl.load(a_tile, mask=(rows[:, None] < M) & (ks[None, :] < K - k0), other=0.0)
        b = tl.load(b_tile, mask=(ks[:, None] < K - k0) & (cols[None, :] < N), other=0.0)
        if WIDEN:  # only under the interpreter, whose tl.dot gets bfloat16 wrong; exact (a bf16 product fits fp32)
            a, b = a.to(tl.float32), b.to(tl.float32)
        acc = tl.dot(a, b, acc)  # tensor cores: bf16/fp16 as they are, fp32 rounded to TF32 (Triton's default)
        a_tile += BK * stride_ak
        b_tile += BK * stride_bk
    if HAS_BIAS:  # the epilogue works on the tile in registers: C is written once, not read back
        acc += tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
    if GELU:  # lesson 05's tanh approximation, h * sigmoid(2u) = 0.5 h (1 + tanh u)
        u = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
        if FAST_TANH:  # on a GPU: the hardware's tanh, one instruction (relative error about 2^-11, below bf16's)
            t = tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [u], dtype=tl.float32, is_pure=True,
                                          pack=1)
            acc = 0.5 * acc * (1.0 + t)
        else:  # the interpreter runs no PTX: an exp and a division (on an H100 they made the epilogue 6x longer)
            e = tl.exp(-2.0 * tl.abs(u))  # at most 1: no overflow for a large negative h (sigmoid(-x) = e / (1 + e))
            acc = acc * tl.where(u >= 0, 1.0, e) / (1.0 + e)
    c_tile = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_tile, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


def interpreting() -> bool:
    """Whether Triton in this process runs kernels under its interpreter (TRITON_INTERPRET=1 when it was imported)."""
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(tl.max, InterpretedFunction)


@functools.cache
def _jitted(name: str):
    """The kernel `name`, decorated once per process (compiled, or for the interpreter)."""
    import triton

    kernel = triton.jit({"bias_gelu": _bias_gelu_kernel, "softmax": _softmax_kernel, "matmul": _matmul_kernel}[name])
    if name == "matmul":  # tried once per (M, N, K, epilogue) and dtypes; the fastest config is kept for the process.
        # The epilogue is in the key: bias + GELU on the accumulator needs registers of its own, so the tile that is
        # fastest for the plain matmul can spill with it.
        kernel = triton.autotune(_matmul_configs(), key=["M", "N", "K", "HAS_BIAS", "GELU"])(kernel)
    return kernel


def _matmul_configs() -> list:
    """The tile shapes the autotuner tries on a GPU: (BM, BN, BK, pipeline stages, warps). Under the interpreter
    one small config (each would run the whole kernel on the CPU), bands of 3: small shapes end in a short band."""
    import triton

    if interpreting():
        return [triton.Config({"BM": 32, "BN": 16, "BK": 32, "GROUP_SIZE_M": 3}, num_warps=1, num_stages=1)]
    shapes = [(128, 256, 64, 3, 8), (128, 256, 64, 4, 8), (256, 128, 64, 3, 8), (128, 128, 64, 4, 4), (128, 128, 32, 4, 4),
              (64, 128, 64, 4, 4), (128, 64, 32, 4, 4)]  # a config whose tiles overflow shared memory is skipped
    return [triton.Config({"BM": bm, "BN": bn, "BK": bk, "GROUP_SIZE_M": GROUP_SIZE_M}, num_stages=st, num_warps=w)
            for bm, bn, bk, st, w in shapes]


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


def _check_matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None) -> None:
    """Refuse what the matmul does not handle, saying what was expected and what came."""
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"a and b must be 2-D matrices, got shapes {list(a.shape)} and {list(b.shape)}")
    if str(a.dtype).removeprefix("torch.") not in MATMUL_DTYPES or b.dtype != a.dtype:
        raise ValueError(f"a and b must both be {', '.join(MATMUL_DTYPES)}, one dtype for both, got {a.dtype} "
                         f"and {b.dtype}")
    if b.device != a.device:
        raise ValueError(f"a and b must be on one device, got {a.device} and {b.device}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"a's columns must be b's rows (M x K @ K x N), got {list(a.shape)} @ {list(b.shape)}")
    n = b.shape[1]
    if bias is not None and (bias.shape != (n,) or bias.dtype != a.dtype or bias.device != a.device):
        raise ValueError(f"bias must be a {a.dtype} tensor of shape [{n}] on {a.device}, "
                         f"got {bias.dtype} {list(bias.shape)} on {bias.device}")


def matmul_launch(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, bias: torch.Tensor | None = None,
                  gelu: bool = False, wrap=lambda k: k) -> None:
    """Launch the autotuned matmul out = a @ b (+ bias, then GELU) into an M x N `out`; any strides (a.t() works)."""
    import triton

    _check_matmul(a, b, bias)
    (m, k), n = a.shape, b.shape[1]
    if m and n:
        grid = lambda cfg: (triton.cdiv(m, cfg["BM"]) * triton.cdiv(n, cfg["BN"]),)  # noqa: E731 (one program a tile)
        wrap(_kernel("matmul", a))[grid](a, b, out, out if bias is None else bias,  # out stands in, never read
                                         m, n, k, *a.stride(), *b.stride(), *out.stride(),
                                         HAS_BIAS=bias is not None, GELU=gelu,
                                         WIDEN=a.dtype == torch.bfloat16 and interpreting(),
                                         FAST_TANH=not interpreting())


def tile_order(tiles_m: int, tiles_n: int, group: int) -> list[tuple[int, int]]:
    """The (row, column) of the C tile each program computes, in program order: _tile_of in plain Python."""
    order = []
    for pid in range(tiles_m * tiles_n):
        per_band = group * tiles_n
        first_row = pid // per_band * group
        rows = min(tiles_m - first_row, group)
        order.append((first_row + pid % per_band % rows, pid % per_band // rows))
    return order


def draw_tile_order(tiles_m: int = 8, tiles_n: int = 8, group: int = 4, first: int = 8, show: bool = True):
    """C's tiles numbered by the program that computes them, row-major beside grouped (GROUP_SIZE_M = group):
    the `first` programs shaded, with the tile rows of A and tile columns of B they read (what L2 must hold)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    fig, axes = plt.subplots(1, 2, figsize=(10, 5.8))
    orders = {"row-major": [(p // tiles_n, p % tiles_n) for p in range(tiles_m * tiles_n)],
              f"grouped, GROUP_SIZE_M = {group}": tile_order(tiles_m, tiles_n, group)}
    for ax, (title, order) in zip(axes, orders.items()):
        early = order[:first]
        a_rows, b_cols = sorted({r for r, _ in early}), sorted({c for _, c in early})
        for pid, (r, c) in enumerate(order):
            ax.add_patch(Rectangle((c, r), 1, 1, facecolor="#3b7dd8" if pid < first else "white", edgecolor="#888888"))
            ax.text(c + 0.5, r + 0.5, str(pid), ha="center", va="center", fontsize=8,
                    color="white" if pid < first else "#444444")
        for r in a_rows:  # the tile rows of A the first programs read, left of C
            ax.add_patch(Rectangle((-1.4, r), 1, 1, facecolor="#f0a830", edgecolor="#888888"))
        for c in b_cols:  # the tile columns of B, above C
            ax.add_patch(Rectangle((c, -1.4), 1, 1, facecolor="#f0a830", edgecolor="#888888"))
        ax.text(-0.9, -0.9, "A", ha="center", va="center")
        ax.text(tiles_n + 0.5, -0.9, "B", ha="center", va="center")
        ax.set_xlim(-1.6, tiles_n + 1)
        ax.set_ylim(tiles_m + 1, -1.6)
        ax.set_aspect("equal")
        ax.axis("off")
        ax.set_title(f"{title}\nprograms 0-{first - 1} read {len(a_rows)} block rows of A\nand {len(b_cols)} block "
                     f"columns of B: {len(a_rows) + len(b_cols)} in all", fontsize=10)
    fig.tight_layout()
    if show:
        plt.show()
    return fig


def _matmul_new(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, gelu: bool, wrap=lambda k: k,
                launch: bool = True) -> torch.Tensor:
    """The op's body: a new M x N tensor holding a @ b (+ bias, GELU); inputs checked first (launch=False: the fake)."""
    _check_matmul(a, b, bias)
    out = a.new_empty(a.shape[0], b.shape[1])
    if launch:
        matmul_launch(a, b, out, bias, gelu, wrap)
    return out


_ops: SimpleNamespace | None = None


def register(backend: str | None = None) -> SimpleNamespace:
    """Register the ops torch.ops.triton_routes.bias_gelu, .softmax and .matmul (once per process) and return them.

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

        @triton_op(f"{NAMESPACE}::matmul", mutates_args={})
        def matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
                   gelu: bool = False) -> torch.Tensor:
            return _matmul_new(a, b, bias, gelu, wrap_triton)
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

        @torch.library.custom_op(f"{NAMESPACE}::matmul", mutates_args=())
        def matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
                   gelu: bool = False) -> torch.Tensor:
            return _matmul_new(a, b, bias, gelu)

        @matmul.register_fake
        def _(a, b, bias=None, gelu=False):
            return _matmul_new(a, b, bias, gelu, launch=False)

        bias_gelu.register_fake(lambda x, bias: torch.empty_like(x))
        softmax.register_fake(lambda x: torch.empty_like(x))
    ops = getattr(torch.ops, NAMESPACE)
    _ops = SimpleNamespace(backend=be, bias_gelu=ops.bias_gelu, softmax=ops.softmax, matmul=ops.matmul)
    return _ops
