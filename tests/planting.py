"""Planted bugs: a copy of a solution file with one small, named change, so the bug never drifts from it.

    report = self_check_of_planted("01", "scale", SOLUTION / "scale.cu", "lesson01_scale_off_by_one.cu",
                                   "if (i < n)", "if (i <= n)")
    assert_diagnosis(report, "past the end")

A planted bug's self-check runs without the simulator's race and bounds check (its instrumented build and
checked runs cost more than the rest of the check) unless the test passes races=True: the bugs whose
diagnosis comes from that check (a data race on global memory, an access past the canary margins) do. The
solutions' self-checks run with it, so a false alarm on correct code still fails a test. Where an exercise has
many planted bugs, make test-all runs a few of them and make test-toolkit the rest (toolkit_beyond).
"""
from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest

from kernels import load
from kernels.check import race_check_limit
from kernels.exercises import check_exercise
from kernels.lessons import lesson12, lesson13

ROOT = Path(__file__).resolve().parent.parent
PLANTED = ROOT / "build" / "planted"


def plant(source: Path, old: str, new: str, name: str) -> Path:
    """Write `source` with `old` (which must occur exactly once) replaced by `new` to build/planted/<name>.

    The copy lands in build/, so its includes of the shared headers resolve as the original's do;
    a solution that changes so that `old` no longer occurs once fails here, not silently.
    """
    text = Path(source).read_text()
    count = text.count(old)
    assert count == 1, f"{Path(source).name} contains {old!r} {count} times, not once: update the planted bug"
    PLANTED.mkdir(parents=True, exist_ok=True)
    dest = PLANTED / name
    # the note goes last, so the copy's line numbers are the solution's (a comment of the file's language)
    comment = "#" if dest.suffix == ".py" else "//"
    planted = text.replace(old, new) + f"\n{comment} planted bug: {old!r} -> {new!r}\n"
    if not dest.exists() or dest.read_text() != planted:
        dest.write_text(planted)
    return dest


def row_max_from_zero() -> Path:
    """Lesson 06's row_max solution with the max started from 0 instead of -inf (right whenever a row holds a positive
    value): one planted file for the lesson's tests and the checker's, so that one build serves both."""
    return plant(ROOT / "solutions" / "06_reductions" / "row_reductions.cu", "float m = -INFINITY;", "float m = 0.0f;",
                 "lesson06_row_max_from_zero.cu")


def toolkit_beyond(bugs, keep: tuple[str, ...]) -> list:
    """The planted bugs of a parametrize: those named in `keep` run in make test-all, the others only in make
    test-toolkit (which CI runs too). Each planted bug costs a build or a whole self-check, and make test-all has
    a time budget: it keeps a bug or two per exercise, enough to fail if the check loses its teeth, and the
    toolkit suite keeps every one."""
    names = list(bugs)
    missing = [k for k in keep if k not in names]
    assert not missing, f"no planted bug named {missing}: the bugs are {names}"
    return [n if n in keep else pytest.param(n, marks=pytest.mark.toolkit) for n in names]


