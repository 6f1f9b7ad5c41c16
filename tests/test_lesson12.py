"""Lesson 12: attention as one fused kernel. The reference against PyTorch's own attention and autograd; every
forward and backward variant against the reference (masked and not, ragged lengths, grouped heads, rows that
attend to nothing, large logits); bad inputs; the op's autograd registration, opcheck and torch.compile; the
exercise and its teeth."""
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from kernels import load
from kernels.check import thorough
from kernels.exercises import check_exercise, find, fitting_hint
from kernels.lessons import lesson12
from kernels.lessons.lesson12 import (HALF_DTYPES, SHAPES, TENSOR_CORE_SHAPES, attention_backward_ref, attention_ref,
                                      causal_mask, check_attention, check_attention_backward, default_scale, qkv,
                                      register_attention)
from planting import checked_in_notebook, plant, self_check, toolkit_beyond

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "12_attention" / "flash_online.cu"
# The reference variants run in one thread order: each order is a full run of every case, and the race check
# (small cases, first order) finds what the other orders would show. The exercise and its planted bugs keep all three.
ONE_ORDER = ("forward",)
# From the variants' own declarations (kernels/lessons/lesson12.py): the tensor-core ones take no float32, the Hopper
# ones bf16 only
TENSOR_CORE_VARIANTS = tuple(v.name for v in lesson12.VARIANTS if torch.float32 not in v.dtypes)
HOPPER_VARIANTS = tuple(v.name for v in lesson12.VARIANTS if v.needs is lesson12.HOPPER)


def dtypes_of(name: str) -> tuple:
    """float32 and bf16 for the CUDA-core variants, bf16 and fp16 for the tensor-core ones, bf16 for Hopper's."""
    if name in HOPPER_VARIANTS:
        return (torch.bfloat16,)
    return HALF_DTYPES if name in TENSOR_CORE_VARIANTS else (torch.float32, torch.bfloat16)


def shapes_of(name: str) -> tuple:
    return TENSOR_CORE_SHAPES if name in TENSOR_CORE_VARIANTS else SHAPES


@pytest.fixture(scope="module")
def ext():
    e = load("12")
    register_attention(e)
    return e


# ---------------------------------------------------------------------------------------------
# The reference, on PyTorch alone (no kernel).

