"""make doctor, make lab, make check and the benchmark's behaviour without a GPU."""
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch

from kernels.bench import FAILED_CHECK, NOT_COMPARABLE

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


@pytest.mark.toolkit  # through make or a command line: the plumbing; the logic is tested in-process
def test_doctor_reports_what_a_bug_report_needs():
    out = subprocess.run([sys.executable, "-m", "kernels.tools.doctor"], cwd=ROOT, env=ENV, capture_output=True,
                         text=True, timeout=120).stdout
    for field in ("python", "torch", "GPU", "nvcc", "ninja", "C++ compiler", "backend", "build cache", "`kernels` name"):
        assert f"{field}:" in out
    assert str(ROOT.parent) not in out  # no machine paths


def test_doctor_notices_the_unrelated_kernels_package(monkeypatch):
    import importlib.metadata

    from kernels.tools import doctor

    class Dist:
        version = "0.4.0"
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: Dist())
    assert "unrelated PyPI package 'kernels'" in doctor.kernels_clash()


def test_kernels_is_this_repositorys_toolkit():
    import kernels

    assert kernels.TOOLKIT == "cuda-kernels-for-pytorch"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


@pytest.mark.toolkit  # through make or a command line: the plumbing; the logic is tested in-process
@pytest.mark.skipif(importlib.util.find_spec("jupyterlab") is None, reason="jupyterlab is not installed here")
def test_make_lab_serves_the_repository_and_opens_lesson_01():
    port, token = _free_port(), "lessons-test"
    args = f"--no-browser --port={port} --ServerApp.ip=127.0.0.1 --IdentityProvider.token={token} --ServerApp.port_retries=0"
    proc = subprocess.Popen(["make", "-s", "lab", f"PY={sys.executable}", f"LAB_ARGS={args}"], cwd=ROOT, env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def get(path: str) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}?token={token}", timeout=5) as r:
            return r.read().decode()
    try:
        listing, deadline = None, time.time() + 90
        while time.time() < deadline and listing is None:
            try:
                listing = get("/api/contents/lessons")
            except OSError:
                assert proc.poll() is None, "the Jupyter server exited early"
                time.sleep(1)
        assert listing is not None, "the Jupyter server did not answer within 90 s"
        lessons = sorted(p.name for p in (ROOT / "lessons").iterdir() if p.is_dir() and p.name[:2].isdigit())
        assert lessons and all(name in listing for name in lessons)
        # the files the notebooks point to are inside the server's root
        assert "02_first_kernel.cu" in get("/api/contents/kernels/reference")
        assert "01_thread_model.ipynb" in get("/api/contents/solutions/01_thread_model")
        # and the browser opens lesson 01's notebook
        opener = urllib.request.build_opener(_NoRedirect)
        with pytest.raises(urllib.error.HTTPError) as redirect:
            opener.open(f"http://127.0.0.1:{port}/?token={token}", timeout=5)
        first = "lessons/01_thread_model/01_thread_model.ipynb"
        assert redirect.value.code == 302 and redirect.value.headers["Location"].split("?")[0] == f"/lab/tree/{first}"
        assert (ROOT / first).is_file() and "01_thread_model.ipynb" in get("/api/contents/lessons/01_thread_model")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    assert proc.poll() is not None


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_bench_without_a_gpu_says_there_are_no_timings(capsys):
    from kernels.bench import bench

    assert bench("nothing", {"noop": lambda: None}) == []
    assert "No GPU timings" in capsys.readouterr().out


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def _graph_inputs(compile_fn, shapes) -> list[list]:
    """What torch.compile hands its backend for softmax at each shape, compiled anew by compile_fn each
    time: a SymInt among the inputs means a graph for dynamic shapes."""
    seen = []

    def backend(gm, example_inputs):
        seen.append([tuple(a.shape) if isinstance(a, torch.Tensor) else type(a).__name__ for a in example_inputs])
        return gm.forward

    def softmax(x):
        return torch.softmax(x, -1)

    for shape in shapes:
        compile_fn(softmax, backend=backend)(torch.randn(shape))
    return seen


def test_the_benchmarks_compile_torch_specialised_to_each_shape():
    """bench() compiles its torch_fn once per call, and lessons call it at several shapes: a plain
    torch.compile would give every shape after the first a graph for dynamic shapes, slower kernels
    than the specialised ones (the first assert shows it), and the "vs torch.compile" column would be
    flattered. compile_static gives each call a specialised graph of its own."""
    from kernels.bench import compile_static

    shapes = [(4, 8), (16, 32), (2, 3), (16, 32)]
    assert _graph_inputs(torch.compile, shapes)[1] == ["SymInt", "SymInt", (16, 32)]  # what it guards against
    assert _graph_inputs(compile_static, shapes) == [[s] for s in shapes]


