"""The debugging guide's entries, runnable: `run(name)` builds one broken kernel and shows its error.

    from kernels.debugging import names, run
    run("off_by_one")          # what you would see, then the fixed twin

Each entry of lessons/10_model/debugging.md has a file in lessons/10_model/debugging/ with the
broken kernel (op `broken`) and its fix (op `fixed`), or, where the bug is in the build or the
timing, the kernel to show it with. `run` builds the file for the current backend, runs the broken
op and prints what a learner would see (the error, or the wrong result next to the right one),
then the fixed op. An entry whose error breaks the CUDA context of its process (an illegal address,
a device-side assert) runs its broken part in a child process, so this process keeps its GPU.
Entries the simulator cannot show (an architecture list, timing) print what a GPU shows, from the
guide, and say so. `python -m kernels.debugging NAME` does the same from a terminal.
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from ..backend import resolve
from ..build import load
from ..build.toolchain import child_env
from ..paths import ROOT

FOLDER = ROOT / "lessons" / "10_model" / "debugging"
GUIDE = ROOT / "lessons" / "10_model" / "debugging.md"
CHILD_TIMEOUT_S = 45  # a kernel that never ends (threads at different barriers hang an H100: sync_in_branch does)
BUILD_TIMEOUT_S = 600  # a child that also builds (no_kernel_image): a first cuda build takes about a minute


def say(text: str = "") -> None:
    """Every line a demonstration prints goes through here."""
    print(text, flush=True)


def _error_text(e: BaseException, lines: int = 2) -> str:
    """The first lines of an error: PyTorch's CUDA errors add paragraphs of advice after them."""
    said = [line for line in str(e).strip().splitlines() if line.strip()]
    return f"{type(e).__name__}: " + "\n    ".join(said[:lines])


def _step(what: str, fn: Callable[[], object]) -> bool:
    """Print a step of a demonstration and whether it returned or raised; True when it returned."""
    say(f"  {what}")
    try:
        fn()
    except Exception as e:  # noqa: BLE001: the error is what the learner is here to read
        say(f"    raised {_error_text(e)}")
        return False
    say("    returned")
    return True


def _sync(dev) -> None:
    import torch

    if dev.type == "cuda":
        torch.cuda.synchronize()


@dataclasses.dataclass(frozen=True)
class Entry:
    """One entry of the guide: its file, how to show the bug and the fix, and what a GPU shows."""

    name: str
    title: str
    broken: Callable          # broken(backend, dev): runs the broken kernel, printing what happens
    fixed: Callable | None    # fixed(backend, dev): the same with the fix; None where the fix is not a kernel
    tool: str                 # what finds this bug
    isolate: tuple[str, ...] = ()  # backends on which `broken` runs in a child process
    gpu_only: str = ""        # why the simulator cannot show it ("" when it can)
    gpu_shows: str = ""       # what a GPU prints, for the simulator to quote

    @property
    def file(self) -> Path:
        return FOLDER / f"{self.name}.cu"


def _ext(name: str, backend: str):
    return load(FOLDER / f"{name}.cu", backend, quiet=True)


# ---------------------------------------------------------------------------------------------
# The demonstrations, one pair per entry. Each builds small inputs on the backend's device.

def _late_error_inputs(dev):
    import torch

    rows = 2**18 if dev.type == "cuda" else 512  # on a GPU, enough work that the launch returns long before the fault
    table = torch.rand(1000, 64, device=dev)
    ids = torch.randint(0, 1000, (rows,), device=dev)
    ids[-1] = 2**40 + 7  # a hashed word id that was never reduced modulo the vocabulary size
    return table, ids, torch.empty(rows, 64, device=dev)


def _late_error_broken(backend: str, dev) -> None:
    ext = _ext("late_error", backend)
    table, ids, out = _late_error_inputs(dev)
    holder = {}
    steps = [("1. ext.broken(table, ids, out)     the launch", lambda: ext.broken(table, ids, out)),
             ("2. y = out * 2                      another op, queued behind it", lambda: holder.update(y=out * 2)),
             ("3. y.sum().item()                   waits for the GPU", lambda: holder["y"].sum().item())]
    for what, fn in steps:
        if not _step(what, fn):
            break
    if backend == "sim":
        say("  (The simulator runs every launch to its end before it returns, so it reports the error at the launch,\n"
            "   as a GPU does with CUDA_LAUNCH_BLOCKING=1.)")


