"""The test runner's machinery (`make test-all`, `make test-toolkit`): the nvcc compile check's combined builds and
the step runner's lanes and summary."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernels.dev import all_tests as test_all
from kernels.dev import compile_check
from planting import CHECKED_IN_NOTEBOOKS

pytestmark = pytest.mark.toolkit  # make test-toolkit runs these, not make test-all

ROOT = Path(__file__).resolve().parent.parent
KERNEL = """// a kernel file
#include "helpers.cuh"

#include <cmath>
#define BLOCK 256

__global__ void twice_kernel(float* x) { x[threadIdx.x] *= 2; }
"""


def test_a_part_moves_includes_before_its_namespace_and_keeps_line_numbers(tmp_path):
    (tmp_path / "local.cuh").write_text("// beside the file\n")
    src = tmp_path / "k.cu"
    src.write_text(KERNEL.replace('#include <cmath>', '#include <cmath>\n#include "local.cuh"'))
    part = compile_check._part(src, 7)
    before, _, inside = part.partition("namespace compile_check_7 {\n")
    assert "#include <cmath>" in before and '#include "helpers.cuh"' in before
    assert f'#include "{(tmp_path / "local.cuh").resolve()}"' in before  # found beside the file, not on -I
    assert "#define TORCH_EXTENSION_NAME compile_check_7" in before
    body, _, after = inside.partition("}  // namespace compile_check_7\n")
    assert body.startswith(f'#line 1 "{src}"\n') and "#include" not in body
    lines = body.splitlines()[1:]
    assert lines[src.read_text().splitlines().index("#define BLOCK 256")] == "#define BLOCK 256"
    # the file defines BLOCK as it would alone, and whatever BLOCK meant before it means that again after it
    assert '#pragma push_macro("BLOCK")\n#undef BLOCK\n' in before
    assert after == '#pragma pop_macro("BLOCK")\n'


def test_a_macro_a_file_redefines_is_restored_for_the_files_after_it(tmp_path):
    first, second = tmp_path / "a.cu", tmp_path / "b.cu"
    first.write_text("#define CHECK_INPUT(x) mine(x)\nint a;\n")
    second.write_text("int b = CHECK_INPUT(1);\n")
    unit = compile_check._part(first, 0) + compile_check._part(second, 1)
    src = tmp_path / "unit.cpp"
    src.write_text("#define CHECK_INPUT(x) (x)\n" + unit)
    out = subprocess.run(["c++", "-E", "-P", str(src)], capture_output=True, text=True, check=True).stdout
    assert "int b = (1);" in out


def test_a_file_with_an_include_under_if_is_built_alone(tmp_path):
    alone = tmp_path / "alone.cu"
    alone.write_text(KERNEL.replace("#include <cmath>", "#ifdef USE_MATH\n#include <cmath>\n#endif"))
    other = tmp_path / "other.cu"
    other.write_text(KERNEL)
    commented = tmp_path / "commented.cu"
    commented.write_text("/*\n#if 0\n*/\n" + KERNEL)  # a directive in a comment is not one
    defines_first = tmp_path / "defines_first.cu"
    defines_first.write_text("#define _USE_MATH_DEFINES\n" + KERNEL)  # it changes what <cmath> declares
    assert compile_check._part(alone, 0) is None and compile_check._part(defines_first, 0) is None
    assert compile_check.groups([alone, other, defines_first, commented], 1) == [[alone], [defines_first], [other, commented]]


def test_a_file_with_build_flags_of_its_own_is_built_alone_with_them(monkeypatch, tmp_path):
    flagged = tmp_path / "flagged.cu"
    flagged.write_text("// what it is\n// build flags: -U__CUDA_NO_HALF_OPERATORS__ -DTWO=2\n" + KERNEL)
    other = tmp_path / "other.cu"
    other.write_text(KERNEL)
    assert compile_check.file_flags(flagged) == ["-U__CUDA_NO_HALF_OPERATORS__", "-DTWO=2"]
    assert compile_check.file_flags(other) == []
    assert compile_check.groups([flagged, other], 1) == [[flagged], [other]]
    seen = []
    monkeypatch.setattr(compile_check, "load", lambda path, be, **kw: seen.append((path.name, be, kw["extra_cflags"])))
    monkeypatch.setattr(compile_check, "compile_only", lambda path, **kw: seen.append((path.name, "nvcc", kw["extra_cflags"])))
    for backend in ("sim", None):
        assert compile_check._compile((flagged, backend))[3] == ""
    assert seen == [("flagged.cu", "sim", ["-U__CUDA_NO_HALF_OPERATORS__", "-DTWO=2"]),
                    ("flagged.cu", "nvcc", ["-U__CUDA_NO_HALF_OPERATORS__", "-DTWO=2"])]


def test_the_build_cache_step_leaves_out_only_the_files_that_only_toolkit_tests_load():
    every, warmed = compile_check.files(), compile_check.files(warm=True)
    left_out = {p.relative_to(compile_check.ROOT).as_posix() for p in every if p not in warmed}
    library = compile_check.CUDA_LIBRARY.relative_to(compile_check.ROOT).as_posix() + "/"
    assert left_out and all(p.startswith(("tests/sim_compat/", "tests/sim_kernels/ptx_", library)) for p in left_out
                            if p not in ("tests/sim_kernels/host_api.cu", "tests/sim_kernels/clusters.cu"))
    assert library + "vector_add.cu" in left_out  # tests/test_cuda_library.py builds it with the library's Makefile
    assert "tests/sim_compat/cg_reductions.cu" in left_out  # its tests, the race check's among them, are toolkit tests
    assert {"tests/sim_kernels/ptx_ops.cu", "tests/sim_compat/half_types.cu"} <= left_out


def test_files_that_reach_all_of_libtorch_are_grouped_apart_with_several_jobs_and_together_with_one(tmp_path):
    files = []
    for i in range(4):
        f = tmp_path / f"k{i}.cu"
        f.write_text(KERNEL)
        files.append(f)
    heavy = tmp_path / "ext.cu"
    heavy.write_text("#include <torch/extension.h>\n" + KERNEL)
    assert compile_check.groups([*files, heavy], 2) == [[files[0], files[2]], [files[1], files[3]], [heavy]]
    assert compile_check.groups([*files, heavy], 1) == [[*files, heavy]]


def test_a_failing_group_is_split_until_the_failing_file_reports_its_own_error(monkeypatch, tmp_path):
    files = []
    for i in range(5):
        f = tmp_path / f"k{i}.cu"
        f.write_text(KERNEL + ("this does not compile;\n" if i == 3 else ""))
        files.append(f)
    built = []

    def compile_only(path, python_module=None, archs=()):
        assert python_module is False and archs == ()  # a combined file's PYBIND11_MODULEs are named after its parts
        built.append(path)
        if "this does not compile" in Path(path).read_text():
            raise compile_check.BuildError("a combined unit failed")
        return path

    def compile_alone(job):
        path, backend, archs = job
        assert backend is None and archs == ()  # nvcc, as the file is, for the GPUs here
        return path, "nvcc", 0.0, f"{path.name}: error" if path == files[3] else ""

    monkeypatch.setattr(compile_check, "build_root", lambda: tmp_path / "build")
    monkeypatch.setattr(compile_check, "compile_only", compile_only)
    monkeypatch.setattr(compile_check, "_compile", compile_alone)
    group, _, errors = compile_check._check_group((files, 0))
    assert group == files
    assert errors == {files[3]: "k3.cu: error"}
    assert len(built) == 4  # all five, [k0 k1] (passes), [k2 k3 k4], [k3 k4]; then k2, k3, k4 alone


def test_the_combined_unit_is_named_by_its_content_so_an_unchanged_group_hits_the_cache(monkeypatch, tmp_path):
    f = tmp_path / "k.cu"
    f.write_text(KERNEL)
    monkeypatch.setattr(compile_check, "build_root", lambda: tmp_path / "build")
    first = compile_check._combined([f], 0)
    assert compile_check._combined([f], 0) == first
    f.write_text(KERNEL + "// changed\n")
    assert compile_check._combined([f], 0) != first


def junit(path: Path, tests: int, failures: int = 0, errors: int = 0, skipped: int = 0,
          cases: tuple[tuple[str, str, float], ...] = ()) -> None:
    """A JUnit XML report as pytest's --junitxml writes it: one testsuite, a testcase per (classname, name, time)."""
    body = "".join(f'<testcase classname="{c}" name="{n}" time="{t}" />' for c, n, t in cases)
    path.write_text(f'<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="{errors}" '
                    f'failures="{failures}" skipped="{skipped}" tests="{tests}">{body}</testsuite></testsuites>')


