"""Lesson 06: reductions. Every variant against PyTorch, bad inputs, determinism, the exercise and its teeth."""
from pathlib import Path

import pytest
import torch

from kernels import load
from kernels.check import ROWS, elementwise
from kernels.exercises import check_exercise
from kernels.exercises.lesson06 import check_row_sum, check_sum, row_max, rows_out
from kernels.check import check

ROOT = Path(__file__).resolve().parent.parent
PLANTED = Path(__file__).resolve().parent / "planted"
SUMS = [f"sum{k}" for k in range(1, 8)]
ROW_SHAPES = (*ROWS, (0, 5), (4, 0))  # ragged widths, no rows, and rows of no columns
MAX_SHAPES = (*ROWS, (0, 5))          # a max of no columns is an error (tested below)


@pytest.fixture(scope="module")
def ext():
    return load("06")


@pytest.mark.parametrize("name", SUMS)
def test_every_full_sum_matches_the_float64_sum_on_ragged_empty_and_single_sizes(ext, name):
    check_sum(getattr(ext, name), name=name, quiet=True, raise_on_fail=True)


@pytest.mark.parametrize("name", SUMS)
def test_full_sums_accept_a_0d_out_and_write_0_for_an_empty_input(ext, dev, name):
    out = torch.full((), float("nan"), device=dev)
    getattr(ext, name)(torch.empty(0, device=dev), out)
    assert out.item() == 0.0
    x = torch.randn(1000, device=dev)
    getattr(ext, name)(x, out)
    assert abs(out.item() - x.double().sum().item()) < 1e-3


@pytest.mark.parametrize("name", ["row_sum1", "row_sum2"])
def test_row_sums_match_the_float64_sum_on_ragged_shapes(ext, name):
    check_row_sum(getattr(ext, name), ROW_SHAPES, name=name, quiet=True, raise_on_fail=True)


def test_row_max_matches_amax_exactly_on_ragged_shapes(ext):
    check(ext.row_max2, row_max, elementwise(1), out=rows_out, sizes=MAX_SHAPES, tolerance={torch.float32: (0.0, 0.0)},
          quiet=True, raise_on_fail=True)


@pytest.mark.parametrize("name", ["row_sum2", "row_max2"])
def test_row_reductions_take_the_float_path_when_rows_are_not_16_byte_aligned(ext, dev, name):
    buf = torch.randn(1 + 6 * 64, device=dev)
    x = buf[1:].view(6, 64)  # 64 columns, but every row starts 4 bytes past a 16-byte boundary
    out = torch.empty(6, device=dev)
    getattr(ext, name)(x, out)
    want = x.sum(-1) if name == "row_sum2" else x.amax(-1)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)


def test_row_max_of_an_empty_row_is_an_error(ext, dev):
    with pytest.raises(RuntimeError, match="at least one column"):
        ext.row_max2(torch.empty(3, 0, device=dev), torch.empty(3, device=dev))


def test_the_deterministic_sum_gives_identical_bits_on_every_run(ext, dev):
    x = torch.randn(2**20 + 3, device=dev)
    first, second = torch.empty(1, device=dev), torch.empty(1, device=dev)
    ext.sum7(x, first)
    for _ in range(3):
        ext.sum7(x, second)
        assert torch.equal(first.view(torch.int32), second.view(torch.int32))


@pytest.mark.parametrize("name", SUMS)
def test_full_sums_reject_bad_inputs_saying_what_was_expected(ext, dev, name):
    op = getattr(ext, name)
    out = torch.empty((), device=dev)
    with pytest.raises(RuntimeError, match="x must have dtype Float"):
        op(torch.randn(64, device=dev, dtype=torch.float64), out)
    with pytest.raises(RuntimeError, match="x must be contiguous"):
        op(torch.randn(8, 8, device=dev).t(), out)
    with pytest.raises(RuntimeError, match="out must hold one element"):
        op(torch.randn(64, device=dev), torch.empty(2, device=dev))
    with pytest.raises(RuntimeError, match="out must have dtype Float"):
        op(torch.randn(64, device=dev), torch.empty((), device=dev, dtype=torch.float64))


@pytest.mark.parametrize("name", ["sum6", "sum7"])
def test_float4_sums_reject_a_misaligned_input(ext, dev, name):
    x = torch.randn(65, device=dev)[1:]  # starts 4 bytes past a 16-byte boundary
    with pytest.raises(RuntimeError, match="16-byte aligned"):
        getattr(ext, name)(x, torch.empty((), device=dev))


@pytest.mark.parametrize("name", ["row_sum1", "row_sum2", "row_max2"])
def test_row_reductions_reject_bad_inputs_saying_what_was_expected(ext, dev, name):
    op = getattr(ext, name)
    x = torch.randn(4, 8, device=dev)
    with pytest.raises(RuntimeError, match="x must have 2 dimensions"):
        op(torch.randn(32, device=dev), torch.empty(4, device=dev))
    with pytest.raises(RuntimeError, match=r"out must have shape \[rows\] = \[4\]"):
        op(x, torch.empty(5, device=dev))
    with pytest.raises(RuntimeError, match="x must be contiguous"):
        op(torch.randn(8, 4, device=dev).t(), torch.empty(4, device=dev))
    with pytest.raises(RuntimeError, match="x must have dtype Float"):
        op(x.double(), torch.empty(4, device=dev))


def test_full_sums_reject_a_tensor_on_the_wrong_device(ext, dev):
    if dev.type == "cpu":
        pytest.skip("the simulator takes CPU tensors; there is no wrong device to pass")
    with pytest.raises(RuntimeError, match="x must be a CUDA tensor"):
        ext.sum6(torch.randn(64), torch.empty((), device=dev))


def test_the_row_max_stub_fails_its_self_check():
    assert not check_exercise("06", "row_max", path=ROOT / "lessons" / "06_reductions" / "row_max.cu").passed


def test_the_row_max_solution_passes_its_self_check():
    assert check_exercise("06", "row_max", solution=True).passed


@pytest.mark.parametrize("planted", ["lesson06_row_max_first_32_only.cu", "lesson06_row_max_half_warp.cu"])
def test_the_self_check_catches_a_planted_bug(planted):
    assert not check_exercise("06", "row_max", path=PLANTED / planted).passed


def test_the_checker_catches_a_missing_syncthreads_on_the_simulator(backend):
    if backend != "sim":
        pytest.skip("on a GPU a missing barrier may or may not change the result: only the simulator is sure to show it")
    racy = load(PLANTED / "lesson06_sum_no_sync.cu")
    report = check_sum(racy.racy_sum, quiet=True)
    assert not report.passed
    # wrong in one thread order and right in another: the report names it a race
    assert any("race between threads" in c.detail for c in report.cases if not c.passed)
    assert any("missing __syncthreads()" in h for h in report.hints)


def test_a_bug_that_is_wrong_in_every_order_is_not_called_a_race(backend):
    if backend != "sim":
        pytest.skip("thread orders exist only on the simulator")
    report = check_exercise("06", "row_max", path=PLANTED / "lesson06_row_max_first_32_only.cu")
    assert not report.passed
    assert not any("race" in c.detail for c in report.cases)
