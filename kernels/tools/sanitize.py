"""`make sanitize LESSON=NN`: a lesson's self-check under compute-sanitizer, or the simulator's orders.

On a GPU, the self-check (`make check LESSON=NN`, or the solution with SOLUTION=1) runs once under
each of compute-sanitizer's tools:
  memcheck    reads and writes outside an allocation, misaligned accesses
  racecheck   shared-memory hazards between threads (a missing __syncthreads)
  synccheck   barriers that not every thread of the block reaches
  initcheck   reads of device memory nothing has written
with PYTORCH_NO_CUDA_MEMORY_CACHING=1: PyTorch's caching allocator hands out pieces of larger
blocks, so a write a little past a tensor lands inside memory the allocator owns and memcheck sees
nothing; without the cache every tensor is an allocation of its own. Each tool's full output is
kept in build/sanitize/NN_tool.log and a short summary printed.

On the simulator there is no compute-sanitizer: the self-check runs with the threads of each block
in forward, reverse and random order (a result that depends on the order is a race), blocks
shuffled, shared memory poisoned with NaN at each block's start, and divergent barriers, deadlocks
and accesses outside mapped memory raised as errors naming the line (kernels/sim/README.md).
"""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

from .. import backend
from ..build.toolchain import child_env, find_cuda_tool
from ..paths import BUILD, ROOT

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
LOGS = BUILD / "sanitize"
_PREFIX = re.compile(r"^=+ ?")


def find_compute_sanitizer() -> str | None:
    """compute-sanitizer in $CUDA_HOME/bin, else on PATH."""
    return find_cuda_tool("compute-sanitizer")


def sanitizer_command(sanitizer: str, tool: str, lesson: str, solution: bool) -> list[str]:
    """compute-sanitizer running one tool over the lesson's self-check in a fresh Python."""
    if tool not in TOOLS:
        raise ValueError(f"unknown tool {tool!r}: expected one of {', '.join(TOOLS)}")
    extra = ["--leak-check", "no"] if tool == "memcheck" else []
    return [sanitizer, "--tool", tool, *extra, "--print-limit", "20", "--target-processes", "all",
            sys.executable, "-m", "kernels.exercises", lesson, *(["--solution"] if solution else []),
            "--backend", "cuda"]


@dataclasses.dataclass
class ToolResult:
    """What one tool said: its own count of errors, and each distinct finding with how often it came."""

    tool: str
    errors: int | None                                   # the ERROR SUMMARY's count; None when absent
    findings: Counter = dataclasses.field(default_factory=Counter)  # "what at where" -> times
    api_errors: Counter = dataclasses.field(default_factory=Counter)  # CUDA API calls that returned an error

    def summary(self) -> str:
        if self.errors is None:
            head = f"{self.tool}: no summary (the run did not finish; see the log)"
        else:
            head = f"{self.tool}: {self.errors} error{'' if self.errors == 1 else 's'}"
        lines = [head]
        for what, times in self.findings.most_common(5):
            lines.append(f"    {what}" + (f"  (x{times})" if times > 1 else ""))
        if len(self.findings) > 5:
            lines.append(f"    ... and {len(self.findings) - 5} more kinds (see the log)")
        for what, times in self.api_errors.most_common(3):
            lines.append(f"    API: {what}" + (f"  (x{times})" if times > 1 else ""))
        return "\n".join(lines)


def _where(line: str) -> str:
    """`kernel at file.cu:NN` from an `at` clause: `at kernel<...>(args)+0x70 in /path/file.cu:NN`
    (compute-sanitizer since CUDA 12) or `at 0x00000110 in /path/file.cu:NN:kernel(args)` (older)."""
    text = re.sub(r"^.*?\bat\s+", "", line.strip(), count=1)
    m = re.match(r"(.+?)\+0x[0-9a-fA-F]+\s+in\s+(\S+)", text)
    if m:
        func, place = m.groups()
    else:
        m = re.match(r"0x[0-9a-fA-F]+\s+in\s+(.+?:\d+):(.+)", text)
        if not m:
            return text
        place, func = m.groups()
    depth, name = 0, ""
    for ch in func:  # the name up to its parameter list, template arguments kept
        if ch == "(" and depth == 0:
            break
        depth += (ch == "<") - (ch == ">")
        name += ch
    return f"{name.strip()} at {Path(place.strip()).name}"


_HEADLINES = ("invalid ", "uninitialized ", "barrier error", "error: race", "warning: race", "misaligned")


def parse_output(tool: str, text: str) -> ToolResult:
    """compute-sanitizer's report (its lines start with =========) as a ToolResult."""
    result = ToolResult(tool, None)
    lines = [_PREFIX.sub("", ln.rstrip()) for ln in text.splitlines() if ln.startswith("=")]
    for i, line in enumerate(lines):
        m = re.match(r"(?:ERROR|RACECHECK) SUMMARY: (\d+) (?:errors?|hazards? displayed \((\d+) errors?)", line)
        if m:
            count = int(m.group(2) if m.group(2) is not None else m.group(1))
            result.errors = count if result.errors is None else max(result.errors, count)
        elif line.startswith("Program hit "):
            result.api_errors[re.sub(r"\s+", " ", line[len("Program hit "):]).rstrip(".")] += 1
        elif line[:1].strip() and line.lower().startswith(_HEADLINES):
            after = lines[i + 1:i + 5]
            if " access at " in line:  # racecheck: "Race reported between Write access at ..."
                what, where = line.split(" at ", 1)[0], "at " + line.split(" at ", 1)[1]
            else:
                what = line
                where = next((ln for ln in after if ln.lstrip().startswith("at ")), "")
            why = next((m.group(1) for ln in after for m in [re.search(r"\bis (misaligned|out of bounds)", ln)] if m), "")
            result.findings[f"{what.strip()}{': ' + why if why else ''} ({_where(where) if where else 'no location'})"] += 1
    return result