def test_the_summary_gives_each_steps_counts_and_the_slowest_items_from_the_reports_the_steps_wrote(monkeypatch, tmp_path):
    monkeypatch.setattr(test_all, "LOGS", tmp_path)
    pytest_step = test_all.Step("pytest", "pytest", [sys.executable, "-m", "pytest"], wall=490, cpu=480, code=0)
    junit(pytest_step.report, 579, skipped=2, cases=(("tests.test_lesson07", "test_planted_bug_is_caught", 41.2),
                                                     ("tests.test_sim", "test_shuffle", 3.1)))
    build_step = test_all.Step("compile-check", "nvcc compile check", [sys.executable, "-m", "kernels.dev.compile_check"],
                               wall=130, cpu=125, code=1)
    compile_check.Outcome(34, 1, builds=[("kernels/reference/01_thread_model.cu, lessons/01_thread_model/scale.cu", 95.0),
                                         ("tests/toolkit/pybind_square.cu", 30.0)]).write(build_step.report)
    not_run = test_all.Step("nbval", "solution notebooks (nbval)", [sys.executable, "-m", "pytest"])
    text = test_all.summary([pytest_step, build_step, not_run], 620)
    lines = text.splitlines()
    assert lines[0].startswith("== summary: 620 s wall, 605 s CPU in all")
    assert any(line.startswith("pytest") and line.endswith("577 passed, 2 skipped") for line in lines)
    assert any(line.startswith("nvcc compile check") and line.endswith("FAILED: 34 passed, 1 failed") for line in lines)
    assert any(line.startswith("solution notebooks (nbval)") and line.endswith("not run") for line in lines)
    slow = lines[lines.index("== slowest items (seconds)") + 1:]
    assert slow[0].split() == ["95.0", "compile-check:", "kernels/reference/01_thread_model.cu,",
                               "lessons/01_thread_model/scale.cu"]
    assert slow[1].split() == ["41.2", "tests/test_lesson07.py::test_planted_bug_is_caught"]
    assert len(slow) == 4