@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("hq,hkv", [(4, 4), (4, 2), (3, 1)])
def test_the_reference_is_sdpa_when_queries_and_keys_are_as_many(causal, hq, hkv):
    q, k, v = (torch.randn(2, h, 37, 16, dtype=torch.float64) for h in (hq, hkv, hkv))
    out, lse = attention_ref(q, k, v, causal)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hq != hkv)
    torch.testing.assert_close(out, want)
    s = (q @ k.repeat_interleave(hq // hkv, 1).transpose(-1, -2)) * default_scale(q)
    if causal:
        s = s.masked_fill(~causal_mask(37, 37, "cpu"), float("-inf"))
    torch.testing.assert_close(lse, torch.logsumexp(s, -1).float())


def test_the_causal_mask_is_aligned_at_the_bottom_right():
    # 2 queries, 4 keys: the last query sees every key, the first all but the last
    assert causal_mask(2, 4, "cpu").tolist() == [[True, True, True, False], [True, True, True, True]]
    # 4 queries, 2 keys: the first two queries see nothing
    assert causal_mask(4, 2, "cpu").tolist() == [[False, False], [False, False], [True, False], [True, True]]


def test_a_query_that_attends_to_nothing_gets_zeros_and_a_log_sum_exp_of_minus_infinity():
    q, k, v = torch.randn(1, 1, 5, 8), torch.randn(1, 1, 3, 8), torch.randn(1, 1, 3, 8)
    out, lse = attention_ref(q, k, v, causal=True)  # queries 0 and 1 come before every key
    assert torch.equal(out[0, 0, :2], torch.zeros(2, 8)) and torch.isneginf(lse[0, 0, :2]).all()
    assert torch.isfinite(out).all() and torch.isfinite(lse[0, 0, 2:]).all()
    out, lse = attention_ref(q, k[:, :, :0], v[:, :, :0])  # no keys at all
    assert torch.equal(out, torch.zeros_like(out)) and torch.isneginf(lse).all()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tq,tk,hq,hkv", [(9, 9, 2, 2), (7, 12, 4, 2), (12, 5, 2, 1)])
def test_the_backward_reference_is_autograd_of_the_forward(causal, tq, tk, hq, hkv):
    q = torch.randn(2, hq, tq, 8, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(2, hkv, tk, 8, dtype=torch.float64, requires_grad=True) for _ in range(2))
    dout = torch.randn(2, hq, tq, 8, dtype=torch.float64)
    out, lse = attention_ref(q, k, v, causal)
    out.backward(dout)
    got = attention_backward_ref(q.detach(), k.detach(), v.detach(), out.detach(), lse, dout, causal)
    for g, w in zip(got, (q.grad, k.grad, v.grad)):
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("d", [40, 64, 128])
def test_the_large_inputs_make_query_0_score_below_minus_100_against_every_key(d):
    q, k, v = qkv(lesson12.LARGE)((2, 2, 1, 6, 9, d), torch.float32, "cpu")
    s = (q @ k.repeat_interleave(2, 1).transpose(-1, -2)) * default_scale(q)
    assert (s[:, :, 0] < -100).all() and (s[:, :, 1:] > 0).any()
    out, _ = attention_ref(q, k, v)
    assert torch.isfinite(out).all()  # the softmax of query 0 is well defined: the max makes it so


# ---------------------------------------------------------------------------------------------
# The kernels.

@checked_in_notebook  # in make test-all by the solution notebook's compared cells (tests/planting.py)
@pytest.mark.parametrize("name", lesson12.FORWARD)
def test_every_forward_variant_matches_the_reference_masked_and_not_on_awkward_shapes(ext, name):
    check_attention(getattr(ext, name), shapes_of(name), dtypes=dtypes_of(name), name=name, quiet=True,
                    raise_on_fail=True, orders=ONE_ORDER)


@checked_in_notebook
@pytest.mark.parametrize("name", lesson12.BACKWARD)
def test_every_backward_variant_matches_the_reference_masked_and_not_on_awkward_shapes(ext, name):
    check_attention_backward(getattr(ext, name), shapes_of(name), dtypes=dtypes_of(name), name=name, quiet=True,
                             raise_on_fail=True, orders=ONE_ORDER)


@pytest.mark.parametrize("name", ["attention_backward3", "attention_backward4"])
def test_the_deterministic_backward_gives_the_same_bits_on_every_run(ext, dev, name):
    if name == "attention_backward4" and dev.type != "cpu" and not _hopper(dev):
        pytest.skip("attention_backward4 needs an H100 (or the simulator)")
    # 512 keys: eight tiles of keys add into each row of dq (an atomics-based dq is seen to differ between runs on a
    # GPU from a few thousand keys; on the simulator blocks run in a fixed order, so only a GPU can fail this)
    q, k, v = qkv()((1, 4, 2, 512, 512, 64), torch.bfloat16, dev)
    out, lse = ext.attention(q, k, v, True, default_scale(q))
    dout = torch.randn_like(q)
    runs = []
    for _ in range(2):
        grads = [torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)]
        getattr(ext, name)(q, k, v, out, lse, dout, True, default_scale(q), *grads)
        runs.append(grads)
    for a, b in zip(*runs):
        assert torch.equal(a, b)


def _causal_backward_inputs(ext, shape, dev) -> tuple:
    """(q, k, v, scale, out, lse, dout) in bf16 for a causal backward on shape (B, Hq, Hkv, Tq, Tk, D)."""
    q, k, v = qkv()(shape, torch.bfloat16, dev)
    scale = default_scale(q)
    out, lse = ext.attention(q, k, v, True, scale)
    return q, k, v, scale, out, lse, torch.randn_like(q)


def _misaligned(t: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of t that starts one element past a 16-byte boundary."""
    buf = t.new_empty(t.numel() + 1)
    out = buf[1:].view(t.shape)
    out.copy_(t)
    return out


def _hopper(dev) -> bool:
    """Whether the device is a 9.x GPU (the simulator's is an H100 unless told otherwise)."""
    if dev.type == "cpu":
        from kernels.sim import knobs
        return knobs.capability_value(os.environ.get(knobs.CAPABILITY, "9.0")).startswith("9.")
    return torch.cuda.get_device_capability(dev)[0] == 9


@pytest.mark.parametrize("case", ["bf16 D64", "fp16 D64", "fp32", "bf16 D40", "bf16 misaligned"])
def test_the_functional_ops_name_the_variant_they_run_and_run_it(ext, dev, case):
    # the benchmark's bars name the variant from attention_variant / attention_backward_variant; 24 keys: one key tile,
    # so dq's atomics (backward1, backward5) add once and the bits compare. bf16 on an H100: attention4 forward,
    # attention_backward5 (4 under torch.use_deterministic_algorithms: the test below).
    dtype = {"fp32": torch.float32, "fp16 D64": torch.float16}.get(case, torch.bfloat16)
    q, k, v = qkv()((1, 2, 1, 33, 24, 40 if case == "bf16 D40" else 64), dtype, dev)
    if case == "bf16 misaligned":
        q = _misaligned(q)
    dout = torch.randn_like(q)
    tensor_cores = case in ("bf16 D64", "fp16 D64")
    fwd, bwd = ("attention3", "attention_backward3") if tensor_cores else ("attention2", "attention_backward1")
    if case == "bf16 D64" and _hopper(dev):
        fwd, bwd = "attention4", "attention_backward5"
    assert (ext.attention_variant(q, k, v), ext.attention_backward_variant(q, k, v, dout)) == (fwd, bwd)
    scale = default_scale(q)
    out, lse = ext.attention(q, k, v, True, scale)
    named = [torch.empty_like(out), torch.empty_like(lse)]
    getattr(ext, fwd)(q, k, v, True, scale, *named)
    assert torch.equal(out, named[0]) and torch.equal(lse, named[1])
    grads = ext.attention_backward(q, k, v, out, lse, dout, True, scale)
    named = [torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)]
    getattr(ext, bwd)(q, k, v, out, lse, dout, True, scale, *named)
    assert all(torch.equal(g, n) for g, n in zip(grads, named))


def test_under_deterministic_algorithms_the_functional_backward_runs_attention_backward4_and_repeats_its_bits(ext, dev):
    if not _hopper(dev):
        pytest.skip("attention_backward4 and 5 need an H100 (or the simulator)")
    # 512 keys: four key blocks add into each row of dq, in any order with attention_backward5's reductions
    q, k, v, scale, out, lse, dout = _causal_backward_inputs(ext, (1, 4, 2, 512, 512, 64), dev)
    assert ext.attention_backward_variant(q, k, v, dout) == "attention_backward5"
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        assert ext.attention_backward_variant(q, k, v, dout) == "attention_backward4"
        runs = [ext.attention_backward(q, k, v, out, lse, dout, True, scale) for _ in range(2)]
    finally:
        torch.use_deterministic_algorithms(was)
    named = [torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)]
    ext.attention_backward4(q, k, v, out, lse, dout, True, scale, *named)
    assert all(torch.equal(a, b) and torch.equal(a, n) for a, b, n in zip(*runs, named))


def test_attention_backward4_refuses_an_out_off_16_bytes_and_the_functional_op_copies_it(ext, dev):
    # the pre-pass reads out 16 bytes at a time: a view one element off would be a misaligned load on a GPU
    if not _hopper(dev):
        pytest.skip("attention_backward4 needs an H100 (or the simulator)")
    q, k, v, scale, out, lse, dout = _causal_backward_inputs(ext, (1, 2, 1, 33, 33, 64), dev)
    odd = _misaligned(out)
    grads = [torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)]
    with pytest.raises(RuntimeError, match="out must start on a 16-byte boundary"):
        ext.attention_backward4(q, k, v, odd, lse, dout, True, scale, *grads)
    want = ext.attention_backward(q, k, v, out, lse, dout, True, scale)
    got = ext.attention_backward(q, k, v, odd, lse, dout, True, scale)
    assert all(torch.equal(a, b) for a, b in zip(got, want))


