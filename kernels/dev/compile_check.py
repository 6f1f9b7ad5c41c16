"""`make compile-check`: build every .cu of the repository as the real CUDA extension with nvcc.

Nothing runs: this proves that the files the simulator executes are also valid CUDA for nvcc.
It needs nvcc and a CUDA build of torch, GPU or not; without them it says so and skips.

Almost all of an nvcc build of one of these files is parsing torch's headers, three times (cudafe++,
cicc for the device, the host compiler): about 25 of its 26 s of compiler time. So the files are
checked together: each file becomes one part of a combined translation unit, inside a namespace
of its own (its own TORCH_EXTENSION_NAME, its macros undefined after it, `#line` so errors name
it), which nvcc compiles for the GPU (device code to SASS) and the host compiler compiles, and which
is then linked and loaded like any build. The headers are parsed once per group, not per file.
A group that fails is split in halves until each failure is a file built alone, so a verdict of
FAILED, and its message, is always the file's own. What a combined unit cannot see: a file that
forgets an #include (or a macro from a header) that an earlier file of its group brought in; the
simulator builds each file alone.

`--targets 7.5 8.0 8.9 9.0` (or `all`; `make compile-check TARGETS=all`) builds every file for each of those GPUs
instead of the ones here, at 9.0 also for sm_90a where a file has a branch for it; at a target below a file's
gate (an exercise's Exercise.needs, a test file's NEEDS_MARK: kernels/gates.py) the file is left out and named,
and every other file must build. There each build has a process of its own: a file built for two targets
registers its op namespaces twice, which one process refuses.

`python -m kernels.dev.compile_check --warm [cuda|sim ...]` instead builds every file for the given
backends (default: the default backend) with the flags the tests and notebooks use, one file per
core, so that a test run that follows finds every build in the cache. `--jobs N` sets how many
builds run at a time (default: one per core); `--results FILE` writes the counts and each build's
time as JSON (what `make test-all`'s summary reads).
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import multiprocessing
import os
import re
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Sequence

from ..backend import resolve
from ..build import BuildError, SourceSet, compile_only, display_path, load
from ..build.sources import code_mask, is_directive
from ..build.toolchain import cuda_home
from ..gates import TARGETS, Capability, Needs, described, parse, shortfall, shown
from ..paths import CUDA_LIBRARY, ROOT, build_root

FOLDERS = ("kernels", "lessons", "solutions", "tests")


@dataclasses.dataclass
class Outcome:
    """What a run did: builds that passed and failed, the reason it was skipped, each build's label and seconds,
    and with targets the files a target's gates left out."""

    passed: int = 0
    failed: int = 0
    skipped: str = ""
    builds: list[tuple[str, float]] = dataclasses.field(default_factory=list)
    gated: list[str] = dataclasses.field(default_factory=list)  # "[7.5] file" left out at a target (--targets)

    @property
    def code(self) -> int:
        return 1 if self.failed else 0

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(dataclasses.asdict(self)))


def read_outcome(path: Path) -> Outcome | None:
    """The Outcome a run wrote with --results (None when there is none)."""
    try:
        return Outcome(**json.loads(Path(path).read_text()))
    except (OSError, ValueError, TypeError):
        return None
SKIP_MARK = "compile-check: skip"  # for test files that are broken on purpose
# A file that builds only with flags of its own (half_types.cu: `// build flags: -U__CUDA_NO_HALF_OPERATORS__`)
# is built alone, with them, by the compile check and by --warm (where --warm builds it), as its tests load it.
FLAGS_MARK = "// build flags:"
# A file that links libraries (`// link flags: -lcublas -lcublasLt`: load's extra_ldflags) is built alone with them
# too; on the simulator the cuBLAS ones are its stand-ins.
LINK_MARK = "// link flags:"
# A file that only tests of `make test-toolkit` load (the simulator's coverage of public CUDA and inline
# PTX) is not built by --warm, the first step of `make test-all`: its tests build it in test-toolkit.
TOOLKIT_ONLY_MARK = "build-cache: make test-toolkit"
# A test file whose kernels need more than some of the GPUs the lessons run on (`// needs compute capability: 9.0
# for TMA and mbarrier transactions`) is left out at the compile check's lower targets (--targets), as an exercise's
# gate (Exercise.needs) leaves its files out, and its tests skip its cuda runs on such a GPU (needs_line).
NEEDS_MARK = "// needs compute capability:"
# Folders whose files are a learner's copy of someone else's code, kept free of this project's marks: the same
TOOLKIT_ONLY_FOLDERS = (CUDA_LIBRARY,)  # (tests/test_cuda_library.py builds it)


