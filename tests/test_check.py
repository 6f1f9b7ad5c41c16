"""The checker: it passes a correct kernel and fails each classic bug with the right diagnosis."""
import importlib.util
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import kernels.backend
from kernels import load
from kernels.check import (DETAILED, REDUCTION_ROWS, ROWS, Case, CheckFailed, Report, _output_names, check,
                           compare, cuda_context_lost, elementwise, guarded, like, merge, race_check_limit,
                           random_tensor, rows)
from kernels.lessons.lesson06 import check_row_max, check_row_sum
from planting import built, row_max_from_zero

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).parent / "toolkit"
INF, NAN = float("inf"), float("nan")


@pytest.fixture(scope="module")
def ext():
    return load(HERE / "vector_add.cu")


def run(fn, **kw):
    return check(fn, torch.add, elementwise(2), out=like(0), quiet=True, **kw)


def test_correct_kernel_passes_every_case(ext):
    r = run(ext.add)
    assert r.passed
    assert [c.size for c in r.cases] == [0, 1, 31, 33, 1000, 2**20 + 3]


def test_report_names_the_op_without_its_build_namespace(ext):
    assert run(ext.add).name == "add"


def test_off_by_one_is_caught_as_a_write_past_the_end(ext):
    r = run(ext.add_le)
    assert not r.passed
    bad = [c for c in r.cases if not c.passed]
    assert bad and all("past the end" in c.problem for c in bad)
    assert any("i <= n" in h for h in r.hints)


def test_skipped_tail_is_caught_as_unwritten_elements(ext):
    r = run(ext.add_notail, sizes=[1000, 2**20 + 3])
    assert not r.passed
    assert all("NaN" in c.problem for c in r.cases)
    assert "never written" in r.cases[0].detail


def test_tail_of_a_single_block_fails_with_the_launch_error(ext):
    r = run(ext.add_notail, sizes=[31])
    assert not r.passed and "raised" in r.cases[0].problem
    assert "CUDA error: invalid argument" in r.cases[0].detail  # a grid of 0 blocks, as the GPU reports it
    # raised in C++, below any Python file of the learner's: no file and line to name
    assert not any(line.startswith("at ") for line in r.cases[0].detail.splitlines())


def test_nan_never_passes(ext):
    r = run(ext.add_nan, sizes=[1000])
    assert not r.passed and "NaN" in r.cases[0].problem


def test_mutated_input_is_caught(ext):
    r = run(ext.add_mutate, sizes=[1000])
    assert not r.passed and "input 0 was modified" in r.cases[0].problem
    assert r.cases[0].detail.startswith("first change at flat index 0: was ")


def test_unwritten_scattered_elements_are_caught(ext):
    r = run(ext.add_skip, sizes=[2**20 + 3])
    assert not r.passed and "NaN" in r.cases[0].problem


def test_wrong_values_show_the_first_mismatches(ext):
    r = check(ext.add, torch.sub, elementwise(2), out=like(0), sizes=[1000], quiet=True)
    assert not r.passed
    assert "differ" in r.cases[0].problem
    assert r.cases[0].detail.startswith("at ")


def test_functional_op_outputs_are_poisoned_too(ext):
    assert check(ext.add_new, torch.add, elementwise(2), quiet=True).passed
    r = check(ext.add_new_notail, torch.add, elementwise(2), sizes=[1000], quiet=True)
    assert not r.passed and "NaN" in r.cases[0].problem


def test_raise_on_fail_raises_with_the_report(ext):
    with pytest.raises(CheckFailed, match="past the end"):
        run(ext.add_le, sizes=[33], raise_on_fail=True)


def test_report_is_the_same_text_on_every_run(ext, capsys):
    check(ext.add, torch.add, elementwise(2), out=like(0))
    first = capsys.readouterr().out
    check(ext.add, torch.add, elementwise(2), out=like(0))
    assert capsys.readouterr().out == first
    assert "6/6 cases passed" in first


def test_inputs_are_fresh_random_values_each_call():
    make = elementwise(1)
    a, b = make(1000, torch.float32, "cpu")[0], make(1000, torch.float32, "cpu")[0]
    assert not torch.equal(a, b)
    assert (a != 0).all()


