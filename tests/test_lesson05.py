"""Lesson 05: the fused kernels (relu + add + bias, bias + GELU, forward and backward) and the SwiGLU exercise."""
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from kernels import load
from kernels.check import ROWS, check, random_tensor
from kernels.exercises import check_exercise, find, fitting_hint
from kernels.lessons.lesson05 import swiglu_backward_ref, swiglu_ref
from planting import assert_diagnosis, built, checked_in_notebook, self_check, self_check_of_planted

ROOT = Path(__file__).resolve().parent.parent
LESSON = ROOT / "lessons" / "05_fused"
SOLUTION = ROOT / "solutions" / "05_fused"

SHAPES = ROWS + ((0, 8),)  # ragged rows and columns, one element (1x1), and an empty tensor
DTYPES = (torch.float32, torch.bfloat16)
# Column sums in float32 are added in another order than PyTorch's: allow for the rounding of up to 64 additions
# (rows of SHAPES) of terms near 1, about 64 x 6e-8 x the partial sums (a draw once put one sum 1.5e-5 off at 0.43,
# past the 1.4e-5 that (1e-5, 1e-5) allowed there).
SUM_TOL = {torch.float32: (1e-5, 3e-5)}


@pytest.fixture(scope="module")
def ext():
    return load("05")


def matrices(k: int, bias: bool = True):
    """k random [rows, C] tensors, then (if bias) a random [C] bias."""
    def make(size, dtype, device):
        ts = [random_tensor(size, dtype, device) for _ in range(k)]
        return ts + [random_tensor((size[1],), dtype, device)] if bias else ts
    return make


def in_float64(fn):
    """fn computed in float64 and rounded to the inputs' dtype: what a float32-inside kernel should match."""
    def ref(*ts):
        out = fn(*[t.double() for t in ts])
        return tuple(o.to(ts[0].dtype) for o in out) if isinstance(out, tuple) else out.to(ts[0].dtype)
    return ref


def like_x(inputs):
    return [(tuple(inputs[0].shape), inputs[0].dtype)]


def dx_and_dbias(inputs):
    return [(tuple(inputs[0].shape), inputs[0].dtype), ((inputs[0].shape[-1],), inputs[0].dtype)]


@checked_in_notebook  # in make test-all by the solution notebook's compared cells (tests/planting.py)
@pytest.mark.parametrize("op", ["relu_add_bias1", "relu_add_bias2"])
def test_relu_add_bias_matches_pytorch(ext, op):
    check(getattr(ext, op), in_float64(lambda x, y, b: torch.relu(x) + y + b), matrices(2), out=like_x,
          sizes=SHAPES, dtypes=DTYPES, raise_on_fail=True, quiet=True)


@checked_in_notebook
@pytest.mark.parametrize("tanh", [True, False], ids=["tanh", "erf"])
def test_bias_gelu_matches_pytorch(ext, tanh):
    approximate = "tanh" if tanh else "none"
    check(lambda x, b, out: ext.bias_gelu3(x, b, tanh, out),
          in_float64(lambda x, b: F.gelu(x + b, approximate=approximate)), matrices(1), out=like_x,
          sizes=SHAPES, dtypes=DTYPES, raise_on_fail=True, quiet=True)


@checked_in_notebook
def test_relu_add_bias_backward_gives_dx_and_the_column_sums_of_grad(ext):
    check(ext.relu_add_bias_backward4, in_float64(lambda g, x: (g * (x > 0), g.sum(0))), matrices(2, bias=False),
          out=dx_and_dbias, sizes=SHAPES, dtypes=DTYPES, tolerance=SUM_TOL, raise_on_fail=True, quiet=True)


@checked_in_notebook
@pytest.mark.parametrize("tanh", [True, False], ids=["tanh", "erf"])
def test_bias_gelu_backward_gives_dx_and_the_column_sums_of_dx(ext, tanh):
    approximate = "tanh" if tanh else "none"

    def ref(g, x, b):
        dx = torch.ops.aten.gelu_backward(g, x + b, approximate=approximate)
        return dx, dx.sum(0)

    check(lambda g, x, b, dx, db: ext.bias_gelu_backward5(g, x, b, tanh, dx, db), in_float64(ref), matrices(2),
          out=dx_and_dbias, sizes=SHAPES, dtypes=DTYPES, tolerance=SUM_TOL, raise_on_fail=True, quiet=True)


