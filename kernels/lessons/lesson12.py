"""Lesson 12 (attention as one fused kernel): the reference the kernels are checked against (forward and
backward), the inputs that catch the usual bugs, the online-update exercise, and the autograd registration of
the functional attention op.

Shapes: q [B, Hq, Tq, D], k and v [B, Hkv, Tk, D]; query head h reads key/value head h // (Hq // Hkv)
(grouped-query attention; Hkv == Hq is ordinary multi-head attention). A check's size is the tuple
(B, Hq, Hkv, Tq, Tk, D). The causal mask is aligned at the bottom right, as FlashAttention 2 aligns it:
query i attends to key j when j <= i + (Tk - Tq), which is SDPA's is_causal=True when Tq == Tk.
A query that attends to no key (causal with Tq > Tk, or Tk == 0) has no softmax; this lesson defines its
output as zeros and its log-sum-exp as -inf (lesson 07 defines a fully masked row the same way; torch.softmax of
such a row is NaN, and what SDPA returns for one depends on its version and backend). Note that SDPA's is_causal
aligns the diagonal at the top left when Tq != Tk: there it and this lesson's mask differ.
"""
from __future__ import annotations

import math
from typing import Callable, Iterable, Sequence

import torch

from ..check import HINTS, TOLERANCE, Case, Diagnosis, Report, check, merge, profile_raised, random_tensor
from . import Exercise, Hint, Needs, Variant, on_the_simulator

# (B, Hq, Hkv, Tq, Tk, D). One query and one key; ragged lengths past a tile of 32 or 64; more queries than keys
# (causal: the first Tq - Tk rows attend to nothing); fewer queries than keys (a decode-like step); grouped heads;
# head dimension 128 and an odd one; no keys at all; no queries.
SHAPES = ((1, 1, 1, 1, 1, 64), (1, 2, 2, 33, 33, 64), (1, 2, 1, 70, 50, 64), (1, 1, 1, 17, 130, 128),
          (2, 1, 1, 40, 40, 40), (1, 1, 1, 5, 0, 64), (1, 2, 2, 0, 9, 64))
# The tensor-core kernels take D = 64 or 128; their tiles are 128 query rows (a block) and 32 or 64 keys: these shapes
# also cross several of each, so that the causal paths that skip whole tiles (a warp's, a block's, the backward's first
# query tiles) and the double buffers past their first tile all run.
TENSOR_CORE_SHAPES = (*(s for s in SHAPES if s[-1] in (64, 128)), (1, 2, 1, 300, 300, 64), (1, 2, 2, 200, 330, 128),
                      (1, 1, 1, 260, 140, 64))
LARGE = 50.0  # the second input set: q times 50, scores of about +-50 and up to a few hundred: exp(s) overflows
# Float32: the kernels' exp is the hardware's exp2 (a few ulps); half types: P is rounded to q's dtype before the
# second product, as FlashAttention does, then O is rounded once more.
# lse is float32 arithmetic on exact products of the inputs whatever their dtype (P's rounding comes after l's sum),
# so it is held to float32's accuracy (with room for the GPU's exp2 and log2 approximations): a kernel that sums the
# rounded P, or loses the max, fails on lse where out's half-type tolerance would let it pass. On an H100 the forward
# variants' largest lse error over ten draws of the checks' shapes was 1e-6 (|lse| up to 7) and, in the large set,
# 9e-5 with |lse| up to 692, where float32's own spacing is 6e-5: a bound relative to |lse| there, as float32's
# rounding is, about five times those errors.
LSE_TOLERANCE = (1e-5, 1e-5)
LARGE_LSE_TOLERANCE = (5e-7, 1e-4)
ATTENTION_TOLERANCE = {**TOLERANCE, torch.float32: (2e-5, 2e-6), torch.float16: ((4e-3, 2e-3), LSE_TOLERANCE),
                       torch.bfloat16: ((2e-2, 1.6e-2), LSE_TOLERANCE)}