def test_a_compile_check_that_could_not_run_says_why_in_the_summary(monkeypatch, tmp_path):
    monkeypatch.setattr(test_all, "LOGS", tmp_path)
    step = test_all.Step("compile-check", "nvcc compile check", [sys.executable, "-m", "kernels.dev.compile_check"], code=0)
    compile_check.Outcome(skipped="nvcc was not found").write(step.report)
    assert test_all.counts(step) == "skipped: nvcc was not found"


def test_the_steps_write_their_counts_where_the_summary_reads_them():
    by_name = test_all.steps(1)
    assert by_name["pytest"].full_command()[-1] == f"--junitxml={test_all.LOGS / 'pytest.xml'}"
    assert by_name["compile-check"].full_command()[-2:] == ["--results", str(test_all.LOGS / "compile-check.json")]


def test_a_failing_step_fails_the_run_after_every_step_ran(monkeypatch, tmp_path, capsys):
    fake = {
        "fails": test_all.Step("fails", "a failing step", [sys.executable, "-c", "print('1 passed, 1 failed'); raise SystemExit(3)"]),
        "passes": test_all.Step("passes", "a passing step", [sys.executable, "-c", "print('2 passed, 0 failed')"]),
    }
    monkeypatch.setattr(test_all, "steps", lambda jobs: fake)
    monkeypatch.setattr(test_all, "LOGS", tmp_path)
    assert test_all.main(["fails", "passes"]) == 1
    out = capsys.readouterr().out
    assert "== a failing step: FAILED (exit 3)" in out
    assert fake["passes"].code == 0
    assert "a failing step  " in out and "FAILED: no count written" in out  # it wrote no report
    assert (tmp_path / "fails.log").read_text() == "1 passed, 1 failed\n"
    assert fake["fails"].cpu > 0  # measured from the child, not guessed