def test_backward_of_an_empty_batch_gives_a_zero_bias_gradient(ext, dev):
    x = torch.randn(0, 5, device=dev)
    dbias = torch.full((5,), float("nan"), device=dev)
    ext.relu_add_bias_backward4(x, x, torch.empty_like(x), dbias)
    assert torch.equal(dbias.cpu(), torch.zeros(5))


def test_a_misaligned_view_takes_the_scalar_path_and_stays_correct(ext, dev):
    base = torch.randn(3 * 64 + 1, device=dev)
    x = base[1:].view(3, 64)  # starts 4 bytes past a 16-byte boundary
    y, b = torch.randn(3, 64, device=dev), torch.randn(64, device=dev)
    out = torch.empty_like(y)
    ext.relu_add_bias2(x, y, b, out)
    torch.testing.assert_close(out, torch.relu(x) + y + b)
    ext.bias_gelu3(x, b, True, out)
    torch.testing.assert_close(out, F.gelu(x + b, approximate="tanh"))


def test_fused_autograd_functions_match_eager_autograd(ext, dev):
    from kernels.benchmarks.lesson05 import fused_ops

    fused = fused_ops(ext)
    x, y = torch.randn(33, 1000, device=dev, requires_grad=True), torch.randn(33, 1000, device=dev, requires_grad=True)
    b = torch.randn(1000, device=dev, requires_grad=True)
    g = torch.randn(33, 1000, device=dev)
    got = torch.autograd.grad(fused["relu_add_bias"](x, y, b), (x, y, b), g)
    want = torch.autograd.grad(torch.relu(x) + y + b, (x, y, b), g)
    for a, w in zip(got, want):
        torch.testing.assert_close(a, w, rtol=1e-5, atol=1e-5)
    got = torch.autograd.grad(fused["bias_gelu"](x, b, False), (x, b), g)
    want = torch.autograd.grad(F.gelu(x + b), (x, b), g)
    for a, w in zip(got, want):
        torch.testing.assert_close(a, w, rtol=1e-5, atol=1e-5)


def test_functional_ops_return_what_the_out_variants_write(ext, dev):
    x, y, g = (torch.randn(7, 33, device=dev) for _ in range(3))
    b = torch.randn(33, device=dev)
    out = torch.empty_like(x)
    ext.relu_add_bias2(x, y, b, out)
    assert torch.equal(ext.relu_add_bias(x, y, b), out)
    ext.bias_gelu3(x, b, False, out)
    assert torch.equal(ext.bias_gelu(x, b, False), out)
    dx, db = torch.empty_like(x), torch.empty_like(b)
    ext.relu_add_bias_backward4(g, x, dx, db)
    for got, want in zip(ext.relu_add_bias_backward(g, x), (dx, db)):
        assert torch.equal(got, want)
    ext.bias_gelu_backward5(g, x, b, True, dx, db)
    for got, want in zip(ext.bias_gelu_backward(g, x, b, True), (dx, db)):
        assert torch.equal(got, want)


def test_fused_ops_pass_opcheck(ext, dev):
    from kernels.benchmarks.lesson05 import register_fused_ops

    register_fused_ops(ext)
    x, y = torch.randn(5, 24, device=dev, requires_grad=True), torch.randn(5, 24, device=dev, requires_grad=True)
    b = torch.randn(24, device=dev, requires_grad=True)
    torch.library.opcheck(ext.relu_add_bias, (x, y, b))  # raises on a failed test
    torch.library.opcheck(ext.bias_gelu, (x, b, True))


