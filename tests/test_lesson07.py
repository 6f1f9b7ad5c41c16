"""Lesson 07: softmax. Every variant against PyTorch, masked rows, bad inputs, the backward and its autograd
registration, the exercise and its teeth."""
from pathlib import Path

import pytest
import torch

from kernels import load
from kernels.check import Diagnosis, check, like
from kernels.lessons import lesson07
from kernels.exercises import check_exercise, find, fitting_hint
from kernels.lessons.lesson07 import SHAPES, awkward_rows, causal_ref, check_softmax, register_softmax, softmax_ref
from planting import checked_in_notebook, plant, self_check, toolkit_beyond

# The reference variants run in one thread order: each order is a full run of every case, and the race check
# (small cases, first order) finds what the other orders would show. Exercises and planted bugs keep all three.
ONE_ORDER = ("forward",)

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "07_softmax" / "softmax_online.cu"
VARIANTS = lesson07.FORWARD  # softmax1-6, as the lesson declares them
DTYPES = (torch.float32, torch.bfloat16)


@pytest.fixture(scope="module")
def ext():
    e = load("07")
    register_softmax(e)
    return e


@pytest.mark.parametrize("name", VARIANTS)
def test_every_variant_matches_torch_softmax_on_awkward_rows_in_float32_and_bfloat16(ext, name):
    check_softmax(getattr(ext, name), (*SHAPES, (0, 5), (4, 0)), dtypes=DTYPES, name=name, quiet=True,
                  raise_on_fail=True, orders=ONE_ORDER)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax6_holds_long_rows_in_1024_threads_registers_and_then_shared_memory(ext, dtype):
    # 3000 packs: 1024 threads' registers alone; 10000 float32 / 8750 bf16 packs: more than their 4096 register packs
    pack = 4 if dtype == torch.float32 else 8
    check_softmax(ext.softmax6, [(2, 3000 * pack), (2, 40000 if dtype == torch.float32 else 70000)],
                  dtypes=(dtype,), quiet=True, raise_on_fail=True, orders=ONE_ORDER)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax6_takes_the_unvectorised_path_for_misaligned_rows(ext, dev, dtype):
    buf = torch.randn(1 + 6 * 64, device=dev).to(dtype)
    x = buf[1:].view(6, 64)  # a multiple of the pack wide, but every row starts 2 or 4 bytes past a 16-byte boundary
    out = torch.empty_like(x)
    ext.softmax6(x, out)
    torch.testing.assert_close(out, softmax_ref(x))


@pytest.mark.parametrize("name", VARIANTS)
def test_a_fully_masked_row_gives_zeros_and_leaves_the_other_rows_alone(ext, dev, name):
    x = torch.randn(3, 40, device=dev)
    x[1] = float("-inf")
    x[2, ::2] = float("-inf")  # partly masked: the masked half gets 0, the rest sums to 1
    out = torch.empty_like(x)
    getattr(ext, name)(x, out)
    assert torch.equal(out[1], torch.zeros(40, device=dev))
    assert torch.equal(out[2, ::2], torch.zeros(20, device=dev))
    torch.testing.assert_close(out[[0, 2]], torch.softmax(x[[0, 2]], dim=-1))