def test_compare_uses_dtype_scaled_tolerance():
    want = torch.ones(10)
    assert compare(want + 5e-6, want, 1e-5, 1e-6)[0]
    assert not compare(want + 1e-3, want, 1e-5, 1e-6)[0]
    nan = want.clone()
    nan[3] = float("nan")
    ok, problem, _ = compare(nan, want, 1, 1)
    assert not ok and "NaN" in problem


def test_guarded_tensor_sits_between_canaries():
    g = guarded((5,), torch.float32, "cpu", 0.0)
    assert g.view.is_contiguous() and g.view.data_ptr() % 16 == 0
    buf, start = g.buffer, g.start
    assert start >= 64 and (buf[:start] == 1234.5).all() and (buf[start + 5:] == 1234.5).all()
    assert g.margins_intact() == (None, "")
    buf[start + 5] = 0.0
    assert g.margins_intact()[1].startswith("wrote past the end: element(s) 5")


def test_a_passing_report_is_a_header_and_one_pass_line_per_case(ext):
    # solution notebooks store this text: it must not change from run to run or between backends
    assert str(run(ext.add)) == "\n".join(
        ["add: 6/6 cases passed"] + [f"  PASS  {n:>12}  float32" for n in (0, 1, 31, 33, 1000, 2**20 + 3)])


# ---------------------------------------------------------------------------------------------
# compare: torch.testing.assert_close's rules (dtype checked, inf only equals the same inf, NaN only
# where the reference has NaN), with the checker's own diagnosis.

def _pair(got, want, dtype=torch.float32, want_dtype=None):
    return torch.tensor(got, dtype=dtype), torch.tensor(want, dtype=want_dtype or dtype)


AGAINST_ASSERT_CLOSE = {
    "equal": _pair([1.0, -2.0], [1.0, -2.0]),
    "within tolerance": _pair([1.0 + 5e-6], [1.0]),
    "outside tolerance": _pair([1.001], [1.0]),
    "the same infinities": _pair([INF, -INF], [INF, -INF]),
    "a finite value against +inf": _pair([3e38], [INF]),
    "+inf against a finite value": _pair([INF], [3e38]),
    "-inf against +inf": _pair([-INF], [INF]),
    "NaN against NaN": _pair([NAN, 1.0], [NAN, 1.0]),
    "a number against NaN": _pair([0.0], [NAN]),
    "NaN against a number": _pair([NAN], [0.0]),
    "float32 against float16": _pair([1.0], [1.0], torch.float32, torch.float16),
    "float64 against float32": _pair([1.0], [1.0], torch.float64, torch.float32),
    "another shape": (torch.ones(2, 3), torch.ones(3, 2)),
    "equal integers": _pair([7, -3], [7, -3], torch.int32),
    "integers one apart": _pair([7, -3], [7, -2], torch.int32),
}


@pytest.mark.parametrize("case", sorted(AGAINST_ASSERT_CLOSE))
def test_compare_passes_exactly_what_assert_close_passes(case):
    got, want = AGAINST_ASSERT_CLOSE[case]
    try:
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)
        expected = True
    except AssertionError:
        expected = False
    assert compare(got, want, 1e-5, 1e-6)[0] is expected


def test_an_infinity_matches_only_the_same_infinity():
    want = torch.tensor([INF, -INF, 1.0])
    assert compare(want.clone(), want, 1e-5, 1e-6)[0]
    for got in ([3e38, -INF, 1.0], [-INF, -INF, 1.0], [INF, -INF, INF]):
        ok, problem, detail = compare(torch.tensor(got), want, 1e-5, 1e-6)
        assert not ok and problem.startswith("1 of 3 elements differ"), got
        assert detail.startswith("at "), got


def test_a_number_where_the_reference_is_nan_fails():
    ok, problem, detail = compare(torch.tensor([1.0, 0.0]), torch.tensor([1.0, NAN]), 1, 1)
    assert not ok and problem == "1 of 2 elements are numbers where the reference is NaN"
    assert detail == "at 1: got 0, expected nan"


def test_nan_where_the_reference_has_a_number_is_diagnosed_as_unwritten():
    ok, problem, detail = compare(torch.tensor([1.0, NAN, NAN]), torch.tensor([1.0, 2.0, NAN]), 1, 1)
    assert not ok and problem == "1 of 3 elements are NaN"
    assert detail == "first at flat index 1: never written (still the NaN poison)"


