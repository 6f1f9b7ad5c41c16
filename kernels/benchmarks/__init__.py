"""GPU benchmarks of the lessons (`make bench [LESSON=NN]`), one module per lesson (lesson04.py, ...).

Each lesson module defines `run(out_dir: Path) -> list[Row]`, which times every variant against
eager PyTorch and torch.compile (kernels.bench) and writes lessonNN.csv and plots into out_dir.
`python -m kernels.benchmarks [NN ...]` runs them and regenerates the README's results table.
"""
from __future__ import annotations

import csv
import importlib
import pkgutil
import re
import sys
from pathlib import Path

from ..backend import gpu_available
from ..build import ROOT

OUT = ROOT / "build" / "bench"
START, END = "<!-- results:start -->", "<!-- results:end -->"


def lessons() -> list[str]:
    return sorted(i.name[len("lesson"):] for i in pkgutil.iter_modules([str(Path(__file__).parent)])
                  if i.name.startswith("lesson"))


def _num(v: str, spec: str) -> str:
    return format(float(v), spec) if v not in ("", None) else ""


def results_table(out_dir: Path = OUT) -> str:
    """A markdown table of the CSVs in out_dir, one line per benchmark: eager PyTorch,
    torch.compile and the fastest of the lesson's kernels. Every row is in the CSVs."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for f in sorted(out_dir.glob("lesson*.csv")):
        with f.open() as fh:
            for r in csv.DictReader(fh):
                if r["vs_eager"]:  # sweeps and baselines without a PyTorch row stay in the CSV only
                    groups.setdefault((f.stem[len("lesson"):], r["bench"]), []).append(r)
    if not groups:
        return "No results yet: run `make bench` on a machine with an NVIDIA GPU."
    device = next(iter(groups.values()))[0].get("device", "")
    lines = [f"Measured by `make bench` on {device}, eager PyTorch and `torch.compile` in the same run. GB/s count "
             "the fewest bytes each op must move; \"of copy\" is against a device-to-device copy measured in the "
             "same run. One line per benchmark, with the fastest of the lesson's kernels; every variant is in "
             "`build/bench/lessonNN.csv` and the plots next to it.", "",
             "| lesson | benchmark | eager GB/s | compile GB/s | fastest kernel | GB/s | of copy | vs eager | vs compile |",
             "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |"]
    for (lesson, name), rows in groups.items():
        by = {r["variant"]: r for r in rows}
        kernels = [r for r in rows if not r["variant"].startswith(("eager", "torch"))]
        if not kernels:
            continue
        best = min(kernels, key=lambda r: float(r["ms"]))
        eager, comp = by.get("eager", {}), by.get("torch.compile", {})
        lines.append(f"| {lesson} | {name} | {_num(eager.get('gbps', ''), '.0f')} | {_num(comp.get('gbps', ''), '.0f')} | "
                     f"{best['variant']} | {_num(best['gbps'], '.0f')} | {_num(best['of_copy'], '.0%')} | "
                     f"{_num(best['vs_eager'], '.2f')}x | {_num(best['vs_compile'], '.2f')}x |")
    return "\n".join(lines)


def update_readme(readme: Path = ROOT / "README.md", out_dir: Path = OUT) -> None:
    """Replace the text between the results markers in the README with the measured table."""
    text = readme.read_text()
    if START not in text or END not in text:
        return
    new = re.sub(re.escape(START) + r".*?" + re.escape(END), lambda m: f"{START}\n{results_table(out_dir)}\n{END}",
                 text, flags=re.S)
    readme.write_text(new)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not gpu_available():
        print("make bench needs an NVIDIA GPU: the simulator runs kernels on the CPU, so its timings would say "
              "nothing about a GPU. Run it on a GPU machine (Colab, a cloud VM) with `make bench PY=python3`.")
        return 2
    wanted = [f"{int(a):02d}" for a in argv] or lessons()
    missing = [w for w in wanted if w not in lessons()]
    if missing:
        print(f"no benchmark for lesson(s) {', '.join(missing)}; benchmarks exist for: {', '.join(lessons())}")
        return 2
    OUT.mkdir(parents=True, exist_ok=True)
    for lesson in wanted:
        csv_path = OUT / f"lesson{lesson}.csv"
        csv_path.unlink(missing_ok=True)
        mod = importlib.import_module(f"{__name__}.lesson{lesson}")
        print(f"== lesson {lesson}")
        mod.run(OUT)
    update_readme()
    print(f"CSV and plots in {OUT.relative_to(ROOT)}/; README results table updated")
    return 0