def test_an_unknown_step_is_refused_with_the_names_it_accepts(capsys):
    assert test_all.main(["pytest", "nbvall"]) == 2
    assert "unknown step nbvall: expected some of build-cache, pytest, toolkit, lesson-tests, compile-check, nbval, nbval-lessons\n" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["nbval", "nbval-lessons"])
def test_the_notebook_steps_run_nbval_on_their_folder(name):
    command = test_all.steps(1)[name].command
    assert command[command.index("--nbval" if name == "nbval" else "--nbval-lax") + 1] == (
        "solutions" if name == "nbval" else "lessons")


def test_the_quick_lesson_step_runs_every_lessons_test_file():
    command = test_all.steps(1)["lesson-tests"].command
    expected = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").glob("test_lesson*.py"))
    assert len(expected) >= 7 and [c for c in command if c.startswith("tests/test_lesson")] == expected
    assert "tests/test_notebooks.py" in command


LANE_TESTS = {
    "test_big.py": "import time\n\n" + "".join(f"def test_{i}():\n    time.sleep(0.2)\n\n\n" for i in range(4)),
    "test_mid.py": "import time\n\n" + "".join(f"def test_{i}():\n    time.sleep(0.2)\n\n\n" for i in range(2)),
    "test_one.py": "def test_only():\n    pass\n",
}


def lane_run(folder: Path, claims: Path) -> subprocess.Popen:
    """A pytest process on `folder` that shares its files through `claims`; -rA lists every test it ran.
    The plugin is imported as a module of its own, not through the package `kernels`, whose import
    brings torch, and nbval's plugin is left out: each costs seconds per process, and the plugin itself
    needs only pytest."""
    return subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:nbval",
                             "-p", "no:benchmark", "-p", "pytest_lanes",
                             "--lanes-dir", str(claims), "-rA", "-q", str(folder)], cwd=folder, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONPATH": str(ROOT / "kernels" / "dev")})


def passed_tests(output: str) -> list[str]:
    return [line.split()[1] for line in output.splitlines() if line.startswith("PASSED ")]


@pytest.fixture
def lane_suite(tmp_path):
    suite, claims = tmp_path / "suite", tmp_path / "claims"
    suite.mkdir()
    claims.mkdir()
    for name, text in LANE_TESTS.items():
        (suite / name).write_text(text)
    return suite, claims


def test_two_pytest_processes_sharing_a_lanes_dir_run_every_test_exactly_once(lane_suite):
    suite, claims = lane_suite
    procs = [lane_run(suite, claims) for _ in range(2)]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    ran = [passed_tests(out) for out in outputs]
    everything = sorted(t for lane in ran for t in lane)
    assert len(everything) == 7 and len(set(everything)) == 7, outputs
    # a file is run whole by one process: its tests never split between the two
    for name in LANE_TESTS:
        assert sum(any(f"{name}::" in t for t in lane) for lane in ran) == 1, outputs


def test_a_process_that_finds_every_file_claimed_runs_nothing_and_passes(lane_suite):
    suite, claims = lane_suite
    first = lane_run(suite, claims).communicate(timeout=600)[0]
    assert len(passed_tests(first)) == 7 and "lanes: 3 files (7 tests) ran in this process" in first
    late = lane_run(suite, claims)
    out = late.communicate(timeout=600)[0]
    assert late.returncode == 0 and passed_tests(out) == [] and "no tests ran" in out, out


