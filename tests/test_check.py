"""The checker: it passes a correct kernel and fails each classic bug with the right diagnosis."""
from pathlib import Path

import pytest
import torch

from kernels import load
from kernels.check import CheckFailed, check, compare, elementwise, guarded, like

HERE = Path(__file__).parent / "toolkit"


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
    assert bad and all(c.problem.startswith("wrote past the end") for c in bad)
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


def test_nan_never_passes(ext):
    r = run(ext.add_nan, sizes=[1000])
    assert not r.passed and "NaN" in r.cases[0].problem


def test_mutated_input_is_caught(ext):
    r = run(ext.add_mutate, sizes=[1000])
    assert not r.passed and "input 0 was modified" in r.cases[0].problem


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
    with pytest.raises(CheckFailed, match="wrote past the end"):
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
    view, buf = guarded((5,), torch.float32, "cpu", 0.0)
    assert view.is_contiguous() and view.data_ptr() % 16 == 0
    assert (buf[:64] == 1234.5).all() and (buf[69:] == 1234.5).all()
