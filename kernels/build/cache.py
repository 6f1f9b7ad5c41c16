"""The build cache: a library is named by a hash of everything that changes it (`key`), found again only
when the stamp written after its build and load still matches it, and built by one process at a time."""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sys
from pathlib import Path

from filelock import FileLock

from .sources import SourceSet
from .toolchain import cxx_version, nvcc_version


def key(sources: SourceSet, backend: str, flags: list[str], backend_files: list[tuple[str, Path]]) -> str:
    """A hash of everything that changes the built library: the file and its local headers (the SourceSet's
    walk, the one the build uses), the flags (for cuda they include the target architectures), the backend,
    torch, Python, the C++ compiler, and nvcc (cuda) or the files of the simulator (`backend_files`)."""
    import torch

    h = hashlib.sha256()
    h.update(f"{backend}|{torch.__version__}|{sys.version_info[:2]}|{' '.join(flags)}".encode())
    h.update(os.environ.get("TORCH_CUDA_ARCH_LIST", "").encode())
    h.update(cxx_version(backend).encode())
    if backend == "cuda":
        h.update(nvcc_version().encode())
    for f, t in sources.texts.items():
        h.update(f.name.encode())
        h.update(t.text.encode())
    for label, f in backend_files:
        h.update(label.encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:10]


def ext_name(entry: Path, backend: str, digest: str) -> str:
    """The extension's name: the file's stem as an identifier, the backend and the key."""
    stem = re.sub(r"\W", "_", entry.stem)
    if not stem[:1].isalpha():
        stem = "k" + stem
    return f"{stem}_{backend}_{digest}"


def stamp(so: Path) -> str:
    """What the stamp of a good library holds: its size and content hash."""
    data = so.read_bytes()
    return f"{len(data)} {hashlib.sha256(data).hexdigest()}\n"


def cached_library(out: Path, name: str) -> Path | None:
    """The cached library when its stamp (written after a successful build and load) matches it.

    Otherwise the leftovers of an interrupted or failed build (library, stamp, objects) are removed,
    so that the build that follows starts from its sources and cannot reuse a truncated file."""
    so, ok = out / f"{name}.so", out / f"{name}.ok"
    try:
        if ok.read_text() == stamp(so):
            return so
    except OSError:
        pass
    for f in [so, ok, *out.glob("*.o")]:
        f.unlink(missing_ok=True)
    return None


@contextlib.contextmanager
def build_lock(out: Path, name: str):
    """Hold an exclusive lock on one extension's build folder: the check of the cache, the build and
    the load happen under it, so a second process building the same file waits and then loads the
    first one's library. (cpp_extension keeps its own lock file, named `lock`, in the same folder;
    this one has another name. Its lock is a file that only its own process removes: one left by a build
    that was killed would make every later build of the folder wait for it forever. Every build here
    holds this lock first, so a `lock` found while holding it is such a leftover, and is removed.)"""
    out.mkdir(parents=True, exist_ok=True)
    with FileLock(out / f"{name}.lock"):
        (out / "lock").unlink(missing_ok=True)
        yield