def files(warm: bool = False) -> list[Path]:
    out = []
    for folder in FOLDERS:
        out += sorted(p for p in (ROOT / folder).rglob("*.cu") if SKIP_MARK not in p.read_text()
                      and not (warm and (TOOLKIT_ONLY_MARK in p.read_text()
                                         or any(p.is_relative_to(f) for f in TOOLKIT_ONLY_FOLDERS))))
    return out


def file_flags(path: Path, mark: str = FLAGS_MARK) -> list[str]:
    """The flags a file asks to be built with (FLAGS_MARK), or [] (with mark=LINK_MARK: linked with)."""
    for line in path.read_text().splitlines():
        if line.strip().startswith(mark):
            return line.strip()[len(mark):].split()
    return []


def file_link_flags(path: Path) -> list[str]:
    """The linker flags a file asks to be built with (LINK_MARK), or []."""
    return file_flags(path, LINK_MARK)


def file_needs(path: Path) -> Needs | None:
    """What a test file's kernels need of a GPU above compute capability 7.5 (NEEDS_MARK), or None."""
    words = file_flags(path, NEEDS_MARK)
    if not words:
        return None
    if len(words) < 3 or words[1] != "for":
        raise ValueError(f"{display_path(path)}: expected {NEEDS_MARK} 9.0 for <what>, got {' '.join(words)!r}")
    return Needs(parse(words[0]), " ".join(words[2:]))


def needs_line(path: Path, capability: Capability | None = None) -> str | None:
    """The line that says a file's kernels need more than the GPU here (of `capability`) has (NEEDS_MARK), or None."""
    return shortfall(Path(path).name, file_needs(path), capability=capability)


def why_not() -> str | None:
    """The reason compile checking is impossible here, or None when it can run."""
    import torch

    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU build (it has no CUDA headers)"
    home = cuda_home()
    if not home or not shutil.which("nvcc", path=f"{home}/bin"):
        return "nvcc was not found (set CUDA_HOME to the CUDA toolkit)"
    return None


def _compile(job: tuple) -> tuple[Path, str, float, str]:
    """Build one file, job (path, backend) or, with nvcc (backend None), (path, None, archs); returns it, the
    backend, the seconds taken and the error ('' when it built). Any failure is reported, not raised, so that
    one file cannot stop the check of the others."""
    path, backend, archs = (*job, ())[:3]
    t0 = time.perf_counter()
    try:
        if backend is None:
            compile_only(path, extra_cflags=file_flags(path), extra_ldflags=file_link_flags(path), archs=archs)
        else:
            load(path, backend, quiet=True, extra_cflags=file_flags(path), extra_ldflags=file_link_flags(path))
        return path, backend or "nvcc", time.perf_counter() - t0, ""
    except Exception as e:  # noqa: BLE001 (a BuildError, or a bug that the report must show, not raise)
        msg = str(e) if isinstance(e, BuildError) else f"{type(e).__name__}: {e}"
        return path, backend or "nvcc", time.perf_counter() - t0, msg


def _run(todo: list[tuple[Path, str | None]], what: str, jobs: int) -> Outcome:
    jobs = max(1, min(len(todo), jobs))
    print(f"{what}: {len(todo)} builds, {jobs} at a time")
    failed, outcome = [], Outcome()
    # a compiler uses one core per file: run one file per core, each in its own process
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        results = pool.map(_compile, todo)
        done = 0
        try:
            for done, (path, be, secs, err) in enumerate(results, 1):
                label = display_path(path) + ("" if be == "nvcc" else f" ({be})")
                print(f"[{done}/{len(todo)}] {label} {'ok' if not err else 'FAILED'} ({secs:.0f} s)", flush=True)
                outcome.builds.append((label, secs))
                if err:
                    print(err)
                    failed.append(path)
        except BrokenProcessPool:  # a build process died (a crash while loading a library)
            rest = [p for p, _ in todo[done:]]
            print(f"a build process died; not checked: {', '.join(display_path(p) for p in rest)}")
            failed += rest
    outcome.passed, outcome.failed = len(todo) - len(failed), len(failed)
    print(f"{outcome.passed} passed, {outcome.failed} failed")
    return outcome


