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
from pathlib import Path

import pytest

from kernels import load
from kernels.check import race_check_limit
from kernels.exercises import check_exercise

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


def toolkit_beyond(bugs, keep: tuple[str, ...]) -> list:
    """The planted bugs of a parametrize: those named in `keep` run in make test-all, the others only in make
    test-toolkit (which CI runs too). Each planted bug costs a build or a whole self-check, and make test-all has
    a time budget: it keeps a bug or two per exercise, enough to fail if the check loses its teeth, and the
    toolkit suite keeps every one."""
    names = list(bugs)
    missing = [k for k in keep if k not in names]
    assert not missing, f"no planted bug named {missing}: the bugs are {names}"
    return [n if n in keep else pytest.param(n, marks=pytest.mark.toolkit) for n in names]


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