# ---------------------------------------------------------------------------------------------
# The op: autograd, opcheck, torch.compile.

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_op_gradients_match_the_reference_for_grouped_heads_and_a_causal_mask(ext, dev, dtype):
    q, k, v = qkv()((1, 4, 2, 37, 37, 64), dtype, dev)
    dout = torch.randn_like(q)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    lesson12.attention(ext, *leaves, is_causal=True).backward(dout)
    want = attention_backward_ref(q, k, v, None, None, dout, True)
    tol = lesson12.BACKWARD_TOLERANCE[dtype]
    for leaf, w in zip(leaves, want):
        torch.testing.assert_close(leaf.grad, w, rtol=tol[0], atol=tol[1])


def test_the_op_passes_opcheck(ext, dev):
    q, k, v = (torch.randn(1, 2, 19, 16, device=dev, requires_grad=True) for _ in range(3))
    torch.library.opcheck(ext.attention, (q, k, v, True, 0.25))
    out, lse = ext.attention(q.detach(), k.detach(), v.detach(), True, 0.25)
    torch.library.opcheck(ext.attention_backward, (q.detach(), k.detach(), v.detach(), out, lse, torch.randn_like(out),
                                                   True, 0.25))


def test_the_op_takes_a_models_transposed_projection_and_lays_out_its_outputs_as_sdpa_does(ext, dev):
    """q, k and v as lesson 10's model makes them (slices of one projection [B, T, 3 C] viewed as [B, H, T, D]): the
    op takes them as they are (attention4 reads them in place, the other variants from copies); out and the gradients
    are [B, T, H, D] in memory, so their transposes back are contiguous (SDPA's flash backend does the same), and a
    contiguous input still gives contiguous outputs; the fake kernels agree (opcheck compares strides too)."""
    b, t, h, d = 2, 80, 2, 64
    proj = torch.randn(b, t, 3 * h * d, device=dev, dtype=torch.bfloat16)
    q, k, v = (x.view(b, t, h, d).transpose(1, 2) for x in proj.split(h * d, dim=2))
    out, lse = ext.attention(q, k, v, True, 0.125)
    assert out.transpose(1, 2).is_contiguous(), out.stride()
    want_out, want_lse = attention_ref(q, k, v, True, 0.125)
    (rtol, atol), (lse_rtol, lse_atol) = lesson12.ATTENTION_TOLERANCE[torch.bfloat16]
    torch.testing.assert_close(out, want_out, rtol=rtol, atol=atol)
    torch.testing.assert_close(lse, want_lse, rtol=lse_rtol, atol=lse_atol)
    # a head broadcast to every query head (stride 0) and a dout broadcast along T (a sum's backward): both taken,
    # from contiguous copies where the kernels cannot read them in place
    one = k[:, :1].expand(b, h, t, d)
    torch.testing.assert_close(ext.attention(q, one, one, True, 0.125)[0], attention_ref(q, one, one, True, 0.125)[0],
                               rtol=rtol, atol=atol)
    flat = torch.randn(b, h, 1, d, device=dev, dtype=torch.bfloat16).expand(b, h, t, d)
    for g, w in zip(ext.attention_backward(q, k, v, out, lse, flat, True, 0.125),
                    attention_backward_ref(q, k, v, None, None, flat, True, 0.125)):
        torch.testing.assert_close(g, w, rtol=lesson12.BACKWARD_TOLERANCE[torch.bfloat16][0],
                                   atol=lesson12.BACKWARD_TOLERANCE[torch.bfloat16][1])
    dout = torch.randn(b, t, h, d, device=dev, dtype=torch.bfloat16).transpose(1, 2)  # as the model's reshape hands it
    grads = ext.attention_backward(q, k, v, out, lse, dout, True, 0.125)
    want = attention_backward_ref(q, k, v, None, None, dout, True, 0.125)
    tol = lesson12.BACKWARD_TOLERANCE[torch.bfloat16]
    for g, w, what in zip(grads, want, ("dq", "dk", "dv")):
        assert g.transpose(1, 2).is_contiguous(), (what, g.stride())
        torch.testing.assert_close(g, w, rtol=tol[0], atol=tol[1], msg=what)
    contiguous = [x.contiguous() for x in (q, k, v)]
    out2, lse2 = ext.attention(*contiguous, True, 0.125)
    assert out2.is_contiguous() and torch.equal(out2, out)
    assert all(g.is_contiguous() for g in ext.attention_backward(*contiguous, out2, lse2, dout.contiguous(), True, 0.125))
    torch.library.opcheck(ext.attention, (q, k, v, True, 0.125))
    torch.library.opcheck(ext.attention_backward, (q, k, v, out, lse, dout, True, 0.125))


def test_the_op_compiles_with_fullgraph_forward_and_backward(ext, dev):
    def f(q, k, v):
        return lesson12.attention(ext, q * 2.0, k, v, is_causal=True).sum(dim=-1)

    q, k, v = (torch.randn(2, 2, 24, 32, device=dev, requires_grad=True) for _ in range(3))
    got = torch.compile(f, fullgraph=True)(q, k, v)
    got.sum().backward()
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    want = F.scaled_dot_product_attention(leaves[0] * 2.0, leaves[1], leaves[2], is_causal=True).sum(dim=-1)
    want.sum().backward()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    for t, w in zip((q, k, v), leaves):
        torch.testing.assert_close(t.grad, w.grad, rtol=1e-4, atol=1e-5)