def test_a_missing_lanes_dir_is_refused_saying_what_was_expected(lane_suite):
    suite, claims = lane_suite
    proc = lane_run(suite, claims / "missing")
    out = proc.communicate(timeout=600)[0]
    assert proc.returncode != 0 and "expected an existing folder" in out, out


def test_files_are_taken_with_the_most_tests_first():
    from kernels.dev.pytest_lanes import files_in_order

    class Item:
        def __init__(self, path):
            self.path = path

    items = [Item("a.py"), Item("b.py"), Item("b.py"), Item("c.py"), Item("b.py"), Item("c.py")]
    assert [[i.path for i in f] for f in files_in_order(items)] == [["b.py"] * 3, ["c.py"] * 2, ["a.py"]]


def test_make_test_all_opens_one_lane_with_the_builds_and_the_lanes_share_the_tests():
    two = test_all.lanes(2)
    assert [[s.name for s in lane] for lane in two] == [["build-cache", "pytest-1", "nbval-1"], ["pytest-2", "nbval-2"]]
    assert two[0][0].command[-3:] == ["--jobs", "1", "--warm"]
    for first, second in zip(two[0][1:], two[1]):
        assert first.command == second.command  # the same run of the same files, shared through one folder
        assert first.command[-2:] == ["--lanes-dir", str(test_all.CLAIMS / first.name.rsplit("-", 1)[0])]
    pytest_step = two[1][0].command
    assert pytest_step[pytest_step.index("tests") + 1:][:2] == ["-m", "not toolkit"]
    one = test_all.lanes(1)
    assert [[s.name for s in lane] for lane in one] == [["build-cache", "pytest", "nbval"]]


def test_make_test_toolkit_opens_one_lane_with_the_compile_check_and_shares_the_toolkit_tests():
    two = test_all.lanes(2, "toolkit")
    assert [[s.name for s in lane] for lane in two] == [["compile-check", "toolkit-1"], ["toolkit-2"]]
    assert two[0][0].command[-2:] == ["--jobs", "1"]
    toolkit = two[1][0].command
    assert toolkit == two[0][1].command and toolkit[toolkit.index("tests") + 1:][:2] == ["-m", "toolkit"]
    assert [[s.name for s in lane] for lane in test_all.lanes(1, "toolkit")] == [["compile-check", "toolkit"]]


def test_the_two_suites_split_the_tests_each_runs_once():
    """Every test is in exactly one of the suites: `-m toolkit` and `-m "not toolkit"` collect disjoint sets
    whose union is the whole suite, and the toolkit's holds the build cache's and the runner's tests."""
    def collected(*marks):
        run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
                              *marks, "tests"], cwd=ROOT, capture_output=True, text=True)
        assert run.returncode in (0, 5), run.stdout[-2000:] + run.stderr[-2000:]
        return {line for line in run.stdout.splitlines() if "::" in line}

    everything, toolkit, rest = collected(), collected("-m", "toolkit"), collected("-m", "not toolkit")
    assert toolkit and rest and not toolkit & rest and toolkit | rest == everything
    assert any(t.startswith("tests/test_ci.py::") for t in toolkit)
    assert any("test_an_interrupted_build_is_rebuilt_never_loaded" in t for t in toolkit)
    # of a lesson's tests, the toolkit's holds only some planted bugs of a test whose other bugs stay in make
    # test-all (tests/planting.py, toolkit_beyond), and the solutions' self-checks that a solution notebook's
    # compared cell runs in make test-all (CHECKED_IN_NOTEBOOKS, held to its cells in tests/test_notebooks.py)
    in_test_all = {t.split("[")[0] for t in rest}
    stray = [t for t in toolkit if t.startswith("tests/test_lesson")
             and not (("[" in t and t.split("[")[0] in in_test_all) or t in CHECKED_IN_NOTEBOOKS)]
    assert not stray, stray
    assert set(CHECKED_IN_NOTEBOOKS) <= toolkit, set(CHECKED_IN_NOTEBOOKS) - toolkit