def test_torch_compile_fullgraph_runs_a_training_step_through_the_fused_ops(ext, dev):
    from kernels.benchmarks.lesson05 import fused_ops

    fused = fused_ops(ext)

    def layer(x, y, b):
        return fused["bias_gelu"](fused["relu_add_bias"](x, y, b), b, True) * 2

    compiled = torch.compile(layer, fullgraph=True)  # raises at the first call if the graph would break
    x, y = torch.randn(9, 40, device=dev, requires_grad=True), torch.randn(9, 40, device=dev, requires_grad=True)
    b = torch.randn(40, device=dev, requires_grad=True)
    g = torch.randn(9, 40, device=dev)
    got = torch.autograd.grad(compiled(x, y, b), (x, y, b), g)
    eager = torch.autograd.grad(layer(x, y, b), (x, y, b), g)
    for a, w in zip(got, eager):  # the same kernels: equal but for the order of dbias's atomics
        torch.testing.assert_close(a, w, rtol=1e-5, atol=1e-5)
    xd, yd, bd = (t.detach().double().requires_grad_() for t in (x, y, b))
    want = torch.autograd.grad(F.gelu(torch.relu(xd) + yd + 2 * bd, approximate="tanh") * 2, (xd, yd, bd), g.double())
    for a, w in zip(got, want):  # float32 inside against a float64 reference
        torch.testing.assert_close(a, w.float(), rtol=1e-4, atol=1e-4)


# --- bad inputs: the error says what was expected -------------------------------------------------

def _args(dev, rows=4, cols=8, dtype=torch.float32):
    x, y = (torch.randn(rows, cols, device=dev, dtype=dtype) for _ in range(2))
    return x, y, torch.randn(cols, device=dev, dtype=dtype), torch.empty(rows, cols, device=dev, dtype=dtype)


def test_wrong_dtype_is_rejected(ext, dev):
    x, y, b, out = _args(dev, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="x must be float32 or bfloat16, got Double"):
        ext.relu_add_bias2(x, y, b, out)


def test_mixed_dtypes_are_rejected(ext, dev):
    x, y, b, out = _args(dev)
    with pytest.raises(RuntimeError, match="y must have x's dtype Float, got BFloat16"):
        ext.relu_add_bias2(x, y.bfloat16(), b, out)


def test_a_bias_of_the_wrong_length_is_rejected(ext, dev):
    x, y, _, out = _args(dev)
    with pytest.raises(RuntimeError, match=r"bias must have shape \[8\] \(one value per column of x, whose shape is \[4, 8\]\), got \[4\]"):
        ext.relu_add_bias2(x, y, torch.randn(4, device=dev), out)


def test_shape_mismatch_is_rejected(ext, dev):
    x, _, b, out = _args(dev)
    with pytest.raises(RuntimeError, match=r"y must have x's shape \[4, 8\], got \[5, 8\]"):
        ext.relu_add_bias1(x, torch.randn(5, 8, device=dev), b, out)


def test_non_contiguous_input_is_rejected(ext, dev):
    x, y, b, out = _args(dev)
    with pytest.raises(RuntimeError, match=r"x must be contiguous.*call \.contiguous\(\) first"):
        ext.bias_gelu3(torch.randn(8, 4, device=dev).t(), b, True, out)


def test_a_dbias_of_the_wrong_shape_is_rejected(ext, dev):
    x, y, b, out = _args(dev)
    with pytest.raises(RuntimeError, match=r"dbias must have shape \[8\], got \[4, 8\]"):
        ext.relu_add_bias_backward4(x, y, out, torch.empty(4, 8, device=dev))


def test_wrong_device_is_rejected(ext, dev):
    if dev.type == "cpu":
        pytest.skip("the simulator takes CPU tensors; there is no wrong device to pass")
    x, y, b, out = _args(dev)
    with pytest.raises(RuntimeError, match="x must be a CUDA tensor, got a tensor on cpu"):
        ext.relu_add_bias2(x.cpu(), y, b, out)


# --- the exercise -----------------------------------------------------------------------------------