def sanitize_sim(lesson: str, solution: bool) -> int:
    """The simulator's version: the self-check in every thread order, blocks shuffled."""
    from ..exercises import check_exercise
    from ..sim import knobs

    print(f"The simulator has no compute-sanitizer. The self-check of lesson {lesson} runs with the threads of each "
          "block in forward, reverse and random order, the blocks shuffled (CUDASIM_SHUFFLE_BLOCKS=1), shared memory "
          "poisoned with NaN at each block's start; a divergent barrier, a deadlock or an access outside mapped "
          "memory is an error naming the line, and writes past an output hit the checker's canaries.\n")
    with knobs.set(shuffle_blocks=True):
        report = check_exercise(lesson, solution=solution, backend="sim", shell=True)
    print(f"\nsimulator checks (thread orders, shuffled blocks, poisoning): {'PASS' if report.passed else 'FAIL'}")
    return 0 if report.passed else 1


def sanitize_gpu(lesson: str, solution: bool, tools: tuple[str, ...] = TOOLS) -> int:
    """Each tool over the self-check; a summary per tool; 1 when a tool found an error or did not
    finish, or the self-check failed under it."""
    sanitizer = find_compute_sanitizer()
    if not sanitizer:
        print("compute-sanitizer was not found in $CUDA_HOME/bin or on PATH: it ships with the CUDA toolkit "
              "(install the toolkit, or the cuda-sanitizer package, and put its bin/ on PATH)")
        return 1
    from ..build import load
    from ..exercises import find, lesson_dir

    for ex in find(lesson):  # build here, so that no tool watches a compiler
        load(lesson_dir(ex.lesson, solution) / ex.file, "cuda", quiet=True)
    LOGS.mkdir(parents=True, exist_ok=True)
    env = child_env(PYTORCH_NO_CUDA_MEMORY_CACHING="1", **{backend.ENV: "cuda"})
    which = "solution" if solution else "exercise"
    print(f"lesson {lesson}'s self-check ({which}) under compute-sanitizer, PyTorch's caching allocator off; "
          f"full logs in {os.path.relpath(LOGS)}/")
    found_any = False
    for tool in tools:
        done = subprocess.run(sanitizer_command(sanitizer, tool, lesson, solution), capture_output=True, text=True,
                              cwd=ROOT, env=env)
        log = LOGS / f"{lesson}_{tool}.log"
        log.write_text(done.stdout + done.stderr)
        result = parse_output(tool, done.stdout + "\n" + done.stderr)
        passed = done.returncode == 0  # the self-check's own verdict: `make check` exits 0 only when every exercise passes
        print(result.summary() + f"\n    self-check under {tool}: {'PASS' if passed else 'FAIL'}")
        found_any |= bool(result.errors) or result.errors is None or not passed
    return 1 if found_any else 0


def main(argv: list[str] | None = None) -> int:
    """`python -m kernels.tools.sanitize NN [--solution] [--tools memcheck,racecheck]`."""
    import argparse

    p = argparse.ArgumentParser(description="A lesson's self-check under compute-sanitizer (GPU) or the "
                                            "simulator's thread orders (make sanitize LESSON=NN).")
    p.add_argument("lesson", help="lesson number, such as 05")
    p.add_argument("--solution", action="store_true", help="check the solution files instead of yours")
    p.add_argument("--tools", default=",".join(TOOLS), help=f"comma-separated, from {', '.join(TOOLS)}")
    p.add_argument("--backend", choices=["cuda", "sim"], help="default: cuda with a GPU, else sim")
    a = p.parse_args(argv)
    try:
        lesson = f"{int(a.lesson):02d}"
    except ValueError:
        print(f"expected a lesson number such as 05, got {a.lesson!r}")
        return 2
    tools = tuple(t.strip() for t in a.tools.split(",") if t.strip())
    unknown = [t for t in tools if t not in TOOLS]
    if unknown or not tools:
        print(f"unknown tool(s) {', '.join(unknown) or '(none given)'}: expected some of {', '.join(TOOLS)}")
        return 2
    from ..exercises import find

    try:
        find(lesson)
    except KeyError as e:
        print(e.args[0])
        return 2
    try:
        chosen = backend.resolve(a.backend)  # the argument, else $KERNELS_BACKEND, else cuda with a GPU
    except (ValueError, RuntimeError) as e:
        print(e)
        return 2
    if chosen == "sim":
        return sanitize_sim(lesson, a.solution)
    return sanitize_gpu(lesson, a.solution, tools)


if __name__ == "__main__":
    sys.exit(main())