@pytest.mark.parametrize("failing", ["test-all", "test-toolkit", "nbval-lessons", None])
def test_ci_runs_every_suite_and_fails_when_any_fails(tmp_path, failing):
    """.ci/run with a stand-in `make` that records its targets and fails the one named: every step runs, and
    the run's status is a failure exactly when a step failed."""
    fake = tmp_path / "bin" / "make"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho "$1" >> "$MAKE_LOG"\n[ "$1" != "$FAIL_TARGET" ]\n')
    fake.chmod(0o755)
    log = tmp_path / "targets"
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}", "MAKE_LOG": str(log),
           "FAIL_TARGET": failing or "none"}
    run = subprocess.run(["bash", str(ROOT / ".ci" / "run")], env=env, capture_output=True, text=True)
    assert log.read_text().split() == ["setup", "test-all", "test-toolkit", "nbval-lessons"], run.stdout
    assert (run.returncode != 0) == (failing is not None), run.stdout
    if failing:
        assert f"== make {failing} FAILED" in run.stdout


def test_the_summary_adds_up_the_lanes_of_a_shared_step(monkeypatch, tmp_path):
    monkeypatch.setattr(test_all, "LOGS", tmp_path)
    py = [sys.executable, "-m", "pytest"]
    parts = [test_all.Step("pytest-1", "pytest, lane 1", py, wall=400, cpu=390, code=0),
             test_all.Step("pytest-2", "pytest, lane 2", py, wall=380, cpu=370, code=0),
             test_all.Step("nbval-1", "solution notebooks (nbval), lane 1", py, wall=3, cpu=2, code=0),
             test_all.Step("nbval-2", "solution notebooks (nbval), lane 2", py, wall=400, cpu=390, code=1)]
    junit(parts[0].report, 403, skipped=3)
    junit(parts[1].report, 424, skipped=10)
    junit(parts[2].report, 0)
    junit(parts[3].report, 221, failures=1)
    lines = test_all.summary(parts, 800).splitlines()
    assert any(line.startswith("pytest, all lanes") and line.endswith(" 760s  814 passed, 13 skipped")
               for line in lines), lines
    assert any(line.startswith("solution notebooks (nbval), lane 1") and line.endswith("no tests ran") for line in lines)
    assert any(line.startswith("solution notebooks (nbval), all lanes") and line.endswith("FAILED: 220 passed, 1 failed")
               for line in lines), lines


