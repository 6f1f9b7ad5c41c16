"""`make test-all` and `make test-toolkit`: the repository's checks, with a summary of each step's time and counts.

    python -m kernels.dev.all_tests              every test of the lessons and the simulator (`make test-all`)
    python -m kernels.dev.all_tests --toolkit    the toolkit's machinery (`make test-toolkit`)
    python -m kernels.dev.all_tests nbval ...    only the named steps, one after another

`make test-all` is what a change to a lesson, the checker or the simulator must pass: every lesson's kernels,
exercises and planted bugs, the checker's and the simulator's suites (races, the profiler, the CUDA semantics
the lessons use), every solution notebook under nbval, and a simulator build of every .cu they use. `make
test-toolkit` holds what checks the machinery around them, which a learner never changes: the nvcc compile
check of every .cu, and the tests marked `toolkit` (the build cache under concurrency and crashes, precompiled
headers, an installed wheel, this runner and the compile check themselves, and the simulator's reach beyond
the lessons: public CUDA's APIs and idioms, inline PTX; their .cu files carry compile_check's
TOOLKIT_ONLY_MARK). CI runs both, then the lesson notebooks (.ci/run).

`make test`, the quick one, runs the steps build-cache and lesson-tests: every lesson's kernels,
exercises and planted bugs on the default backend, and the notebooks' consistency. The lesson notebooks,
executed with their exercise stubs (step nbval-lessons, `make nbval-lessons`), are not a step of
`make test-all`: they are the solution notebooks' cells but for the exercise cells (tests/test_notebooks.py
holds that), each stub's build and failing self-check is a test of the lesson's (`test_..._stub_...`), and
`make lessons` executes them all; CI runs the step after `make test-all` (.ci/run).

Every step keeps one core busy (pytest and notebooks run one test at a time; the simulator builds and the
nvcc compile check run one compiler at a time here), so both suites run in two lanes, one per core, which
share pytest's files and the notebooks file by file (kernels/dev/pytest_lanes.py): each test file or notebook
is run once, by whichever lane is free first, so neither lane waits for the other until the last file,
whatever each file costs. In `make test-all` one lane starts with the simulator builds of every .cu, one at a
time, while the other starts the tests at once: a test that needs a build that is not made yet makes it
itself (builds of one file take turns, see kernels/build/cache.py, so nothing is built twice). In
`make test-toolkit` one lane starts with the nvcc compile check. On one core the same steps run in one
lane. Each lane's torch gets its share of the cores (see lane_env). Each step's output is printed as it
comes, its lines prefixed with the step's name while two run at once, and its whole output is kept in
build/test-all/<step>.log. The summary's counts and slowest items come from what each step writes for it:
pytest's JUnit XML (--junitxml) and the compile check's JSON (--results), never from the text the steps print.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from ..paths import BUILD, ROOT
from ..tables import text_table
from .compile_check import read_outcome

LOGS = BUILD / "test-all"
PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]
NOTEBOOK_FLAGS = ["--nbval-current-env", "--nbval-cell-timeout=900", "--durations=5"]


@dataclass
class Step:
    name: str
    title: str
    command: list[str]
    wall: float = 0.0
    cpu: float = 0.0
    code: int | None = None
    lines: list[str] = field(default_factory=list)

    @property
    def report(self) -> Path:
        """Where the step writes its counts: pytest's JUnit XML, or the compile check's JSON."""
        return LOGS / f"{self.name}.{'json' if 'kernels.dev.compile_check' in self.command else 'xml'}"

    def full_command(self) -> list[str]:
        """The command with the option that writes its report."""
        if "kernels.dev.compile_check" in self.command:
            return [*self.command, "--results", str(self.report)]
        return [*self.command, f"--junitxml={self.report}"] if "pytest" in self.command else list(self.command)


def steps(jobs: int) -> dict[str, Step]:
    """Every step by name; `jobs` is how many builds the simulator builds and the compile check run at a time."""
    return {s.name: s for s in [
        Step("build-cache", "simulator builds of every .cu",
             [sys.executable, "-m", "kernels.dev.compile_check", "--jobs", str(jobs), "--warm"]),
        Step("pytest", "pytest", [*PYTEST, "tests", "-m", "not toolkit", "--durations=10"]),
        Step("toolkit", "the toolkit's tests", [*PYTEST, "tests", "-m", "toolkit", "--durations=10"]),
        Step("lesson-tests", "every lesson's tests",
             [*PYTEST, *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_lesson*.py")),
              "tests/test_notebooks.py", "--durations=10"]),
        Step("compile-check", "nvcc compile check", [sys.executable, "-m", "kernels.dev.compile_check", "--jobs", str(jobs)]),
        Step("nbval", "solution notebooks (nbval)", [*PYTEST, "--nbval", "solutions", *NOTEBOOK_FLAGS]),
        Step("nbval-lessons", "lesson notebooks (executed)", [*PYTEST, "--nbval-lax", "lessons", *NOTEBOOK_FLAGS]),
    ]}


# Each suite as lanes: the steps each lane opens with, then the steps whose files the lanes share
# (kernels/dev/pytest_lanes.py), in the order each lane runs them: the notebooks last, since their files are
# small, so the lane that finishes first waits little.
SUITES = {
    "all": ([["build-cache"], []], ("pytest", "nbval")),
    "toolkit": ([["compile-check"], []], ("toolkit",)),
}
CLAIMS = LOGS / "claims"


def lanes(cores: int, suite: str = "all") -> list[list[Step]]:
    """The steps of a suite in lanes that run side by side: two where there are two cores or more, else
    one. The lanes' copies of a shared step are separate processes on one folder of claims."""
    count = 2 if cores > 1 else 1
    by_name = steps(jobs=1)
    openings, shared = SUITES[suite]
    openings = [[by_name[n] for n in names] for names in openings]
    if count == 1:
        openings = [[s for names in openings for s in names]]
    out = []
    for k, opening in enumerate(openings, 1):
        lane = list(opening)
        for name in shared:
            base = by_name[name]
            lane.append(Step(base.name if count == 1 else f"{base.name}-{k}",
                             base.title if count == 1 else f"{base.title}, lane {k}",
                             [*base.command, "-p", "kernels.dev.pytest_lanes", "--lanes-dir", str(CLAIMS / name)]))
        out.append(lane)
    return out


