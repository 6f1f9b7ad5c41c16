"""What the toolkit knows about each lesson, declared once per lesson: kernels/lessons/lessonNN.py.

A lesson's module is the one place that says, for lessons/NN_topic/ and kernels/reference/NN_topic.cu:

    EXERCISES   the exercises: the file the learner edits, its self-check, its ladder of hints
                (each Hint tied by name to the checker's diagnoses: kernels.check.Diagnosis), and
                what it needs of a GPU above compute capability 7.5, if anything (kernels.gates.Needs)
    VARIANTS    the reference file's ops that the tools run: each with the arguments it takes at a
                size, its dtypes, the probes `make profile` shows on the simulator, and its Needs
    OP_NEEDS    the Needs of the file's other ops that need more than compute capability 7.5 (a functional
                form that calls a variant that does), by op name
    GPU_SIZE    the size `make profile KERNEL=...` (Nsight Compute) and the benchmarks run them at
    SIM_SIZE    the size `make profile` runs the probes at on the simulator
    references, tolerances, shapes and check_* functions the notebooks, the checks and the tests share

`make check`/`make hint` (kernels.exercises), `make profile` (kernels.tools.profile and nsight), the
benchmarks (kernels.benchmarks) and the tests read them from here, so a new variant is its kernel in
the reference file plus one Variant line. Modules named lessonNN_<what>.py beside them hold a lesson's
own Python content (lesson 10's debugging entries, lesson 11's CuPy and Triton routes).
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Callable

from ..check import Case, Diagnosis
from ..gates import Needs
from ..paths import LESSONS, REFERENCE, SOLUTIONS


@dataclass(frozen=True)
class Hint:
    """A hint and the failures it answers: a failing case fits it when the case's diagnosis is one of
    `answers` or the case is about one of `parts` (an output such as "dx", or a part of a lesson's
    check such as "opcheck"). A hint for a write past the end or before the start also answers the
    simulator's bounds check (OUT_OF_BOUNDS), which stops the same bug at the access, before it lands."""

    text: str
    answers: tuple[Diagnosis, ...] = ()
    parts: tuple[str, ...] = ()

    def __post_init__(self):
        wrong = [a for a in self.answers if not isinstance(a, Diagnosis)]
        if wrong:
            raise TypeError(f"Hint.answers takes Diagnosis members (kernels.check.Diagnosis), got {wrong!r}")

    def fits(self, case: Case) -> bool:
        """Whether this hint answers the failing case."""
        if case.diagnosis is Diagnosis.OUT_OF_BOUNDS and {Diagnosis.WROTE_PAST_END, Diagnosis.WROTE_BEFORE_START} & set(self.answers):
            return True
        return case.diagnosis in self.answers or (bool(case.part) and case.part in self.parts)

    def __str__(self) -> str:
        return self.text


@dataclass
class Exercise:
    """One exercise: the file the learner edits (.cu, or .py glue), and how to check what it builds."""

    lesson: str            # "04"
    name: str              # "copy_vec4"
    file: str              # the file name, in lessons/NN_topic/ (stub) and solutions/NN_topic/
    run: Callable          # run(ext, backend) -> Report; ext is the built file, or the imported .py module
    hints: list[str | Hint] = field(default_factory=list)  # a ladder, from a nudge to nearly the answer
    needs: Needs | None = None  # a GPU below it builds and checks the file on the simulator instead
    # whether check_exercise makes the simulator's race-check build beside the plain one (its `run` passes races= to
    # check() to match): False where the simulator's own rules already stop what it would find
    races: bool = True


@dataclass(frozen=True)
class Probe:
    """A run of a variant that `make profile LESSON=NN` shows on the simulator: a title, and the arguments
    when they differ from the variant's own (args(size, dtype, device) -> tuple)."""

    title: str
    args: Callable | None = None


@dataclass(frozen=True)
class Variant:
    """An op of the lesson's reference file that the tools run: `args(size, dtype, device)` gives its
    arguments (fresh tensors) at a size of the lesson's kind (an element count, (rows, cols), (M, N, K));
    it runs in `dtypes` (the first is what Nsight Compute profiles); `probes` are what `make profile`
    shows of it on the simulator (none: it is not shown there); `needs`, what it needs of a GPU above
    compute capability 7.5 (a GPU below it runs the op on the simulator instead, kernels/gates.py)."""

    name: str
    args: Callable
    dtypes: tuple = ()     # torch dtypes; () is float32
    probes: tuple[Probe, ...] = ()
    needs: Needs | None = None

    @property
    def dtype(self):
        """The dtype the variant's single-run tools (Nsight Compute) use."""
        import torch

        return self.dtypes[0] if self.dtypes else torch.float32


