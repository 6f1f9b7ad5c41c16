"""What the kernels of tests/sim_kernels/races.cu do on a GPU, for the simulator README's comparison table.

    python tests/toolkit/races_on_gpu.py [--runs 20] [--out DIR]

For each racy kernel: how many of `runs` runs gave a wrong answer (the correct form's answer, and the
reference, alongside), then what compute-sanitizer's racecheck and memcheck say about one run of each
bug (a child process per run, PyTorch's caching allocator off). The out-of-bounds kernels run only under
memcheck (on their own they may break the CUDA context). Writes races_on_gpu.md (the table) and
races_on_gpu.log (every sanitizer's output) to --out (default: $OUT, else build/).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
RACES = ROOT / "tests" / "sim_kernels" / "races.cu"


def cases():
    """(name, run(bug) -> output, reference) for every op with a bug form; sizes large enough for a GPU to race."""
    import torch

    from kernels import load

    ext = load(RACES, "cuda", quiet=True)
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(2048, 20480, device="cuda", generator=g)
    v = torch.randn(1 << 24, device="cuda", generator=g)
    a = torch.randn(2048, 2048, device="cuda", generator=g).half()
    b = torch.randn(2048, 2048, device="cuda", generator=g).half()
    w = torch.randn(32, device="cuda", generator=g)
    return ext, [
        ("column_sums", lambda bug: ext.column_sums(x, bug), x.sum(0), (1e-3, 1e-3)),
        ("block_total", lambda bug: ext.block_total(v, bug), v.double().sum().float().reshape(1), (1e-4, 1e-1)),
        ("wmma_tiles", lambda bug: ext.wmma_tiles(a, b, bug), a.float() @ b.float(), (1e-2, 1e-2)),
        ("reverse_block", lambda bug: ext.reverse_block(v, bug), v.view(-1, 256).flip(1).reshape(-1), (0, 0)),
        ("warp_swap", lambda bug: ext.warp_swap(w, bug), w.flip(0), (0, 0)),
    ]


def count_wrong(runs: int) -> list[tuple[str, int, int]]:
    """(op, wrong runs of the bug form, wrong runs of the correct form) out of `runs` each."""
    import torch

    _, all_cases = cases()
    out = []
    for name, run, want, (rtol, atol) in all_cases:
        wrong = {True: 0, False: 0}
        for bug in (True, False):
            for _ in range(runs):
                got = run(bug)
                torch.cuda.synchronize()
                wrong[bug] += not torch.allclose(got, want, rtol=rtol, atol=atol)
        out.append((name, wrong[True], wrong[False]))
    return out


def one(op: str, bug: bool) -> None:
    """Run one op once (the child process under compute-sanitizer)."""
    import torch

    ext, all_cases = cases()
    extra = {"fill_tiles": lambda: ext.fill_tiles(1000, 1000, bug),
             "row_sums_window": lambda: ext.row_sums_window(torch.randn(1000, 33, device="cuda"), bug)}
    runs = {name: run for name, run, _, _ in all_cases}
    extra[op]() if op in extra else runs[op](bug)
    torch.cuda.synchronize()


def sanitize(tool: str, op: str, bug: bool, log: list[str]) -> str:
    """compute-sanitizer's verdict on one run: its error count, and the first hazard or error kind."""
    exe = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    env = {**os.environ, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1", "PYTHONPATH": str(ROOT)}
    cmd = [exe, f"--tool={tool}", "--print-limit=3", sys.executable, __file__, "--one", op] + (["--bug"] if bug else [])
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    text = run.stdout + run.stderr
    log.append(f"===== {tool} {op} bug={bug} (exit {run.returncode})\n{text[-6000:]}")
    summary = re.search(r"(?:ERROR|RACECHECK) SUMMARY: (\d+) (?:errors?|hazards?)", text)
    first = re.search(r"(Error|Warning): (Race reported[^\n]*|[A-Z][^\n]{0,80})", text)
    count = summary.group(1) if summary else "?"
    return f"{count}" + (f" ({first.group(2).strip()[:60]})" if first and count not in ("0", "?") else "")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "build"))
    p.add_argument("--one", help=argparse.SUPPRESS)
    p.add_argument("--bug", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.one:
        one(a.one, a.bug)
        return 0
    sys.path.insert(0, str(ROOT))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = ["| kernel | wrong answers, bug (of %d) | wrong answers, correct form | racecheck, bug | memcheck, bug |" % a.runs,
            "| --- | ---: | ---: | --- | --- |"]
    log: list[str] = []
    for name, bad, good in count_wrong(a.runs):
        rows.append(f"| {name} | {bad} | {good} | {sanitize('racecheck', name, True, log)} | "
                    f"{sanitize('memcheck', name, True, log)} |")
        print(rows[-1], flush=True)
    for name in ("fill_tiles", "row_sums_window"):
        rows.append(f"| {name} | (not run alone) | | {sanitize('racecheck', name, True, log)} | "
                    f"{sanitize('memcheck', name, True, log)} |")
        print(rows[-1], flush=True)
    (out / "races_on_gpu.md").write_text("\n".join(rows) + "\n")
    (out / "races_on_gpu.log").write_text("\n".join(log))
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