def _late_error_fixed(backend: str, dev) -> None:
    ext = _ext("late_error", backend)
    _step("ext.fixed(table, ids, out)", lambda: ext.fixed(*_late_error_inputs(dev)))


def _illegal_address_broken(backend: str, dev) -> None:
    import torch

    ext = _ext("illegal_address", backend)
    x = torch.rand(256, 768, device=dev)
    out = torch.empty_like(x)
    if _step("ext.broken(x, None, out)           no bias", lambda: ext.broken(x, None, out)):
        _step("torch.cuda.synchronize()           wait for the kernel", lambda: _sync(dev))


def _illegal_address_fixed(backend: str, dev) -> None:
    import torch

    ext = _ext("illegal_address", backend)
    x = torch.rand(256, 768, device=dev)
    out = torch.empty_like(x)
    ext.fixed(x, None, out)
    say(f"  ext.fixed(x, None, out): out equals x (no bias to add): {torch.equal(out, x)}")


def _misaligned_inputs(dev):
    import torch

    buf = torch.rand(4097, device=dev)
    return buf[1:], torch.empty(4096, device=dev)  # a view one float (4 bytes) into its buffer


def _misaligned_broken(backend: str, dev) -> None:
    ext = _ext("misaligned_vec4", backend)
    x, out = _misaligned_inputs(dev)
    say(f"  x = buf[1:]: x.data_ptr() % 16 = {x.data_ptr() % 16} (a float4 load needs 0)")
    if _step("ext.broken(x, out)", lambda: ext.broken(x, out)):
        _step("torch.cuda.synchronize()", lambda: _sync(dev))
    if backend == "sim":
        say("  (The simulator does not check alignment itself: the CPU's aligned 16-byte load faulted at that line,\n"
            "   and a CPU fault of that kind carries no address, hence (nil).)")


def _misaligned_fixed(backend: str, dev) -> None:
    import torch

    ext = _ext("misaligned_vec4", backend)
    x, out = _misaligned_inputs(dev)
    ext.fixed(x, out)
    say(f"  ext.fixed(x, out) takes the one-float kernel: out equals 2 * x: {torch.equal(out, 2 * x)}")


def _off_by_one_run(backend: str, dev, op: str) -> None:
    import torch

    ext = _ext("off_by_one", backend)
    n = 1000
    x = torch.rand(n + 1, device=dev)[:n]           # x and out end inside larger buffers, so the extra
    buf = torch.full((n + 1,), -7.0, device=dev)    # thread reads and writes memory we can look at
    out = buf[:n]
    getattr(ext, op)(x, out)
    _sync(dev)
    right = torch.equal(out, x + 1)
    say(f"  ext.{op}(x, out) on {n} floats: out == x + 1: {right}; the float after out's end: "
        f"was -7, now {buf[n].item():.4g}")


def _off_by_one_broken(backend: str, dev) -> None:
    from ..check import check, elementwise, like

    _off_by_one_run(backend, dev, "broken")
    say("  no error anywhere: the result is right and the neighbour was overwritten. The self-check sees it:")
    r = check(_ext("off_by_one", backend).broken, lambda x: x + 1, elementwise(1), out=like(0), sizes=[1000],
              backend=backend, quiet=True, name="off_by_one broken")
    failing = [c for c in r.cases if not c.passed]
    say(f"    kernels.check: {failing[0].problem if failing else 'passed (it should not have)'}")


def _off_by_one_fixed(backend: str, dev) -> None:
    _off_by_one_run(backend, dev, "fixed")


def _block_sums(x):
    import torch

    return torch.stack([c.sum() for c in x.split(256)])


