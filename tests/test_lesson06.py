"""Lesson 06: reductions. Every variant against PyTorch, bad inputs, determinism, the exercise and its teeth."""
from pathlib import Path

import pytest
import torch

from kernels import load
from kernels.check import ROWS, Diagnosis, check, rows
from kernels.exercises import check_exercise, find, fitting_hint
from kernels.lessons import lesson06
from kernels.lessons.lesson06 import check_row_sum, check_sum, row_max, rows_out
from planting import checked_in_notebook, plant, row_max_from_zero, self_check

ROOT = Path(__file__).resolve().parent.parent
LESSON = ROOT / "lessons" / "06_reductions"
SOLUTION = ROOT / "solutions" / "06_reductions"
SUMS = list(lesson06.SUMS)  # as the lesson declares them
IN_NOTEBOOK = [f"sum{k}" for k in range(1, 8)]  # the ones the solution notebook checks
ROW_SHAPES = (*ROWS, (0, 5), (4, 0))  # ragged widths, no rows, and rows of no columns
MAX_SHAPES = (*ROWS, (0, 5))          # a max of no columns is an error (tested below)


@pytest.fixture(scope="module")
def ext():
    return load("06")


# sum1 .. sum7's checks, in make test-all by the solution notebook's compared cell (tests/planting.py)
@pytest.mark.parametrize("name", [pytest.param(n, marks=checked_in_notebook) if n in IN_NOTEBOOK else n for n in SUMS])
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
    check(ext.row_max2, row_max, rows(1), out=rows_out, sizes=MAX_SHAPES, tolerance={torch.float32: (0.0, 0.0)},
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


# ---------------------------------------------------------------------------------------------
# The exercises: the stubs fail with their diagnosis, the solutions pass, planted bugs are caught.

def failures(report) -> list:
    return [c for c in report.cases if not c.passed]


def first_hint_shown(name: str, report) -> int:
    """The number of the hint a failing check prints first: the one tagged for the failure."""
    return fitting_hint(find("06", name)[0], report)


@pytest.mark.parametrize("name", ["row_max", "row_sum_block"])
def test_the_stub_builds_and_fails_every_case_as_never_written(name):
    report = self_check("06", name, LESSON / "row_reductions.cu")
    assert report.cases and not any(c.problem == "build" for c in report.cases)
    assert all("NaN" in c.problem and "never written" in c.detail for c in report.cases)
    assert first_hint_shown(name, report) == 1  # the plan of the kernel


@pytest.mark.parametrize("name", [pytest.param(n, marks=checked_in_notebook) for n in ("row_max", "row_sum_block")])
def test_the_solution_passes_its_self_check(name):
    assert check_exercise("06", name, solution=True).passed


def test_a_row_max_that_starts_from_zero_fails_every_case_on_every_run():
    planted = row_max_from_zero()
    for _ in range(3):  # fresh random inputs each run: row 0 is all negative in every one
        report = self_check("06", "row_max", planted)
        assert report.cases and all(not c.passed and "differ" in c.problem for c in report.cases)
        assert not any("race" in c.detail for c in report.cases)  # wrong in every order: not a race


@pytest.mark.parametrize("old, new, name", [
    ("for (int64_t c = lane; c < cols; c += 32) m = fmaxf(m, r[c]);", "if (lane < cols) m = r[lane];",
     "lesson06_row_max_first_32_only.cu"),
    ("for (int offset = 16;", "for (int offset = 8;", "lesson06_row_max_half_warp.cu"),
])
def test_the_row_max_check_catches_a_wrong_value_bug(old, new, name):
    report = self_check("06", "row_max", plant(SOLUTION / "row_reductions.cu", old, new, name))
    assert failures(report) and all("differ" in c.problem for c in failures(report))


def test_the_row_max_check_names_a_lane_that_returned_before_the_shuffles(backend):
    # on a GPU a shuffle that reads an exited lane is undefined (it may even give the right max); the
    # simulator refuses it, naming the shuffle and where the lane returned
    if backend != "sim":
        pytest.skip("what a shuffle reads from an exited lane on a GPU is undefined: only the simulator is sure to stop it")
    loop = "  for (int64_t c = lane; c < cols; c += 32) m = fmaxf(m, r[c]);\n"
    planted = plant(SOLUTION / "row_reductions.cu", loop, loop + "  if (lane >= cols) return;  // a lane without columns leaves\n",
                    "lesson06_row_max_early_return.cu")
    report = self_check("06", "row_max", planted)
    narrow = {c.size for c in report.cases if c.size[1] < 32}  # rows narrower than a warp leave lanes idle
    assert narrow and {c.size for c in failures(report)} == narrow
    assert all("__shfl_xor_sync" in c.detail and "which has exited (returned at lesson06_row_max_early_return.cu:30)"
               in c.detail for c in failures(report))
    assert first_hint_shown("row_max", report) == 3  # the hint that every lane takes part in the shuffles


def test_the_block_row_sum_check_names_a_missing_barrier_in_the_tree_a_race(backend):
    if backend != "sim":
        pytest.skip("on a GPU a missing barrier may or may not change the result: only the simulator is sure to show it")
    planted = plant(SOLUTION / "row_reductions.cu", "    __syncthreads();  // this level is complete", "    // this level",
                    "lesson06_row_sum_block_no_sync.cu")
    report = check_exercise("06", "row_sum_block", path=planted)
    assert failures(report)
    # named by the race check (both lines) or, in a case too large for it, by the orders that disagree
    assert all(c.diagnosis is Diagnosis.RACE for c in failures(report))
    assert all("data race on shared memory" in c.problem or "race between threads" in c.detail for c in failures(report))
    assert any("__syncthreads()" in h for h in report.hints)
    assert first_hint_shown("row_sum_block", report) == 2  # the hint about where the barriers go


def test_the_block_row_sum_check_catches_an_early_return_before_the_barrier(backend):
    # threads without columns leave: their slots of partial are never written. On a GPU the tree
    # then adds whatever the shared memory held; the simulator's NaN poison makes that visible.
    if backend != "sim":
        pytest.skip("stale shared memory on a GPU may hold anything: only the simulator's poison is sure to show it")
    planted = plant(SOLUTION / "row_reductions.cu", "  const float* r = x + blockIdx.x * cols;",
                    "  if (tid >= cols) return;  const float* r = x + blockIdx.x * cols;",
                    "lesson06_row_sum_block_early_return.cu")
    report = self_check("06", "row_sum_block", planted)
    narrow = {c.size for c in report.cases if c.size[1] < 256}
    assert {c.size for c in failures(report)} == narrow  # rows as wide as the block leave no thread idle
    assert all("NaN" in c.problem for c in failures(report))


def test_the_block_row_sum_check_catches_an_off_by_one_at_the_ragged_end():
    planted = plant(SOLUTION / "row_reductions.cu", "c < cols; c += BLOCK", "c <= cols; c += BLOCK",
                    "lesson06_row_sum_block_off_by_one.cu")
    report = self_check("06", "row_sum_block", planted)
    assert report.cases and all(not c.passed and "differ" in c.problem for c in report.cases)
    assert first_hint_shown("row_sum_block", report) == 3  # the hint about the loop bound


def test_the_checker_names_a_missing_syncthreads_in_sum3_a_race(backend):
    if backend != "sim":
        pytest.skip("on a GPU a missing barrier may or may not change the result: only the simulator is sure to show it")
    # race.cu is sum3 without the barrier in its tree (the test below holds it to that); the lesson's notebook runs it
    # on ones, this check on its random inputs (and make test-all's simulator builds have built it)
    racy = load(SOLUTION / "race.cu", quiet=True)
    report = check_sum(racy.racy_sum, quiet=True)
    assert not report.passed
    # the race check names both lines (or, in a larger case, one order is wrong and another right)
    assert any("data race on shared memory" in c.problem or "race between threads" in c.detail for c in failures(report))
    assert all(c.diagnosis is Diagnosis.RACE for c in failures(report))
    assert any("__syncthreads()" in h for h in report.hints)


def test_the_lessons_race_demo_is_sum3_without_its_barrier_in_the_tree():
    """race.cu, which the lesson runs, keeps sum_kernel3's body apart from the one deleted barrier."""
    race = (LESSON / "race.cu").read_text()
    assert race == (SOLUTION / "race.cu").read_text()
    assert "    if (tid < s) partial[tid] += partial[tid + s];\n    // the __syncthreads() that was here" in race
    assert race.count("__syncthreads();") == 1  # only the barrier after the load is left

    def body(text: str, signature: str) -> list[str]:  # the kernel's code lines up to the block's sum
        start = text.index(signature)
        lines = text[text.index("{", start) + 1:text.index("  if (tid == 0)", start)].splitlines()
        return [line for line in lines if line.strip() and not line.strip().startswith("//")]

    tree = body((ROOT / "kernels" / "reference" / "06_reductions.cu").read_text(), "__global__ void sum_kernel3(")
    barrier = "    __syncthreads();  // this level is complete before the next level reads it"
    assert barrier in tree and [line for line in tree if line != barrier] == body(race, "void racy_sum_kernel(")


# ---------------------------------------------------------------------------------------------
# The benchmark's control experiment: what the atomics cost sum2 and sum3.

def test_atomic_cost_compares_each_tree_with_its_twin_without_atomics(capsys):
    from kernels.bench import Row
    from kernels.benchmarks.lesson06 import BENCH_1G, atomic_cost

    times = {"sum2": 2.0, "sum2_noatomic": 1.0, "sum3": 1.9, "sum3_noatomic": 0.5, "sum4": 0.4}
    atomic_cost([Row(BENCH_1G, v, ms, None, None, None, None, None) for v, ms in times.items()])
    out = capsys.readouterr().out
    assert "sum2: 2.000 ms with one atomic per block, 1.000 ms without (0.50 of the time)" in out
    assert "sum3: 1.900 ms with one atomic per block, 0.500 ms without (0.26 of the time)" in out
    assert "sum3 vs sum2: 1.05x faster with the atomics, 2.00x without" in out


def test_atomic_cost_says_so_when_the_figures_lack_the_control_variants(capsys):
    from kernels.bench import Row
    from kernels.benchmarks.lesson06 import BENCH_1G, atomic_cost

    atomic_cost([Row(BENCH_1G, "sum2", 2.0, None, None, None, None, None)])
    assert capsys.readouterr().out.startswith("no timings of sum2, sum2_noatomic, sum3, sum3_noatomic on 1 GiB")
