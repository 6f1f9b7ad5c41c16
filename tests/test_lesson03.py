"""Lesson 03: multiply as a real PyTorch op (functional, float32/float64, autograd, fake, compile).

Every test uses the default backend (cuda with a GPU, else the simulator) and its device.
"""
import warnings
from pathlib import Path

import pytest
import torch

from kernels import load
from kernels.check import check, elementwise
from kernels.exercises import check_exercise
from planting import assert_diagnosis, built, checked_in_notebook, self_check, self_check_of_planted, toolkit_beyond

ROOT = Path(__file__).resolve().parent.parent
LESSON = ROOT / "lessons" / "03_pytorch_op"
SOLUTION = ROOT / "solutions" / "03_pytorch_op"
DTYPES = (torch.float32, torch.float64)
SIZES = (0, 1, 31, 33, 1000, 2**20 + 3)


@pytest.fixture(scope="module")
def ext():
    """The reference ops, with the Python half the notebook adds: fake kernels and the derivative."""
    ext = load("03", quiet=True)
    ns = ext.ns

    @torch.library.register_fake(f"{ns}::mul")
    def _(x, y):
        return torch.empty_like(x)

    @torch.library.register_fake(f"{ns}::mul_backward")
    def _(grad, x, y):
        return torch.empty_like(x), torch.empty_like(y)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return tuple(ext.mul_backward(grad.contiguous(), x, y))

    torch.library.register_autograd(f"{ns}::mul", backward, setup_context=setup_context)
    return ext


def test_registers_mul_and_its_backward_in_one_namespace(ext):
    assert ext.ops() == ["mul", "mul_backward"]


@checked_in_notebook  # in make test-all by the solution notebook's compared cells (tests/planting.py)
def test_mul_matches_torch_on_ragged_sizes_and_both_dtypes(ext):
    check(ext.mul, torch.mul, elementwise(2), sizes=SIZES, dtypes=DTYPES, raise_on_fail=True, quiet=True)


@checked_in_notebook
def test_mul_backward_returns_grad_times_the_other_input(ext):
    check(ext.mul_backward, lambda g, x, y: (g * y, g * x), elementwise(3), sizes=SIZES, dtypes=DTYPES,
          raise_on_fail=True, quiet=True)


def test_mul_returns_a_new_tensor_of_the_input_shape(ext, dev):
    x, y = torch.randn(3, 5, device=dev), torch.randn(3, 5, device=dev)
    out = ext.mul(x, y)
    assert out.shape == (3, 5) and out.data_ptr() not in (x.data_ptr(), y.data_ptr())
    torch.testing.assert_close(out, x * y, rtol=0, atol=0)


def test_mul_is_differentiable_through_register_autograd(ext, dev):
    x = torch.randn(1000, device=dev, requires_grad=True)
    y = torch.randn(1000, device=dev, requires_grad=True)
    ext.mul(x, y).sum().backward()  # the grad of sum() is expanded (not contiguous)
    assert torch.equal(x.grad, y.detach()) and torch.equal(y.grad, x.detach())