def test_lesson_10s_model_on_this_attention_matches_its_sdpa_twin_in_loss_and_gradients(ext, dev):
    from kernels.lessons.lesson10 import gpt_module

    gpt = gpt_module()
    torch.manual_seed(0)
    sdpa = gpt.GPT(gpt.Config(d_model=64, n_head=2, n_layer=2, seq_len=40), gpt.SDPA).to(dev)
    mine = gpt.twin(sdpa, lesson12.model_kernels(ext))
    x, y = next(gpt.batches(gpt.text_bytes(dev), 3, 40, 1))
    losses = [gpt.loss_of(m, x, y) for m in (sdpa, mine)]
    for loss in losses:
        loss.backward()
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-6)
    for (name, a), b in zip(sdpa.named_parameters(), mine.parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-6, msg=name)


# ---------------------------------------------------------------------------------------------
# The exercise.

def test_the_flash_online_stub_fails_its_self_check_and_the_first_hint_is_the_plan():
    report = self_check("12", "flash_online", ROOT / "lessons" / "12_attention" / "flash_online.cu")
    assert not report.passed
    assert fitting_hint(find("12", "flash_online")[0], report) == 1


@checked_in_notebook
def test_the_flash_online_solution_passes_its_self_check():
    assert check_exercise("12", "flash_online", solution=True).passed


PLANTED = {
    # the running output is not moved onto the new max: its old terms keep the weight of the old one
    "no_o_rescale": ("    for (int d = 0; d < DMAX; ++d) o[d] *= alpha;\n", "", "elements differ", 1),
    # the output rescaled twice per tile
    "rescale_twice": ("o[d] *= alpha;", "o[d] *= alpha * alpha;", "elements differ", 1),
    # the causal bound one tile short where a row's last key starts a tile
    "causal_tile_short": ("(int)((keys + BC - 1) / BC)", "(int)(keys / BC)", "elements differ", 1),
    # the running max starts at 0: query 0's scores (all below -100) give exp(s - 0) = 0 for every key
    "max_from_zero": ("float m = -INFINITY, l = 0.0f;", "float m = 0.0f, l = 0.0f;", "elements differ", 1),
    # lse = log(sum exp(s - m)) without adding m back
    "lse_without_max": ("m + logf(l)", "logf(l)", "in lse", 1),
    # no skip of a tile that is masked for the row before its first key: exp(-inf - -inf) makes its o and l NaN
    "no_empty_tile_skip": ("    if (m_new == -INFINITY) continue;", "", "NaN", 2),
    # no causal bound: every block loads every tile (right values; the simulator's access profile counts the loads)
    "no_causal_bound": ("tiles = keys > 0 ? (int)((keys + BC - 1) / BC) : 0;", "tiles = keys > 0 ? tiles : 0;",
                        "global loads", 3),
}


def test_the_solution_makes_the_global_loads_its_self_check_compares_with():
    got, _ = lesson12.causal_loads(load(SOLUTION, "sim", quiet=True).flash_online)
    assert got == lesson12.SOLUTION_GLOBAL_LOADS


@pytest.mark.parametrize("bug", toolkit_beyond(PLANTED, keep=("no_o_rescale", "max_from_zero")))
def test_the_self_check_catches_a_planted_bug_with_its_diagnosis_and_the_hint_that_fits_it(bug):
    # no_causal_bound too on a GPU: the self-check counts the loads on the simulator there as well
    old, new, diagnosis, first_hint = PLANTED[bug]
    path = plant(SOLUTION, old, new, f"lesson12_flash_online_{bug}.cu")
    load(path)  # the planted file builds: the check below fails on its values, not on a compile error
    report = self_check("12", "flash_online", path)
    assert not report.passed
    assert any(diagnosis in c.problem for c in report.cases if not c.passed), str(report)
    assert fitting_hint(find("12", "flash_online")[0], report) == first_hint


# ---------------------------------------------------------------------------------------------
# Bad input.

def _forward_call(ext, name):
    op = getattr(ext, name)

    def call(q, k, v, out=None, lse=None):
        if name == "attention":
            return op(q, k, v, False, 0.125)
        out = torch.empty_like(q) if out is None else out
        lse = q.new_empty(q.shape[:3] if q.dim() == 4 else (1,), dtype=torch.float32) if lse is None else lse
        return op(q, k, v, False, 0.125, out, lse)
    return call