# Bugs planted in the solution, one change each: (old, new, the diagnoses the self-check must give,
# the hint it prints first: the one tagged for that diagnosis, else hint 1, the plan).
PLANTED_BUGS = {
    "lesson05_no_tail.cu": ("if (blockIdx.x == 0 && t < n) {\n    const float at = to_float(a[t]);",
                            "if (false && t < n) {\n    const float at = to_float(a[t]);",
                            ("never written (still the NaN poison)",), 1),
    # da uses sigmoid(a) where silu'(a) belongs, in the vector path
    "lesson05_silu_grad.cu": ("da_v.v[k] = from_float<T>(g * bk * s * (1.0f + ak * (1.0f - s)));",
                              "da_v.v[k] = from_float<T>(g * bk * s);", ("elements differ", "in da"), 4),
}


def test_swiglu_stub_builds_and_fails_its_self_check_with_unwritten_elements():
    report = self_check("05", "swiglu", built(LESSON / "swiglu.cu"))
    assert_diagnosis(report, "never written (still the NaN poison)")


@checked_in_notebook
def test_swiglu_solution_passes_its_self_check():
    assert check_exercise("05", "swiglu", path=built(SOLUTION / "swiglu.cu")).passed


@pytest.mark.parametrize("bug", sorted(PLANTED_BUGS))
def test_swiglu_self_check_names_a_planted_bug_and_shows_the_hint_that_fits_it_first(bug):
    old, new, diagnoses, first_hint = PLANTED_BUGS[bug]
    report = self_check_of_planted("05", "swiglu", SOLUTION / "swiglu.cu", bug, old, new)
    assert_diagnosis(report, *diagnoses)
    assert fitting_hint(find("05", "swiglu")[0], report) == first_hint


def test_swiglu_solution_rejects_a_misaligned_view(dev):
    sw = load(ROOT / "solutions/05_fused/swiglu.cu")
    a = torch.randn(65, device=dev)[1:]
    b, out = torch.randn(64, device=dev), torch.empty(64, device=dev)
    with pytest.raises(RuntimeError, match="a must start at a 16-byte aligned address"):
        sw.swiglu(a, b, out)


def test_swiglu_references_agree_with_autograd_in_float32(dev):
    a, b, g = (torch.randn(100, device=dev) for _ in range(3))
    torch.testing.assert_close(swiglu_ref(a, b), F.silu(a) * b)
    a.requires_grad_()
    b.requires_grad_()
    want = torch.autograd.grad(F.silu(a) * b, (a, b), g)
    for got, w in zip(swiglu_backward_ref(g, a.detach(), b.detach()), want):
        torch.testing.assert_close(got, w)


# ---------------------------------------------------------------------------------------------
# The store experiment (GPU timing of a plain 16-byte store against __stcs): what it builds.

def test_the_streaming_store_copy_differs_from_05_fused_in_its_16_byte_store_alone(tmp_path):
    from kernels.benchmarks.lesson05 import PLAIN_STORE, STREAMING_STORE, streaming_store_source

    original = (ROOT / "kernels" / "reference" / "05_fused.cu").read_text().splitlines()
    copy = streaming_store_source(tmp_path).read_text().splitlines()
    changed = [(a, b) for a, b in zip(original, copy) if a != b]
    assert len(copy) == len(original) and len(changed) == 1
    assert changed[0][0].replace(PLAIN_STORE, STREAMING_STORE) == changed[0][1]


def test_the_streaming_store_copy_builds_and_computes_what_the_plain_one_does(ext, tmp_path, dev):
    from kernels.benchmarks.lesson05 import streaming_store_source

    stcs = load(streaming_store_source(tmp_path), quiet=True)
    x, y = torch.randn(64, 256, device=dev), torch.randn(64, 256, device=dev)
    b = torch.randn(256, device=dev)
    want, got = torch.empty_like(x), torch.empty_like(x)
    ext.relu_add_bias2(x, y, b, want)
    stcs.relu_add_bias2(x, y, b, got)
    assert torch.equal(want, got)


def test_the_store_benchmark_refuses_to_run_without_a_gpu(capsys):
    from kernels.backend import gpu_available
    from kernels.benchmarks.lesson05 import main

    if gpu_available():
        pytest.skip("with a GPU the benchmark runs (and takes a minute)")
    assert main(["--stores"]) == 2
    assert "needs an NVIDIA GPU" in capsys.readouterr().out