# With q times 50 the scores are 50 times larger, and so is their float32 rounding (about 1e-7 of |s| per
# product summed): an error e in a score is a relative error e in its exp. Half types' tolerances for out hold it.
LARGE_TOLERANCE = {**TOLERANCE, torch.float32: ((1e-3, 1e-4), LARGE_LSE_TOLERANCE),
                   torch.float16: ((4e-3, 2e-3), LARGE_LSE_TOLERANCE), torch.bfloat16: ((2e-2, 1.6e-2), LARGE_LSE_TOLERANCE)}
HALF_DTYPES = (torch.bfloat16, torch.float16)
TENSOR_CORES = Needs((8, 0), "mma.sync m16n8k16 on fp16/bf16 and cp.async")  # the launchers say the same
HOPPER = Needs((9, 0), "TMA, mbarrier transactions and wgmma", only_major=True)  # attention4 (sm_90a): lesson 13's gate


def default_scale(q: torch.Tensor) -> float:
    """1 / sqrt(D), the softmax scale of scaled dot-product attention."""
    return 1.0 / math.sqrt(q.shape[-1]) if q.shape[-1] else 1.0


def causal_mask(tq: int, tk: int, device) -> torch.Tensor:
    """[Tq, Tk] bool, True where query i may attend key j: j <= i + (Tk - Tq)."""
    i = torch.arange(tq, device=device)[:, None]
    j = torch.arange(tk, device=device)[None, :]
    return j <= i + (tk - tq)