@pytest.mark.parametrize("name", [*lesson12.FORWARD, "attention"])
def test_bad_forward_inputs_are_refused_saying_what_was_expected(ext, dev, name):
    call = _forward_call(ext, name)
    dt = torch.bfloat16 if name in ("attention3", "attention4") else torch.float32
    q, k, v = (torch.randn(1, 4, 8, 64, device=dev, dtype=dt) for _ in range(3))
    said = (r"takes bfloat16 .*got Double" if name == "attention4" else
            r"q must be (float32, )?float16 or bfloat16.*got Double")
    with pytest.raises(RuntimeError, match=said):
        call(q.double(), k.double(), v.double())
    with pytest.raises(RuntimeError, match=r"q must have 4 dimensions \[B, Hq, Tq, D\], got shape \[4, 8, 64\]"):
        call(q[0].contiguous(), k, v)
    transposed = k.transpose(1, 2).contiguous().transpose(1, 2)  # a [B, T, H, D] tensor viewed as [B, H, T, D]
    if name in ("attention4", "attention"):  # both take any layout whose rows are contiguous, 16 bytes apart
        if name == "attention" or _hopper(dev):
            out = torch.empty_like(q)
            got = call(q, transposed, v, out=out)
            torch.testing.assert_close(got[0] if name == "attention" else out, attention_ref(q, k, v, scale=0.125)[0],
                                       atol=2e-2, rtol=2e-2)
        if name == "attention4":
            ragged = torch.randn(1, 4, 8, 68, device=dev, dtype=dt)[..., :64]  # rows 136 bytes apart
            with pytest.raises(RuntimeError, match="k's rows must be contiguous and start a multiple of 16 bytes apart"):
                call(q, ragged, v)
            with pytest.raises(RuntimeError, match="k's rows must be contiguous .*no stride of 0"):
                call(q, k[:, :1].expand(1, 4, 8, 64), v)  # one head broadcast (stride 0): for the functional op
            shared = torch.empty(1, 1, 8, 64, device=dev, dtype=dt).expand(1, 4, 8, 64)
            with pytest.raises(RuntimeError, match="out's rows must be contiguous"):
                call(q, k, v, out=shared)
            overlapping = torch.empty(1, 5, 8, 64, device=dev, dtype=dt).as_strided((1, 4, 8, 64), (512, 64, 64, 1))
            with pytest.raises(RuntimeError, match="out must not overlap itself"):
                call(q, k, v, out=overlapping)
    else:
        with pytest.raises(RuntimeError, match="k must be contiguous.*call .contiguous\\(\\) first"):
            call(q, transposed, v)
    with pytest.raises(RuntimeError, match=r"q's heads \(Hq = 4\) must be a multiple of k's and v's \(Hkv = 3\)"):
        call(q, k[:, :3].contiguous(), v[:, :3].contiguous())
    with pytest.raises(RuntimeError, match=r"k and v must have the same shape"):
        call(q, k, v[:, :, :5].contiguous())
    with pytest.raises(RuntimeError, match="q, k and v must have one dtype"):
        call(q, k.to(torch.float16), v)
    if name in ("attention3", "attention4"):
        with pytest.raises(RuntimeError, match="takes head dim D = 64 or 128, got D = 40"):
            call(q[..., :40].contiguous(), k[..., :40].contiguous(), v[..., :40].contiguous())
    if name != "attention":
        with pytest.raises(RuntimeError, match=r"out must have q's shape \[1, 4, 8, 64\]"):
            call(q, k, v, out=torch.empty(1, 4, 8, 32, device=dev, dtype=dt))
        with pytest.raises(RuntimeError, match=r"lse must be float32 of shape \[B, Hq, Tq\] = \[1, 4, 8\]"):
            call(q, k, v, lse=torch.empty(1, 4, 8, device=dev, dtype=dt if dt != torch.float32 else torch.float64))


@pytest.mark.parametrize("name", lesson12.BACKWARD)
def test_bad_backward_inputs_are_refused_saying_what_was_expected(ext, dev, name):
    dt = torch.bfloat16 if name in TENSOR_CORE_VARIANTS else torch.float32
    q, k, v = (torch.randn(1, 2, 8, 64, device=dev, dtype=dt) for _ in range(3))
    out, lse = attention_ref(q, k, v)
    grads = [torch.empty_like(t) for t in (q, k, v)]
    op = getattr(ext, name)
    with pytest.raises(RuntimeError, match=r"lse must be float32 of shape \[B, Hq, Tq\] = \[1, 2, 8\]"):
        op(q, k, v, out, lse[..., :4].contiguous(), torch.randn_like(q), False, 0.125, *grads)
    with pytest.raises(RuntimeError, match=r"dout must have q's shape \[1, 2, 8, 64\]"):
        op(q, k, v, out, lse, torch.randn(1, 2, 8, 32, device=dev, dtype=dt), False, 0.125, *grads)
    with pytest.raises(RuntimeError, match=r"dk must have k's shape"):
        op(q, k, v, out, lse, torch.randn_like(q), False, 0.125, grads[0], grads[1][:, :1].contiguous(), grads[2])
    if name in HOPPER_VARIANTS and _hopper(dev):  # an output that overlaps itself would be written twice
        with pytest.raises(RuntimeError, match=r"dk's rows must be contiguous .*no stride of 0"):
            op(q, k, v, out, lse, torch.randn_like(q), False, 0.125, grads[0], grads[1][:, :1].expand_as(k), grads[2])


def test_a_tensor_on_the_wrong_device_is_refused(ext, dev):
    if dev.type == "cpu":
        pytest.skip("the simulator takes CPU tensors; there is no wrong device to pass")
    q = torch.randn(1, 1, 8, 64)
    with pytest.raises(RuntimeError, match="q must be a CUDA tensor"):
        ext.attention2(q, q.to(dev), q.to(dev), False, 0.125, torch.empty_like(q, device=dev),
                       torch.empty(1, 1, 8, device=dev))


def test_a_gpu_below_8_0_is_refused_by_the_tensor_core_variants_even_for_an_empty_call(ext, dev):
    if dev.type != "cpu":
        pytest.skip("the simulator's capability is what this test lowers")
    from kernels.sim import knobs

    q, k, v = (torch.randn(1, 1, 8, 64, dtype=torch.bfloat16) for _ in range(3))
    out, lse = torch.empty_like(q), torch.empty(1, 1, 8)
    with knobs.set(capability=(7, 5)):
        for keys in (8, 0):  # no keys: nothing to compute, and still the same answer as a full call
            with pytest.raises(RuntimeError, match="needs compute capability 8.0"):
                ext.attention3(q, k[:, :, :keys].contiguous(), v[:, :, :keys].contiguous(), False, 0.125, out, lse)
            grads = [torch.empty_like(t) for t in (q, k[:, :, :keys], v[:, :, :keys])]
            with pytest.raises(RuntimeError, match="needs compute capability 8.0"):
                ext.attention_backward3(q, k[:, :, :keys].contiguous(), v[:, :, :keys].contiguous(), out, lse,
                                        torch.randn_like(q), False, 0.125, *grads)
        out2, _ = ext.attention(q, k, v, False, 0.125)  # the functional form runs attention2 there instead
        torch.testing.assert_close(out2, attention_ref(q, k, v)[0])