def test_each_lane_gets_its_share_of_the_cores_for_torchs_threads_unless_the_caller_chose(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert test_all.lane_env(2, 2) == {"OMP_NUM_THREADS": "1"}
    assert test_all.lane_env(16, 2) == {"OMP_NUM_THREADS": "8"}
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert test_all.lane_env(2, 2) == {}


def test_a_step_runs_with_the_environment_it_is_given(monkeypatch, tmp_path):
    monkeypatch.setattr(test_all, "LOGS", tmp_path)
    step = test_all.Step("env", "prints a variable", [sys.executable, "-c", "import os; print(os.environ['OMP_NUM_THREADS'])"])
    test_all.run_step(step, prefix=False, env={"OMP_NUM_THREADS": "1"})
    assert step.code == 0 and step.lines == ["1"]


def test_the_whole_run_starts_each_shared_step_on_an_empty_folder_of_claims_and_runs_every_lane(monkeypatch, tmp_path, capsys):
    claims = tmp_path / "claims"
    (claims / "pytest").mkdir(parents=True)
    (claims / "pytest" / "tests_test_x.py").write_text("")  # a claim left by an earlier run
    seen = tmp_path / "seen"

    def step(name):
        code = f"import os; open({str(seen)!r}, 'a').write('{name} ' + ','.join(sorted(os.listdir({str(claims)!r}))) + '\\n')"
        return test_all.Step(name, name, [sys.executable, "-c", code])

    monkeypatch.setattr(test_all, "LOGS", tmp_path / "logs")
    monkeypatch.setattr(test_all, "CLAIMS", claims)
    monkeypatch.setattr(test_all, "lanes", lambda cores, suite="all": [[step("a1"), step("a2")], [step("b1")]])
    monkeypatch.setattr(test_all.os, "cpu_count", lambda: 2)
    assert test_all.main([]) == 0
    assert sorted(seen.read_text().splitlines()) == [f"{n} nbval,pytest" for n in ("a1", "a2", "b1")]
    assert not any((claims / "pytest").iterdir())
    assert "== summary:" in capsys.readouterr().out


NVCC_PATH_SCRIPT = """
import sys
from pathlib import Path
from kernels.build import compile_only
from kernels.dev import compile_check
src = Path(sys.argv[1])
compile_check.groups([src], 1)          # the compile check's scans of a file
compile_check._part(src, 0)
so = compile_only(src)                  # a cuda build, as `load(src, "cuda")` makes it, with nvcc
print("built", so.name)
print("sim modules:", sorted(m for m in sys.modules if m == "kernels.sim" or m.startswith("kernels.sim.")))
"""


@pytest.mark.slow
def test_the_nvcc_path_imports_nothing_of_the_simulator(tmp_path):
    """The compile check and a cuda build (nvcc through cpp_extension) load no kernels.sim module."""
    reason = compile_check.why_not()
    if reason:
        pytest.skip(f"no nvcc build here: {reason}")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KERNELS_BUILD_DIR": str(ROOT / "build" / "ext")}
    run = subprocess.run([sys.executable, "-c", NVCC_PATH_SCRIPT, str(ROOT / "tests" / "toolkit" / "vector_add.cu")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert "built vector_add_cuda_" in run.stdout
    assert "sim modules: []" in run.stdout, run.stdout


# ---------------------------------------------------------------------------------------------
# make setup's choice of torch (kernels/dev/torch_choice.py)

def _torch_choice():
    import importlib.util

    spec = importlib.util.spec_from_file_location("torch_choice", ROOT / "kernels" / "dev" / "torch_choice.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("asked, has_torch, system, machine, driver, nvcc, expected", [
    ("", False, "Linux", "x86_64", "", "", "cpu"),  # a laptop without an NVIDIA GPU: the small install
    ("", False, "Linux", "x86_64", "/proc/driver/nvidia/version", "", "cuda"),
    ("", False, "Linux", "x86_64", "", "/usr/local/cuda/bin/nvcc", "cuda"),  # the compile check needs it
    ("", False, "Darwin", "arm64", "", "", "cuda"),  # macOS's default torch is small already
    ("", True, "Linux", "x86_64", "", "", "keep"),  # Colab, a GPU machine: the torch there stays
    ("cpu", False, "Linux", "x86_64", "/proc/driver/nvidia/version", "", "cpu"),
    ("cuda", False, "Linux", "x86_64", "", "", "cuda"),
    ("cuda", True, "Linux", "x86_64", "/proc/driver/nvidia/version", "", "keep"),  # pip would keep it: say so
])
def test_setup_chooses_the_small_torch_where_nothing_could_use_cuda(asked, has_torch, system, machine, driver, nvcc,
                                                                   expected):
    choice, why = _torch_choice().choose(asked, has_torch, system, machine, driver, nvcc)
    assert choice == expected and why


def test_setup_runs_the_chosen_install_and_says_which_and_why(tmp_path):
    """The Makefile's set-up recipe with a stand-in venv whose python logs what it is asked to run."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    log = tmp_path / "calls"
    fake = venv / "bin" / "python"
    fake.write_text(f"""#!/usr/bin/env bash
echo "$*" >> {log}
case "$1" in
  kernels/dev/torch_choice.py) exec {sys.executable} -S "$@" ;;
  -c) echo "torch 0.0 (CPU only)" ;;
  *) echo "Successfully installed x" ;;
