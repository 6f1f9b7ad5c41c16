"""Lesson 02: every vector-add and square variant matches PyTorch; bad inputs and launches say why; saxpy has teeth."""
from pathlib import Path

import pytest
import torch

from kernels import load
from kernels.check import SIZES, check, elementwise, like
from kernels.exercises import check_exercise
from planting import assert_diagnosis, built, checked_in_notebook, self_check, self_check_of_planted

ROOT = Path(__file__).resolve().parent.parent
LESSON = ROOT / "lessons" / "02_first_kernel"
SOLUTION = ROOT / "solutions" / "02_first_kernel"
# Bugs planted in the solution, one change each: (old, new, the diagnosis the self-check must give).
PLANTED_BUGS = {
    "lesson02_saxpy_off_by_one.cu": ("if (i < n) {", "if (i <= n) {", "past the end"),
    "lesson02_saxpy_floor_grid.cu": ("ceil_div(n, THREADS)", "n / THREADS", "never written (still the NaN poison)"),
}
FLOATING = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


@pytest.fixture(scope="module")
def ext():
    return load("02")


@checked_in_notebook  # in make test-all by the solution notebook's compared cells (tests/planting.py)
@pytest.mark.parametrize("op", ["add1", "add2"])
def test_float32_add_matches_torch_on_ragged_empty_and_single_element_sizes(ext, op):
    assert 0 in SIZES and 1 in SIZES
    check(getattr(ext, op), torch.add, elementwise(2), out=like(0), sizes=SIZES, raise_on_fail=True, quiet=True)


@pytest.mark.parametrize("threads", [32, 96, 128, 1000, 1024])
def test_add3_is_correct_for_any_block_size_up_to_1024(ext, threads):
    def add3(x, y, out):
        ext.add3(x, y, out, threads)

    check(add3, torch.add, elementwise(2), out=like(0), sizes=(0, 1, 33, 1000, 70001), name=f"add3[{threads}]",
          raise_on_fail=True, quiet=True)


def test_a_block_of_2048_threads_is_an_invalid_configuration(ext, dev):
    x, y, out = (torch.randn(5000, device=dev) for _ in range(3))
    with pytest.raises(RuntimeError, match=r"CUDA error: invalid (configuration )?argument"):
        ext.add3(x, y, out, 2048)
    ext.add3(x, y, out, 1024)  # the error is not sticky: the next launch works
    torch.testing.assert_close(out, x + y)


@checked_in_notebook
@pytest.mark.parametrize("op, ref, n_in", [("add4", torch.add, 2), ("square5", lambda x: x * x, 1)],
                         ids=["add4", "square5"])
def test_templated_ops_match_torch_in_every_floating_dtype(ext, op, ref, n_in):
    check(getattr(ext, op), ref, elementwise(n_in), out=like(0), sizes=SIZES, dtypes=FLOATING,
          raise_on_fail=True, quiet=True)


def test_templated_add_names_the_dtype_it_cannot_handle(ext, dev):
    x = torch.ones(10, dtype=torch.int32, device=dev)
    with pytest.raises(RuntimeError, match="\"add4\" not implemented for 'Int'"):
        ext.add4(x, x, x.clone())


def test_add1_refuses_more_elements_than_an_int_can_index(ext, dev):
    huge = torch.ones(1, device=dev).expand(2**31)  # 2^31 elements that take 4 bytes of memory
    with pytest.raises(RuntimeError, match="add1 indexes with 32-bit ints: at most 2147483647 elements, got 2147483648"):
        ext.add1(huge, huge, huge)


def _inputs(dev, dtype=torch.float32, n=64):
    return [torch.randn(n, device=dev, dtype=dtype) for _ in range(3)]


@pytest.mark.parametrize("op", ["add1", "add2", "add4"])
def test_mixed_dtypes_are_rejected(ext, dev, op):
    x, y, out = _inputs(dev)
    match = "x must have dtype Float, got Double" if op != "add4" else "x and y must have the same dtype, got Double and Float"
    with pytest.raises(RuntimeError, match=match):
        getattr(ext, op)(x.double(), y, out)


@pytest.mark.parametrize("op", ["add1", "add2", "add4"])
def test_shape_mismatch_is_rejected(ext, dev, op):
    x, _, out = _inputs(dev)
    with pytest.raises(RuntimeError, match=r"x and y must have the same shape, got \[64\] and \[65\]"):
        getattr(ext, op)(x, torch.randn(65, device=dev), out)


def test_output_of_the_wrong_shape_is_rejected(ext, dev):
    x, y, _ = _inputs(dev)
    with pytest.raises(RuntimeError, match=r"x and out must have the same shape, got \[64\] and \[8, 8\]"):
        ext.add2(x, y, torch.empty(8, 8, device=dev))


@pytest.mark.parametrize("op", ["add1", "add2", "add4"])
def test_non_contiguous_input_is_rejected(ext, dev, op):
    _, y, out = _inputs(dev)
    with pytest.raises(RuntimeError, match=r"x must be contiguous, got strides \[2\]"):
        getattr(ext, op)(torch.randn(128, device=dev)[::2], y, out)


def test_square5_rejects_an_output_of_another_dtype(ext, dev):
    x, _, _ = _inputs(dev)
    with pytest.raises(RuntimeError, match="x and out must have the same dtype, got Float and Half"):
        ext.square5(x, torch.empty(64, device=dev, dtype=torch.half))


def test_wrong_device_is_rejected(ext, dev):
    if dev.type == "cpu":
        pytest.skip("the simulator takes CPU tensors; there is no wrong device to pass")
    x, y, out = _inputs(dev)
    with pytest.raises(RuntimeError, match="x must be a CUDA tensor, got a tensor on cpu"):
        ext.add2(x.cpu(), y, out)


def test_saxpy_stub_builds_and_fails_its_self_check_with_the_error_of_a_launch_of_0_blocks():
    report = self_check("02", "saxpy", built(LESSON / "saxpy.cu"))
    assert_diagnosis(report, "raised ", "CUDA error: invalid")


@checked_in_notebook
def test_saxpy_solution_passes_its_self_check():
    assert check_exercise("02", "saxpy", path=built(SOLUTION / "saxpy.cu")).passed


@pytest.mark.parametrize("bug", sorted(PLANTED_BUGS))
def test_saxpy_self_check_names_a_planted_bug(bug):
    old, new, diagnosis = PLANTED_BUGS[bug]
    assert_diagnosis(self_check_of_planted("02", "saxpy", SOLUTION / "saxpy.cu", bug, old, new), diagnosis)