def on_the_simulator(ext, op: str, backend: str | None) -> Callable:
    """The op `op` of an exercise's loaded file, as the simulator runs it: the file built for the simulator too when
    the exercise runs on a GPU. For the checks only the simulator can make (an access profile's load count), so
    that a self-check makes them, and prints the same cases, on every backend."""
    from ..backend import resolve
    from ..build import load

    if resolve(backend) == "sim":
        return getattr(ext, op)
    return getattr(load(ext.path, "sim", quiet=True), op)


def lesson_id(lesson: str | int) -> str:
    """'6', 6 and '06' all name lesson 06."""
    try:
        return f"{int(lesson):02d}"
    except (TypeError, ValueError):
        raise ValueError(f"expected a lesson number such as \"06\", got {lesson!r}") from None


def lesson_dir(lesson: str, solution: bool = False) -> Path:
    """lessons/NN_topic (or solutions/NN_topic) for a lesson number."""
    base = SOLUTIONS if solution else LESSONS
    found = sorted(base.glob(f"{lesson}_*"))
    if not found:
        raise FileNotFoundError(f"no folder for lesson {lesson} in {base.name}/")
    return found[0]


def modules() -> dict[str, ModuleType]:
    """Every lesson's declaration module, by lesson number ("04": kernels.lessons.lesson04)."""
    out = {}
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if info.name.startswith("lesson") and info.name[len("lesson"):].isdigit():
            out[info.name[len("lesson"):]] = importlib.import_module(f"{__name__}.{info.name}")
    return dict(sorted(out.items()))


def module(lesson: str | int) -> ModuleType:
    """The declaration module of a lesson (a KeyError naming the lessons there are)."""
    found = modules()
    key = lesson_id(lesson)
    if key not in found:
        raise KeyError(f"no lesson {key}; the lessons are: {', '.join(found)}")
    return found[key]


def variants(lesson: str | int) -> list[Variant]:
    """The variants a lesson declares ([] for a lesson without any)."""
    return list(getattr(module(lesson), "VARIANTS", []))


def with_variants() -> list[str]:
    """The lessons that declare variants (what `make profile` and the benchmarks offer)."""
    return [n for n, m in modules().items() if getattr(m, "VARIANTS", None)]


def with_probes() -> list[str]:
    """The lessons whose variants `make profile LESSON=NN` shows on the simulator."""
    return [n for n, m in modules().items() if any(v.probes for v in getattr(m, "VARIANTS", []))]


def exercise_files(ex: Exercise) -> tuple[Path, Path]:
    """An exercise's file as the learner edits it (lessons/NN_topic/) and as solved (solutions/NN_topic/)."""
    return lesson_dir(ex.lesson) / ex.file, lesson_dir(ex.lesson, solution=True) / ex.file


def gated_exercises() -> list[Exercise]:
    """The exercises that need more of a GPU than compute capability 7.5."""
    return [ex for m in modules().values() for ex in getattr(m, "EXERCISES", []) if ex.needs]


def file_gate(path: Path) -> tuple[str, Needs] | None:
    """(the exercise's name, its Needs) when `path` is the file of an exercise that needs more than compute
    capability 7.5 (its stub or its solution); else None."""
    path = Path(path).resolve()
    return next(((ex.name, ex.needs) for ex in gated_exercises() if path in exercise_files(ex)), None)


def op_gates(path: Path) -> dict[str, Needs]:
    """The Needs of each op of a lesson's reference file (kernels/reference/NN_topic.cu) that needs more than
    compute capability 7.5, by op name; {} for any other file."""
    path = Path(path).resolve()
    if path.parent != REFERENCE or not path.name[:2].isdigit():
        return {}
    try:
        found = module(path.name[:2])
    except KeyError:
        return {}
    return {**{v.name: v.needs for v in getattr(found, "VARIANTS", []) if v.needs}, **getattr(found, "OP_NEEDS", {})}
