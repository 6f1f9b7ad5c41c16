"""GPU benchmarks of the lessons (`make bench [LESSON=NN]`), one module per lesson (lesson04.py, ...).

Each lesson module defines `run(out_dir: Path) -> list[Row]`, which times every variant against
eager PyTorch and torch.compile (kernels.bench) and writes lessonNN.csv and plots into out_dir.
`python -m kernels.benchmarks [--record] [NN ...]` runs them and regenerates the README's results
table; with --record (`make bench RECORD=1`) it also copies each lesson's CSV, stamped with the date
and the torch version, to kernels/benchmarks/recorded/lessonNN.csv, which is committed so that
`show_recorded("NN")` can show the GPU figures on a machine without a GPU.
"""
from __future__ import annotations

import csv
import datetime
import importlib
import pkgutil
import re
from pathlib import Path
from typing import Callable, NamedTuple

from ..backend import gpu_available
from ..bench import FAILED_CHECK, NOT_COMPARABLE, OTHER_ROUTE
from ..paths import BUILD, RECORDED, ROOT
from ..tables import markdown_table, text_table

OUT = BUILD / "bench"
STAMP = ("date", "torch")  # the columns a recorded CSV adds to the one `make bench` writes
START, END = "<!-- results:start -->", "<!-- results:end -->"


def lessons() -> list[str]:
    return sorted(i.name[len("lesson"):] for i in pkgutil.iter_modules([str(Path(__file__).parent)])
                  if i.name.startswith("lesson"))


def _num(v: str, spec: str) -> str:
    return format(float(v), spec) if v not in ("", None) else ""


def _times(v: str) -> str:
    """A speed-up as "1.23x", or nothing for a row without one."""
    return f"{_num(v, '.2f')}x" if v not in ("", None) else ""


def _rate(row: dict) -> str:
    """A row's GB/s, or for compute-bound benchmarks (no byte count) its TFLOP/s, marked as such."""
    if row.get("gbps"):
        return _num(row["gbps"], ".0f")
    return f"{_num(row['tflops'], '.1f')} TFLOP/s" if row.get("tflops") else ""