_INCLUDE_LINE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"].*$', re.M)
_DEFINE_RE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)", re.M)
_CONDITIONAL_RE = re.compile(r"^[ \t]*#[ \t]*(if|ifdef|ifndef|endif)\b", re.M)


def _part(path: Path, n: int) -> str | None:
    """`path` as part `n` of a combined translation unit, or None when it must be built alone (an
    #include inside #if, or after a #define, which could change what the include means).

    Its #includes go before its namespace (headers belong at file scope), with a quoted one that
    resolves next to the file made absolute; the lines they held stay, blank, so `#line` keeps
    every later line number the file's own. Each macro the file defines is saved and undefined
    before it and restored after it (push_macro/pop_macro), so the file defines it as it would
    alone, and neither the headers nor the next file see its definition."""
    src = path.read_text()
    mask = code_mask(src)
    depth, includes, defines = 0, [], []
    directives = [*_CONDITIONAL_RE.finditer(src), *_INCLUDE_LINE_RE.finditer(src), *_DEFINE_RE.finditer(src)]
    for m in sorted(directives, key=lambda m: m.start()):
        if not is_directive(src, mask, m):
            continue  # in a comment or a string
        if m.re is _CONDITIONAL_RE:
            depth += -1 if m.group(1) == "endif" else 1
        elif m.re is _DEFINE_RE:
            defines.append(m.group(1))
        elif depth or defines:
            return None
        else:
            name = m.group(2).strip()
            beside = path.parent / name
            includes.append(f'#include "{beside.resolve()}"' if m.group(1) == '"' and beside.is_file()
                            else f"#include {m.group(1)}{name}{'>' if m.group(1) == '<' else chr(34)}")
    body = _INCLUDE_LINE_RE.sub("", src)
    names = list(dict.fromkeys(defines))
    save = "".join(f'#pragma push_macro("{d}")\n#undef {d}\n' for d in names)
    restore = "".join(f'#pragma pop_macro("{d}")\n' for d in names)
    return (f"// ---- {display_path(path)}\n" + "".join(i + "\n" for i in includes) + save
            + f"#undef TORCH_EXTENSION_NAME\n#define TORCH_EXTENSION_NAME compile_check_{n}\n"
            + f"namespace compile_check_{n} {{\n#line 1 \"{path}\"\n{body}\n}}  // namespace compile_check_{n}\n"
            + restore)


def _reaches_torch_api(path: Path) -> bool:
    """Whether the file includes <torch/extension.h> or another header of all of libtorch's C++ API,
    which costs several times the headers of the other files to parse."""
    return SourceSet.of(path).reaches_torch_api()


def _combined(group: list[Path], first: int) -> Path:
    """The combined translation unit of `group` (parts numbered from `first`), written under the
    build folder; named by its content, so an unchanged group is found in the build cache."""
    parts = [_part(p, first + i) for i, p in enumerate(group)]
    text = ("// Generated by kernels/dev/compile_check.py: these files compiled together, each in its own namespace.\n"
            + "".join(parts))
    out = build_root() / "compile-check" / f"group_{hashlib.sha256(text.encode()).hexdigest()[:10]}.cu"
    out.parent.mkdir(parents=True, exist_ok=True)
    if not out.exists() or out.read_text() != text:
        tmp = out.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(text)
        tmp.replace(out)  # atomic: a build of the same group for another target may be reading it
    return out


def groups(paths: list[Path], count: int) -> list[list[Path]]:
    """The files in groups that compile together; a file that cannot be a part, alone. With one job, the others
    in one group: its headers (with those of libtorch's whole C++ API, which a few files reach) are parsed once
    (one group of the repository's 61 files took 217 s where the two kinds apart took 160 + 151 s on a 2-core
    machine). With several jobs, the files that reach libtorch's whole C++ API apart from the others, each kind
    in `count` groups of about equal size, so that the groups compile at once."""
    alone = [p for p in paths if _part(p, 0) is None or file_flags(p) or file_link_flags(p)]
    heavy = [p for p in paths if p not in alone and _reaches_torch_api(p)]
    light = [p for p in paths if p not in alone and p not in heavy]
    out = [[p] for p in alone]
    for kind in ((light + heavy,) if count <= 1 else (light, heavy)):
        k = max(1, min(count, len(kind)))
        out += [kind[i::k] for i in range(k) if kind[i::k]]
    return out