@pytest.mark.toolkit  # through make or a command line: the plumbing; the logic is tested in-process
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: make bench would run every benchmark")
def test_make_bench_refuses_politely_without_a_gpu():
    r = subprocess.run(["make", "-s", "bench", f"PY={sys.executable}"], cwd=ROOT, env=ENV, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0
    assert "needs an NVIDIA GPU" in r.stdout


def test_bar_report_says_pass_miss_or_not_measured_for_each_bar():
    from kernels.bench import Row
    from kernels.benchmarks import Bar, bar_report

    rows = [Row("softmax 8x8 fp32", "softmax6", 1.0, 100.0, None, 0.9, 1.6, 0.99)]
    lines = bar_report(rows, [Bar("softmax 8x8 fp32", "softmax6", "vs_eager", 1.5),
                              Bar("softmax 8x8 fp32", "softmax6", "vs_compile", 1.0),
                              Bar("softmax 8x8 bf16", "softmax6", "vs_compile", 1.0)]).splitlines()
    assert lines[1].split()[-3:] == ["1.600", "1.50", "PASS"]
    assert lines[2].split()[-3:] == ["0.990", "1.00", "MISS"]
    assert lines[3].endswith("NOT MEASURED")


def test_a_bar_against_another_row_of_the_same_benchmark_is_their_speed_ratio():
    from kernels.bench import Row
    from kernels.benchmarks import Bar, bar_report

    rows = [Row("attention fwd", "attention3", 2.0, None, 300.0, None, 5.0, 2.0),
            Row("attention fwd", "torch sdpa flash", 1.5, None, 400.0, None, 6.7, 2.7)]
    lines = bar_report(rows, [Bar("attention fwd", "attention3", "vs:torch sdpa flash", 0.8),
                              Bar("attention fwd", "attention3", "vs:torch sdpa cudnn", 0.8)]).splitlines()
    assert lines[1].split()[-3:] == ["0.750", "0.80", "MISS"]
    assert lines[2].endswith("NOT MEASURED")


def test_a_bar_on_a_row_that_failed_its_check_is_a_miss_however_fast():
    from kernels.bench import FAILED_CHECK, Row
    from kernels.benchmarks import Bar, bar_report

    rows = [Row("step", "op", 1.0, None, None, None, None, 1.5, FAILED_CHECK + ": its loss is not the eager model's"),
            Row("fwd", "attention3", 1.0, None, None, None, None, None),
            Row("fwd", "torch sdpa flash", 2.0, None, None, None, None, None, FAILED_CHECK + " after timing"),
            Row("fwd", "attention4", 1.0, None, None, None, None, 1.2)]
    lines = bar_report(rows, [Bar("step", "op", "vs_compile", 1.0),
                              Bar("fwd", "attention3", "vs:torch sdpa flash", 0.8),
                              Bar("fwd", "attention4", "vs_compile", 1.0)]).splitlines()
    assert lines[1].endswith("1.500  1.00  MISS (failed its check)"), lines[1]
    assert lines[2].endswith("MISS (failed its check)"), lines[2]
    assert lines[3].split()[-1] == "PASS"


@pytest.mark.parametrize("note", [FAILED_CHECK + " after timing", NOT_COMPARABLE + ": timed partly kernel by kernel"])
def test_a_bar_against_a_baseline_row_that_failed_or_is_not_comparable_does_not_pass(note):
    from kernels.bench import Row
    from kernels.benchmarks import Bar, bar_report

    rows = [Row("step", "torch.compile", 2.0, None, None, None, 2.0, 1.0, note),
            Row("step", "op", 1.0, None, None, None, None, 2.0), Row("step", "eager", 4.0, None, None, None, 1.0, None)]
    lines = bar_report(rows, [Bar("step", "op", "vs_compile", 1.0), Bar("step", "torch.compile", "vs_eager", 1.0),
                              Bar("step", "op", "vs:eager", 1.0)]).splitlines()
    assert lines[1].split()[-1] != "PASS" and ("failed" in lines[1]) == note.startswith(FAILED_CHECK), lines[1]
    assert "2.000" in lines[2] and lines[2].split()[-1] != "PASS", lines[2]  # 2x eager, but its own note
    assert lines[3].split()[-1] == "PASS", lines[3]  # neither of its two rows does


def test_a_table_keeps_a_long_variant_name_apart_from_its_time():
    from kernels.bench import Row, table

    name = "load (.cu): first build of a long name"
    rated = table([Row("copy", name, 30611.4, 2000.0, None, 0.66, 1.0, None)], 3000).splitlines()
    assert re.fullmatch(re.escape(name) + r"\s{2,}30611400\.0us\s.*", rated[2]), rated[2]


def test_a_table_leaves_a_missing_ratio_blank_not_a_lone_x():
    from kernels.bench import Row, table

    rows = [Row("cupy per call", "eager", 0.0095, 221.0, None, 0.07, 1.0, None),
            Row("cupy per call", "cupy zero-copy", 0.1276, 16.0, None, 0.01, 0.07, None)]
    lines = table(rows, 3000).splitlines()
    assert lines[2].rstrip().endswith("1.00x") and lines[3].rstrip().endswith("0.07x"), lines
    assert not any(line.rstrip().endswith(" x") for line in lines), lines


def test_the_rooflines_labels_never_overlap_where_points_share_an_intensity():
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.text import Annotation

    from kernels.bench import roofline

    points = {"matmul4": (16.0, 16.1), "matmul5": (32.0, 16.4), "matmul6": (32.0, 19.1), "matmul7": (32.0, 37.7),
              "matmul8": (32.0, 43.8), "matmul1": (0.25, 0.5), "matmul2": (0.25, 5.9)}
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(roofline(points, 59.3, 2990.5, show=False))  # closed by roofline: a canvas to draw on
    canvas.draw()
    renderer = canvas.get_renderer()
    fig = canvas.figure
    boxes = [a.get_window_extent(renderer) for a in fig.axes[0].texts if isinstance(a, Annotation)]
    assert len(boxes) == len(points)
    overlapping = [(i, j) for i in range(len(boxes)) for j in range(i) if boxes[i].overlaps(boxes[j])]
    assert not overlapping, overlapping


def test_a_table_of_times_alone_shows_them_in_one_readable_unit_without_rate_columns():
    from kernels.bench import Row, table

    def shown(*ms):
        return table([Row("build", f"route {i}: first build", t, None, None, None, None, None)
                      for i, t in enumerate(ms)], 3000).splitlines()

    lines = shown(30611.4, 133.3)
    assert lines[0] == "build" and lines[1].split() == ["variant", "time"]
    assert re.fullmatch(r"route 0: first build\s{2,}30\.61 s", lines[2]), lines[2]
    assert re.fullmatch(r"route 1: first build\s{2,}0\.13 s", lines[3]), lines[3]
    assert shown(443.09, 22.0)[2].endswith(" 443.09 ms") and shown(0.5)[2].endswith(" 500.0 us")


@pytest.mark.toolkit  # through make or a command line: the plumbing; the logic is tested in-process
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_the_quick_benchmarks_refuse_politely_without_a_gpu():
    for lesson in ("07", "08"):
        r = subprocess.run([sys.executable, "-m", f"kernels.benchmarks.lesson{lesson}", "--quick"], cwd=ROOT, env=ENV,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and "needs an NVIDIA GPU" in r.stdout


@pytest.mark.toolkit  # through make or a command line: the plumbing; the logic is tested in-process
def test_make_check_without_a_lesson_asks_which():
    r = subprocess.run(["make", "-s", "check", f"PY={sys.executable}"], cwd=ROOT, env=ENV, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0 and "which lesson?" in r.stdout


def test_readme_results_table_is_generated_between_markers(tmp_path):
    from kernels.benchmarks import END, START, update_readme

    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{START}\nold\n{END}\noutro\n")
    csv = tmp_path / "bench" / "lesson04.csv"
    csv.parent.mkdir()
    csv.write_text("bench,variant,ms,gbps,tflops,of_copy,vs_eager,vs_compile,note,copy_gbps,device\n"
                   "copy,eager,0.21,2800,,0.93,1.0,0.98,,3000,H100\n"
                   "copy,torch.compile,0.2,2850,,0.95,1.02,1.0,,3000,H100\n"
                   "copy,copy1,0.3,2000,,0.67,0.7,0.69,,3000,H100\n"
                   "copy,copy4,0.2,2900,,0.97,1.01,1.0,,3000,H100\n"
                   "block size,block 32,1.0,600,,0.2,,,,3000,H100\n")
    update_readme(readme, csv.parent)
    text = readme.read_text()
    assert "| 04 | copy | 2800 | 2850 | copy4 | 2900 | 97% | 1.01x | 1.00x |" in text
    assert "copy1" not in text and "block 32" not in text  # the slower variant and the sweep stay in the CSV
    assert "old" not in text and text.endswith("outro\n")
    assert "Measured by `make bench` on H100," in text


def test_the_results_table_does_not_count_another_route_as_the_lessons_kernel(tmp_path):
    from kernels.bench import OTHER_ROUTE
    from kernels.benchmarks import results_table

    (tmp_path / "lesson13.csv").write_text(
        BENCH_HEADER + "mm,eager,0.2,,700,,1.0,1.0,,3000,H100\n"
                       "mm,matmul13_5,0.21,,660,,0.95,0.95,,3000,H100\n"
                       f"mm,Triton (lesson 11),0.19,,720,,1.05,1.05,{OTHER_ROUTE},3000,H100\n")
    table = results_table(tmp_path)
    assert "| matmul13_5 | 660.0 TFLOP/s |" in table and "Triton" not in table


def test_the_results_table_keeps_a_benchmark_that_only_torch_compile_measured(tmp_path):
    from kernels.benchmarks import results_table

    (tmp_path / "lesson12.csv").write_text(
        BENCH_HEADER + "step graphed,torch.compile,6.6,,,,,1.0,,3000,H100\n"
                       "step graphed,attention op + compile,6.4,,,,,1.03,,3000,H100\n"
                       "sweep,block 64,1.0,600,,0.2,,,,3000,H100\n")
    table = results_table(tmp_path)
    assert "| 12 | step graphed |  |  | attention op + compile |  |  |  | 1.03x |" in table and "sweep" not in table


def test_the_results_table_names_every_gpu_its_csvs_come_from(tmp_path):
    from kernels.benchmarks import results_table

    for lesson, device in (("04", "NVIDIA H100 80GB HBM3"), ("06", "Tesla T4")):
        (tmp_path / f"lesson{lesson}.csv").write_text(
            BENCH_HEADER + f"copy,eager,0.21,2800,,0.93,1.0,0.98,,3000,{device}\n"
                           f"copy,copy4,0.2,2900,,0.97,1.01,1.0,,3000,{device}\n")
    assert "Measured by `make bench` on NVIDIA H100 80GB HBM3, Tesla T4," in results_table(tmp_path)


def test_a_table_names_the_gpu_that_measured_it_and_none_where_there_is_none(monkeypatch):
    from kernels import bench
    from kernels.bench import Row, table

    rates = [Row("copy", "copy4", 0.2, 2900.0, None, 0.97, 1.01, None)]
    times = [Row("pitfalls", "first step", 950.5, None, None, None, None, None)]
    assert table(rates, 3000, "Tesla T4").splitlines()[0] == "copy   (Tesla T4, device copy: 3000 GB/s)"
    assert table(times, 3000, "Tesla T4").splitlines()[0] == "pitfalls   (Tesla T4)"
    monkeypatch.setattr(bench, "device_name", lambda: "")  # no GPU in this process: nothing to name
    assert table(rates, 3000).splitlines()[0] == "copy   (device copy: 3000 GB/s)"
    assert table(times, 3000).splitlines()[0] == "pitfalls"
    monkeypatch.setattr(bench, "device_name", lambda: "NVIDIA H100 80GB HBM3")  # by default, this process's GPU
    assert table(times, 3000).splitlines()[0] == "pitfalls   (NVIDIA H100 80GB HBM3)"


def test_provenance_says_which_gpu_made_a_csv_and_when_it_was_recorded(tmp_path):
    from kernels.benchmarks import provenance

    measured = tmp_path / "lesson04.csv"
    measured.write_text(BENCH_HEADER + "copy,eager,0.21,2800,,0.93,1.0,0.98,,3000,Tesla T4\n")
    assert provenance(measured) == "measured on Tesla T4 by `make bench`"
    recorded = tmp_path / "recorded.csv"
    recorded.write_text(BENCH_HEADER.strip() + ",date,torch\n"
                        "copy,eager,0.21,2800,,0.93,1.0,0.98,,3000,NVIDIA H100 80GB HBM3,2026-11-27,2.11.0+cu130\n")
    assert provenance(recorded) == "recorded on NVIDIA H100 80GB HBM3 by `make bench`, 2026-11-27, torch 2.11.0+cu130"


def test_warming_several_backends_never_mixes_them_in_one_worker(monkeypatch):
    # A worker loads what it builds; lesson 03's package registers the fixed namespace `mulop`, which
    # one process cannot load twice. So each backend gets its own pool of workers.
    from kernels.dev import compile_check

    pools = []
    monkeypatch.setattr(compile_check, "resolve", lambda b: b)
    monkeypatch.setattr(compile_check, "_run", lambda todo, what, jobs=None: pools.append({be for _, be in todo})
                        or compile_check.Outcome(len(todo)))
    assert compile_check.main(["--warm", "cuda", "sim"]) == 0
    assert pools == [{"cuda"}, {"sim"}]


BENCH_HEADER = "bench,variant,ms,gbps,tflops,of_copy,vs_eager,vs_compile,note,copy_gbps,device\n"


def test_record_stamps_the_benchmark_csv_with_date_and_torch_version(tmp_path):
    import datetime

    from kernels.benchmarks import record

    (tmp_path / "lesson02.csv").write_text(BENCH_HEADER + "add,eager,0.3,2700,,0.9,1.0,0.99,,3000,NVIDIA H100\n"
                                                          "add,add2,0.29,2750,,0.92,1.03,1.02,,3000,NVIDIA H100\n")
    dst = record("2", out_dir=tmp_path, recorded_dir=tmp_path / "recorded")
    assert dst == tmp_path / "recorded" / "lesson02.csv"
    lines = dst.read_text().splitlines()
    assert lines[0] == BENCH_HEADER.strip() + ",date,torch"
    stamp = f",{datetime.date.today().isoformat()},{torch.__version__}"
    assert lines[1:] == ["add,eager,0.3,2700,,0.9,1.0,0.99,,3000,NVIDIA H100" + stamp,
                         "add,add2,0.29,2750,,0.92,1.03,1.02,,3000,NVIDIA H100" + stamp]


def test_record_copies_a_lessons_record_files_beside_the_csv_and_names_a_missing_one(tmp_path, monkeypatch):
    import types

    import kernels.benchmarks as benchmarks

    def run(out_dir):
        (out_dir / "lesson10.csv").write_text(BENCH_HEADER + "step,eager,22,,116,,1.0,0.57,,3000,GPU\n")
        (out_dir / "lesson10_trace.png").write_bytes(b"\x89PNG picture")
    module = types.SimpleNamespace(run=run, RECORD_FILES=("lesson10_trace.png",))
    monkeypatch.setattr(benchmarks, "gpu_available", lambda: True)
    monkeypatch.setattr(benchmarks, "ROOT", tmp_path)
    monkeypatch.setattr(benchmarks, "OUT", tmp_path / "bench")
    monkeypatch.setattr(benchmarks, "RECORDED", tmp_path / "recorded")
    monkeypatch.setattr(benchmarks, "update_readme", lambda: None)
    monkeypatch.setattr(benchmarks, "lessons", lambda: ["10"])
    monkeypatch.setattr(benchmarks.importlib, "import_module", lambda name: module)
    assert benchmarks.main(["--record", "10"]) == 0
    assert (tmp_path / "recorded" / "lesson10_trace.png").read_bytes() == b"\x89PNG picture"
    (tmp_path / "bench" / "lesson10_trace.png").unlink()
    with pytest.raises(FileNotFoundError, match="no lesson10_trace.png in"):
        benchmarks.record("10", files=module.RECORD_FILES)


def test_record_without_a_benchmark_run_says_what_to_run(tmp_path):
    from kernels.benchmarks import record

    with pytest.raises(FileNotFoundError, match="make bench LESSON=NN"):
        record("04", out_dir=tmp_path, recorded_dir=tmp_path / "recorded")
    assert not (tmp_path / "recorded").exists()


def test_show_recorded_prints_a_labelled_table_per_benchmark_and_plots_each(tmp_path, capsys, monkeypatch):
    import matplotlib.pyplot as plt

    from kernels.benchmarks import show_recorded

    (tmp_path / "lesson06.csv").write_text(
        BENCH_HEADER.strip() + ",date,torch\n"
        "sum 1 GiB,eager,0.40,2684,,0.89,1.0,1.01,,3010,NVIDIA H100 80GB HBM3,2026-11-20,2.14.0+cu130\n"
        "sum 1 GiB,sum7,0.39,2753,,0.91,1.03,1.04,,3010,NVIDIA H100 80GB HBM3,2026-11-20,2.14.0+cu130\n"
        "row max,row_max2,0.1,2600,,0.86,0.98,0.97,,3010,NVIDIA H100 80GB HBM3,2026-11-20,2.14.0+cu130\n")
    shown = []
    monkeypatch.setattr(plt, "show", lambda *a, **k: shown.append(plt.gcf().axes[0].get_title()))
    rows = show_recorded("06", recorded_dir=tmp_path)
    out = capsys.readouterr().out
    assert out.splitlines()[0] == ("Lesson 06: recorded on NVIDIA H100 80GB HBM3 by `make bench`, 2026-11-20, "
                                   "torch 2.14.0+cu130")
    assert "sum 1 GiB   (NVIDIA H100 80GB HBM3, device copy: 3010 GB/s)" in out  # each table names its GPU
    assert "row max   (NVIDIA H100 80GB HBM3, device copy: 3010 GB/s)" in out
    assert any(line.startswith("sum7") and "2753" in line and "1.03x" in line for line in out.splitlines())
    assert [(r.bench, r.variant, r.gbps) for r in rows] == [("sum 1 GiB", "eager", 2684.0),
                                                            ("sum 1 GiB", "sum7", 2753.0), ("row max", "row_max2", 2600.0)]
    assert shown == ["sum 1 GiB\nNVIDIA H100 80GB HBM3", "row max\nNVIDIA H100 80GB HBM3"]  # and each chart


def test_show_recorded_shows_rows_of_milliseconds_alone_as_a_table_without_a_plot(tmp_path, capsys, monkeypatch):
    import matplotlib.pyplot as plt

    from kernels.benchmarks import show_recorded

    (tmp_path / "lesson10.csv").write_text(
        BENCH_HEADER.strip() + ",date,torch\n"
        "pitfalls,first step (cold),950.5,,,,,,,3010,NVIDIA H100 80GB HBM3,2026-11-20,2.14.0+cu130\n")
    shown = []
    monkeypatch.setattr(plt, "show", lambda *a, **k: shown.append(plt.gcf()))
    rows = show_recorded("10", recorded_dir=tmp_path)
    assert shown == [], "a bar chart of GB/s or TFLOP/s has nothing to draw for rows of milliseconds alone"
    assert [(r.bench, r.variant, r.ms, r.gbps, r.tflops) for r in rows] == [
        ("pitfalls", "first step (cold)", 950.5, None, None)]
    assert any(line.startswith("first step (cold)") for line in capsys.readouterr().out.splitlines())


def test_show_recorded_without_a_recording_says_so_in_one_line(tmp_path, capsys):
    from kernels.benchmarks import show_recorded

    assert show_recorded("5", recorded_dir=tmp_path) == []
    out = capsys.readouterr().out
    assert out == "No recorded GPU figures for lesson 05 yet (they come from `make bench RECORD=1` on a GPU).\n"


def test_show_recorded_rejects_a_csv_that_make_bench_did_not_record(tmp_path):
    from kernels.benchmarks import show_recorded

    (tmp_path / "lesson04.csv").write_text(BENCH_HEADER + "copy,eager,0.2,2800,,0.93,1.0,0.98,,3000,H100\n")
    with pytest.raises(ValueError, match="lacks the column.s. date, torch"):
        show_recorded("04", recorded_dir=tmp_path, plot=False)


def test_show_recorded_rejects_a_lesson_that_is_not_a_number():
    from kernels.benchmarks import show_recorded

    with pytest.raises(ValueError, match='expected a lesson number such as "06", got \'softmax\''):
        show_recorded("softmax")


def test_make_bench_record_1_runs_the_benchmark_with_record():
    r = subprocess.run(["make", "-n", "bench", "RECORD=1", "LESSON=06", f"PY={sys.executable}"], cwd=ROOT, env=ENV,
                       capture_output=True, text=True, timeout=60)
    assert "-m kernels.benchmarks --record 06" in r.stdout
    r = subprocess.run(["make", "-n", "bench", "LESSON=06", f"PY={sys.executable}"], cwd=ROOT, env=ENV,
                       capture_output=True, text=True, timeout=60)
    assert "-m kernels.benchmarks  06" in r.stdout


def test_benchmark_main_with_record_writes_the_recorded_csv(tmp_path, monkeypatch, capsys):
    import types

    import kernels.benchmarks as benchmarks

    def run(out_dir):
        (out_dir / "lesson02.csv").write_text(BENCH_HEADER + "add,add2,0.29,2750,,0.92,1.03,1.02,,3000,GPU\n")
    monkeypatch.setattr(benchmarks, "gpu_available", lambda: True)
    monkeypatch.setattr(benchmarks, "ROOT", tmp_path)
    monkeypatch.setattr(benchmarks, "OUT", tmp_path / "bench")
    monkeypatch.setattr(benchmarks, "RECORDED", tmp_path / "recorded")
    monkeypatch.setattr(benchmarks, "update_readme", lambda: None)
    monkeypatch.setattr(benchmarks.importlib, "import_module", lambda name: types.SimpleNamespace(run=run))
    assert benchmarks.main(["02"]) == 0
    assert not (tmp_path / "recorded").exists()  # without --record nothing committed changes
    assert benchmarks.main(["--record", "2"]) == 0
    assert "recorded in recorded/lesson02.csv" in capsys.readouterr().out
    assert (tmp_path / "recorded" / "lesson02.csv").read_text().splitlines()[1].startswith("add,add2,0.29,2750,")


def _ladder():
    from kernels.check import Diagnosis
    from kernels.exercises import Exercise, Hint

    return Exercise("02", "saxpy", "saxpy.cu", run=None, hints=[
        Hint("nudge", answers=(Diagnosis.INVALID_LAUNCH,)), Hint("blocks", answers=(Diagnosis.UNWRITTEN,)),
        Hint("guard", answers=(Diagnosis.WROTE_PAST_END, Diagnosis.WRONG_VALUES), parts=("dx",)), "answer"])


def _report(*failures):
    """A report of one passing case and a failing one per (diagnosis, part)."""
    from kernels.check import Case, Report

    r = Report("saxpy", cases=[Case(1, torch.float32)])
    for diagnosis, part in failures:
        r.cases.append(Case(100, torch.float32, False, "problem", "", diagnosis, part))
    return r


def test_the_first_hint_shown_is_the_one_tagged_for_the_failure():
    from kernels.check import Diagnosis
    from kernels.exercises import fitting_hint

    past_end, unwritten = (Diagnosis.WROTE_PAST_END, ""), (Diagnosis.UNWRITTEN, "")
    raised = (Diagnosis.INVALID_LAUNCH, "")
    assert fitting_hint(_ladder(), _report(past_end, past_end)) == 3
    assert fitting_hint(_ladder(), _report(unwritten)) == 2
    assert fitting_hint(_ladder(), _report(raised)) == 1
    # the hint that answers most failing cases wins: one size with 0 blocks, three with a tail unwritten
    assert fitting_hint(_ladder(), _report(raised, unwritten, unwritten, unwritten)) == 2
    # a hint about an output answers any failure in it
    assert fitting_hint(_ladder(), _report((Diagnosis.UNWRITTEN, "dx"), (Diagnosis.INPUT_MODIFIED, "dx"))) == 3


def test_without_a_tagged_hint_for_the_failure_the_first_hint_is_shown():
    from kernels.check import Diagnosis
    from kernels.exercises import fitting_hint

    assert fitting_hint(_ladder(), _report((Diagnosis.WRONG_SHAPE, ""))) == 1


def test_a_hint_answers_diagnoses_by_name_not_by_words():
    from kernels.exercises import Hint

    with pytest.raises(TypeError, match="Hint.answers takes Diagnosis members"):
        Hint("guard", answers=("wrote past the end",))


def test_a_failing_check_shows_the_fitting_hint_and_the_command_for_the_next(capsys):
    sys.path.insert(0, str(ROOT / "tests"))
    from planting import plant

    from kernels.exercises import check_exercise, lesson_dir

    # the same planted file as tests/test_lesson02.py's off-by-one: one build serves both
    off_by_one = plant(lesson_dir("02", solution=True) / "saxpy.cu", "if (i < n) {", "if (i <= n) {",
                       "lesson02_saxpy_off_by_one.cu")
    report = check_exercise("02", "saxpy", path=off_by_one, backend="sim", shell=True)
    out = capsys.readouterr().out
    assert not report.passed and "past the end" in out
    assert "  hint 3/4 (it fits this failure): Kernel: the index" in out
    assert "  next hint: make hint LESSON=02 N=4" in out
    assert "hint 1/4" not in out and "hint 2/4" not in out and "hint 4/4" not in out  # one hint, not the ladder
    check_exercise("02", "saxpy", path=off_by_one, backend="sim")
    assert '  next hint: hint("02", "saxpy", 4)' in capsys.readouterr().out  # in a notebook, the call to run


def test_a_passing_check_prints_no_hint(capsys):
    from kernels.exercises import check_exercise

    assert check_exercise("01", "scale", solution=True, backend="sim").passed
    assert "hint" not in capsys.readouterr().out


@pytest.mark.toolkit  # through make or a command line: the plumbing; the logic is tested in-process
def test_make_hint_prints_that_hint_and_the_command_for_the_next():
    from kernels.exercises import find

    r = subprocess.run(["make", "-s", "hint", "LESSON=02", "N=2", f"PY={sys.executable}"], cwd=ROOT, env=ENV,
                       capture_output=True, text=True, timeout=120)
    n = len(find("02", "saxpy")[0].hints)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith(f"hint 2/{n}: Blocks: enough to give every element a thread")
    assert r.stdout.splitlines()[-1] == "next hint: make hint LESSON=02 N=3"


def test_the_last_hint_offers_no_next_one(capsys):
    from kernels.exercises import find, hint

    n = len(find("01", "scale")[0].hints)
    hint("01", "scale", n)
    out = capsys.readouterr().out
    assert out.startswith(f"hint {n}/{n}: ") and "next hint" not in out


@pytest.mark.parametrize("n", [0, 99, "2", 1.0, True])
def test_hint_numbers_outside_the_ladder_are_refused_with_its_range(n):
    from kernels.exercises import find, hint

    with pytest.raises(ValueError, match=f"has hints 1 to {len(find('02', 'saxpy')[0].hints)}; got"):
        hint("02", "saxpy", n)


@pytest.mark.toolkit  # through make or a command line: the plumbing; the logic is tested in-process
def test_make_hint_for_a_hint_that_does_not_exist_says_which_do():
    r = subprocess.run(["make", "-s", "hint", "LESSON=02", "N=9", f"PY={sys.executable}"], cwd=ROOT, env=ENV,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "lesson 02's exercise saxpy has hints 1 to 4; got 9" in r.stdout


def test_a_hint_in_a_lesson_of_several_exercises_needs_the_exercise_name(monkeypatch):
    import kernels.exercises as exercises

    two = [_ladder(), exercises.Exercise("02", "square", "square.cu", run=None, hints=["h"])]
    monkeypatch.setattr(exercises, "all_exercises", lambda: {"02": two})
    with pytest.raises(ValueError, match=r"several exercises \(saxpy, square\): say which, as in make hint "
                                         r"LESSON=02 EX=<name> N=2"):
        exercises.hint("02", None, 2, shell=True)
    assert exercises.hint_command(two[1], 1, shell=True) == "make hint LESSON=02 EX=square N=1"
    assert exercises.hint_command(two[1], 1) == 'hint("02", "square", 1)'


def test_a_lesson_that_is_not_a_number_is_refused_clearly(capsys):
    from kernels.exercises import find, main

    with pytest.raises(KeyError) as e:
        find("intro")
    assert e.value.args[0] == 'expected a lesson number such as "04", got \'intro\''
    assert main(["intro", "--hint", "1"]) == 2
    assert capsys.readouterr().out == 'expected a lesson number such as "04", got \'intro\'\n'


@pytest.mark.toolkit  # through make or a command line: the plumbing; the logic is tested in-process
def test_make_check_says_how_to_get_the_next_hint_from_the_shell():
    r = subprocess.run(["make", "-s", "check", "LESSON=01", f"PY={sys.executable}"], cwd=ROOT, env=ENV,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0  # the stub in lessons/ does not pass
    assert "  hint 1/4: Start from add_kernel2" in r.stdout
    assert "  next hint: make hint LESSON=01 N=2" in r.stdout


def test_make_lessons_ends_by_saying_what_to_open_next(monkeypatch, capsys):
    from kernels.dev import run_notebooks

    monkeypatch.setattr(run_notebooks, "notebooks", lambda folders: [ROOT / "lessons" / "01_thread_model" / "x.ipynb"])
    monkeypatch.setattr(run_notebooks, "run_in_process", lambda nb, env: (True, ""))
    assert run_notebooks.main(["lessons"]) == 0
    out = capsys.readouterr().out
    assert out.index("all notebooks ran") < out.index("make lab") < out.index("make check LESSON=01")
    # the steps name files that exist
    assert "01_thread_model/01_thread_model.ipynb" in out and (ROOT / "lessons/01_thread_model/01_thread_model.ipynb").is_file()
    assert "scale.cu" in out and (ROOT / "lessons/01_thread_model/scale.cu").is_file()


def test_make_lessons_runs_the_lesson_notebooks_and_the_solutions_only_when_asked():
    def folders(*args):
        r = subprocess.run(["make", "-n", "lessons", f"PY={sys.executable}", *args], cwd=ROOT, env=ENV,
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        line = next(x for x in r.stdout.splitlines() if "kernels.dev.run_notebooks" in x)
        return line.split("kernels.dev.run_notebooks", 1)[1].split()
    assert folders() == ["lessons"]
    assert folders("SOLUTIONS=1") == ["lessons", "solutions"]


def test_make_lessons_with_a_failing_notebook_names_it_and_gives_no_next_steps(monkeypatch, capsys):
    from kernels.dev import run_notebooks

    monkeypatch.setattr(run_notebooks, "notebooks", lambda folders: [ROOT / "lessons" / "01_thread_model" / "x.ipynb"])
    monkeypatch.setattr(run_notebooks, "run_in_process", lambda nb, env: (False, "NameError: name 'y' is not defined"))
    assert run_notebooks.main(["lessons"]) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "lessons/01_thread_model/x.ipynb" in out and "make lab" not in out


@pytest.mark.toolkit  # starts two Jupyter kernels
def test_make_lessons_runs_notebooks_side_by_side_with_torch_threads_shared(monkeypatch):
    import nbformat
    from kernels.dev import run_notebooks

    folder = ROOT / "build" / "tests" / f"side_by_side_{os.getpid()}"
    folder.mkdir(parents=True, exist_ok=True)
    code = "import os, time; t = time.time(); time.sleep(2); print(os.environ.get('OMP_NUM_THREADS'), t)"
    nbs = []
    for name in ("a", "b"):
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
        nbformat.write(nb, folder / f"{name}.ipynb")
        nbs.append(folder / f"{name}.ipynb")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert run_notebooks.run_side_by_side(nbs, jobs=2) == []
    printed = [nbformat.read(run_notebooks.OUT / nb.relative_to(ROOT), as_version=4).cells[0].outputs[0]["text"].split()
               for nb in nbs]
    assert [p[0] for p in printed] == ["1", "1"]  # two notebooks on two cores: one torch thread each
    assert abs(float(printed[0][1]) - float(printed[1][1])) < 2  # both ran at once (each sleeps 2 s)


def test_make_lessons_starts_the_later_lessons_first_and_keeps_a_lessons_two_notebooks_apart():
    from kernels.dev.run_notebooks import heaviest_first, notebooks

    order = [nb.relative_to(ROOT).parts[:2] for nb in heaviest_first(notebooks(["lessons", "solutions"]))]
    assert order[0] == ("lessons", max(p.name for p in (ROOT / "lessons").iterdir() if p.name[:2].isdigit()))
    assert sorted(order) == sorted(nb.relative_to(ROOT).parts[:2] for nb in notebooks(["lessons", "solutions"]))
    neighbours = zip(order, order[1:])  # two workers take neighbours at about the same time
    assert not [a for a, b in neighbours if a[1] == b[1]], "a lesson's notebook and its solution run side by side"
    assert order[-1][1].startswith("01")  # the shortest last: no core waits long for the final one


def _tracked_toolkit_files() -> list[str]:
    """Every file under kernels/ that git tracks: the toolkit's code and everything it reads (headers,
    reference files, recorded figures, the simulator's README)."""
    done = subprocess.run(["git", "ls-files", "kernels"], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0 or not done.stdout.strip():
        pytest.skip("not a git checkout: the tracked files are unknown")
    return [f for f in done.stdout.split() if (ROOT / f).is_file()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from a copy of the repository's tracked package (pip wheel, no build isolation, no index)."""
    import shutil

    import setuptools

    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"setuptools {setuptools.__version__} here; the project builds with setuptools>=77")
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    for f in ["pyproject.toml", "README.md", *_tracked_toolkit_files()]:
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / f, src / f)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation", "--no-index",
                        str(src), "-w", str(tmp / "dist")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    log = r.stdout + r.stderr
    for warning in ("BuildBackendWarning", "SetuptoolsDeprecationWarning", "would be ignored", "is deprecated"):
        assert warning not in log, f"the build warns: {warning}"
    return next((tmp / "dist").glob("*.whl"))


@pytest.mark.toolkit
@pytest.mark.slow
def test_the_wheel_carries_every_tracked_file_of_the_toolkit_and_no_cache(wheel):
    import zipfile

    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [f for f in _tracked_toolkit_files() if f not in names]
    assert not missing, f"missing from the wheel: {missing}"
    assert not [n for n in names if "__pycache__" in n]


@pytest.mark.toolkit
@pytest.mark.slow
def test_an_installed_copy_builds_and_runs_a_lesson_on_the_simulator(wheel, tmp_path):
    """A non-editable install (into a fresh venv that sees this one's packages, so torch is not fetched),
    run from a folder outside the repository: it finds its own headers and reference files."""
    import site

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    # this interpreter's packages (torch) after the venv's own, where this one is itself a venv
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "outer_packages.pth").write_text("".join(f"{p}\n" for p in site.getsitepackages()))
    r = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", str(wheel)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    script = ("import torch, kernels\n"
              "assert 'site-packages' in kernels.__file__, kernels.__file__\n"
              "ext = kernels.load('04', 'sim', quiet=True)\n"
              "x, out = torch.randn(1000), torch.empty(1000)\n"
              "ext.copy1(x, out)\n"
              "print('copied', torch.equal(out, x))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["KERNELS_BUILD_DIR"] = str(tmp_path / "ext")
    sim_pch = ROOT / "build" / "ext" / "sim-pch"  # the checkout's precompiled headers: a build in seconds
    if sim_pch.is_dir():
        (tmp_path / "ext").mkdir()
        (tmp_path / "ext" / "sim-pch").symlink_to(sim_pch, target_is_directory=True)
    run = subprocess.run([str(python), "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and "copied True" in run.stdout, run.stdout[-2000:] + run.stderr[-3000:]
