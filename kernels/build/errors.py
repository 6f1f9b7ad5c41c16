"""A failed build or load, said in the learner's terms: the compiler's own error lines first, paths made
relative, a missing symbol demangled and explained."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from ..paths import ROOT


class BuildError(RuntimeError):
    """A failed build: the compiler's errors first, then where the full log is."""


def display_path(p: Path) -> str:
    """A path for messages: relative to the working directory or the repository when possible."""
    for base in (Path.cwd(), ROOT):
        if p.is_relative_to(base):
            return os.path.relpath(p, base)
    return str(p)


def relative(text: str) -> str:
    """Text with the machine's paths to the working directory and the repository made relative."""
    for base in (Path.cwd(), ROOT):
        text = text.replace(str(base) + os.sep, "")
    return text


def compiler_errors(log: str, limit: int = 25) -> str:
    """The compiler's error lines (with a little context), the most useful part of a failed build's log."""
    lines = log.splitlines()
    keep: list[str] = []
    for i, line in enumerate(lines):
        if re.search(r"(:\d+(:\d+)?:|\(\d+\):) (fatal )?error", line):
            keep.extend(lines[i:i + 3])
        if len(keep) >= limit:
            break
    return relative("\n".join(dict.fromkeys(keep)) or "\n".join(lines[-limit:]))


def demangle(symbol: str) -> str:
    """A C++ symbol as source code writes it: `_ZN6helper5scaleEi` -> `helper::scale(int)`.

    Uses c++filt; without it, only the name (namespaces included) is recovered, not the parameters."""
    exe = shutil.which("c++filt")
    if exe:
        try:
            out = subprocess.run([exe, symbol], capture_output=True, text=True, timeout=10).stdout.strip()
            if out:
                return out
        except (OSError, subprocess.SubprocessError):
            pass
    m = re.match(r"_Z(N?)(.*)", symbol)
    if not m:
        return symbol
    nested, rest, parts = m.group(1), m.group(2), []
    while n := re.match(r"\d+", rest):  # <length><identifier>, repeated inside N...E
        size = int(n.group())
        parts.append(rest[n.end():n.end() + size])
        rest = rest[n.end() + size:]
        if not nested:
            break
    return "::".join(parts) + "(...)" if parts else symbol


def load_error(e: BaseException, entry: Path, backend: str, so: Path) -> BuildError:
    """A failed load (the file compiled and linked) as a BuildError whose first line is the cause."""
    said = relative(str(e.__cause__ or e))
    m = re.search(r"undefined symbol: (\S+)", said)
    n = re.search(r"(\S+): cannot open shared object file", said)
    if m:
        cause = (f"undefined symbol {demangle(m.group(1))}: the code calls it, but nothing that was built or "
                 "linked defines it (a declaration without a definition, a name or signature that differs "
                 "from the definition, or a __device__ function called from host code)")
    elif n:
        cause = f"a library it needs was not found when loading: {n.group(1)} (linked at build time, missing now)"
    else:
        cause = said.splitlines()[0] if said else type(e).__name__
    return BuildError(f"{cause}\n{display_path(entry)} compiled for {backend}, but loading the built library "
                      f"{display_path(so)} failed. The loader said:\n{said}")