# The tests whose one assertion a cell of the lesson's solution notebook makes as well: an exercise's self-check
# passing on its solution, or a reference variant's check (the same check on the same shapes, dtypes and thread
# orders, or more orders). make test-all's nbval step runs that cell and compares its printed report (the PASS
# lines; a variant's line of passed cases) with the one recorded, so a failing check fails there. These tests are
# toolkit tests (CI runs both suites), and make test-all runs each of those checks once instead of twice.
# tests/test_notebooks.py holds every entry to its cell: the cell exists, calls the check named here, has its output
# compared and recorded as passing.
# {test id: (solution notebook, cell id, the call in the cell)}; a variant's entry adds a fourth item (below)
CHECKED_IN_NOTEBOOKS = {
    "tests/test_lesson01.py::test_scale_solution_passes_its_self_check":
        ("solutions/01_thread_model/01_thread_model.ipynb", "442ed368", 'check_exercise("01", "scale"'),
    "tests/test_lesson02.py::test_saxpy_solution_passes_its_self_check":
        ("solutions/02_first_kernel/02_first_kernel.ipynb", "355fcf65", 'check_exercise("02", "saxpy"'),
    "tests/test_lesson03.py::test_self_check_passes_on_the_solution":
        ("solutions/03_pytorch_op/03_pytorch_op.ipynb", "58a302d2", 'check_exercise("03", "fma"'),
    "tests/test_lesson04.py::test_exercise_self_check_passes_on_the_solution":
        ("solutions/04_memory_bound/04_memory_bound.ipynb", "c49c2e3a", 'check_exercise("04", "scale_add_vec4"'),
    "tests/test_lesson05.py::test_swiglu_solution_passes_its_self_check":
        ("solutions/05_fused/05_fused.ipynb", "d488f4ab", 'check_exercise("05", "swiglu"'),
    "tests/test_lesson06.py::test_the_solution_passes_its_self_check[row_max]":
        ("solutions/06_reductions/06_reductions.ipynb", "2223fcef", 'check_exercise("06", "row_max"'),
    "tests/test_lesson06.py::test_the_solution_passes_its_self_check[row_sum_block]":
        ("solutions/06_reductions/06_reductions.ipynb", "6dfbeb45", 'check_exercise("06", "row_sum_block"'),
    "tests/test_lesson07.py::test_the_softmax_online_solution_passes_its_self_check":
        ("solutions/07_softmax/07_softmax.ipynb", "l07-28", 'check_exercise("07", "softmax_online"'),
    "tests/test_lesson08.py::test_the_layernorm_backward_solution_passes_its_self_check":
        ("solutions/08_layernorm/08_layernorm.ipynb", "8d6686de", 'check_exercise("08", "layernorm_backward"'),
    "tests/test_lesson08.py::test_the_welford_solution_passes_its_self_check":
        ("solutions/08_layernorm/08_layernorm.ipynb", "2d135fb2", 'check_exercise("08", "welford_layernorm"'),
    "tests/test_lesson09.py::test_the_matmul_blocktile_solution_passes_its_self_check":
        ("solutions/09_matmul/09_matmul.ipynb", "l09-29", 'check_exercise("09", "matmul_blocktile"'),
    "tests/test_lesson09.py::test_the_matmul_wmma_solution_passes_its_self_check":
        ("solutions/09_matmul/09_matmul.ipynb", "l09-37", 'check_exercise("09", "matmul_wmma"'),
    "tests/test_lesson10.py::test_self_check_passes_on_the_solution":
        ("solutions/10_model/10_model.ipynb", "l10-47", 'check_exercise("10"'),
    "tests/test_lesson12.py::test_the_flash_online_solution_passes_its_self_check":
        ("solutions/12_attention/12_attention.ipynb", "l12-25", 'check_exercise("12", "flash_online"'),
    "tests/test_lesson13.py::test_the_ws_matmul_solution_passes_its_self_check":
        ("solutions/13_hopper_matmul/13_hopper_matmul.ipynb", "l13-29", 'check_exercise("13", "ws_matmul"'),
    "tests/test_lesson14.py::test_the_all_reduce_solution_passes_its_self_check":
        ("solutions/14_multi_gpu/14_multi_gpu.ipynb", "l14-13", 'check_exercise("14", "all_reduce"'),
}


def passed(name: str) -> str:
    """The line of a check's report, or of a cell's summary of one, that says every case passed: the fourth item of
    an entry of CHECKED_IN_NOTEBOOKS for a check of the lessons' reference ops (a regular expression). At least one
    case: a check that ran none ("0/0") passed nothing."""
    return rf"{re.escape(name)}: ([1-9]\d*)/\1 cases passed"


