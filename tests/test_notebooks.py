"""The notebooks as shipped: lessons without outputs, solutions executed, the two in step.

A lesson notebook and its solution notebook tell the same story; only the exercise cells differ
(the lesson's has `FILL ME IN`). These tests catch an edit made to one and not the other, a lesson
committed with outputs, and outputs that would not compare equal on another machine.
"""
import json
import re
from pathlib import Path

import pytest

from planting import CHECKED_IN_NOTEBOOKS

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted(p.name for p in (ROOT / "lessons").iterdir() if p.is_dir() and p.name[:2].isdigit())
# what a path on one machine looks like: it must not land in a committed notebook
MACHINE_PATH = re.compile(r"(/(home|Users|root|tmp|work)/|site-packages|[A-Z]:\\\\)")
# the Colab link and set-up cell: each names its own notebook, so a lesson's and its solution's differ
COLAB_CELLS = ("colab-link", "colab-setup")  # kernels/dev/colab_cells.py's LINK_ID and SETUP_ID


def cells(folder: str, name: str) -> list[dict]:
    return json.loads((ROOT / folder / name / f"{name}.ipynb").read_text())["cells"]


def text(cell: dict) -> str:
    return "".join(cell["source"])


def outputs_text(cell: dict) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append("".join(out.get("text", "")))
        for kind, value in out.get("data", {}).items():
            if kind.startswith("text/"):
                parts.append("".join(value))
        parts.append("\n".join(out.get("traceback", [])))
    return "\n".join(parts)


def test_every_lesson_has_a_solution_notebook():
    assert LESSONS, "no lessons found"
    for name in LESSONS:
        assert (ROOT / "lessons" / name / f"{name}.ipynb").is_file(), name
        assert (ROOT / "solutions" / name / f"{name}.ipynb").is_file(), name


@pytest.mark.parametrize("name", LESSONS)
def test_lesson_notebook_ships_without_outputs(name):
    for i, cell in enumerate(cells("lessons", name)):
        if cell["cell_type"] == "code":
            assert not cell["outputs"] and cell["execution_count"] is None, f"{name} cell {i} has outputs"


@pytest.mark.parametrize("name", LESSONS)
def test_solution_notebook_is_executed_without_errors(name):
    for i, cell in enumerate(cells("solutions", name)):
        if cell["cell_type"] == "code":
            assert cell["execution_count"] is not None, f"{name} cell {i} was not executed"
            assert all(out["output_type"] != "error" for out in cell["outputs"]), f"{name} cell {i} failed"


BUILD_LINE = re.compile(r"^ *(- )?building \S+ for (sim|cuda) \.\.\.", re.M)  # the loader's line for a fresh build


@pytest.mark.parametrize("name", LESSONS)
def test_solution_outputs_hold_no_build_line_of_a_cold_cache(name):
    # make test-all builds every kernel before nbval, so its runs print no build line: a committed output that holds
    # one (the notebook refreshed while a kernel was being built) fails there (nbval-ignore-output cells excepted)
    for i, cell in enumerate(cells("solutions", name)):
        if cell["cell_type"] == "code" and "nbval-ignore-output" not in cell.get("metadata", {}).get("tags", []):
            assert not BUILD_LINE.search(outputs_text(cell)), f"{name} cell {i}: {BUILD_LINE.search(outputs_text(cell))[0]}"


@pytest.mark.parametrize("name", LESSONS)
def test_lesson_and_solution_differ_only_in_the_exercise_cells(name):
    lesson, solution = cells("lessons", name), cells("solutions", name)
    assert len(lesson) == len(solution), f"{name}: {len(lesson)} cells in the lesson, {len(solution)} in the solution"
    for i, (a, b) in enumerate(zip(lesson, solution)):
        assert a["cell_type"] == b["cell_type"], f"{name} cell {i}"
        if a.get("id") in COLAB_CELLS and a.get("id") == b.get("id"):
            continue  # each names its own notebook: test_every_notebook_opens_in_colab_... checks them
        if text(a) != text(b):
            assert a["cell_type"] == "code" and "FILL ME IN" in text(a), (
                f"{name} cell {i} differs between lessons/ and solutions/ and is not an exercise cell")
            assert "FILL ME IN" not in text(b), f"{name} cell {i}: the solution still says FILL ME IN"
        assert a["metadata"].get("tags", []) == b["metadata"].get("tags", []), f"{name} cell {i}: tags differ"


@pytest.mark.parametrize("folder", ["lessons", "solutions"])
@pytest.mark.parametrize("name", LESSONS)
def test_no_machine_paths_in_notebooks(folder, name):
    for i, cell in enumerate(cells(folder, name)):
        found = MACHINE_PATH.search(text(cell) + "\n" + outputs_text(cell))
        assert not found, f"{folder}/{name} cell {i} mentions a machine path: {found.group(0)!r}"


HINT_CELL = re.compile(r'# hint\("(\d\d)", "(\w+)", (\d+)\)   # remove the "# " and run this cell for hint (\d+) of (\d+)')


@pytest.mark.parametrize("folder", ["lessons", "solutions"])
@pytest.mark.parametrize("name", LESSONS)
def test_notebook_metadata_names_its_language(folder, name):
    # without language_info JupyterLab fills it in on opening, and the notebook shows as modified
    meta = json.loads((ROOT / folder / name / f"{name}.ipynb").read_text())["metadata"]
    assert meta.get("language_info", {}).get("name") == "python", f"{folder}/{name} has no language_info"


