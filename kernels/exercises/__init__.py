"""The lessons' exercises and their self-checks, one module per lesson (lesson04.py, ...).

A notebook's check cell and `make check LESSON=NN` both call `check_exercise`, so they print
the same report. Each lesson module defines EXERCISES, a list of Exercise.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..build import ROOT, BuildError, load
from ..check import Report, merge

LESSONS = ROOT / "lessons"
SOLUTIONS = ROOT / "solutions"


@dataclass
class Exercise:
    """One exercise: the .cu file the learner edits, and how to check what it builds."""

    lesson: str            # "04"
    name: str              # "copy_vec4"
    file: str              # the file name, in lessons/NN_topic/ (stub) and solutions/NN_topic/
    run: Callable          # run(ext, backend) -> Report
    hints: list[str] = field(default_factory=list)  # a ladder, from a nudge to nearly the answer


def lesson_dir(lesson: str, solution: bool = False) -> Path:
    """lessons/NN_topic (or solutions/NN_topic) for a lesson number."""
    base = SOLUTIONS if solution else LESSONS
    found = sorted(base.glob(f"{lesson}_*"))
    if not found:
        raise FileNotFoundError(f"no folder for lesson {lesson} in {base.name}/")
    return found[0]


def all_exercises() -> dict[str, list[Exercise]]:
    """Every lesson's exercises, by lesson number."""
    out = {}
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if info.name.startswith("lesson"):
            mod = importlib.import_module(f"{__name__}.{info.name}")
            out[info.name[len("lesson"):]] = list(mod.EXERCISES)
    return dict(sorted(out.items()))


def find(lesson: str, name: str | None = None) -> list[Exercise]:
    lesson = f"{int(lesson):02d}"
    exs = all_exercises().get(lesson)
    if not exs:
        raise KeyError(f"lesson {lesson} has no exercises; lessons with exercises: {', '.join(all_exercises())}")
    if name is None:
        return exs
    picked = [e for e in exs if e.name == name]
    if not picked:
        raise KeyError(f"lesson {lesson} has no exercise {name!r}; it has: {', '.join(e.name for e in exs)}")
    return picked


def check_exercise(lesson: str, name: str | None = None, *, path: str | Path | None = None,
                   solution: bool = False, backend: str | None = None, show_hints: int = 1) -> Report:
    """Build the exercise file (yours in lessons/, or the solution) and run its self-check.

    Prints a pass/fail line per case and, on failure, the first `show_hints` hints of the ladder.
    Never raises for a failing or non-compiling exercise: it reports instead.
    """
    reports = []
    for ex in find(lesson, name):
        src = Path(path) if path else lesson_dir(ex.lesson, solution) / ex.file
        try:
            ext = load(src, backend)
        except (BuildError, FileNotFoundError) as e:
            print(f"{ex.name}: does not build yet\n{e}")
            r = Report(ex.name)
            from ..check import Case
            import torch

            r.cases.append(Case("build", torch.float32, False, "the file does not compile"))
            reports.append(r)
            continue
        r = ex.run(ext, backend)
        if not r.passed and ex.hints and show_hints:
            for i, h in enumerate(ex.hints[:show_hints], 1):
                print(f"  hint {i}/{len(ex.hints)}: {h}")
            if len(ex.hints) > show_hints:
                print(f"  (more hints: hint('{ex.lesson}', '{ex.name}', {show_hints + 1}))")
        reports.append(r)
    if len(reports) == 1:
        return reports[0]
    return merge(f"lesson {lesson}", reports)


def hint(lesson: str, name: str, n: int = 1) -> None:
    """Print hint n of an exercise's ladder (1 is a nudge; the last is nearly the answer)."""
    ex = find(lesson, name)[0]
    n = max(1, min(n, len(ex.hints)))
    print(f"hint {n}/{len(ex.hints)}: {ex.hints[n - 1]}")


def main(argv: list[str] | None = None) -> int:
    """`python -m kernels.exercises NN [--solution]`: check a lesson's exercises; exit 1 on failure."""
    import argparse

    p = argparse.ArgumentParser(description="Check your exercises of a lesson (make check LESSON=NN).")
    p.add_argument("lesson", help="lesson number, such as 04")
    p.add_argument("name", nargs="?", help="one exercise of the lesson (default: all)")
    p.add_argument("--solution", action="store_true", help="check the solution files instead of yours")
    p.add_argument("--backend", choices=["cuda", "sim"], help="default: cuda with a GPU, else sim")
    a = p.parse_args(argv)
    try:
        exs = find(a.lesson, a.name)
    except KeyError as e:
        print(e.args[0])
        return 2
    ok = True
    for ex in exs:
        r = check_exercise(ex.lesson, ex.name, solution=a.solution, backend=a.backend)
        ok &= r.passed
        print()
    print("all exercises pass" if ok else "some exercises do not pass yet")
    return 0 if ok else 1