def test_mul_passes_gradcheck_in_float64(ext, dev):
    x = torch.randn(7, 5, device=dev, dtype=torch.float64, requires_grad=True)
    y = torch.randn(7, 5, device=dev, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(ext.mul, (x, y))


@pytest.mark.parametrize("dtype", DTYPES)
def test_mul_and_mul_backward_pass_opcheck(ext, dev, dtype):
    x = torch.randn(7, 5, device=dev, dtype=dtype, requires_grad=True)
    y = torch.randn(7, 5, device=dev, dtype=dtype, requires_grad=True)
    torch.library.opcheck(ext.mul, (x, y))
    torch.library.opcheck(ext.mul_backward, (torch.randn_like(x), x.detach(), y.detach()))


def test_mul_compiles_with_fullgraph(ext, dev):
    def f(a, b):
        return torch.relu(ext.mul(a, b)) + a

    a, b = torch.randn(1000, device=dev), torch.randn(1000, device=dev)
    assert torch.equal(torch.compile(f, fullgraph=True)(a, b), f(a, b))


@pytest.mark.parametrize("op", ["mul", "mul_backward"])
def test_bad_inputs_raise_with_what_was_expected(ext, dev, op):
    def call(x, y):
        return ext.mul(x, y) if op == "mul" else ext.mul_backward(x.clone(), x, y)

    x = torch.randn(8, 4, device=dev)
    if dev.type == "cuda":  # on the simulator every tensor is a CPU tensor: no wrong device to pass
        with pytest.raises(RuntimeError, match="must be a CUDA tensor"):
            call(x, x.cpu())
    with pytest.raises(RuntimeError, match="must have dtype float32 or float64"):
        call(x.half(), x.half())
    with pytest.raises(RuntimeError, match="must have the same dtype"):
        call(x, x.double())
    with pytest.raises(RuntimeError, match="must have the same shape"):
        call(x, x[:4])
    with pytest.raises(RuntimeError, match="must be contiguous"):
        call(x.t(), x.t())


def test_pybind_variant_computes_mul_but_is_invisible_to_autograd(dev):
    mod = load(LESSON / "mul_pybind.cu", quiet=True)
    x = torch.randn(1000, device=dev, requires_grad=True)
    y = torch.randn(1000, device=dev)
    out = mod.mul(x, y)
    assert torch.equal(out, (x * y).detach())
    assert not out.requires_grad  # the gradient is lost silently: the lesson's point


def test_package_declares_a_cuda_extension_built_by_build_extension():
    setup = (LESSON / "package" / "setup.py").read_text()
    assert "CUDAExtension(" in setup and '"build_ext": BuildExtension' in setup
    assert (LESSON / "package" / "pyproject.toml").is_file()
    assert "TORCH_LIBRARY(mulop, m)" in (LESSON / "package" / "mulop" / "csrc" / "mulop.cu").read_text()


def test_self_check_of_the_stub_builds_and_fails_on_unwritten_elements_and_the_missing_op(capsys):
    report = self_check("03", "fma", built(LESSON / "fma.cu"))
    assert_diagnosis(report, "never written (still the NaN poison)", "fma_backward does not exist")


@checked_in_notebook
def test_self_check_passes_on_the_solution(capsys):
    assert check_exercise("03", "fma", path=built(SOLUTION / "fma.cu")).passed


# Bugs planted in the solution's fma.cu, one change each: (old, new, the diagnoses the self-check must give).
PLANTED_BUGS = {
    "lesson03_fma_grads_swapped.cu": ("grad_x[i] = g * y[i];\n    grad_y[i] = g * x[i];",
                                      "grad_x[i] = g * x[i];\n    grad_y[i] = g * y[i];",
                                      ("elements differ", "in grad_x", "raised GradcheckError")),
    "lesson03_fma_last_element.cu": ("if (i < n) out[i] = x[i] * y[i] + z[i];",
                                     "if (i < n - 1) out[i] = x[i] * y[i] + z[i];",
                                     ("never written (still the NaN poison)",)),
}


@pytest.mark.parametrize("bug", sorted(PLANTED_BUGS))
def test_self_check_names_a_planted_bug(bug, capsys):
    old, new, diagnoses = PLANTED_BUGS[bug]
    assert_diagnosis(self_check_of_planted("03", "fma", SOLUTION / "fma.cu", bug, old, new), *diagnoses)


# Bugs in the Python half (fma_op.py), each planted in a copy of the solution: (old, new, the
# diagnoses the self-check must give). The copied fma.cu gets a comment naming the bug, so each copy
# builds under its own namespace and no registration of one case leaks into another.
PYTHON_HALF_BUGS = {
    "fake kernel of the wrong shape": ("return torch.empty_like(x)\n", "return torch.empty_like(x)[:1]\n",
                                       ("raised OpCheckError", "test_faketensor failed")),
    "gradients of x and y swapped": ("return grad_x, grad_y, grad", "return grad_y, grad_x, grad",
                                     ("elements differ", "in grad_x")),
    "strided grad passed to the kernel": ("ops.fma_backward(grad.contiguous(), x, y)", "ops.fma_backward(grad, x, y)",
                                          ("raised OpCheckError", "grad must be contiguous")),
    "y not saved for backward": ("ctx.save_for_backward(x, y)", "ctx.save_for_backward(x, x)",
                                 ("elements differ", "in grad_x")),
}


@pytest.mark.parametrize("bug", toolkit_beyond(sorted(PYTHON_HALF_BUGS), keep=("gradients of x and y swapped",
                                                                                 "fake kernel of the wrong shape")))
def test_self_check_names_a_planted_bug_in_the_python_half(bug, tmp_path, capsys):
    good, bad, diagnoses = PYTHON_HALF_BUGS[bug]
    source = (SOLUTION / "fma_op.py").read_text()
    assert source.count(good) == 1, f"the solution no longer contains {good!r}: update the planted bug"
    (tmp_path / "fma_op.py").write_text(source.replace(good, bad))
    (tmp_path / "fma.cu").write_text((SOLUTION / "fma.cu").read_text() + f"// planted: {bug}\n")
    assert_diagnosis(self_check("03", "fma", built(tmp_path / "fma.cu")), *diagnoses)


def test_self_check_says_which_part_of_the_python_half_is_unwritten(tmp_path, capsys):
    # the kernels done, fma_op.py still the stub: the hints name what is missing
    (tmp_path / "fma_op.py").write_text((LESSON / "fma_op.py").read_text())
    (tmp_path / "fma.cu").write_text((SOLUTION / "fma.cu").read_text() + "// python half unwritten\n")
    report = self_check("03", "fma", built(tmp_path / "fma.cu"))
    assert_diagnosis(report, "raised NotImplementedError")
    assert "fma_op.py is not finished: the backward of fma is not written yet" in report.hints
    assert "fma_op.py is not finished: the fake kernel of fma is not written yet" in report.hints
    # the exception raised inside the op names the line of fma_op.py that raised it
    line = (LESSON / "fma_op.py").read_text().splitlines().index(
        '        raise NotImplementedError("the backward of fma is not written yet")') + 1
    assert any(c.detail.endswith(f"at fma_op.py, line {line}, in backward") for c in report.cases)