def test_the_hopper_variants_refuse_float16_and_a_gpu_before_hopper_even_for_an_empty_call(ext, dev):
    if dev.type != "cpu" and not _hopper(dev):
        pytest.skip("attention4 and attention_backward4 need an H100 (or the simulator)")
    q, k, v = (torch.randn(1, 1, 8, 64, device=dev, dtype=torch.float16) for _ in range(3))
    lse = torch.zeros(1, 1, 8, device=dev)

    def backward(q, k, v):
        grads = [torch.empty_like(t) for t in (q, k, v)]
        ext.attention_backward4(q, k, v, q.clone(), lse, torch.randn_like(q), False, 0.125, *grads)

    with pytest.raises(RuntimeError, match=r"`attention4` takes bfloat16 .*attention3 takes float16 too\), got Half"):
        ext.attention4(q, k, v, False, 0.125, torch.empty_like(q), torch.empty(1, 1, 8, device=dev))
    with pytest.raises(RuntimeError, match=r"`attention_backward4` takes bfloat16 .*attention_backward3 takes float16 too\), got Half"):
        backward(q, k, v)
    if dev.type != "cpu":
        return
    from kernels.sim import knobs

    q, k, v = (t.bfloat16() for t in (q, k, v))
    with knobs.set(capability=(8, 0)):
        for keys in (8, 0):
            kk, vv = k[:, :, :keys].contiguous(), v[:, :, :keys].contiguous()
            with pytest.raises(RuntimeError, match="needs compute capability 9.0"):
                ext.attention4(q, kk, vv, False, 0.125, torch.empty_like(q), torch.empty(1, 1, 8))
            with pytest.raises(RuntimeError, match="needs compute capability 9.0"):
                backward(q, kk, vv)
        # the functional forms run attention3 and attention_backward3 there
        assert ext.attention_variant(q, k, v) == "attention3"
        assert ext.attention_backward_variant(q, k, v, q) == "attention_backward3"


# Bugs planted in attention4 (a copy of the reference file, built for the simulator): its check must fail on each.
REFERENCE = ROOT / "kernels" / "reference" / "12_attention.cu"
PLANTED_REFERENCE = {
    # O is never moved onto a new running max: right only while the first tile holds every row's max
    "attention4_no_rescale": ("          for (int r = 0; r < D / 2; ++r) o[r] *= alpha[r / 2 % 2];\n", "", "elements differ"),
    # the wait for a stage of K one phase off: waiting for parity 1 while phase 0 is under way asks for a phase after
    # the one the producer's copy completes, which never comes (the simulator names the deadlock)
    # the last consumer never hands the turn back to the first (Turns::pass): consumer 0 waits at its named barrier
    # for ever (the simulator names the deadlock)
    "attention4_turn_kept": ("if (on && !(last && c == N - 1)) named_barrier_arrive",
                             "if (on && c != N - 1) named_barrier_arrive", "deadlock"),
    "attention4_wrong_parity": ("mbar_wait(&k_full[t % STAGES4], t / STAGES4 % 2);",
                                "mbar_wait(&k_full[t % STAGES4], (t / STAGES4 + 1) % 2);", "deadlock"),
    # causal: the block's key tiles counted up to its first row's diagonal instead of its last row's
    "attention4_causal_tiles": ("keys_of_row(min(i0 + C::BM, Tq) - 1, Tq, Tk, causal) + BN4 - 1) / BN4;",
                                "keys_of_row(i0, Tq, Tk, causal) + BN4 - 1) / BN4;",
                                "elements differ"),
    # V's stage handed back to the producer before the wait that completes the P V wgmma reading it: the producer's
    # TMA refills the stage under that wgmma (the simulator names the copy and the wgmma; a GPU reads wrong values)
    "attention4_early_release": ("          softmax(mine - 1 - t, alpha);   // while the P V product runs\n"
                                 "          wgmma_wait<0>();\n"
                                 "          release(&v_empty[(u - 1) % STAGES4]);\n",
                                 "          release(&v_empty[(u - 1) % STAGES4]);\n"
                                 "          softmax(mine - 1 - t, alpha);   // while the P V product runs\n"
                                 "          wgmma_wait<0>();\n", "still reads"),
}


PLANTED_BACKWARD = {
    # dS = P dP, without D (the row sums of dO * O)
    "backward4_no_row_sums": ("dp[r] = s[r] * (dp[r] - (DQ ? delta_row[r / 2 % 2] : column(delta_s[stage], r)));",
                              "dp[r] = s[r] * dp[r];", "elements differ"),
    # causal: the dQ kernel's key tiles counted up to its first row's diagonal instead of its last row's
    "backward4_causal_tiles": ("per_head = (keys_of_row(min(r0 + 128, Tq) - 1, Tq, Tk, causal) + BS - 1) / BS;",
                               "per_head = (keys_of_row(r0, Tq, Tk, causal) + BS - 1) / BS;", "elements differ"),
    # the dK/dV kernel's mask drops the diagonal itself: key j kept from query j - shift + 1 on, not from j - shift
    "backward4_mask_off_by_one": ("s[r] = (DQ ? at >= bound : at < bound) ? 0.0f : s[r];",
                                  "s[r] = (DQ ? at >= bound : at <= bound) ? 0.0f : s[r];", "elements differ"),
    # the dK/dV kernel's first consumer waits for its first turn too, which no consumer hands it (the simulator names
    # the deadlock)
    "backward4_first_turn_waited": ("turns.take(t == 0);", "turns.take(false);", "deadlock"),
    # attention_backward5: at D 128 both consumers multiply dS by the first 64 columns of K (dq's last 64 columns get
    # the first 64's values)
    "backward5_dq_columns": ("const int qa = BS == 128 ? c : 0, dpan = BS == 128 ? 0 : c;",
                             "const int qa = BS == 128 ? c : 0, dpan = 0;", "elements differ"),
    # attention_backward5: a warp writes its dQ part into shared memory again before its last bulk reduction has read
    # it (the simulator names the reduction and the wait that found its source changed)
    "backward5_no_read_wait": ("        if (lane == 0) bulk_wait_read<0>();\n        __syncwarp();\n", "", "still reading"),
    # attention_backward5's tile order of the dQ sums with two register pairs swapped: the rounding pass reads the
    # sums back from places the warps did not put them
    "backward5_tile_order": ("(2 * (col % 64 / 8) + i % 16 / 8) * 64", "(col % 64 / 8 + 8 * (i % 16 / 8)) * 64",
                             "elements differ"),
}