def _grouped(t: torch.Tensor, hq: int) -> torch.Tensor:
    """k or v [B, Hkv, T, D] repeated to Hq heads: head h of the result is head h // (Hq // Hkv)."""
    return t.repeat_interleave(hq // t.shape[1], dim=1)


def _probabilities(q, k, causal: bool, scale: float):
    """(P, lse) in float64: the softmax of the scaled, masked scores and its log-sum-exp; P's fully masked rows 0."""
    s = (q.double() @ _grouped(k, q.shape[1]).double().transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~causal_mask(q.shape[2], k.shape[2], q.device), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # -inf for a row with nothing to attend (and for Tk == 0)
    finite = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    return torch.exp(s - finite[..., None]), lse  # exp(-inf - 0) = 0: no NaN from -inf - -inf


def attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                  scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse): softmax(scale * q k^T, masked) v in float64, out rounded once to q's dtype, lse in float32."""
    scale = default_scale(q) if scale is None else scale
    p, lse = _probabilities(q, k, causal, scale)
    out = p @ _grouped(v, q.shape[1]).double()
    return out.to(q.dtype), lse.float()


def _ungrouped_sum(t: torch.Tensor, hkv: int) -> torch.Tensor:
    """[B, Hq, T, D] summed over each group of query heads to [B, Hkv, T, D] (the gradient of _grouped)."""
    b, hq, n, d = t.shape
    return t.reshape(b, hkv, hq // hkv, n, d).sum(dim=2)


def attention_backward_ref(q, k, v, out, lse, dout, causal: bool = False, scale: float | None = None):
    """(dq, dk, dv) in float64 rounded to the inputs' dtype, by the formulas the backward kernels use:
    P = exp(S - lse), dV = P^T dO, dP = dO V^T, D_i = rowsum(dO * O), dS = P * (dP - D), dQ = scale dS K,
    dK = scale dS^T Q (dK and dV summed over the query heads of a group). `out` and `lse` are unused: the
    reference recomputes them in float64, so that the kernels' rounding of O does not hide in the reference."""
    scale = default_scale(q) if scale is None else scale
    del out, lse
    p, _ = _probabilities(q, k, causal, scale)
    kk, vv, do = _grouped(k, q.shape[1]).double(), _grouped(v, q.shape[1]).double(), dout.double()
    o = p @ vv
    dp = do @ vv.transpose(-1, -2)
    ds = p * (dp - (do * o).sum(dim=-1, keepdim=True))
    dq = scale * ds @ kk
    dk = scale * ds.transpose(-1, -2) @ q.double()
    dv = p.transpose(-1, -2) @ do
    hkv = k.shape[1]
    return dq.to(q.dtype), _ungrouped_sum(dk, hkv).to(k.dtype), _ungrouped_sum(dv, hkv).to(v.dtype)


def qkv(logit_scale: float = 1.0) -> Callable:
    """Inputs for check() on (B, Hq, Hkv, Tq, Tk, D): q, k, v standard normal, q times `logit_scale`. With a
    logit_scale other than 1 (the large set) query 0 of every head also scores below -100 against every key (k's
    first feature made positive, q's first large and negative, the rest of q's row 0): every exp(s) of that row is
    0 in float32, so a running max started from 0 instead of -inf divides 0 by 0, while the true softmax of the row
    is well defined. (Only in the large set: float32's rounding of scores that large is beyond the normal set's
    tolerance.)"""
    def make(size, dtype, device):
        b, hq, hkv, tq, tk, d = size
        q = random_tensor((b, hq, tq, d), dtype, device) * logit_scale
        k = random_tensor((b, hkv, tk, d), dtype, device)
        v = random_tensor((b, hkv, tk, d), dtype, device)
        if logit_scale != 1.0 and tq and tk and d:
            k[..., 0] = k[..., 0].abs() + 0.5
            q[:, :, 0, :] = 0
            q[:, :, 0, 0] = -250.0 / default_scale(q)  # scale * q0 * k0 <= -125
        return [q, k, v]
    return make


def outputs(inputs: list[torch.Tensor]) -> list[tuple[tuple[int, ...], torch.dtype]]:
    """The out-variant's outputs: out like q, lse [B, Hq, Tq] in float32."""
    q = inputs[0]
    return [(tuple(q.shape), q.dtype), (tuple(q.shape[:3]), torch.float32)]


def _label(size, causal: bool, large: bool) -> str:
    b, hq, hkv, tq, tk, d = size
    heads = f"H{hq}" if hq == hkv else f"H{hq}/{hkv}"
    return f"B{b} {heads} Tq{tq} Tk{tk} D{d}{' causal' if causal else ''}{f' q*{LARGE:g}' if large else ''}"


def _relabelled(report: Report, causal: bool, large: bool) -> Report:
    """The report with each case's size shown as its shape, masking and input set (the report's size column)."""
    for case in report.cases:
        case.size = _label(case.size, causal, large)
    return report


def check_attention(fn: Callable, shapes: Iterable = SHAPES, *, dtypes=(torch.float32,), causal=(False, True),
                    name: str | None = None, backend: str | None = None, quiet: bool = False,
                    raise_on_fail: bool = False, orders: Sequence[str] | None = None, large: bool = True) -> Report:
    """check() of an out-variant attention fn(q, k, v, causal, scale, out, lse) against attention_ref, masked and
    not, with scale 1 / sqrt(D); with `large`, once more on q times LARGE (in the first thread order only: the
    large values test the arithmetic, not the barriers; float32 within LARGE_TOLERANCE). The report names each
    case by its shape and input set."""
    shapes = list(shapes)
    reports = []
    for is_causal in causal:
        def op(q, k, v, out, lse, is_causal=is_causal):
            return fn(q, k, v, is_causal, default_scale(q), out, lse)

        def ref(q, k, v, is_causal=is_causal):
            return attention_ref(q, k, v, is_causal)

        sets = [(1.0, orders, ATTENTION_TOLERANCE)]
        if large:
            sets.append((LARGE, (orders or ("forward",))[:1], LARGE_TOLERANCE))
        for logit_scale, its_orders, tolerance in sets:
            report = check(op, ref, qkv(logit_scale), out=outputs, out_names=("out", "lse"), sizes=shapes,
                           dtypes=dtypes, tolerance=tolerance, name=name, backend=backend, quiet=True,
                           orders=its_orders)
            reports.append(_relabelled(report, is_causal, logit_scale != 1.0))
    return merge(name or reports[0].name, reports, quiet=quiet, raise_on_fail=raise_on_fail)


def backward_inputs(causal: bool, logit_scale: float = 1.0) -> Callable:
    """Inputs for check() of a backward on (B, Hq, Hkv, Tq, Tk, D): qkv()'s q, k and v, the forward's out (rounded to
    q's dtype) and lse from attention_ref with the same masking, and a standard-normal dout."""
    make = qkv(logit_scale)

    def inputs(size, dtype, device):
        q, k, v = make(size, dtype, device)
        out, lse = attention_ref(q, k, v, causal)
        return [q, k, v, out, lse, random_tensor(tuple(q.shape), dtype, device)]
    return inputs


def gradients(inputs: list[torch.Tensor]) -> list[tuple[tuple[int, ...], torch.dtype]]:
    """The backward out-variant's outputs: dq like q, dk like k, dv like v."""
    return [(tuple(t.shape), t.dtype) for t in inputs[:3]]


# A gradient sums a product over every query (dK, dV) or key (dQ) on top of the forward's roundings.
BACKWARD_TOLERANCE = {**ATTENTION_TOLERANCE, torch.float32: (1e-4, 1e-5), torch.float16: (1e-2, 5e-3),
                      torch.bfloat16: (5e-2, 3e-2)}


# The large set (q times 50, and query 0 scoring about -125): P = exp(s - lse) must be recomputed against lse, as
# exp(s) alone overflows. Each tolerance is 3-4 times the largest error the variants showed over ten random draws of
# the checks' shapes. dk = scale dS^T q carries q's size (row 0 holds -2000 at D 64), so its absolute tolerance is in
# those units: for dk the large set catches NaN, inf and gross errors, the normal set the rest.
LARGE_BACKWARD_TOLERANCE = {torch.float32: ((1e-4, 2e-4), (1e-4, 6e-3), (1e-4, 6e-4)),
                            torch.float16: ((1e-2, 1e-2), (1e-2, 5.0), (1e-2, 4e-3)),
                            torch.bfloat16: ((5e-2, 8e-2), (5e-2, 30.0), (5e-2, 3e-2))}
LARGE_BACKWARD_SEED = 12


def check_attention_backward(fn: Callable, shapes: Iterable = SHAPES, *, dtypes=(torch.float32,),
                             causal=(False, True), name: str | None = None, backend: str | None = None,
                             quiet: bool = False, raise_on_fail: bool = False,
                             orders: Sequence[str] | None = None, large: bool = True) -> Report:
    """check() of an out-variant backward fn(q, k, v, out, lse, dout, causal, scale, dq, dk, dv) against
    attention_backward_ref, masked and not, with scale 1 / sqrt(D); with `large`, once more on q times LARGE (in the
    first thread order only, within LARGE_BACKWARD_TOLERANCE). The out and lse it is given come from the reference
    forward of the same masking and inputs."""
    shapes = list(shapes)
    reports = []
    for is_causal in causal:
        def op(q, k, v, out, lse, dout, dq, dk, dv, is_causal=is_causal):
            return fn(q, k, v, out, lse, dout, is_causal, default_scale(q), dq, dk, dv)

        def ref(q, k, v, out, lse, dout, is_causal=is_causal):
            return attention_backward_ref(q, k, v, out, lse, dout, is_causal)

        sets = [(1.0, orders, BACKWARD_TOLERANCE, None)]
        if large:  # one fixed draw: the set is there for overflow and gross errors, not to sample the roundings
            sets.append((LARGE, (orders or ("forward",))[:1], LARGE_BACKWARD_TOLERANCE, LARGE_BACKWARD_SEED))
        for logit_scale, its_orders, tolerance, seed in sets:
            report = check(op, ref, backward_inputs(is_causal, logit_scale), out=gradients,
                           out_names=("dq", "dk", "dv"), sizes=shapes, dtypes=dtypes, tolerance=tolerance, name=name,
                           backend=backend, quiet=True, orders=its_orders, seed=seed)
            reports.append(_relabelled(report, is_causal, logit_scale != 1.0))
    return merge(name or reports[0].name, reports, quiet=quiet, raise_on_fail=raise_on_fail)


_registered: set[str] = set()


def heads_like(t: torch.Tensor) -> torch.Tensor:
    """An empty tensor of t's shape [B, H, T, D] laid out as the functional ops lay out out, dq, dk and dv (the
    .cu's empty_heads_like; SDPA's flash backend does the same): empty_like of t viewed as [B, T, H, D], which keeps
    the order of t's dimensions in memory and packs them. Contiguous in, contiguous out; a model's transposed views of
    its [B, T, 3 C] projection give outputs that are [B, T, H, D] in memory, whose transpose back needs no copy."""
    return torch.empty_like(t.transpose(1, 2)).transpose(1, 2)


def register_attention(ext) -> None:
    """Give `ext`'s functional attention op its fake kernels and its derivative (the lesson 03 route); once per
    build. The op returns (out, lse); lse is what the backward needs, and it is not differentiable here."""
    ns = ext.ns
    if ns in _registered:
        return
    ops = getattr(torch.ops, ns)

    @torch.library.register_fake(f"{ns}::attention")
    def _(q, k, v, causal, scale):
        return heads_like(q), q.new_empty(q.shape[:3], dtype=torch.float32)

    @torch.library.register_fake(f"{ns}::attention_backward")
    def _(q, k, v, out, lse, dout, causal, scale):
        return heads_like(q), heads_like(k), heads_like(v)

    def setup_context(ctx, inputs, output):
        q, k, v, causal, scale = inputs
        out, lse = output
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.scale = causal, scale
        ctx.mark_non_differentiable(lse)

    def backward(ctx, dout, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = ops.attention_backward(q, k, v, out, lse, dout, ctx.causal, ctx.scale)
        return dq, dk, dv, None, None

    torch.library.register_autograd(f"{ns}::attention", backward, setup_context=setup_context)
    _registered.add(ns)


def model_kernels(ext):
    """Lesson 10's model pieces (lessons/10_model/gpt.py's Kernels) with this lesson's attention: layernorm and bias +
    GELU as its SDPA twin runs them (PyTorch's), the causal attention through the op. So a model with these against
    gpt.SDPA differs in the attention alone. register_attention(ext) first."""
    from .lesson10 import gpt_module

    gpt = gpt_module()

    def attend(q, k, v, scale):  # the model's q, k, v are transposed views of its projection: the op takes them
        return attention(ext, q, k, v, is_causal=True, scale=scale)
    return gpt.Kernels("attention op", gpt.SDPA.layernorm, attend, gpt.SDPA.bias_gelu)


def attention(ext, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, is_causal: bool = False,
              scale: float | None = None) -> torch.Tensor:
    """The lesson's attention in scaled_dot_product_attention's form: the output only, differentiable
    (register_attention(ext) first)."""
    out, _ = getattr(torch.ops, ext.ns).attention(q, k, v, is_causal, default_scale(q) if scale is None else scale)
    return out


# ---------------------------------------------------------------------------------------------
# The exercise: flash_online.cu, the online update of a thread-per-row fused attention in float32.

# On the simulator the self-check also profiles one causal shape and counts its global loads. Tq 128 and Tk 80 put
# the diagonal at j <= i - 48: the block of rows 0-63 attends to the first 16 keys (one tile of 16), the block of rows
# 64-127 to all 80 (five tiles). Loading a block's tiles past its last row's diagonal gives the right values (they are
# masked for every row of the block) at the cost of their loads: 10 tiles of K and V instead of 6.
PROFILE_SIZE = (1, 1, 1, 128, 80, 8)
SOLUTION_GLOBAL_LOADS = 224  # warp-level requests of the solution on PROFILE_SIZE: q once, 6 tiles of K and V


def causal_loads(fn: Callable):
    """(global load requests, the profile) of a sim-loaded flash_online-like fn, causal, on PROFILE_SIZE."""
    from ..sim.profile import profile

    q, k, v = qkv()(PROFILE_SIZE, torch.float32, "cpu")
    report = profile(fn, q, k, v, True, default_scale(q), torch.empty_like(q), q.new_empty(q.shape[:3]))
    return sum(r.requests for r in report.rows if r.kind == "global load"), report


def check_causal_tiles(fn: Callable, name: str = "causal tiles") -> Report:
    """On the simulator: causal blocks load only the key tiles up to their last row's diagonal. One case on
    PROFILE_SIZE: no more global loads than the solution's (SOLUTION_GLOBAL_LOADS)."""
    case = Case(_label(PROFILE_SIZE, True, False) + " profile", torch.float32, part="profile")
    report = Report(name, [case])
    try:
        got, profiled = causal_loads(fn)
    except Exception as e:  # noqa: BLE001 - the report says what went wrong, as a failing case does
        return profile_raised(report, case, e)
    if got > SOLUTION_GLOBAL_LOADS:
        case.passed, case.diagnosis = False, Diagnosis.ACCESS_PATTERN
        case.problem = "more global loads than the solution's: causal blocks load key tiles past their diagonal"
        case.detail = (f"the simulator's access profile, causal, Tq 128, Tk 80, shows {got} global load requests (each "
                       f"a warp's); the solution's shows {SOLUTION_GLOBAL_LOADS}: the rows 0-63 need one tile of keys, "
                       "the rows 64-127 five. By line:\n" + str(profiled))
        report.hints.append(HINTS[Diagnosis.ACCESS_PATTERN])
    return report


def _run_flash_online(ext, backend) -> Report:
    values = check_attention(ext.flash_online, name="flash_online", backend=backend, quiet=True)
    parts = [values]
    if values.passed:  # the load count is the simulator's, on a GPU too
        simulated = on_the_simulator(ext, "flash_online", backend)
        parts.append(check_causal_tiles(simulated, name="flash_online causal tiles"))
    return merge("flash_online", parts, quiet=False)


EXERCISES = [
    Exercise("12", "flash_online", "flash_online.cu", _run_flash_online, hints=[
        Hint("l and o are sums over the keys seen so far, of exp(s - m) and of exp(s - m) * v, both taken against the "
             "running max m. A tile may bring a larger max: before its keys are added, l and o must be moved onto the "
             "new max. By what single factor? (Lesson 07's merge did the same to a sum.) Then each key of the tile "
             "adds its own exp(s - new max) to l and that times its row of V to o. At the end, out = o / l.",
             answers=(Diagnosis.WRONG_VALUES, Diagnosis.UNWRITTEN)),
        Hint("NaN, or inf: before its first key a row has m = -inf. If a whole tile is masked for it too (causal rows "
             "near the top, or Tq > Tk), the tile's max is -inf as well, and m - m_new is -inf - -inf = NaN: skip such "
             "a tile (`continue`). A row that never met a key ends with l = 0: its out is 0 (not o / 0) and its lse "
             "-inf; any other row's lse is m + log(l), the log of the sum of exp(s) over its keys.",
             answers=(Diagnosis.NAN_WHERE_REFERENCE_IS_NOT, Diagnosis.NUMBER_WHERE_REFERENCE_IS_NAN),
             parts=("lse",)),
        Hint("The causal tile bound: the block's last row is min(i0 + ROWS, Tq) - 1, and it attends to the keys j <= "
             "row + shift (shift = Tk - Tq), so to min(Tk, row + shift + 1) keys: that many keys take ceil(keys / BC) "
             "tiles; none when keys <= 0. A bound one tile short drops the last keys of the rows below the diagonal; "
             "no bound at all gets the values right but loads (and masks) every tile past the diagonal.",
             answers=(Diagnosis.ACCESS_PATTERN,)),
        "The update: float m_new = m; for (c) m_new = fmaxf(m_new, s[c]); if (m_new == -INFINITY) continue; "
        "const float alpha = __expf(m - m_new); l *= alpha; for (d) o[d] *= alpha; for (c) { const float p = "
        "__expf(s[c] - m_new); l += p; for (d) o[d] += p * Vs[c][d]; } m = m_new;   The end: inv = l > 0 ? 1 / l : 0; "
        "out[q_at + (int64_t)i * D + d] = o[d] * inv for d < D; lse[bh * Tq + i] = l > 0 ? m + logf(l) : -INFINITY. "
        "(kernels/reference/12_attention.cu's attention2 does the same with one key at a time.)",
    ]),
]


# ---------------------------------------------------------------------------------------------
# The reference file's variants, as `make profile KERNEL=...` (Nsight Compute) runs them. A size is (B, H, T, D):
# self-attention, not causal, as many key/value heads as query heads.

GPU_SIZE = (4, 16, 4096, 128)


def _forward_args(size, dtype, device) -> tuple:
    b, h, t, d = size
    q, k, v = (torch.randn(b, h, t, d, device=device).to(dtype) for _ in range(3))
    return q, k, v, False, default_scale(q), torch.empty_like(q), q.new_empty((b, h, t), dtype=torch.float32)


def _backward_args(size, dtype, device) -> tuple:
    """Inputs of the right shapes and sizes for a backward's profile, not a forward's outputs: computing those by the
    float64 reference would take tens of GB at GPU_SIZE. lse = log(T) is the log-sum-exp of scores near 0."""
    b, h, t, d = size
    q, k, v = (torch.randn(b, h, t, d, device=device).to(dtype) for _ in range(3))
    out = (torch.randn(b, h, t, d, device=device) * 0.1).to(dtype)
    lse = torch.full((b, h, t), math.log(max(t, 1)), device=device)
    return (q, k, v, out, lse, torch.randn_like(q), False, default_scale(q), torch.empty_like(q), torch.empty_like(k),
            torch.empty_like(v))


ALL_DTYPES = (torch.float32, *HALF_DTYPES)
VARIANTS = [
    Variant("attention1", _forward_args, ALL_DTYPES),
    Variant("attention2", _forward_args, ALL_DTYPES),
    Variant("attention3", _forward_args, HALF_DTYPES, needs=TENSOR_CORES),
    Variant("attention4", _forward_args, (torch.bfloat16,), needs=HOPPER),
    Variant("attention_backward1", _backward_args, ALL_DTYPES),
    Variant("attention_backward2", _backward_args, HALF_DTYPES, needs=TENSOR_CORES),
    Variant("attention_backward3", _backward_args, HALF_DTYPES, needs=TENSOR_CORES),
    Variant("attention_backward4", _backward_args, (torch.bfloat16,), needs=HOPPER),
    Variant("attention_backward5", _backward_args, (torch.bfloat16,), needs=HOPPER),
]
# The functional forms need no gate: they take attention4 on an H100 (bf16, an sm_90a build), attention3 and
# attention_backward3 where the GPU and the input allow (fp16 or bf16, D 64 or 128, compute capability 8.0 or later),
# the CUDA-core variants elsewhere.
FORWARD = [v.name for v in VARIANTS if v.args is _forward_args]
BACKWARD = [v.name for v in VARIANTS if v.args is _backward_args]