def _sync_in_branch_run(backend: str, dev, op: str) -> None:
    import torch

    ext = _ext("sync_in_branch", backend)
    x = torch.rand(1000, device=dev)  # 4 blocks of 256, the last one 232 short
    out = torch.empty(4, device=dev)
    if _step(f"ext.{op}(x, out) on 1000 floats (the last block holds 232)", lambda: getattr(ext, op)(x, out)):
        _sync(dev)
        want = _block_sums(x)
        say(f"    block sums: {[round(v, 3) for v in out.tolist()]}\n"
            f"    right:      {[round(v, 3) for v in want.tolist()]}  "
            f"({'equal' if torch.allclose(out, want) else 'DIFFERENT'})")


def _missing_barrier_run(backend: str, dev, op: str) -> None:
    import torch

    ext = _ext("missing_barrier", backend)
    x = torch.rand(256 * 1024 if backend == "cuda" else 256 * 8, device=dev)
    want = x.view(-1, 256).flip(1).reshape(-1)
    out = torch.empty_like(x)
    if backend == "sim":
        from ..check import sim_order

        for order in ("forward", "reverse"):
            with sim_order(order):
                getattr(ext, op)(x, out)
            say(f"  ext.{op}(x, out), threads in {order} order: {int((out != want).sum())} of {x.numel()} "
                "elements wrong")
        return
    runs, wrong = 200, 0
    for _ in range(runs):
        getattr(ext, op)(x, out)
        wrong += not torch.equal(out, want)
    say(f"  ext.{op}(x, out), {runs} runs on {x.numel()} floats: {wrong} runs gave a wrong answer")


def _sticky_inputs(dev):
    import torch

    logp = torch.log_softmax(torch.rand(8, 10, device=dev), dim=1)
    labels = torch.randint(0, 10, (8,), device=dev)
    labels[3] = -100  # a padded position, as cross_entropy's ignore_index marks it
    return logp, labels, torch.empty(8, device=dev)


def _sticky_broken(backend: str, dev) -> None:
    import torch

    ext = _ext("sticky_error", backend)
    logp, labels, out = _sticky_inputs(dev)
    steps = [("1. ext.broken(logp, labels, out); synchronize()", lambda: (ext.broken(logp, labels, out), _sync(dev))),
             ("2. torch.ones(3, device=dev).sum().item()     an unrelated op, after the error",
              lambda: torch.ones(3, device=dev).sum().item()),
             ("3. ext.fixed(logp, labels, out)                the fixed kernel, same process",
              lambda: (ext.fixed(logp, labels, out), _sync(dev)))]
    for what, fn in steps:
        _step(what, fn)


def _sticky_fixed(backend: str, dev) -> None:
    import torch

    ext = _ext("sticky_error", backend)
    logp, labels, out = _sticky_inputs(dev)
    ext.fixed(logp, labels, out)
    keep = labels != -100
    want = torch.where(keep, -logp.gather(1, labels.clamp(min=0)[:, None])[:, 0], torch.zeros_like(out))
    say(f"  ext.fixed(logp, labels, out) in a fresh process: row 3 (label -100) gets {out[3].item():g}, and every row "
        f"equals -logp[r, label]: {torch.equal(out, want)}")


def _other_arch() -> str:
    """An architecture list that does not include this GPU's (and no PTX)."""
    import torch

    major, _ = torch.cuda.get_device_capability()
    return "8.0" if major != 8 else "9.0"


def _no_kernel_image_broken(backend: str, dev) -> None:
    import torch

    arch = os.environ.get("TORCH_CUDA_ARCH_LIST", "")
    cap = ".".join(map(str, torch.cuda.get_device_capability()))
    say(f"  built with TORCH_CUDA_ARCH_LIST={arch} for a GPU of compute capability {cap}")
    ext = _ext("no_kernel_image", backend)
    out = torch.empty(1024, device=dev)
    _step("ext.fill(out, 1.0)", lambda: ext.fill(out, 1.0))


def _no_kernel_image_fixed(backend: str, dev) -> None:
    import torch

    ext = _ext("no_kernel_image", backend)
    out = torch.empty(1024, device=dev)
    ext.fill(out, 1.0)
    say(f"  built for the GPUs this process sees: ext.fill(out, 1.0) sets every element to 1: {bool((out == 1).all())}")