def _check_group(job: tuple) -> tuple[list[Path], float, dict[Path, str]]:
    """Compile a group, job (files, first part's number) or (files, first, archs: the GPU architectures, such as
    "75", default those of the GPUs here); returns it, the seconds taken and the error of each file that failed.
    A group that fails is split in halves, down to single files built as they are."""
    group, first, archs = (*job, ())[:3]
    t0 = time.perf_counter()
    if len(group) == 1:
        path, _, _, err = _compile((group[0], None, archs))
        return group, time.perf_counter() - t0, {path: err} if err else {}
    try:
        # loaded as a library: its PYBIND11_MODULEs are named after its parts, not after it
        compile_only(_combined(group, first), python_module=False, archs=archs)
        return group, time.perf_counter() - t0, {}
    except Exception:  # noqa: BLE001 (the halves say which file failed, with its own message)
        # Said out loud: files that build alone but not together cost a build per half, all the way down.
        print(f"{len(group)} files failed as one build; building each half ({display_path(group[0])} ...)", flush=True)
        half = len(group) // 2
        errors = {}
        for sub, start in ((group[:half], first), (group[half:], first + half)):
            errors.update(_check_group((sub, start, archs))[2])
        return group, time.perf_counter() - t0, errors


def needs_sm90a(path: Path) -> bool:
    """Whether a file's code has a branch for sm_90a's own instructions (wgmma, setmaxnreg: under
    __CUDA_ARCH_FEAT_SM90_ALL), which only a build for sm_90a compiles."""
    return SourceSet.of(path).needs_sm90a


def target_groups(paths: list[Path], target: Capability, count: int) -> list[tuple[list[Path], tuple[str, ...]]]:
    """The groups of `paths` (see groups) with the architectures each is compiled for at a target: sm_XY, and at
    9.0 sm_90a beside sm_90 for the files with a branch for it (in groups of their own)."""
    arch = f"{target[0]}{target[1]}"
    hopper = [p for p in paths if target == (9, 0) and needs_sm90a(p)]
    rest = [p for p in paths if p not in hopper]
    return ([(g, (arch,)) for g in groups(rest, count)] +
            [(g, (arch, arch + "a")) for g in groups(hopper, count)])


def gated_files(target: Capability) -> dict[Path, str]:
    """The files a GPU of this capability cannot build, by path, with what they need: the files of the exercises
    that need more (Exercise.needs, kernels/gates.py), and the test files marked so (NEEDS_MARK)."""
    from .. import lessons

    out = {}
    for ex in lessons.gated_exercises():
        for path in lessons.exercise_files(ex) if not ex.needs.met_by(target) else ():
            out[path.resolve()] = described(ex.name, ex.needs)
    for path in files():
        needs = file_needs(path)
        if needs and not needs.met_by(target):
            out[path.resolve()] = described(path.name, needs)
    return out