@pytest.mark.parametrize("name", LESSONS)
def test_hints_appear_only_when_asked_one_cell_per_hint(name):
    from kernels.exercises import all_exercises

    lesson = name[:2]
    code = [text(c) for c in cells("lessons", name) if c["cell_type"] == "code"]
    called = [line for src in code for line in src.splitlines() if re.match(r"\s*hint\(", line)]
    assert not called, f"{name}: Run All would print a hint: {called[0]!r}"
    offered = [HINT_CELL.fullmatch(src.strip()).groups() for src in code if HINT_CELL.fullmatch(src.strip())]
    expected = [(lesson, ex.name, str(k), str(k), str(len(ex.hints)))
                for ex in all_exercises().get(lesson, []) for k in range(1, len(ex.hints) + 1)]
    assert offered == expected, f"{name}: hint cells {offered}, expected one per hint: {expected}"


@pytest.mark.parametrize("name", LESSONS)
def test_a_lesson_with_a_gpu_benchmark_shows_its_recorded_figures_on_the_simulator(name):
    from kernels.benchmarks import lessons as benchmarked

    shown = [c for c in cells("lessons", name) if c["cell_type"] == "code" and "show_recorded(" in text(c)]
    if name[:2] not in benchmarked():
        assert not shown, f"{name} shows recorded figures but has no benchmark in kernels/benchmarks/"
        return
    assert any(f'show_recorded("{name[:2]}")' in text(c) for c in shown), f"{name}: no show_recorded cell"
    for c in shown:  # figures differ with each recording, so nbval must not compare them
        assert "nbval-ignore-output" in c["metadata"].get("tags", []) or "NBVAL_IGNORE_OUTPUT" in text(c)
        assert "cuda" in text(c), "the recorded figures are for the simulator: a GPU shows its own"


@pytest.mark.parametrize("folder", ["lessons", "solutions"])
@pytest.mark.parametrize("name", LESSONS)
def test_every_notebook_opens_in_colab_and_sets_itself_up_there_first(folder, name):
    from kernels import colab
    from kernels.dev.colab_cells import LINK_ID, SETUP_ID

    assert (LINK_ID, SETUP_ID) == COLAB_CELLS
    notebook = f"{folder}/{name}/{name}.ipynb"
    nb = cells(folder, name)
    assert nb[0]["cell_type"] == "markdown" and nb[0]["id"] == LINK_ID, f"{notebook}: no Colab link at the top"
    assert text(nb[0]) == colab.link_cell(notebook), f"{notebook}: run python -m kernels.dev.colab_cells"
    assert f"github/{colab.REPOSITORY}/blob/{colab.REF}/{notebook})" in text(nb[0])
    first = next(c for c in nb if c["cell_type"] == "code")
    assert first["id"] == SETUP_ID and text(first) == colab.first_cell(notebook), (
        f"{notebook}: its first code cell is not the Colab set-up; run python -m kernels.dev.colab_cells")
    assert f'"--branch={colab.REF}"' in text(first) and f'"https://github.com/{colab.REPOSITORY}"' in text(first)
    assert f'setup("{folder}/{name}")' in text(first)
    assert first["outputs"] == [] and not first["metadata"].get("tags"), "outside Colab the cell prints nothing"


def test_the_colab_cells_of_every_notebook_and_the_readmes_link_are_written_from_kernels_colab():
    from kernels import colab
    from kernels.dev import colab_cells

    files = [*colab_cells.notebooks(), colab_cells.README]
    stale = [p.relative_to(ROOT).as_posix() for p in files if len(set(colab_cells.render(p))) > 1]
    assert len(files) == 2 * len(LESSONS) + 1 and not stale, f"run python -m kernels.dev.colab_cells: {stale}"
    assert colab.link("lessons/01_thread_model/01_thread_model.ipynb") in (ROOT / "README.md").read_text()


@pytest.mark.parametrize("test", sorted(CHECKED_IN_NOTEBOOKS))
def test_a_self_check_left_to_make_test_all_s_notebooks_is_run_and_compared_there(test):
    """A solution's self-check or a reference variant's check that make test-all runs only through its solution
    notebook (tests/planting.py): the cell exists, calls the same check, is not left out of nbval's comparison, its
    recorded output is the check's passing report (a variant's: its line with every case passed), and make
    test-all's nbval step runs the solution notebooks with outputs compared."""
    from nbval.plugin import find_comment_markers, find_metadata_tags

    from kernels.dev import all_tests

    notebook, cell_id, call, *variant_line = CHECKED_IN_NOTEBOOKS[test]
    folder, name = Path(notebook).parts[:2]
    assert folder == "solutions" and name.startswith(test.split("test_lesson")[1][:2] + "_"), (test, notebook)
    by_id = {c.get("id"): c for c in cells(folder, name)}
    assert cell_id in by_id, f"{notebook} has no cell {cell_id} (its ids: {sorted(k for k in by_id if k)})"
    cell = by_id[cell_id]
    assert call in text(cell), text(cell)
    markers = [*find_comment_markers(text(cell)), *find_metadata_tags(cell.get("metadata", {}))]
    assert ("check", False) not in markers and ("skip", True) not in markers, markers  # compared, not skipped
    printed = outputs_text(cell)
    assert "FAIL" not in printed, printed
    if variant_line:  # one line per variant, "name: N/N cases passed": this test's variant, every case passed
        assert re.search(rf"^{variant_line[0]}$", printed, re.MULTILINE), (variant_line[0], printed)
    else:
        assert "PASS" in printed, printed
    nbval = all_tests.steps(jobs=1)["nbval"].command
    assert "nbval" in all_tests.SUITES["all"][1] and "solutions" in nbval
    assert "--nbval" in nbval and "--nbval-lax" not in nbval and not any("sanitize" in a for a in nbval), nbval