# The checks of the lessons' reference ops that a compared cell of the solution notebook runs as the test does (the
# same op, reference, inputs, sizes, dtypes and tolerance; the same thread orders, or more): each parameter of a test
# an entry, whose fourth item is the line that the cell's recorded output holds when every case of that check passed.
_L01, _L02, _L03 = (f"solutions/{n}/{n}.ipynb" for n in ("01_thread_model", "02_first_kernel", "03_pytorch_op"))
_L05, _L06, _L09 = (f"solutions/{n}/{n}.ipynb" for n in ("05_fused", "06_reductions", "09_matmul"))
_L11, _L12, _L13 = (f"solutions/{n}/{n}.ipynb" for n in ("11_other_routes", "12_attention", "13_hopper_matmul"))
_ADD = "torch.add, elementwise(2), out=like(0)"
_T02, _T05, _T09, _T12, _T13 = (f"tests/test_lesson{n}.py::test_" for n in ("02", "05", "09", "12", "13"))
CHECKED_IN_NOTEBOOKS.update({
    "tests/test_lesson01.py::test_add2_matches_torch_on_ragged_empty_and_single_element_sizes":
        (_L01, "d9202bb1", f"check(ext.add2, {_ADD})", passed("add2")),
    **{f"{_T02}float32_add_matches_torch_on_ragged_empty_and_single_element_sizes[{op}]":
       (_L02, "edd42aa3", f"check(ext.{op}, {_ADD})", passed(op)) for op in ("add1", "add2")},
    f"{_T02}templated_ops_match_torch_in_every_floating_dtype[add4]":
        (_L02, "9721cb38", f"check(ext.add4, {_ADD}, dtypes=floating)", passed("add4")),
    f"{_T02}templated_ops_match_torch_in_every_floating_dtype[square5]":
        (_L02, "9721cb38", "check(ext.square5, lambda x: x * x, elementwise(1), out=like(0), dtypes=floating)",
         passed("square5")),
    "tests/test_lesson03.py::test_mul_matches_torch_on_ragged_sizes_and_both_dtypes":
        (_L03, "321e4adc", "check(ext.mul, torch.mul, elementwise(2), dtypes=(torch.float32, torch.float64))",
         passed("mul")),
    "tests/test_lesson03.py::test_mul_backward_returns_grad_times_the_other_input":
        (_L03, "bffe6e75", "check(ext.mul_backward, lambda g, x, y: (g * y, g * x), elementwise(3),",
         passed("mul_backward")),
    **{f"{_T05}relu_add_bias_matches_pytorch[{op}]":
       (_L05, "ca0f2beb", "check(getattr(ext, name), in_float64(lambda x, y, b: torch.relu(x) + y + b)", passed(op))
       for op in ("relu_add_bias1", "relu_add_bias2")},
    **{f"{_T05}bias_gelu_matches_pytorch[{kind}]":
       (_L05, "aaa02521", "check(lambda x, b, out: ext.bias_gelu3(x, b, tanh, out),", passed(f"bias_gelu3 ({name})"))
       for kind, name in (("tanh", "tanh"), ("erf", "none"))},
    f"{_T05}relu_add_bias_backward_gives_dx_and_the_column_sums_of_grad":
        (_L05, "6e349b67", "check(ext.relu_add_bias_backward4, in_float64(lambda g, x: (g * (x > 0), g.sum(0))),",
         passed("relu_add_bias_backward4")),
    **{f"{_T05}bias_gelu_backward_gives_dx_and_the_column_sums_of_dx[{kind}]":
       (_L05, "4508aeb3", "check(lambda g, x, b, dx, db: ext.bias_gelu_backward5(g, x, b, tanh, dx, db),",
        passed(f"bias_gelu_backward5 ({name})")) for kind, name in (("tanh", "tanh"), ("erf", "none"))},
    **{f"tests/test_lesson06.py::test_every_full_sum_matches_the_float64_sum_on_ragged_empty_and_single_sizes[sum{k}]":
       (_L06, "def140b7", 'check_sum(getattr(ext, f"sum{k}"))', passed(f"sum{k}")) for k in range(1, 8)},
    **{f"{_T09}every_fp32_variant_matches_torch_on_awkward_shapes[matmul{k}]":
       (_L09, "l09-09", 'check_matmul(getattr(ext, f"matmul{k}"), (*SHAPES, *WIDE), quiet=True)', passed(f"matmul{k}"))
       for k in range(1, 9)},
    **{f"{_T09}the_wmma_variants_match_torch_in_bf16_and_fp16_on_awkward_shapes[{op}-dtype{i}]":
       (_L09, "l09-20", "check_matmul(getattr(ext, name), (*SHAPES, *WIDE), dtypes=(dt,), quiet=True)",
        passed(f"{op} {dtype}")) for op in ("matmul9", "matmul10", "matmul12")
       for i, dtype in enumerate(("bfloat16", "float16"))},
    "tests/test_lesson11.py::test_the_reference_ops_match_pytorch_on_ragged_shapes_and_an_empty_batch":
        (_L11, "l11-05", 'check_bias_gelu(ext.bias_gelu, name="load: bias_gelu")', passed("load: bias_gelu")),
    "tests/test_lesson11.py::test_the_triton_softmax_passes_lesson_07s_checker_with_masked_and_large_rows":
        (_L11, "l11-23", "check_softmax(lambda x, out: out.copy_(ops.softmax(x)), TRITON_SHAPES,",
         passed("triton softmax")),
    **{f"{_T12}every_forward_variant_matches_the_reference_masked_and_not_on_awkward_shapes[{v}]":
       (_L12, "l12-12", "r = check_attention(getattr(ext, name)", passed(v))
       for v in lesson12.FORWARD},
    **{f"{_T12}every_backward_variant_matches_the_reference_masked_and_not_on_awkward_shapes[{v}]":
       (_L12, "l12-16", "r = check_attention_backward(getattr(ext, name)", passed(v))
       for v in lesson12.BACKWARD},  # the cell checks every backward variant the lesson declares
    # lesson 13's cell checks every variant on SHAPES in bf16 and fp16: the bf16 test's shapes, and the fp16 test's one
    **{f"{_T13}{test}[{v}]": (_L13, "l13-24", "check_matmul13(getattr(ext, name), SHAPES, quiet=True)", passed(v))
       for test in ("every_variant_matches_torch_in_bf16_on_whole_and_ragged_tiles", "every_variant_takes_fp16_too")
       for v in (variant.name for variant in lesson13.VARIANTS)},
    # and, in one cell, matmul13_5 on column-major operands and linear13's epilogue on LAYOUT_SHAPES in bf16 and fp16
    **{f"{_T13}the_tma_store_variant_takes_column_major_operands[{label}]":
       (_L13, "l13-25a", "check_matmul13(in_layout(ext.matmul13_5, a_col, b_col), LAYOUT_SHAPES",
        passed(f"matmul13_5 ({label})")) for label, _, _ in lesson13.LAYOUTS},
    **{f"{_T13}linear13_fuses_the_bias_and_the_activation[{act}]":
       (_L13, "l13-25a", "check_linear13(ext.linear13, act, quiet=True)", passed(f"linear13 {act}"))
       for act in lesson13.ACTIVATIONS},
    f"{_T13}scaled_mm13_multiplies_e4m3_operands_with_their_scales_into_bf16":
        (_L13, "l13-25d", "check_scaled_mm13(ext.scaled_mm13, quiet=True)", passed("scaled_mm13")),
})
checked_in_notebook = pytest.mark.toolkit  # the mark of the tests above (see CHECKED_IN_NOTEBOOKS)


