"""What ptxas says about each kernel of a .cu file (`nvcc -Xptxas -v`): registers per thread, bytes spilled
to local memory, static shared memory. A property of the compiled code, not of a run: it needs nvcc, not a GPU.

    from kernels.tools.ptxas import resource_usage, resource_table
    print(resource_table(resource_usage("09")))
"""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..build import BuildError, SourceSet, demangle, find_source
from ..build.toolchain import cpp_extension, cuda_home, missing_toolkit_headers, nvcc_version
from ..paths import INCLUDE, build_root
from ..tables import text_table


@dataclass
class KernelResources:
    """One kernel as ptxas compiled it."""

    kernel: str          # demangled, template arguments included
    registers: int       # per thread
    spill_stores: int    # bytes per thread written to local memory because the registers ran out
    spill_loads: int
    shared_bytes: int    # static shared memory per block
    stack_bytes: int


_ENTRY = re.compile(r"Compiling entry function '(\w+)' for '(sm_\d+a?)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def parse_ptxas(log: str) -> list[KernelResources]:
    """The kernels in a `-Xptxas -v` log, in the order ptxas compiled them."""
    rows: list[KernelResources] = []
    name, frame = None, (0, 0, 0)
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            name, frame = m.group(1), (0, 0, 0)
        elif (m := _FRAME.search(line)) and name:
            frame = tuple(int(g) for g in m.groups())
        elif (m := _USED.search(line)) and name:
            rows.append(KernelResources(demangle(name), int(m.group(1)), frame[1], frame[2], int(m.group(2) or 0),
                                        frame[0]))
            name = None
    return rows


def resource_usage(source: str | Path, arch: str = "sm_90") -> list[KernelResources]:
    """Compile `source` (a path, or a reference file's number such as "09") for `arch` and parse ptxas's report."""
    entry = find_source(source)
    home = cuda_home()
    nvcc = Path(home) / "bin" / "nvcc" if home else None
    if nvcc is None or not nvcc.exists():
        raise BuildError("resource_usage needs nvcc (the CUDA toolkit); none was found")
    cpp = cpp_extension()
    includes = [str(INCLUDE), *missing_toolkit_headers(), *cpp.include_paths(device_type="cuda")]
    cmd = [str(nvcc), "-cubin", f"-arch={arch}", "-O3", "-std=c++20", "-Xptxas", "-v",
           "-DTORCH_EXTENSION_NAME=ptxas_report", *cpp.COMMON_NVCC_FLAGS, *(f"-I{d}" for d in includes), str(entry)]
    # The report of an unchanged file is kept: the same sources, command and nvcc give the same report.
    key = hashlib.sha256("\0".join([*cmd, nvcc_version(), *(t.text for t in SourceSet.of(entry).texts.values())]).encode())
    cached = build_root() / "ptxas" / f"{entry.stem}_{key.hexdigest()[:16]}.log"
    if cached.is_file():
        return parse_ptxas(cached.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run([*cmd, "-o", str(Path(tmp) / "out.cubin")], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise BuildError(f"nvcc failed on {entry.name}:\n{done.stderr[-3000:]}")
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(f".{os.getpid()}.tmp")  # written whole, then renamed: never read half-written
    partial.write_text(done.stderr + done.stdout)
    partial.replace(cached)
    return parse_ptxas(done.stderr + done.stdout)


def _short(kernel: str) -> str:
    """A kernel's name with its template arguments, without its parameter list."""
    depth, cut = 0, len(kernel)
    for i, ch in enumerate(kernel):  # the parameter list is the first "(" outside template brackets
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "(" and depth == 0:
            cut = i
            break
    return kernel[:cut]


def resource_table(rows: list[KernelResources]) -> str:
    """A plain-text table: kernel, registers, spills, shared memory."""
    return text_table(("kernel", "regs", "spill st", "spill ld", "smem B"),
                      [(_short(r.kernel), r.registers, r.spill_stores, r.spill_loads, r.shared_bytes) for r in rows])