@pytest.mark.parametrize("name", VARIANTS)
def test_large_inputs_do_not_overflow_exp(ext, dev, name):
    x = torch.tensor([[1000.0, 999.0, -1000.0, 0.0]], device=dev)  # exp(1000) is inf in float32
    out = torch.empty_like(x)
    getattr(ext, name)(x, out)
    torch.testing.assert_close(out, torch.softmax(x, dim=-1))
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", [*VARIANTS, "softmax"])
def test_bad_inputs_are_refused_saying_what_was_expected(ext, dev, name):
    op = getattr(ext, name)

    def call(x, out=None):
        return op(x) if name == "softmax" else op(x, torch.empty_like(x) if out is None else out)

    with pytest.raises(RuntimeError, match="x must be float32 or bfloat16, got Double"):
        call(torch.randn(4, 8, device=dev, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="x must be contiguous"):
        call(torch.randn(8, 4, device=dev).t())
    with pytest.raises(RuntimeError, match=r"x must have 2 dimensions \[rows, cols\], got shape \[32\]"):
        call(torch.randn(32, device=dev))
    with pytest.raises(RuntimeError, match=r"x must have 2 dimensions \[rows, cols\], got shape \[2, 3, 4\]"):
        call(torch.randn(2, 3, 4, device=dev))
    if name != "softmax":
        x = torch.randn(4, 8, device=dev)
        with pytest.raises(RuntimeError, match=r"out must have x's shape \[4, 8\], got \[4, 7\]"):
            call(x, torch.empty(4, 7, device=dev))
        with pytest.raises(RuntimeError, match="out must have x's dtype Float, got BFloat16"):
            call(x, torch.empty(4, 8, device=dev, dtype=torch.bfloat16))


def test_a_tensor_on_the_wrong_device_is_refused(ext, dev):
    if dev.type == "cpu":
        pytest.skip("the simulator takes CPU tensors; there is no wrong device to pass")
    with pytest.raises(RuntimeError, match="x must be a CUDA tensor"):
        ext.softmax6(torch.randn(4, 8), torch.empty(4, 8, device=dev))


# (rows, cols): whole 16-byte packs per row take softmax7's warp-per-row kernel (1, 2, 4 and 8 packs a lane, float32
# and bf16), longer rows a block of 256 or 1024 threads per row; ragged rows the online kernel
CAUSAL_CASES = [(4, 4), (6, 3), (33, 33), (64, 100), (2 * 300, 300), (3, 1), (20, 0), (0, 5), (24, 136), (264, 264),
                (6, 2048), (3, 4096), (1032, 1032), (3, 16384)]


@pytest.mark.parametrize("q_len", [1, 3, "rows"])
def test_the_fused_causal_softmax_matches_scale_mask_then_softmax(ext, q_len):
    for rows_, cols in CAUSAL_CASES:
        q = rows_ if q_len == "rows" else q_len
        if q == 0 or rows_ % q:
            continue
        check(lambda x, out: ext.softmax7(x, 0.125, q, out), lambda x: causal_ref(x, 0.125, q), awkward_rows(),
              out=like(0), sizes=[(rows_, cols)], dtypes=DTYPES, name="softmax7", quiet=True, raise_on_fail=True,
              orders=ONE_ORDER)


def test_the_fused_causal_softmax_refuses_a_q_len_that_does_not_divide_the_rows(ext, dev):
    x = torch.randn(6, 4, device=dev)
    with pytest.raises(RuntimeError, match=r"q_len must be positive and divide the rows of x \(6\), got 4"):
        ext.softmax7(x, 1.0, 4, torch.empty_like(x))
    with pytest.raises(RuntimeError, match="q_len must be positive"):
        ext.softmax7(x, 1.0, 0, torch.empty_like(x))


def _backward_ref(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    y64, dy64 = y.double(), dy.double()
    return (y64 * (dy64 - (dy64 * y64).sum(dim=-1, keepdim=True))).to(y.dtype)


# Rows of these many 16-byte packs reach every layout of softmax_backward2 on both sides of its limits:
# a warp per row with 1, 2, 4 and 8 packs a lane, blocks of 128 (4 and 8 packs a thread), 256 and 1024
# threads, and past 4096 packs the unvectorised path.
BACKWARD_PACKS = (1, 32, 33, 64, 65, 128, 129, 256, 257, 512, 513, 1024, 1025, 2048, 2049, 4096, 4097)


def _backward_inputs(size, dt, device):
    x, dy = awkward_rows()(size, dt, device)[0], torch.randn(size, device=device).to(dt)
    return [softmax_ref(x), dy]


@pytest.mark.parametrize("name", ["softmax_backward1", "softmax_backward2", "softmax_backward"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_backward_matches_the_formula_on_ragged_rows_and_rows_of_every_layout(ext, name, dtype):
    pack = 4 if dtype == torch.float32 else 8
    sizes = [*SHAPES, *((3, k * pack) for k in BACKWARD_PACKS), (0, 3), (3, 0)]
    kwargs = {} if name == "softmax_backward" else {"out": like(0)}  # the numbered ones are out-variants
    check(getattr(ext, name), _backward_ref, _backward_inputs, sizes=sizes, dtypes=(dtype,), name=name,
          quiet=True, raise_on_fail=True, orders=ONE_ORDER, **kwargs)


@pytest.mark.parametrize("name", ["softmax_backward1", "softmax_backward2"])
def test_the_backward_variants_take_the_unvectorised_path_for_misaligned_rows(ext, dev, name):
    buf = torch.randn(2, 1 + 6 * 64, device=dev)
    y, dy = torch.softmax(buf[0, 1:], -1).view(6, 64), buf[1, 1:].view(6, 64)  # rows start 4 bytes past 16
    dx = torch.empty_like(y)
    getattr(ext, name)(y, dy, dx)
    torch.testing.assert_close(dx, _backward_ref(y, dy))


def test_the_backward_refuses_a_gradient_of_another_shape(ext, dev):
    y = torch.softmax(torch.randn(4, 8, device=dev), -1)
    with pytest.raises(RuntimeError, match=r"dy must have x's shape \[4, 8\], got \[4, 9\]"):
        ext.softmax_backward(y, torch.randn(4, 9, device=dev))
    for name in ("softmax_backward1", "softmax_backward2"):
        with pytest.raises(RuntimeError, match=r"dx must have x's shape \[4, 8\], got \[4, 7\]"):
            getattr(ext, name)(y, torch.randn_like(y), torch.empty(4, 7, device=dev))


@pytest.mark.parametrize("dtype", DTYPES)
def test_autograd_through_the_op_matches_torch_softmax(ext, dev, dtype):
    x = torch.randn(37, 520, device=dev).to(dtype)
    g = torch.randn(37, 520, device=dev).to(dtype)
    a = x.clone().requires_grad_()
    ext.softmax(a).backward(g)
    b = x.float().clone().requires_grad_()
    torch.softmax(b, dim=-1).backward(g.float())
    torch.testing.assert_close(a.grad, b.grad.to(dtype))


def test_the_op_passes_opcheck(ext, dev):
    x = torch.randn(5, 33, device=dev, requires_grad=True)
    torch.library.opcheck(ext.softmax, (x,))
    y = torch.softmax(x.detach(), -1)
    torch.library.opcheck(ext.softmax_backward, (y, torch.randn_like(y)))


def test_the_op_compiles_with_fullgraph_forward_and_backward(ext, dev):
    def f(x):
        return ext.softmax(x * 2.0).sum(dim=-1)

    x = torch.randn(6, 48, device=dev, requires_grad=True)
    compiled = torch.compile(f, fullgraph=True)
    got = compiled(x)
    got.sum().backward()
    want_x = x.detach().clone().requires_grad_()
    want = torch.softmax(want_x * 2.0, -1).sum(-1)
    want.sum().backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(x.grad, want_x.grad)


def test_the_softmax_online_stub_fails_its_self_check_and_the_first_hint_is_the_plan():
    report = self_check("07", "softmax_online", ROOT / "lessons" / "07_softmax" / "softmax_online.cu")
    assert not report.passed
    assert fitting_hint(find("07", "softmax_online")[0], report) == 1


@checked_in_notebook
def test_the_softmax_online_solution_passes_its_self_check():
    assert check_exercise("07", "softmax_online", solution=True).passed


PLANTED = {
    # the merge of two empty pairs computes -inf - -inf: NaN, which reaches every row shorter than 32
    "no_neg_inf_guard": ("  if (m == -INFINITY) return {m, 0.0f};", "", "elements are NaN", 2),
    # the sums are added without rescaling them to the common max
    "no_rescale": ("a.s * __expf(a.m - m) + b.s * __expf(b.m - m)", "a.s + b.s", "elements differ", 1),
    # shuffle down: only lane 0 ends with the row's pair, the other lanes write with partial ones
    "shfl_down": ("__shfl_xor_sync(FULL_MASK, p.m, offset), __shfl_xor_sync(FULL_MASK, p.s, offset)",
                  "__shfl_down_sync(FULL_MASK, p.m, offset), __shfl_down_sync(FULL_MASK, p.s, offset)",
                  "elements differ", 1),
    # the butterfly stops one step early: lanes 16 apart never meet
    "four_steps": ("for (int offset = 16; offset > 0", "for (int offset = 8; offset > 0", "elements differ", 1),
}


@pytest.mark.parametrize("bug", toolkit_beyond(PLANTED, keep=("no_rescale",)))
def test_the_self_check_catches_a_planted_bug_with_its_diagnosis_and_the_hint_that_fits_it(bug):
    old, new, diagnosis, first_hint = PLANTED[bug]
    path = plant(SOLUTION, old, new, f"lesson07_softmax_online_{bug}.cu")
    load(path)  # the planted file builds: the check below fails on its values, not on a compile error
    report = self_check("07", "softmax_online", path)
    assert not report.passed
    assert any(diagnosis in c.problem for c in report.cases if not c.passed), str(report)
    assert fitting_hint(find("07", "softmax_online")[0], report) == first_hint


def test_a_shuffle_of_the_whole_pair_is_refused_as_nvcc_refuses_it():
    """__shfl_xor_sync has overloads for numbers and half types only: a struct does not build with nvcc, and so it
    does not build on the simulator either (it used to pass the self-check there)."""
    path = plant(SOLUTION, "const MaxSum other = {__shfl_xor_sync(FULL_MASK, p.m, offset), __shfl_xor_sync(FULL_MASK, p.s, offset)};",
                 "const MaxSum other = __shfl_xor_sync(FULL_MASK, p, offset);", "lesson07_softmax_online_struct_shuffle.cu")
    report = check_exercise("07", "softmax_online", path=path, backend="sim")
    assert not report.passed and [c.diagnosis for c in report.cases] == [Diagnosis.BUILD_FAILED], str(report)


@pytest.mark.parametrize("q_len", [1, 3, 12])
def test_the_fused_causal_softmax_gradient_is_scale_times_the_softmax_backward(ext, dev, q_len):
    # masked columns have y = 0, so the backward gives them 0; the scale multiplies the gradient once more
    x, g = torch.randn(12, 20, device=dev), torch.randn(12, 20, device=dev)
    y = torch.empty_like(x)
    ext.softmax7(x, 0.3, q_len, y)
    want = x.clone().requires_grad_()
    causal_ref(want, 0.3, q_len).backward(g)
    torch.testing.assert_close(0.3 * ext.softmax_backward(y, g), want.grad)
