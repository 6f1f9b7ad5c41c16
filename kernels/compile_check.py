"""`make compile-check`: build every .cu of the repository as the real CUDA extension with nvcc.

Nothing runs: this proves that the files the simulator executes are also valid CUDA for nvcc.
It needs nvcc and a CUDA build of torch, GPU or not; without them it says so and skips.

`python -m kernels.compile_check --warm [cuda|sim ...]` instead builds every file for the given
backends (default: the default backend) with the flags the tests and notebooks use, one file per
core, so that a test run that follows finds every build in the cache.
"""
from __future__ import annotations

import multiprocessing
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from .backend import resolve
from .build import ROOT, BuildError, build, compile_only, cuda_home, display_path

FOLDERS = ("kernels", "lessons", "solutions", "tests")
SKIP_MARK = "compile-check: skip"  # for test files that are broken on purpose


def files() -> list[Path]:
    out = []
    for folder in FOLDERS:
        out += sorted(p for p in (ROOT / folder).rglob("*.cu") if SKIP_MARK not in p.read_text())
    return out


def why_not() -> str | None:
    """The reason compile checking is impossible here, or None when it can run."""
    import torch

    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU build (it has no CUDA headers)"
    home = cuda_home()
    if not home or not shutil.which("nvcc", path=f"{home}/bin"):
        return "nvcc was not found (set CUDA_HOME to the CUDA toolkit)"
    return None


def _compile(job: tuple[Path, str | None]) -> tuple[Path, str, float, str]:
    """Build one file; returns it, the backend, the seconds taken and the error ('' when it built).
    Any failure is reported, not raised, so that one file cannot stop the check of the others."""
    path, backend = job
    t0 = time.perf_counter()
    try:
        if backend is None:
            compile_only(path)
        else:
            build(path, backend, quiet=True)
        return path, backend or "nvcc", time.perf_counter() - t0, ""
    except Exception as e:  # noqa: BLE001 (a BuildError, or a bug that the report must show, not raise)
        msg = str(e) if isinstance(e, BuildError) else f"{type(e).__name__}: {e}"
        return path, backend or "nvcc", time.perf_counter() - t0, msg


def _run(todo: list[tuple[Path, str | None]], what: str) -> int:
    jobs = max(1, min(len(todo), os.cpu_count() or 1))
    print(f"{what}: {len(todo)} builds, {jobs} at a time")
    failed = []
    # a compiler uses one core per file: run one file per core, each in its own process
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        results = pool.map(_compile, todo)
        done = 0
        try:
            for done, (path, be, secs, err) in enumerate(results, 1):
                label = display_path(path) + ("" if be == "nvcc" else f" ({be})")
                print(f"[{done}/{len(todo)}] {label} {'ok' if not err else 'FAILED'} ({secs:.0f} s)", flush=True)
                if err:
                    print(err)
                    failed.append(path)
        except BrokenProcessPool:  # a build process died (a crash while loading a library)
            rest = [p for p, _ in todo[done:]]
            print(f"a build process died; not checked: {', '.join(display_path(p) for p in rest)}")
            failed += rest
    print(f"{len(todo) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--warm":
        backends = [resolve(b) for b in argv[1:]] or [resolve(None)]
        # One pool per backend: a worker loads what it builds, and a file whose TORCH_LIBRARY names a
        # fixed namespace (lesson 03's package) cannot be loaded for two backends in one process.
        codes = [_run([(p, be) for p in files()], f"warming the build cache for {be}") for be in backends]
        return max(codes)
    reason = why_not()
    if reason:
        print(f"compile check SKIPPED: {reason}. The simulator tests still ran every kernel.")
        return 0
    return _run([(p, None) for p in files()], "compile check with nvcc")


if __name__ == "__main__":
    sys.exit(main())