def test_an_output_of_another_dtype_fails_naming_both_dtypes():
    ok, problem, _ = compare(torch.ones(4), torch.ones(4, dtype=torch.float16), 1, 1)
    assert not ok and problem == "dtype float32, expected float16"


def test_a_float32_result_for_a_float16_op_fails_every_case_and_is_not_cast():
    r = check(lambda x: x.float() * 2, lambda x: x * 2, elementwise(1), dtypes=(torch.float16,), quiet=True)
    assert [c.problem for c in r.cases] == ["dtype float32, expected float16"] * len(r.cases)
    assert any("dtype is not the reference's" in h for h in r.hints)


def test_a_shape_mismatch_fails_naming_both_shapes():
    ok, problem, _ = compare(torch.ones(2, 3), torch.ones(6), 1, 1)
    assert not ok and problem == "shape (2, 3), expected (6,)"


def nan_and_inf(size, dtype, device):
    """One input whose first elements are NaN, +inf and -inf."""
    x = random_tensor((size,), dtype, device)
    x[:3] = torch.tensor([NAN, INF, -INF], dtype=dtype)
    return [x]


def test_inputs_holding_nan_and_inf_are_seen_unchanged():
    assert check(lambda x, out: out.copy_(x), torch.clone, nan_and_inf, out=like(0), sizes=[3, 1000], quiet=True).passed


def test_a_tiny_change_to_an_input_that_holds_nan_is_caught():
    def nudge_last(x, out):
        out.copy_(x)
        x[-1] = torch.nextafter(x[-1], torch.tensor(INF, device=x.device))

    r = check(nudge_last, torch.clone, nan_and_inf, out=like(0), sizes=[33], quiet=True)
    assert r.cases[0].problem == "input 0 was modified"
    assert r.cases[0].detail.startswith("first change at flat index 32: ")


# ---------------------------------------------------------------------------------------------
# Row-wise inputs: the rows that catch the usual bugs of a row reduction.

def test_row_inputs_start_with_an_all_negative_row_then_a_constant_row():
    x, y = rows(2)((7, 33), torch.float32, "cpu")
    assert (x[0] < 0).all()
    assert (x[1] == x[1, 0]).all()
    assert x[2:].std() > 0.5 and torch.isfinite(x).all()
    assert (y[0] > 0).any() and (y[1] != y[1, 0]).any()  # only the first input gets the special rows


def test_row_inputs_with_neg_inf_make_row_2_all_minus_infinity():
    (x,) = rows(1, neg_inf=True)((4, 5), torch.float32, "cpu")
    assert (x[2] == -INF).all() and torch.isfinite(x[[0, 1, 3]]).all()


def test_row_inputs_fit_a_single_row_and_no_rows():
    (one,) = rows(1, neg_inf=True)((1, 1), torch.float32, "cpu")
    assert one.item() < 0
    (none,) = rows(1)((0, 5), torch.float32, "cpu")
    assert none.shape == (0, 5)


def test_row_reduction_shapes_add_rows_of_one_column_to_the_row_shapes():
    assert set(ROWS) < set(REDUCTION_ROWS)
    assert any(r > 1 and c == 1 for r, c in REDUCTION_ROWS)


def test_a_row_max_that_starts_from_zero_fails_every_case_that_has_rows():
    max_from_zero = load(built(row_max_from_zero()), quiet=True)  # lesson 06's planted bug (its tests build it too)
    with race_check_limit(0):  # a wrong value in every thread order: the race check's instrumented build adds nothing
        r = check_row_max(max_from_zero.row_max, shapes=(*REDUCTION_ROWS, (0, 5)), quiet=True)
    assert [c.passed for c in r.cases] == [c.size[0] == 0 for c in r.cases]
    assert all("differ" in c.problem for c in r.cases if not c.passed)


def test_the_row_reduction_checks_pass_the_reference_kernels():
    ext06 = load("06", quiet=True)
    assert check_row_max(ext06.row_max2, quiet=True).passed
    assert check_row_sum(ext06.row_sum2, quiet=True).passed


# ---------------------------------------------------------------------------------------------
# Errors: a Python exception names its file and line; a sticky CUDA error stops the check.

def raising_op(x, y, out):
    raise ValueError("this op is not written yet")