esac
""")
    fake.chmod(0o755)
    for torch_arg, cpu_install in (("TORCH=cpu", True), ("TORCH=cuda", False)):
        log.write_text("")
        (venv / ".installed").unlink(missing_ok=True)
        r = subprocess.run(["make", "-s", f"VENV={venv}", str(venv / ".installed"), torch_arg, "SPACE_CHECK=0",
                            "TORCH_CPU_INDEX=https://example.invalid/cpu"], cwd=ROOT, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        calls = log.read_text()
        assert ("-m pip install torch --index-url https://example.invalid/cpu" in calls) == cpu_install
        assert "-m pip install -e ." in calls
        said = "the CPU-only build" if cpu_install else "the CUDA build, PyPI's default"
        assert f"torch: {said}" in r.stdout and f"({torch_arg} asked for it" in r.stdout
    r = subprocess.run(["make", "-s", f"VENV={venv}", "setup", "TORCH=gpu"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode != 0 and "expected TORCH=cpu" in r.stderr


def test_setup_stops_before_the_download_when_the_disk_is_too_small(tmp_path, monkeypatch, capsys):
    """A full disk is said before pip downloads gigabytes and fails with "No space left on device"."""
    choice = _torch_choice()
    gb = 2**30
    venv, cache, temp = tmp_path / "new" / ".venv", tmp_path / "cache", tmp_path / "tmp"
    one_disk = lambda p: 1  # noqa: E731
    # on one disk the CUDA build needs its packages and two copies of its wheels (the download, the cache's)
    assert choice.space_problem("cuda", venv, cache, temp, free=lambda p: 20 * gb, disk=one_disk) == ""
    short = choice.space_problem("cuda", venv, cache, temp, free=lambda p: 10 * gb, disk=one_disk)
    assert "10.0 GB free" in short and "13.2 GB" in short and "TORCH=cpu" in short and str(tmp_path) in short
    assert "the venv, the temporary folder, pip's cache" in short
    assert choice.space_problem("cuda", venv, None, temp, free=lambda p: 10 * gb, disk=one_disk) == ""  # no cache
    assert choice.space_problem("cpu", venv, cache, temp, free=lambda p: 5 * gb, disk=one_disk) == ""
    assert "2.3 GB" in choice.space_problem("cpu", venv, cache, temp, free=lambda p: 1 * gb, disk=one_disk)
    # each disk holds its share: a small temporary folder on a disk of its own is short by itself
    disk = lambda p: str(p)  # noqa: E731  (each existing folder a disk of its own)
    temp.mkdir()
    cache.mkdir()
    small_temp = lambda p: 2 * gb if p == temp else 50 * gb  # noqa: E731
    short = choice.space_problem("cuda", venv, cache, temp, free=small_temp, disk=disk)
    assert f"{temp} has 2.0 GB free" in short and "3.7 GB" in short and "(the temporary folder)" in short
    # a path that cannot be read leaves the check out rather than stopping set-up with a traceback
    def unreadable(p):
        raise PermissionError(p)
    assert choice.space_problem("cuda", venv, cache, temp, free=lambda p: 1 * gb, disk=unreadable) == ""
    # the route make setup takes: exit 3 and the reason on stderr; SPACE_CHECK=0 goes on
    monkeypatch.setattr(choice.shutil, "disk_usage", lambda p: type("U", (), {"free": 1 * gb})())
    monkeypatch.setattr(choice.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setenv("PIP_CACHE_DIR", str(cache))
    assert choice.main(["cpu", "--venv", str(venv)]) == 3
    assert "not enough disk space" in capsys.readouterr().err
    assert choice.main(["cpu", "--venv"]) == 2 and "--venv needs" in capsys.readouterr().err
    monkeypatch.setenv("SPACE_CHECK", "0")
    assert choice.main(["cpu", "--venv", str(venv)]) == 0
    assert capsys.readouterr().out.startswith("cpu\t")
