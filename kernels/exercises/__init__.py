"""The lessons' exercises and their self-checks: `check_exercise("04")`, `hint("04", n=2)`.

A notebook's check cell and `make check LESSON=NN` both call `check_exercise`, so they print
the same report. Each lesson's declaration (kernels/lessons/lessonNN.py) lists its EXERCISES.

Hints appear only when asked for: a failing check prints one hint, the one that fits the failure
(a Hint names the checker's diagnoses it answers, such as Diagnosis.WROTE_PAST_END, and the outputs or
parts of the check it is about), and says how to ask for the next: `hint("02", "saxpy", 2)` in a
notebook, `make hint LESSON=02 N=2` in a terminal.
"""
from __future__ import annotations

import time
from pathlib import Path

from .. import lessons
from ..backend import resolve
from ..build import BuildError, load
from ..check import Case, Diagnosis, Report, merge, race_check_on
from ..gates import ON_SIMULATOR, say, shortfall
from ..lessons import Exercise, Hint, lesson_dir

__all__ = ["check_exercise", "hint", "find", "fitting_hint", "all_exercises", "Exercise", "Hint", "lesson_dir", "main"]


def all_exercises() -> dict[str, list[Exercise]]:
    """Every lesson's exercises, by lesson number."""
    return {n: list(mod.EXERCISES) for n, mod in lessons.modules().items() if getattr(mod, "EXERCISES", None)}


def find(lesson: str, name: str | None = None) -> list[Exercise]:
    try:
        lesson = f"{int(lesson):02d}"
    except (TypeError, ValueError):
        raise KeyError(f'expected a lesson number such as "04", got {lesson!r}') from None
    exs = all_exercises().get(lesson)
    if not exs:
        raise KeyError(f"lesson {lesson} has no exercises; lessons with exercises: {', '.join(all_exercises())}")
    if name is None:
        return exs
    picked = [e for e in exs if e.name == name]
    if not picked:
        raise KeyError(f"lesson {lesson} has no exercise {name!r}; it has: {', '.join(e.name for e in exs)}")
    return picked


def fitting_hint(ex: Exercise, report: Report) -> int:
    """The number (from 1) of the hint that answers most of the report's failing cases; ties go to
    the earlier hint, and 1 when no hint names any of the failures."""
    failures = [c for c in report.cases if not c.passed]
    best, best_count = 1, 0
    for n, h in enumerate(ex.hints, 1):
        count = sum(h.fits(c) for c in failures) if isinstance(h, Hint) else 0
        if count > best_count:
            best, best_count = n, count
    return best


def hint_command(ex: Exercise, n: int, shell: bool = False) -> str:
    """How to ask for hint n of an exercise: a notebook call, or a make command for a terminal."""
    if not shell:
        return f'hint("{ex.lesson}", "{ex.name}", {n})'
    several = len(find(ex.lesson)) > 1
    return f"make hint LESSON={ex.lesson}{f' EX={ex.name}' if several else ''} N={n}"


def _print_hints(ex: Exercise, report: Report, show: int, shell: bool) -> None:
    """After a failing check: `show` hints from the one that fits the failure, then how to get the next."""
    if report.passed or not ex.hints or show <= 0:
        return
    first = fitting_hint(ex, report)
    last = min(first + show - 1, len(ex.hints))
    for n in range(first, last + 1):
        fits = " (it fits this failure)" if n == first and first > 1 else ""
        print(f"  hint {n}/{len(ex.hints)}{fits}: {ex.hints[n - 1]}")
    if last < len(ex.hints):
        print(f"  next hint: {hint_command(ex, last + 1, shell)}")
    else:
        print(f"  that was the last hint; the worked answer is solutions/{lesson_dir(ex.lesson, True).name}/{ex.file}")


def import_fresh(path: Path):
    """A Python exercise file imported anew (the learner's latest edit), under a name of its own."""
    import importlib.util
    import sys

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such exercise file: {path}")
    name = f"_exercise_{path.stem}_{abs(hash(path.resolve()))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.pop(name, None)
    spec.loader.exec_module(module)
    return module


def on_this_gpu(ex: Exercise, backend: str | None) -> str | None:
    """The backend an exercise's check runs on: `backend`, but "sim" where it resolves to a GPU that lacks what
    the exercise needs (Exercise.needs), after a line that says so."""
    line = shortfall(ex.name, ex.needs) if resolve(backend) == "cuda" else None
    if line is None:
        return backend
    say(line + ON_SIMULATOR)
    return "sim"