# Bugs planted in the Hopper variants' strides and head counts: the checks in _in_model_layout's layouts (a layout a
# tensor each) on HOPPER_SHAPES (grouped heads) must fail on each.
PLANTED_LAYOUT = {
    # dv stored through dk's strides
    "backward4_dv_with_dk_strides": ("head_rows(dv), d, causal, scale, stream);", "head_rows(dk), d, causal, scale, stream);",
                                     "attention_backward4"),
    # the pre-pass reads out through dout's strides
    "backward4_out_with_dout_strides": ("head_rows(out), ptr<float>(lse)", "head_rows(dout), ptr<float>(lse)",
                                        "attention_backward4"),
    # the K tile of kv head bkv located among the query heads (Hq) instead of the kv heads
    "attention4_k_in_query_heads": ("&map_k, 64 * p, j, bkv, Hkv,", "&map_k, 64 * p, j, bkv, Hq,", "attention4"),
}


@pytest.mark.parametrize("bug", toolkit_beyond(PLANTED_LAYOUT, keep=("attention4_k_in_query_heads",)))
def test_the_hopper_variants_checks_in_other_layouts_fail_on_a_planted_stride_or_head_bug(bug):
    old, new, name = PLANTED_LAYOUT[bug]
    planted = load(plant(REFERENCE, old, new, f"lesson12_reference_{bug}.cu"), "sim", quiet=True)
    run = check_attention if name == "attention4" else check_attention_backward
    report = run(_in_model_layout(name, getattr(planted, name)), HOPPER_SHAPES, dtypes=(torch.bfloat16,),
                 backend="sim", quiet=True, orders=ONE_ORDER, large=False)
    assert not report.passed and any("elements differ" in c.problem + c.detail for c in report.cases
                                     if not c.passed), str(report)


@pytest.mark.parametrize("bug", toolkit_beyond({**PLANTED_REFERENCE, **PLANTED_BACKWARD},
                                               keep=("attention4_wrong_parity", "backward4_no_row_sums")))
def test_the_hopper_variants_checks_fail_on_a_planted_bug(bug):
    old, new, said = {**PLANTED_REFERENCE, **PLANTED_BACKWARD}[bug]
    planted = load(plant(REFERENCE, old, new, f"lesson12_reference_{bug}.cu"), "sim", quiet=True)
    run = check_attention_backward if bug in PLANTED_BACKWARD else check_attention
    name = "attention4" if bug not in PLANTED_BACKWARD else f"attention_{bug[:bug.index('_')]}"
    report = run(getattr(planted, name),
                 TENSOR_CORE_SHAPES, dtypes=(torch.bfloat16,), backend="sim", quiet=True, orders=ONE_ORDER,
                 large=False)
    assert not report.passed and any(said in c.problem + c.detail for c in report.cases if not c.passed), str(report)


# attention4 at D 64 is persistent: min(tiles, SMs) blocks (132 on an H100 and on the simulator), each walking query
# tiles round by round (every other round from the other end). Shapes with more tiles than that, so that blocks take a
# second and third tile (140 tiles: a part of a second round): Q's two buffers taken in turn, the K/V ring's stages and
# phases and the consumers' turns running on from one tile to the next (300 keys: three key tiles a query tile; 8
# keys under 200 causal rows: tiles with no key at all in the middle of a walk), grouped heads (the kv head of each
# tile's query head), and consumers that let key tiles through (20 rows: two consumers without a row; 200 rows: the
# first consumer of the second block reaches one key tile of two).
PERSISTENT_SHAPES = ((1, 140, 70, 8, 8, 64), (2, 70, 35, 20, 300, 64), (1, 150, 150, 200, 200, 64),
                     (1, 140, 140, 200, 8, 64))


def test_attention4_blocks_that_walk_several_query_tiles_match_the_reference(ext, dev):
    if not _hopper(dev):
        pytest.skip("attention4 needs an H100 (or the simulator)")
    check_attention(ext.attention4, PERSISTENT_SHAPES, dtypes=(torch.bfloat16,), name="attention4", quiet=True,
                    raise_on_fail=True, orders=ONE_ORDER, large=False)


# Bugs planted in attention4's walk over query tiles: the check on PERSISTENT_SHAPES must fail on each.
PLANTED_PERSISTENT = {
    # the output carried over from the block's last tile (the first tile's softmax has nothing to rescale: o must
    # start at 0; the row sums need no reset, the first alpha, exp2(-inf), clears them)
    "attention4_output_kept": ("for (int r = 0; r < D / 2; ++r) o[r] = 0.0f;", "for (int r = 0; r < D / 2; ++r) o[r] *= 1.0f;",
                               "elements differ"),
    # the next tile's kv head taken from the query head's index (no grouping)
    "attention4_tile_kv_head": ("bkv = bh / Hq * Hkv + bh % Hq / (Hq / Hkv);", "bkv = bh / Hq * Hkv + bh % Hq % Hkv;",
                                "elements differ"),
    # a consumer's own key tiles counted up to its first row's diagonal instead of its last row's (causal: its later
    # rows lose their last keys)
    "attention4_consumer_tiles": ("(keys_of_row(min(last, Tq - 1), Tq, Tk, causal)",
                                  "(keys_of_row(min(last - 63, Tq - 1), Tq, Tk, causal)", "elements differ"),
    # a tile a consumer lets through without products never hands its V stage back: the producer's next load into
    # that stage waits for ever (the simulator names the deadlock; 20 x 300 and 200 x 200 have consumers that let
    # tiles through)
    "attention4_skip_kept": ("        release(&v_empty[g % STAGES4]);\n", "", "deadlock"),
}