_print_lock = threading.Lock()


def say(text: str) -> None:
    """Print a line of progress (one at a time from the lanes)."""
    with _print_lock:
        print(text, flush=True)


def run_step(step: Step, prefix: bool, env: dict[str, str] | None = None) -> None:
    """Run the step (with `env` added to the environment), streaming its output, and record its wall
    time, CPU time and exit code."""
    LOGS.mkdir(parents=True, exist_ok=True)
    say(f"== {step.title}: {' '.join(step.command[1:] if step.command[0] == sys.executable else step.command)}")
    step.report.unlink(missing_ok=True)  # an earlier run's counts must not pass for this one's
    t0 = time.perf_counter()
    proc = subprocess.Popen(step.full_command(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"})
    with open(LOGS / f"{step.name}.log", "w") as log:
        for line in proc.stdout:
            log.write(line)
            step.lines.append(line.rstrip("\n"))
            say(f"[{step.name}] {line.rstrip()}" if prefix else line.rstrip("\n"))
    # wait4, not proc.wait: it also says how much CPU the step and everything it started used
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = step.code = os.waitstatus_to_exitcode(status)
    step.wall = time.perf_counter() - t0
    step.cpu = usage.ru_utime + usage.ru_stime
    verdict = "done" if step.code == 0 else f"FAILED (exit {step.code})"
    say(f"== {step.title}: {verdict} in {step.wall:.0f} s ({step.cpu:.0f} s CPU): {counts(step)}")


def lane_env(cores: int, count: int) -> dict[str, str]:
    """What the steps of `count` lanes on `cores` cores add to the environment: torch's CPU ops in each
    lane get the lane's share of the cores. Left to torch, every process would start a thread per core,
    and on a machine whose cores the lanes already keep busy those threads mostly wait for each other
    (OpenMP's waiting threads spin): lesson 05's checks took 18.3 s of CPU with two threads a process,
    10.3 s with one, on two busy cores. An OMP_NUM_THREADS that is already set is kept."""
    return {} if "OMP_NUM_THREADS" in os.environ else {"OMP_NUM_THREADS": str(max(1, cores // count))}


def run_lanes(lanes: list[list[Step]], env: dict[str, str]) -> None:
    """Run the lanes side by side, the steps of each one after another."""
    threads = [threading.Thread(target=lambda lane=lane: [run_step(s, prefix=True, env=env) for s in lane])
               for lane in lanes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _junit(step: Step) -> ET.Element | None:
    try:
        return ET.parse(step.report).getroot()
    except (OSError, ET.ParseError):
        return None


def tally(step: Step) -> dict[str, int]:
    """The step's counts by kind ("passed", "failed", ...), from the report it wrote; {} when it wrote none."""
    if step.report.suffix == ".json":
        outcome = read_outcome(step.report)
        return {} if outcome is None or outcome.skipped else {"passed": outcome.passed, "failed": outcome.failed}
    root = _junit(step)
    if root is None:
        return {}
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = {k: sum(int(x.get(k, 0)) for x in suites) for k in ("tests", "failures", "errors", "skipped")}
    counts = {"passed": total["tests"] - total["failures"] - total["errors"] - total["skipped"],
              "failed": total["failures"], "errors": total["errors"], "skipped": total["skipped"]}
    return {k: v for k, v in counts.items() if v or k == "passed"}


def counts(step: Step) -> str:
    """The step's counts ("577 passed, 2 skipped"), "skipped: why" for a compile check that could not run."""
    if step.code is None:
        return "not run"
    if step.report.suffix == ".json":
        outcome = read_outcome(step.report)
        if outcome is not None and outcome.skipped:
            return f"skipped: {outcome.skipped}"
    found = tally(step)
    if not found:
        return "no count written"
    if not any(found.values()):
        return "no tests ran"
    return ", ".join(f"{n} {word}" for word, n in found.items() if n)


def slowest(all_steps: list[Step], count: int = 10) -> list[tuple[float, str]]:
    """The slowest tests, notebook cells and builds, from the steps' reports."""
    items = []
    for step in all_steps:
        if step.report.suffix == ".json":
            outcome = read_outcome(step.report)
            for names, secs in outcome.builds if outcome else []:
                items.append((float(secs), f"{step.name}: {names if len(names) < 90 else names[:87] + '...'}"))
            continue
        root = _junit(step)
        for case in root.iter("testcase") if root is not None else []:
            where = case.get("file") or case.get("classname", "").replace(".", "/") + ".py"
            items.append((float(case.get("time", 0)), f"{where}::{case.get('name')}"))
    return sorted(items, reverse=True)[:count]


def failures(all_steps: list[Step]) -> list[str]:
    """Each failed or errored test, as file::name with the first line of its message, from the steps' reports."""
    found = []
    for step in all_steps:
        root = _junit(step) if step.report.suffix == ".xml" else None
        for case in root.iter("testcase") if root is not None else []:
            bad = case.find("failure")
            bad = bad if bad is not None else case.find("error")
            if bad is None:
                continue
            where = case.get("file") or case.get("classname", "").replace(".", "/") + ".py"
            first = (bad.get("message") or "").strip().splitlines()[:1]
            found.append(f"{where}::{case.get('name')}" + (f"  {first[0][:160]}" if first else ""))
    return found


def merged(parts: list[Step]) -> str:
    """The counts of a step that several lanes shared, added up ("814 passed, 13 skipped")."""
    total: dict[str, int] = {}
    for s in parts:
        for word, n in tally(s).items():
            total[word] = total.get(word, 0) + n
    return ", ".join(f"{n} {word}" for word, n in total.items() if n) or "no count written"


def summary(all_steps: list[Step], wall: float) -> str:
    """The table printed at the end: each step, its wall and CPU seconds, its counts; each step the lanes
    shared, its lanes added up; then the slowest items."""
    ran = [s for s in all_steps if s.code is not None]
    shared = {name: [s for s in all_steps if re.fullmatch(rf"{name}-\d+", s.name)]
              for suite in SUITES.values() for name in suite[1]}
    shared = {f"{steps(1)[name].title}, all lanes": parts for name, parts in shared.items() if len(parts) > 1}
    body = []
    for s in all_steps:
        verdict = "" if s.code in (0, None) else "FAILED: "
        body.append((s.title, f"{s.wall:.0f}s", f"{s.cpu:.0f}s", f"{verdict}{counts(s)}"))
    for title, parts in shared.items():
        verdict = "" if all(s.code in (0, None) for s in parts) else "FAILED: "
        body.append((title, "", f"{sum(s.cpu for s in parts):.0f}s", f"{verdict}{merged(parts)}"))
    from ..build.toolchain import cxx, cxx_version

    compiler = (cxx_version("sim").splitlines() or [cxx("sim")])[0]
    lines = [f"== summary: {wall:.0f} s wall, {sum(s.cpu for s in ran):.0f} s CPU in all, on {os.cpu_count()} cores; "
             f"simulator builds with {compiler}",
             text_table(("step", "wall", "CPU", "result"), body, align="lrrl"),
             "== slowest items (seconds)"]
    lines += [f"{secs:8.1f}  {what}" for secs, what in slowest(all_steps)]
    failed = failures(all_steps)
    if failed:
        lines += ["== failed"] + [f"  {f}" for f in failed]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """`python -m kernels.dev.all_tests [STEP ...]`: every step in lanes, or the named steps one after another."""
    cores = os.cpu_count() or 1
    by_name = steps(jobs=cores)
    p = argparse.ArgumentParser(prog="python -m kernels.dev.all_tests", description="Run the repository's checks "
                                "(make test-all: every step) and print a summary of each step's time and counts.")
    p.add_argument("steps", nargs="*", metavar="STEP", help=f"only these steps, one after another: {', '.join(by_name)}")
    p.add_argument("--toolkit", action="store_true", help="the toolkit's machinery (make test-toolkit) instead of "
                   "every test of the lessons and the simulator (make test-all)")
    args = p.parse_args(argv)
    names = args.steps
    if names and args.toolkit:
        print("--toolkit runs a suite: name steps or give --toolkit, not both")
        return 2
    unknown = [a for a in names if a not in by_name]
    if unknown:
        print(f"unknown step {', '.join(unknown)}: expected some of {', '.join(by_name)}")
        return 2
    t0 = time.perf_counter()
    if names:
        chosen = [by_name[a] for a in names]
        for s in chosen:
            run_step(s, prefix=False)
    else:
        suite = "toolkit" if args.toolkit else "all"
        run = lanes(cores, suite)
        chosen = [s for lane in run for s in lane]
        shutil.rmtree(CLAIMS, ignore_errors=True)  # claims of an earlier run would skip their files
        for name in SUITES[suite][1]:
            (CLAIMS / name).mkdir(parents=True)
        if len(run) > 1:
            run_lanes(run, lane_env(cores, len(run)))
        else:
            for s in run[0]:
                run_step(s, prefix=False)
    print(summary(chosen, time.perf_counter() - t0))
    return 0 if all(s.code == 0 for s in chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