def _timing_broken(backend: str, dev) -> None:
    import torch

    ext = _ext("timing_without_sync", backend)
    x = torch.rand(2**22, device=dev)
    out = torch.empty_like(x)
    ext.busy(x, out, 2000)  # warm-up: the first launch pays for loading the module
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    ext.busy(x, out, 20000)
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    say(f"  perf_counter around the launch alone:          {1e3 * (t1 - t0):8.3f} ms   (the launch, not the kernel)")
    say(f"  perf_counter up to torch.cuda.synchronize():   {1e3 * (t2 - t0):8.3f} ms")


def _timing_fixed(backend: str, dev) -> None:
    import torch

    ext = _ext("timing_without_sync", backend)
    x = torch.rand(2**22, device=dev)
    out = torch.empty_like(x)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(5):
        start.record()
        ext.busy(x, out, 20000)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    say(f"  CUDA events, median of 5:                      {sorted(times)[2]:8.3f} ms   (the kernel itself)")


ENTRIES: dict[str, Entry] = {e.name: e for e in [
    Entry("late_error", "An error reported later than its cause", _late_error_broken, _late_error_fixed,
          "CUDA_LAUNCH_BLOCKING=1 (the error moves to the launch that caused it); compute-sanitizer",
          isolate=("cuda",)),
    Entry("illegal_address", "An illegal memory access", _illegal_address_broken, _illegal_address_fixed,
          "compute-sanitizer --tool memcheck (make sanitize) names the kernel, the line and the address",
          isolate=("cuda",)),
    Entry("misaligned_vec4", "A misaligned vector load on an offset view", _misaligned_broken, _misaligned_fixed,
          "compute-sanitizer --tool memcheck (\"Invalid __global__ read of size 16 bytes ... misaligned\"); "
          "a TORCH_CHECK on aligned16() in the launcher", isolate=("cuda",)),
    Entry("off_by_one", "`i <= n`", _off_by_one_broken, _off_by_one_fixed,
          "kernels.check (canaries after every output); compute-sanitizer memcheck with "
          "PYTORCH_NO_CUDA_MEMORY_CACHING=1 (make sanitize)"),
    Entry("sync_in_branch", "`__syncthreads()` inside `if (i < n)`",
          lambda b, d: _sync_in_branch_run(b, d, "broken"), lambda b, d: _sync_in_branch_run(b, d, "fixed"),
          "the simulator (an error naming both barriers); compute-sanitizer --tool synccheck", isolate=("cuda",)),
    Entry("missing_barrier", "A missing barrier",
          lambda b, d: _missing_barrier_run(b, d, "broken"), lambda b, d: _missing_barrier_run(b, d, "fixed"),
          "the simulator's thread orders (kernels.check runs forward, reverse and random); "
          "compute-sanitizer --tool racecheck"),
    Entry("sticky_error", "A sticky error that needs a restart", _sticky_broken, _sticky_fixed,
          "read the first error, not the last; restart the process; find the cause with CUDA_LAUNCH_BLOCKING=1",
          isolate=("cuda", "sim")),
    Entry("no_kernel_image", "\"no kernel image is available\": the architecture list",
          _no_kernel_image_broken, _no_kernel_image_fixed,
          "make doctor (the GPU's compute capability); cuobjdump --list-elf on the built library",
          isolate=("cuda",),
          gpu_only="the simulator compiles for the CPU: there is no GPU architecture to get wrong",
          gpu_shows="CUDA error: no kernel image is available for execution on the device (raised at the launch, "
                    "by CHECK_LAUNCH)"),
    Entry("timing_without_sync", "Timing without a sync", _timing_broken, _timing_fixed,
          "CUDA events or torch.cuda.synchronize() before reading the clock; kernels.bench",
          gpu_only="a simulator launch runs the whole grid before it returns, and its timings mean nothing",
          gpu_shows="perf_counter() around the launch alone measures microseconds, the cost of queueing it; "
                    "perf_counter() up to torch.cuda.synchronize() and CUDA events measure the kernel's "
                    "milliseconds (run(\"timing_without_sync\") on a GPU prints the three)"),
]}


def names() -> list[str]:
    """The entries, in the guide's order."""
    return list(ENTRIES)


def _entry(name: str) -> Entry:
    if name not in ENTRIES:
        raise KeyError(f"no debugging entry {name!r}; the entries are: {', '.join(ENTRIES)}")
    return ENTRIES[name]


