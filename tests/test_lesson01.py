"""Lesson 01: the CPU loop and the CUDA kernel compute the same vector sum; the scale exercise has teeth."""
from pathlib import Path

import pytest
import torch

from kernels import load
from kernels.check import SIZES, check, elementwise, like
from kernels.exercises import check_exercise
from planting import assert_diagnosis, built, checked_in_notebook, self_check, self_check_of_planted

ROOT = Path(__file__).resolve().parent.parent
LESSON = ROOT / "lessons" / "01_thread_model"
SOLUTION = ROOT / "solutions" / "01_thread_model"
# Bugs planted in the solution, one change each: (old, new, the diagnosis the self-check must give).
PLANTED_BUGS = {
    "lesson01_scale_no_block_offset.cu": ("const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;",
                                          "const int64_t i = threadIdx.x;", "never written (still the NaN poison)"),
    "lesson01_scale_off_by_one.cu": ("if (i < n) out[i]", "if (i <= n) out[i]", "past the end"),
}


@pytest.fixture(scope="module")
def ext():
    return load("01")


@checked_in_notebook  # in make test-all by the solution notebook's compared cell (tests/planting.py)
def test_add2_matches_torch_on_ragged_empty_and_single_element_sizes(ext):
    assert 0 in SIZES and 1 in SIZES
    check(ext.add2, torch.add, elementwise(2), out=like(0), sizes=SIZES, raise_on_fail=True, quiet=True)


def test_add_loop1_matches_torch_on_cpu_tensors(ext, dev):
    def on_cpu(x, y, out):
        o = out.cpu()  # starts as the checker's NaN poison, so unwritten elements still fail
        ext.add_loop1(x.cpu(), y.cpu(), o)
        out.copy_(o)

    check(on_cpu, torch.add, elementwise(2), out=like(0), sizes=SIZES, name="add_loop1",
          raise_on_fail=True, quiet=True)


def test_add_loop1_and_add2_agree_exactly(ext, dev):
    x, y = torch.randn(4099), torch.randn(4099)
    loop = torch.empty_like(x)
    ext.add_loop1(x, y, loop)
    kernel = torch.empty(4099, device=dev)
    ext.add2(x.to(dev), y.to(dev), kernel)
    assert torch.equal(loop, kernel.cpu())


def _inputs(dev, n=64):
    return [torch.randn(n, device=dev) for _ in range(3)]


@pytest.mark.parametrize("op", ["add2", "add_loop1"])
def test_wrong_dtype_is_rejected_with_the_expected_dtype(ext, dev, op):
    d = dev if op == "add2" else torch.device("cpu")
    x, y, out = _inputs(d)
    with pytest.raises(RuntimeError, match="x must have dtype Float, got Double"):
        getattr(ext, op)(x.double(), y, out)


@pytest.mark.parametrize("op", ["add2", "add_loop1"])
def test_shape_mismatch_is_rejected(ext, dev, op):
    d = dev if op == "add2" else torch.device("cpu")
    x, _, out = _inputs(d)
    with pytest.raises(RuntimeError, match=r"x and y must have the same shape, got \[64\] and \[65\]"):
        getattr(ext, op)(x, torch.randn(65, device=d), out)


@pytest.mark.parametrize("op", ["add2", "add_loop1"])
def test_non_contiguous_input_is_rejected(ext, dev, op):
    d = dev if op == "add2" else torch.device("cpu")
    _, y, out = _inputs(d)
    with pytest.raises(RuntimeError, match=r"x must be contiguous.*call \.contiguous\(\) first"):
        getattr(ext, op)(torch.randn(128, device=d)[::2], y, out)


def test_add2_rejects_a_tensor_on_the_wrong_device(ext, dev):
    if dev.type == "cpu":
        pytest.skip("the simulator takes CPU tensors; there is no wrong device to pass")
    x, y, out = _inputs(dev)
    with pytest.raises(RuntimeError, match="x must be a CUDA tensor, got a tensor on cpu"):
        ext.add2(x.cpu(), y, out)


def test_add_loop1_rejects_gpu_tensors(ext, dev):
    if dev.type == "cpu":
        pytest.skip("no GPU tensors on the simulator")
    x, y, out = _inputs(dev)
    with pytest.raises(RuntimeError):  # registered for the CPU only: the dispatcher finds no CUDA kernel
        ext.add_loop1(x, y, out)


def test_scale_stub_builds_and_fails_its_self_check_with_unwritten_elements():
    report = self_check("01", "scale", built(LESSON / "scale.cu"))
    assert_diagnosis(report, "never written (still the NaN poison)")


@checked_in_notebook
def test_scale_solution_passes_its_self_check():
    assert check_exercise("01", "scale", path=built(SOLUTION / "scale.cu")).passed


@pytest.mark.parametrize("bug", sorted(PLANTED_BUGS))
def test_scale_self_check_names_a_planted_bug(bug):
    old, new, diagnosis = PLANTED_BUGS[bug]
    assert_diagnosis(self_check_of_planted("01", "scale", SOLUTION / "scale.cu", bug, old, new), diagnosis)