def check_exercise(lesson: str, name: str | None = None, *, path: str | Path | None = None,
                   solution: bool = False, backend: str | None = None, show_hints: int = 1,
                   shell: bool = False) -> Report:
    """Build the exercise file (yours in lessons/, or the solution) and run its self-check; a Python
    exercise file (.py) is imported instead of built.

    Prints a pass/fail line per case and, on failure, `show_hints` hints of the ladder starting
    from the one that fits the failure, and how to ask for the next (a make command if `shell`).
    Never raises for a failing or non-compiling exercise: it reports instead.
    """
    reports = []
    for ex in find(lesson, name):
        src = Path(path) if path else lesson_dir(ex.lesson, solution) / ex.file
        be = on_this_gpu(ex, backend)  # "sim" where the GPU lacks what the exercise needs
        beside = None
        races = ex.races and race_check_on()
        if src.suffix == ".cu" and resolve(be) == "sim" and races:
            from ..sim.instrumented import build_beside

            beside = build_beside(src)  # the race check's build, made beside the plain one
        try:
            ext = import_fresh(src) if src.suffix == ".py" else load(src, be)
            if getattr(ext, "backend", None) == "sim" and races:  # its race check's build, loaded now
                from ..sim.instrumented import prepare

                prepare(ext, beside)
        except Exception as e:  # a Python exercise may fail to import in any way; a .cu file only as below
            if beside is not None and beside.poll() is None:
                beside.kill()  # the file does not build: neither will its twin
            if src.suffix != ".py" and not isinstance(e, (BuildError, FileNotFoundError)):
                raise
            print(f"{ex.name}: does not {'import' if src.suffix == '.py' else 'build'} yet\n{e}")
            import torch

            r = Report(ex.name)
            r.cases.append(Case("build", torch.float32, False,
                                "the file does not import" if src.suffix == ".py" else "the file does not compile",
                                diagnosis=Diagnosis.BUILD_FAILED))
            reports.append(r)
            continue
        r = ex.run(ext, be)
        _print_hints(ex, r, show_hints, shell)
        reports.append(r)
    if len(reports) == 1:
        return reports[0]
    return merge(f"lesson {lesson}", reports)


def hint(lesson: str, name: str | None = None, n: int = 1, *, shell: bool = False) -> None:
    """Print hint n of an exercise's ladder (1 is a nudge; the last is nearly the answer).

    `name` may be left out when the lesson has one exercise.
    """
    exs = find(lesson, name)
    if len(exs) > 1:
        names = ", ".join(e.name for e in exs)
        how = f"make hint LESSON={exs[0].lesson} EX=<name> N={n}" if shell else f'hint("{exs[0].lesson}", "<name>", {n})'
        raise ValueError(f"lesson {exs[0].lesson} has several exercises ({names}): say which, as in {how}")
    ex = exs[0]
    if not ex.hints:
        raise ValueError(f"lesson {ex.lesson}'s exercise {ex.name} has no hints")
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= len(ex.hints):
        raise ValueError(f"lesson {ex.lesson}'s exercise {ex.name} has hints 1 to {len(ex.hints)}; got {n!r}")
    print(f"hint {n}/{len(ex.hints)}: {ex.hints[n - 1]}")
    if n < len(ex.hints):
        print(f"next hint: {hint_command(ex, n + 1, shell)}")


def process_seconds() -> float | None:
    """Wall seconds since this process started (imports included), where the system says (Linux); else None."""
    import os

    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return uptime - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def main(argv: list[str] | None = None) -> int:
    """`python -m kernels.exercises NN [name] [--solution] [--hint N]`: check a lesson's exercises
    (exit 1 on failure), or print one hint."""
    import argparse

    p = argparse.ArgumentParser(description="Check your exercises of a lesson (make check LESSON=NN), "
                                            "or print a hint (make hint LESSON=NN [EX=name] N=2).")
    p.add_argument("lesson", help="lesson number, such as 04")
    p.add_argument("name", nargs="?", help="one exercise of the lesson (default: all)")
    p.add_argument("--solution", action="store_true", help="check the solution files instead of yours")
    p.add_argument("--backend", choices=["cuda", "sim"], help="default: cuda with a GPU, else sim")
    p.add_argument("--hint", type=int, metavar="N", help="print hint N of the exercise instead of checking")
    a = p.parse_args(argv)
    try:
        if a.hint is not None:
            hint(a.lesson, a.name, a.hint, shell=True)
            return 0
        exs = find(a.lesson, a.name)
    except (KeyError, ValueError) as e:
        print(e.args[0])
        return 2
    ok, t0 = True, time.perf_counter()
    for ex in exs:
        r = check_exercise(ex.lesson, ex.name, solution=a.solution, backend=a.backend, shell=True)
        ok &= r.passed
        print()
    verdict = "all exercises pass" if ok else "some exercises do not pass yet"
    since_start = process_seconds()
    started = f"; {since_start:.1f} s since Python started" if since_start else ""
    print(f"{verdict} (checked in {time.perf_counter() - t0:.1f} s, builds included{started})")
    return 0 if ok else 1