def _child(name: str, backend: str, part: str, env: dict[str, str] | None = None,
           timeout: int = CHILD_TIMEOUT_S) -> None:
    """Run one part of an entry in a child process (its CUDA context may break) and print its output,
    with the assertion messages a kernel printed and how the process ended when it failed."""
    cmd = [sys.executable, "-m", __name__, name, "--backend", backend, "--part", part]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                              env=child_env(**(env or {})))
    except subprocess.TimeoutExpired as e:
        said = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        say(said.rstrip("\n"))
        say(f"  the process did not finish in {timeout} s (a kernel that never ends?) and was stopped")
        return
    say(done.stdout.rstrip("\n"))
    said = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    for line in [line for line in said if "Assertion" in line][:2]:
        say(f"  the kernel printed: {line}")
    if done.returncode != 0:
        how = f"killed by signal {-done.returncode}" if done.returncode < 0 else f"exit status {done.returncode}"
        say(f"  the process ended ({how})" + "".join(f"\n    {line}" for line in said[-2:] if "Assertion" not in line))


def _run_part(entry: Entry, backend: str, part: str) -> None:
    from ..backend import device

    dev = device(backend)
    (entry.broken if part == "broken" else entry.fixed)(backend, dev)


def run(name: str, backend: str | None = None) -> None:
    """Build entry `name` on the backend (default: the current one) and print what its broken kernel
    does, then what the fixed one does. Never raises for the entry's own bug."""
    entry = _entry(name)
    be = resolve(backend)
    say(f"== {entry.name}: {entry.title} ({be} backend; the guide: lessons/10_model/debugging.md)")
    if be == "sim" and entry.gpu_only:
        say(f"The simulator cannot show this: {entry.gpu_only}. What a GPU shows (from the guide):\n  {entry.gpu_shows}")
        say(f"Found with: {entry.tool}")
        return
    if entry.name != "no_kernel_image":
        _ext(entry.name, be)  # build here: a build error is reported in this process, and the child loads from the cache
    say("broken:")
    if be in entry.isolate:
        if entry.name == "late_error":
            say(" without CUDA_LAUNCH_BLOCKING:")
            _child(entry.name, be, "broken", {"CUDA_LAUNCH_BLOCKING": "0"})
            say(" with CUDA_LAUNCH_BLOCKING=1 (every launch waits for its kernel):")
            _child(entry.name, be, "broken", {"CUDA_LAUNCH_BLOCKING": "1"})
        elif entry.name == "no_kernel_image":
            _child(entry.name, be, "broken", {"TORCH_CUDA_ARCH_LIST": _other_arch()}, timeout=BUILD_TIMEOUT_S)
        else:
            _child(entry.name, be, "broken")
    else:
        _run_part(entry, be, "broken")
    if entry.fixed is not None:
        say("fixed:")
        _run_part(entry, be, "fixed")
    say(f"Found with: {entry.tool}")


__all__ = ["Entry", "ENTRIES", "FOLDER", "GUIDE", "names", "run", "main"]


def main(argv: list[str] | None = None) -> int:
    """`python -m kernels.debugging [NAME ...]`: run entries (all without a name)."""
    import argparse

    p = argparse.ArgumentParser(description="Run the debugging guide's broken kernels and their fixes.")
    p.add_argument("names", nargs="*", help=f"entries (default: all): {', '.join(ENTRIES)}")
    p.add_argument("--backend", choices=["cuda", "sim"], help="default: cuda with a GPU, else sim")
    p.add_argument("--part", choices=["broken", "fixed"], help=argparse.SUPPRESS)  # a child process's one part
    a = p.parse_args(argv)
    unknown = [n for n in a.names if n not in ENTRIES]
    if unknown:
        print(f"no debugging entry {', '.join(map(repr, unknown))}; the entries are: {', '.join(ENTRIES)}")
        return 2
    if a.part:
        _run_part(ENTRIES[a.names[0]], resolve(a.backend), a.part)
        return 0
    for n in a.names or names():
        run(n, a.backend)
        say()
    return 0


if __name__ == "__main__":
    sys.exit(main())