@pytest.mark.parametrize("bug", toolkit_beyond(PLANTED_PERSISTENT, keep=("attention4_output_kept",)))
def test_attention4_check_over_several_query_tiles_fails_on_a_planted_bug(bug):
    old, new, said = PLANTED_PERSISTENT[bug]
    planted = load(plant(REFERENCE, old, new, f"lesson12_reference_{bug}.cu"), "sim", quiet=True)
    report = check_attention(planted.attention4, PERSISTENT_SHAPES, dtypes=(torch.bfloat16,), backend="sim",
                             quiet=True, orders=ONE_ORDER, large=False)
    assert not report.passed and any(said in c.problem + c.detail for c in report.cases if not c.passed), str(report)


# attention_backward5's dQ product reads both consumers' halves of dS^T from shared memory, which a named barrier
# between the two warpgroups orders after their stores. Small enough for the simulator's race check (thorough(): every
# case), at D 64 (a consumer's dQ rows: half of the queries) and D 128 (half of the columns), with more keys than one
# block's 128 so that two blocks add into the same dq rows.
RACE_SHAPES = ((1, 2, 2, 130, 130, 64), (1, 2, 1, 70, 150, 128))


def test_attention_backward5_passes_the_race_check_and_fails_it_without_the_barrier_between_its_consumers(ext, dev):
    if dev.type != "cpu":
        pytest.skip("the race check is the simulator's")
    with thorough():
        check_attention_backward(ext.attention_backward5, RACE_SHAPES, dtypes=(torch.bfloat16,), quiet=True,
                                 raise_on_fail=True, orders=ONE_ORDER, large=False, name="attention_backward5")
        planted = load(plant(REFERENCE, "        named_barrier(1, 256);  // both consumers' halves of dS^T are in\n",
                             "", "lesson12_reference_backward5_no_barrier.cu"), "sim", quiet=True)
        report = check_attention_backward(planted.attention_backward5, RACE_SHAPES, dtypes=(torch.bfloat16,),
                                          backend="sim", quiet=True, orders=ONE_ORDER, large=False)
    assert not report.passed and all("data race on shared memory" in c.problem + c.detail for c in report.cases
                                     if not c.passed), str(report)


# Shapes the Hopper variants' blocks and tiles meet that TENSOR_CORE_SHAPES leave out: two batches (the batch's
# offsets and the tensor maps' third coordinate), grouped heads at D 128, more queries than keys at D 128 (rows that
# attend to nothing), and keys past two 128-key tiles.
HOPPER_SHAPES = ((2, 4, 2, 150, 150, 128), (2, 2, 1, 200, 90, 128), (2, 2, 2, 70, 300, 64))


def _bthd(t: torch.Tensor, pad: int = 1) -> torch.Tensor:
    """t's values in a [B, T, H, D] tensor seen as [B, H, T, D], with `pad` rows of padding after each token's heads
    (its rows 16 bytes apart, the heads and tokens not dense): the layout of a model's slice of its projection."""
    b, h, n, d = t.shape
    return torch.cat([t.transpose(1, 2), t.new_zeros(b, n, pad, d)], dim=2)[:, :, :h].transpose(1, 2)


def _hbtd(t: torch.Tensor) -> torch.Tensor:
    """t's values in an [H, B, T, D] tensor seen as [B, H, T, D]: the batch's stride smaller than the head's."""
    return t.transpose(0, 1).contiguous().transpose(0, 1)


def _in_model_layout(name: str, fn: Callable) -> Callable:
    """The out-variant fn (attention4's or attention_backward4's arguments) called on copies of its [B, H, T, D]
    tensors in layouts of their own (so that a tensor read or written through another one's strides, or a head
    counted in another tensor's heads, gives wrong values), its outputs copied back. (These tensors are the
    framework's, not the check's guarded ones: a planted bug here must stay within them.)"""
    if name == "attention4":
        def forward(q, k, v, causal, scale, out, lse):
            o = _bthd(out, 3)
            fn(_bthd(q, 1), _hbtd(k), _bthd(v, 2), causal, scale, o, lse)
            out.copy_(o)
        return forward

    def backward(q, k, v, out, lse, dout, causal, scale, dq, dk, dv):
        grads = [_bthd(dq, 2), _bthd(dk, 0), _hbtd(dv)]  # dk and dv dense (one extent) in two orders
        fn(_bthd(q, 1), _hbtd(k), _bthd(v, 2), _bthd(out, 3), lse, _hbtd(dout), causal, scale, *grads)
        for g, into in zip(grads, (dq, dk, dv)):
            into.copy_(g)
    return backward


@pytest.mark.parametrize("layout", ["contiguous", "model"])
@pytest.mark.parametrize("name", ["attention4", "attention_backward4", "attention_backward5"])
def test_the_hopper_variants_match_the_reference_on_batches_grouped_heads_and_empty_rows(ext, dev, name, layout):
    """The shapes above, on contiguous tensors and on tensors in a model's layout (every input and output a
    transposed [B, T, H, D] view whose tokens and heads are not dense: the tensor maps' strides and the epilogues')."""
    if dev.type != "cpu" and not _hopper(dev):
        pytest.skip("the Hopper variants need an H100 (or the simulator)")
    run = check_attention if name == "attention4" else check_attention_backward
    fn = getattr(ext, name)
    if layout == "model":
        fn = _in_model_layout(name, fn)
    run(fn, HOPPER_SHAPES, dtypes=(torch.bfloat16,), name=name, quiet=True, raise_on_fail=True, orders=ONE_ORDER,
        large=False)