def results_table(out_dir: Path = OUT) -> str:
    """A markdown table of the CSVs in out_dir, one line per benchmark: eager PyTorch,
    torch.compile and the fastest of the lesson's kernels. Every row is in the CSVs."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for f in sorted(out_dir.glob("lesson*.csv")):
        if not f.stem[len("lesson"):].isdigit():  # a lesson's other files (lesson14_overlap.csv: a trace's spans)
            continue
        with f.open() as fh:
            for r in csv.DictReader(fh):
                # sweeps and baselines without a PyTorch row stay in the CSV only; a benchmark with torch.compile's
                # row and no eager one (eager out of memory, or a step only the compiled models can take) is kept
                if r["vs_eager"] or r["vs_compile"]:
                    groups.setdefault((f.stem[len("lesson"):], r["bench"]), []).append(r)
    if not groups:
        return "No results yet: run `make bench` on a machine with an NVIDIA GPU."
    device = _devices([r for rows in groups.values() for r in rows])
    body = []
    lines = [f"Measured by `make bench` on {device}, eager PyTorch and `torch.compile` in the same run. GB/s count "
             "the fewest bytes each op must move; \"of copy\" is against a device-to-device copy measured in the "
             "same run (compute-bound benchmarks, such as matmul, show TFLOP/s; their `vs eager` is the fraction of "
             "cuBLAS). One line per benchmark, with the fastest of the lesson's kernels; every variant is in "
             "`build/bench/lessonNN.csv` and the plots next to it.", ""]
    for (lesson, name), rows in groups.items():
        by = {r["variant"]: r for r in rows}
        kernels = [r for r in rows if not r["variant"].startswith(("eager", "torch"))
                   and OTHER_ROUTE not in r.get("note", "")]
        if not kernels:
            continue
        best = min(kernels, key=lambda r: float(r["ms"]))
        eager, comp = by.get("eager", {}), by.get("torch.compile", {})
        body.append((lesson, name, _rate(eager), _rate(comp), best["variant"], _rate(best),
                     _num(best["of_copy"], ".0%"), _times(best["vs_eager"]), _times(best["vs_compile"])))
    header = ("lesson", "benchmark", "eager GB/s", "compile GB/s", "fastest kernel", "GB/s", "of copy", "vs eager",
              "vs compile")
    return "\n".join(lines) + "\n" + markdown_table(header, body, align="llrrlrrrr")


def update_readme(readme: Path = ROOT / "README.md", out_dir: Path = OUT) -> None:
    """Replace the text between the results markers in the README with the measured table."""
    text = readme.read_text()
    if START not in text or END not in text:
        return
    new = re.sub(re.escape(START) + r".*?" + re.escape(END), lambda m: f"{START}\n{results_table(out_dir)}\n{END}",
                 text, flags=re.S)
    readme.write_text(new)


def _lesson_id(lesson: str | int) -> str:
    """'6', 6 and '06' all name lesson 06."""
    try:
        return f"{int(lesson):02d}"
    except (TypeError, ValueError):
        raise ValueError(f"expected a lesson number such as \"06\", got {lesson!r}") from None


def record(lesson: str | int, out_dir: Path | None = None, recorded_dir: Path | None = None,
           files: tuple[str, ...] = ()) -> Path:
    """Copy out_dir/lessonNN.csv to recorded_dir/lessonNN.csv with a date and a torch version column, and the
    named files of out_dir (a lesson module's RECORD_FILES, such as a picture the notebook shows) as they are."""
    import shutil

    import torch

    out_dir, recorded_dir = out_dir or OUT, recorded_dir or RECORDED
    src = out_dir / f"lesson{_lesson_id(lesson)}.csv"
    if not src.exists():
        raise FileNotFoundError(f"no {src.name} in {out_dir}: run the lesson's benchmark first (make bench LESSON=NN)")
    for name in files:
        if not (out_dir / name).exists():
            raise FileNotFoundError(f"no {name} in {out_dir}: the lesson's benchmark writes it beside {src.name}")
    with src.open(newline="") as fh:
        reader = csv.DictReader(fh)
        fields = [f for f in reader.fieldnames or [] if f not in STAMP] + list(STAMP)
        rows = list(reader)
    stamp = {"date": datetime.date.today().isoformat(), "torch": torch.__version__}
    recorded_dir.mkdir(parents=True, exist_ok=True)
    dst = recorded_dir / src.name
    with dst.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows({**r, **stamp} for r in rows)
    for name in files:
        shutil.copyfile(out_dir / name, recorded_dir / name)
    return dst


def _devices(records: list[dict]) -> str:
    """The GPUs a CSV's rows were measured on, as its device column names them, each once."""
    return ", ".join(dict.fromkeys(r.get("device") or "a device the CSV does not name" for r in records))


def _provenance(records: list[dict]) -> str:
    if records and all(c in records[0] for c in STAMP):
        date, version = (", ".join(dict.fromkeys(r[c] for r in records)) for c in STAMP)
        return f"recorded on {_devices(records)} by `make bench`, {date}, torch {version}"
    return f"measured on {_devices(records)} by `make bench`"


def provenance(path: Path) -> str:
    """Which GPU made the figures of a benchmark's CSV: "recorded on <device> by `make bench`, <date>, torch
    <version>" for a recorded one (kernels/benchmarks/recorded/), "measured on <device> by `make bench`" for this
    machine's run (build/bench/)."""
    with path.open(newline="") as fh:
        return _provenance(list(csv.DictReader(fh)))


def _float(v: str | None) -> float | None:
    return float(v) if v not in ("", None) else None


def show_recorded(lesson: str | int, recorded_dir: Path | None = None, plot: bool = True) -> list:
    """Print the GPU figures `make bench RECORD=1` committed for a lesson as tables, and plot them, each headed by
    the GPU that measured it.

    For learners without a GPU. Returns the rows read (kernels.bench.Row), [] when none are recorded.
    """
    from ..bench import Row, plot as bar_chart, table

    lesson = _lesson_id(lesson)
    path = (recorded_dir or RECORDED) / f"lesson{lesson}.csv"
    if not path.exists():
        print(f"No recorded GPU figures for lesson {lesson} yet (they come from `make bench RECORD=1` on a GPU).")
        return []
    with path.open(newline="") as fh:
        records = list(csv.DictReader(fh))
    missing = [c for c in ("bench", "variant", "ms", "copy_gbps", "device", *STAMP) if records and c not in records[0]]
    if missing:
        raise ValueError(f"{path.name} lacks the column(s) {', '.join(missing)}: "
                         "recorded CSVs are written by `make bench RECORD=1`")
    groups: dict[str, list[tuple[Row, dict]]] = {}
    for r in records:
        row = Row(r["bench"], r["variant"], float(r["ms"]), *(_float(r.get(k)) for k in
                  ("gbps", "tflops", "of_copy", "vs_eager", "vs_compile")), r.get("note", ""))
        groups.setdefault(row.bench, []).append((row, r))
    print(f"Lesson {lesson}: {_provenance(records)}")
    for pairs in groups.values():
        rows, copy = [row for row, _ in pairs], float(pairs[0][1]["copy_gbps"])
        device = _devices([r for _, r in pairs])  # each table and chart names its GPU, not only the line above
        print()
        print(table(rows, copy, device))
        if plot and any(r.gbps or r.tflops for r in rows):  # rows of times alone (build times) have no bars
            bar_chart(rows, copy, show=True, device=device)
    return [row for pairs in groups.values() for row, _ in pairs]


class Bar(NamedTuple):
    """A performance bar: in the benchmark named `bench`, `variant` must reach `at_least` on `measure`
    (a Row field: "vs_eager", "vs_compile" or "of_copy"; or "vs:<other variant>", its speed against that
    variant's row in the same benchmark, such as "vs:torch sdpa flash")."""

    bench: str
    variant: str
    measure: str
    at_least: float


def bar_report(rows: list, bars: list[Bar]) -> str:
    """One line per bar: the measured value, the bar, and PASS or MISS (or NOT MEASURED when no row matches). A bar
    on a row, or against a row (the "vs:" variant's, eager's for vs_eager, torch.compile's for vs_compile), whose
    note says it failed its check is a MISS however fast, and one whose note says it is not comparable is NOT
    COMPARABLE."""
    by = {(r.bench, r.variant): r for r in rows}
    baseline = {"vs_eager": "eager", "vs_compile": "torch.compile"}
    body = []
    for b in bars:
        row = by.get((b.bench, b.variant))
        versus = b.measure.startswith("vs:")
        other = by.get((b.bench, b.measure[len("vs:"):] if versus else baseline.get(b.measure)))
        if versus:
            value = other.ms / row.ms if row and other else None
        else:
            value = getattr(row, b.measure) if row else None
        notes = [r.note for r in (row, other) if r is not None]
        verdict = ("NOT MEASURED" if value is None else "MISS (failed its check)" if any(FAILED_CHECK in n for n in notes)
                   else "NOT COMPARABLE" if any(NOT_COMPARABLE in n for n in notes)
                   else "PASS" if value >= b.at_least else "MISS")
        body.append((b.bench, b.variant, b.measure, "" if value is None else f"{value:.3f}", f"{b.at_least:.2f}", verdict))
    return text_table(("benchmark", "variant", "measure", "value", "bar", "result"), body, align="lllrrl")


def print_quick(rows: list, copy_gbps: float, bars: list[Bar]) -> None:
    """A quick run's result: a table per benchmark, then the bars."""
    from ..bench import table

    for name in dict.fromkeys(r.bench for r in rows):
        print(table([r for r in rows if r.bench == name], copy_gbps), end="\n\n")
    print(bar_report(rows, bars))


def quick_main(run_quick: Callable[[], object], argv: list[str] | None = None) -> int:
    """`python -m kernels.benchmarks.lessonNN --quick`: run_quick() on a GPU, or say why not."""
    import argparse

    p = argparse.ArgumentParser(description="The rows of a lesson's benchmark that carry performance bars "
                                            "(`make bench LESSON=NN` runs everything).")
    p.add_argument("--quick", action="store_true", required=True, help="time only the rows with bars")
    p.parse_args(argv)
    if not gpu_available():
        print("the quick benchmark needs an NVIDIA GPU: simulator timings say nothing about a GPU")
        return 2
    run_quick()
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m kernels.benchmarks [--record] [NN ...]` (make bench [RECORD=1] [LESSON=NN])."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m kernels.benchmarks",
                                description="Every lesson's GPU benchmark (or the named ones): CSV and plots in "
                                            "build/bench/, the README's results table regenerated.")
    p.add_argument("--record", action="store_true",
                   help="also copy each lesson's CSV, dated, to kernels/benchmarks/recorded/ (committed)")
    p.add_argument("lessons", nargs="*", metavar="NN", help="lesson numbers (default: every lesson with a benchmark)")
    a = p.parse_args(argv)
    keep, argv = a.record, a.lessons
    if not gpu_available():
        print("make bench needs an NVIDIA GPU: the simulator runs kernels on the CPU, so its timings would say "
              "nothing about a GPU. Run it on a GPU machine (Colab, a cloud VM) with `make bench PY=python3`.")
        return 2
    try:
        wanted = [_lesson_id(a) for a in argv] or lessons()
    except ValueError as e:
        print(f"{e} (usage: python -m kernels.benchmarks [--record] [NN ...])")
        return 2
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
        if keep:
            print(f"recorded in {record(lesson, files=getattr(mod, 'RECORD_FILES', ())).relative_to(ROOT)}")
    update_readme()
    print(f"CSV and plots in {OUT.relative_to(ROOT)}/; README results table updated")
    return 0