def check_with_nvcc(paths: list[Path], jobs: int, targets: Sequence[Capability] = ()) -> Outcome:
    """Compile every file with nvcc in groups (see the module's docstring), `jobs` groups at a time: for the GPUs
    here (sm_90 without one), or for each of `targets` (`make compile-check TARGETS=...`), where the files of
    exercises that need more than a target has are left out (kernels/gates.py), and every other file must build."""
    todo: list[tuple[str, tuple]] = []  # (the target's label, the job of _check_group)
    outcome = Outcome()
    for target in targets or [None]:
        label, here = "", paths
        if target is not None:
            label = f"[{shown(target)}] "
            left_out = gated_files(target)
            for path in (p for p in paths if p.resolve() in left_out):
                print(f"{label}{display_path(path)} not built: {left_out[path.resolve()]}")
                outcome.gated.append(f"{label}{display_path(path)}")
            here = [p for p in paths if p.resolve() not in left_out]
        first = 0
        for g, archs in target_groups(here, target, jobs) if target else [(g, ()) for g in groups(here, jobs)]:
            todo.append((label, (g, first, archs)))
            first += len(g)
    jobs = max(1, min(jobs, len(todo)))
    built = sum(len(job[0]) for _, job in todo)
    where = f" for compute capability {', '.join(shown(t) for t in targets)}" if targets else ""
    print(f"compile check with nvcc{where}: {built} files in {len(todo)} builds, {jobs} at a time")
    failed: list[str] = []
    t0 = time.perf_counter()
    # With targets, a process per build: a file built for two targets registers its op namespaces twice, which
    # one process refuses (kernels/build/extension.py)
    fresh = {"max_tasks_per_child": 1} if targets else {}
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"), **fresh) as pool:
        done = 0
        try:
            for done, (group, secs, errors) in enumerate(pool.map(_check_group, [job for _, job in todo]), 1):
                label = todo[done - 1][0]
                names = ", ".join(display_path(p) for p in group)
                if len(group) > 3:
                    names = f"{len(group)} files ({display_path(group[0])} ... {display_path(group[-1])})"
                verdict = "ok" if not errors else f"FAILED: {len(errors)} of {len(group)} files"
                outcome.builds.append((label + names, secs))
                print(f"[{done}/{len(todo)}] {label}{names} {verdict} ({secs:.0f} s)", flush=True)
                for path, err in errors.items():
                    print(f"{label}{display_path(path)} FAILED\n{err}")
                    failed.append(label + display_path(path))
        except BrokenProcessPool:  # a build process died (a crash while loading a library)
            rest = [label + display_path(p) for label, job in todo[done:] for p in job[0]]
            print(f"a build process died; not checked: {', '.join(rest)}")
            failed += rest
    outcome.passed, outcome.failed = built - len(failed), len(failed)
    gated = f", {len(outcome.gated)} not built (gated)" if targets else ""
    print(f"{outcome.passed} passed, {outcome.failed} failed{gated} in {time.perf_counter() - t0:.0f} s")
    return outcome


def main(argv: list[str] | None = None) -> int:
    """`python -m kernels.dev.compile_check [--jobs N] [--results FILE] [--targets CAPABILITY ...|all]
    [--warm [BACKEND ...]]`."""
    p = argparse.ArgumentParser(prog="python -m kernels.dev.compile_check",
                                description="Build every .cu of the repository with nvcc (the compile check), or "
                                            "with --warm for the given backends, to fill the build cache.")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="builds at a time (default: one per core)")
    p.add_argument("--warm", nargs="*", metavar="BACKEND", choices=["cuda", "sim"],
                   help="build every file for these backends (default: the default backend) instead of checking")
    p.add_argument("--results", type=Path, help="write the counts and each build's time to this JSON file")
    p.add_argument("--targets", nargs="+", metavar="CAPABILITY",
                   help="build for each of these compute capabilities (7.5 8.0 8.9 9.0, or all: "
                        f"{' '.join(shown(t) for t in TARGETS)}), each file's gates kept (kernels/gates.py)")
    a = p.parse_args(argv)
    if a.jobs < 1:
        p.error(f"--jobs must be at least 1, got {a.jobs}")
    try:
        targets = list(TARGETS) if a.targets == ["all"] else [parse(t) for t in a.targets or []]
    except ValueError as e:
        p.error(f"--targets: {e} (or all)")
    if a.warm is not None and targets:
        p.error("--targets is for the compile check with nvcc, not --warm")
    if a.warm is not None:
        backends = [resolve(b) for b in a.warm] or [resolve(None)]
        # One pool per backend: a worker loads what it builds, and a file whose TORCH_LIBRARY names a
        # fixed namespace (lesson 03's package) cannot be loaded for two backends in one process.
        outcome = Outcome()
        for be in backends:
            one = _run([(f, be) for f in files(warm=True)], f"warming the build cache for {be}", a.jobs)
            outcome.passed, outcome.failed = outcome.passed + one.passed, outcome.failed + one.failed
            outcome.builds += one.builds
    else:
        reason = why_not()
        if reason:
            print(f"compile check SKIPPED: {reason}. The simulator tests still ran every kernel.")
            outcome = Outcome(skipped=reason)
        else:
            outcome = check_with_nvcc(files(), a.jobs, targets)
    if a.results:
        outcome.write(a.results)
    return outcome.code


if __name__ == "__main__":
    sys.exit(main())