def test_a_python_exception_inside_the_op_names_its_file_and_line():
    r = check(raising_op, torch.add, elementwise(2), out=like(0), sizes=[33], quiet=True)
    line = inspect.getsourcelines(raising_op)[1] + 1
    assert r.cases[0].problem == "raised ValueError"
    assert r.cases[0].detail == f"this op is not written yet\nat tests/test_check.py, line {line}, in raising_op"


def test_a_python_exception_in_a_file_outside_the_repository_is_named_by_the_file_name(tmp_path):
    (tmp_path / "my_op.py").write_text("def my_op(x, y, out):\n    return x.not_a_method()\n")
    spec = importlib.util.spec_from_file_location("my_op", tmp_path / "my_op.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    r = check(module.my_op, torch.add, elementwise(2), out=like(0), sizes=[33], quiet=True)
    assert r.cases[0].problem == "raised AttributeError"
    assert r.cases[0].detail.endswith("\nat my_op.py, line 2, in my_op")


@pytest.fixture
def fake_cuda(monkeypatch):
    """The cuda backend on CPU tensors, with a CUDA context that a sticky error breaks for good."""
    context = {"broken": ""}

    def synchronize():
        if context["broken"]:
            raise RuntimeError(f"CUDA error: {context['broken']}\nCompile with `TORCH_USE_CUDA_DSA` to enable "
                               "device-side assertions.")

    monkeypatch.setattr(kernels.backend, "resolve", lambda backend=None: "cuda")
    monkeypatch.setattr(kernels.backend, "device", lambda backend=None: torch.device("cpu"))
    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    return context


def breaks_at(context, n: int, error: str):
    """A kernel that adds, except at size n, where it raises `error` and leaves the context broken."""
    def kernel(x, y, out):
        if x.numel() == n:
            context["broken"] = error
            raise RuntimeError(f"CUDA error: {error}\nCUDA kernel errors might be asynchronously reported")
        torch.add(x, y, out=out)
    return kernel


def test_a_sticky_cuda_error_is_told_by_its_text(fake_cuda):
    error = RuntimeError("CUDA error: an illegal memory access was encountered")
    assert cuda_context_lost(error, "cuda") == "an illegal memory access was encountered"
    assert cuda_context_lost(error, "sim") == ""  # the simulator has no CUDA context to lose


def test_a_cuda_error_is_sticky_when_a_synchronize_fails_after_it(fake_cuda):
    error = RuntimeError("CUDA error: unknown error")
    assert cuda_context_lost(error, "cuda") == ""
    fake_cuda["broken"] = "unknown error"
    assert cuda_context_lost(error, "cuda") == "unknown error"


@pytest.mark.parametrize("error", ["an illegal memory access was encountered", "unspecified launch failure",
                                   "device-side assert triggered", "unknown error"])
def test_check_stops_after_a_sticky_cuda_error_with_one_restart_line(fake_cuda, capsys, error):
    r = check(breaks_at(fake_cuda, 33, error), torch.add, elementwise(2), out=like(0))
    printed = capsys.readouterr().out
    assert [c.size for c in r.cases] == [0, 1, 31, 33] and not r.passed
    assert r.cases[-1].problem == "raised RuntimeError"
    assert r.stopped.startswith(f"the CUDA context is broken ({error})")
    assert "stopped after case 4 of 6" in r.stopped and "Restart the Python process" in r.stopped
    assert printed.count("Restart the Python process") == 1 and printed.count(f"CUDA error: {error}") == 1


def test_check_goes_on_after_a_cuda_error_that_is_not_sticky(fake_cuda):
    r = check(breaks_at(fake_cuda, 33, ""), torch.add, elementwise(2), out=like(0), quiet=True)
    assert len(r.cases) == 6 and not r.stopped
    assert [c.passed for c in r.cases] == [True, True, True, False, True, True]


def test_check_on_a_broken_context_runs_no_case(fake_cuda):
    fake_cuda["broken"] = "an illegal memory access was encountered"
    r = check(raising_op, torch.add, elementwise(2), out=like(0), quiet=True)
    assert r.cases == [] and not r.passed
    assert "stopped before the first case" in r.stopped and "Restart the Python process" in str(r)


def test_a_merged_report_keeps_the_reason_a_part_stopped():
    passed = Report("forward", [Case(1, torch.float32)])
    stopped = Report("backward", stopped="the CUDA context is broken")
    merged = merge("both", [passed, stopped])
    assert merged.cases == passed.cases and merged.stopped == "the CUDA context is broken"
    assert not merged.passed


def test_an_illegal_memory_access_on_the_gpu_stops_the_check_with_one_restart_line(backend):
    if backend != "cuda":
        pytest.skip("needs a GPU: the simulator has no CUDA context to break")
    # in a subprocess: the error breaks the CUDA context of the process it happens in
    script = (f"import torch\nfrom kernels import load\nfrom kernels.check import check, elementwise, like\n"
              f"ext = load({str(HERE / 'illegal_address.cu')!r}, quiet=True)\n"
              f"check(ext.write_far, torch.clone, elementwise(1), out=like(0), backend='cuda')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert "write_far: 1/2 cases passed" in done.stdout  # size 0 launches nothing; size 1 breaks the context
    assert "the CUDA context is broken (an illegal memory access was encountered)" in done.stdout
    assert done.stdout.count("Restart the Python process") == 1


# ---------------------------------------------------------------------------------------------
# The report: outputs by name, a line per case, details of the first few failing cases, hints once.

def sum_and_difference(x, y):
    return x + y, x - y


def test_outputs_are_named_in_the_report_by_out_names():
    def only_the_sum(x, y, total, diff):
        torch.add(x, y, out=total)

    r = check(only_the_sum, sum_and_difference, elementwise(2), out=like(0, 1), out_names=("total", "diff"),
              sizes=[33], quiet=True)
    assert r.cases[0].problem == "33 of 33 elements are NaN in diff"


def test_outputs_without_names_are_numbered():
    r = check(lambda x, y: (x + y, x), sum_and_difference, elementwise(2), sizes=[33], quiet=True)
    assert "elements differ" in r.cases[0].problem and r.cases[0].problem.endswith(" in output 1")


def test_out_names_of_the_wrong_length_are_refused_saying_how_many():
    with pytest.raises(ValueError, match=r"out_names has 1 names \(total\), but the op has 2 outputs"):
        check(lambda x, y, a, b: None, sum_and_difference, elementwise(2), out=like(0, 1), out_names=("total",),
              sizes=[33], quiet=True)


def test_a_tolerance_per_output_holds_each_output_to_its_own():
    def sum_a_little_off(x, y):  # the sum 1e-3 off (relative), the difference exact
        return (x + y) * (1 + 1e-3), x - y

    def run(tolerance):
        return check(sum_a_little_off, sum_and_difference, elementwise(2), sizes=[33], tolerance=tolerance, quiet=True)
    assert run({torch.float32: ((1e-2, 1e-2), (1e-6, 1e-6))}).passed
    failed = run({torch.float32: ((1e-6, 1e-6), (1e-2, 1e-2))})
    assert not failed.passed and failed.cases[0].problem.endswith(" in output 0")
    with pytest.raises(ValueError, match=r"3 tolerances for 2 outputs"):
        run({torch.float32: ((1e-2, 1e-2),) * 3})


def test_an_out_variant_ops_outputs_are_named_from_its_schema(ext):
    assert _output_names(ext.add, None, 2, 1) == ["out"]
    assert _output_names(raising_op, None, 2, 1) == ["output 0"]


def test_a_failing_report_gives_details_of_the_first_few_failing_cases_and_counts_the_rest():
    sizes = (0, 1, 2, 3, 5, 8, 13, 21)
    r = check(lambda x, y, out: None, torch.add, elementwise(2), out=like(0), sizes=sizes, name="nothing", quiet=True)
    lines = str(r).splitlines()
    assert lines[0] == "nothing: 1/8 cases passed"
    assert [line[:6] for line in lines if line.startswith(("  PASS", "  FAIL"))] == ["  PASS"] + ["  FAIL"] * 7
    assert sum("never written" in line for line in lines) == DETAILED
    assert lines[-2] == f"  (details of {7 - DETAILED} more failing cases left out: fix the first ones and run again)"
    assert lines[-1].startswith("  hint: unwritten elements")  # the same hint for 7 cases, said once
    assert len(lines) == 1 + 8 + DETAILED + 2


@pytest.mark.parametrize("error, diagnosis", [
    (RuntimeError("cudasim: exception in kernel sum_kernel3: data race on partial[3]: thread (3,0,0) read ..."),
     "RACE"),
    (RuntimeError("cudasim: exception in kernel k: out-of-bounds write at a.cu:12: the thread wrote 4 bytes ..."),
     "OUT_OF_BOUNDS"),
    (RuntimeError("cudasim: __shfl_xor_sync at a.cu:30 with mask 0xffffffff names lane 7 (thread (7,0,0)), "
                  "which has exited (returned at a.cu:28)."), "EXITED_LANE"),
    (RuntimeError("CUDA error: invalid argument\nCUDA kernel errors might be asynchronously reported"), "INVALID_LAUNCH"),
    (RuntimeError("grad must be contiguous, got strides [0, 0]"), "INPUT_REFUSED"),
    (NotImplementedError("the backward of fma is not written yet"), "NOT_IMPLEMENTED"),
    (ValueError("something else"), "RAISED"),
])
def test_a_raised_error_gets_its_diagnosis_by_name(error, diagnosis):
    from kernels.check import Diagnosis, diagnose_error

    assert diagnose_error(error) is Diagnosis[diagnosis]


def test_an_error_that_carries_its_diagnosis_is_taken_at_its_word():
    from kernels.check import Diagnosis, diagnose_error

    e = RuntimeError("a finding worded any way")
    e.diagnosis = Diagnosis.RACE
    assert diagnose_error(e) is Diagnosis.RACE


def test_a_nan_the_kernel_computed_is_told_apart_from_the_poison():
    from kernels.check import Diagnosis, diagnose_output

    want = torch.ones(4)
    poisoned = torch.tensor([1.0, float("nan"), 1.0, 1.0])
    computed = poisoned.clone()
    computed.view(torch.int32)[1] = -0x400000  # 0xffc00000: the NaN x86 computes for 0/0 or inf - inf
    assert diagnose_output(poisoned, want, 1e-5, 1e-6)[0] is Diagnosis.UNWRITTEN
    diagnosis, problem, detail = diagnose_output(computed, want, 1e-5, 1e-6)
    assert diagnosis is Diagnosis.NAN_WHERE_REFERENCE_IS_NOT and problem == "1 of 4 elements are NaN"
    assert "not the poison" in detail


def test_a_computed_nan_gets_a_hint_about_arithmetic_not_about_grid_coverage():
    from kernels.check import Diagnosis, check, elementwise

    def zero_over_zero(x):  # every element written, some as 0/0
        out = x.clone()
        out[::3] = torch.zeros_like(out[::3]) / torch.zeros_like(out[::3])
        return out

    report = check(zero_over_zero, lambda x: x, elementwise(1), sizes=[7], quiet=True)
    assert not report.passed and report.cases[0].diagnosis is Diagnosis.NAN_WHERE_REFERENCE_IS_NOT, str(report)
    assert any("0/0" in h for h in report.hints) and not any("grid" in h for h in report.hints), report.hints


def test_check_deterministic_names_the_output_whose_bits_differ_between_two_runs_and_passes_the_same_bits():
    from kernels.check import Diagnosis, check_deterministic

    calls = []

    def drifting(x):  # the second call's sum is one ulp off in one element, as an atomic's order makes it
        calls.append(1)
        total = x.sum(dim=0)
        if len(calls) == 2:
            total[1] = torch.nextafter(total[1], torch.tensor(INF, device=total.device))
        return x * 2, total

    def inputs(size, dtype, device):
        return [torch.randn(size, dtype=dtype, device=device)]

    names = ("twice", "total")
    report = check_deterministic(drifting, inputs, (5, 3), parts=("total",), out_names=names, why="not the same sum",
                                 quiet=True)
    case = report.cases[0]
    assert not report.passed and case.diagnosis is Diagnosis.NOT_DETERMINISTIC and case.size == "5x3 twice"
    assert case.problem == "total differs bit for bit between two runs: not the same sum"
    assert "1 of 3 elements differ; first at flat index 1" in case.detail and report.hints
    assert check_deterministic(lambda x: (x * 2, x.sum(dim=0)), inputs, (5, 3), parts=("total",), out_names=names,
                               quiet=True).passed