def built(path: Path) -> Path:
    """`path`, after building it: a file that does not build fails the test here (BuildError), so a
    toolkit change that breaks every build cannot pass for a self-check that caught a bug."""
    load(path, quiet=True)
    return path


def assert_diagnosis(report, *expected: str) -> None:
    """The report fails, no case is a failed build, and each `expected` text is in a failing case."""
    failing = [c for c in report.cases if not c.passed]
    assert failing, f"expected a failing report, got:\n{report}"
    assert all(c.size != "build" for c in failing), f"the file did not build:\n{report}"
    text = "\n".join(f"{c.problem}\n{c.detail}" for c in failing)
    for e in expected:
        assert e in text, f"expected {e!r} in a failing case, got:\n{report}"


def self_check_of_planted(lesson: str, exercise: str, solution: Path, name: str, old: str, new: str,
                          races: bool = False):
    """The exercise's self-check report on `solution` with `old` replaced by `new`, after building it; with
    the simulator's race and bounds check only when `races`."""
    return self_check(lesson, exercise, built(plant(solution, old, new, name)), races=races)


def self_check(lesson: str, exercise: str, path: Path, races: bool = False, **kwargs):
    """The exercise's self-check report on a planted file, with the race and bounds check only when `races`."""
    with contextlib.nullcontext() if races else race_check_limit(0):
        return check_exercise(lesson, exercise, path=path, **kwargs)
