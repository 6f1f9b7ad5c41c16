"""A pytest plugin: several pytest processes share one run's files, each file run by exactly one of them.

    python -m pytest -p kernels.dev.pytest_lanes --lanes-dir build/test-all/claims/pytest tests

Every process started with the same arguments and the same --lanes-dir collects the same tests; before
it runs a file's tests (a test module, or a notebook's cells under nbval) it claims the file by creating
a marker in that folder, which succeeds in one process only. So two processes on two cores finish the
suite in about half the time, each taking the next unclaimed file when it is free, and a process that
starts late (its lane had other work first) simply finds fewer files left. Files are taken largest first
(most tests), so the last ones, which decide when the run ends, are small. The folder must be empty
when the run starts (`make test-all` makes a new one); without --lanes-dir the plugin does nothing.
Nothing else is shared: each process has its own fixtures and prints its own results.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--lanes-dir", default=None, metavar="DIR",
                     help="share the run's files with the other pytest processes given the same folder")


def files_in_order(items: list[pytest.Item]) -> list[list[pytest.Item]]:
    """The items grouped by file (in collection order within a file), the files with most items first."""
    by_file: dict[Path, list[pytest.Item]] = {}
    for item in items:
        by_file.setdefault(Path(item.path), []).append(item)
    return sorted(by_file.values(), key=len, reverse=True)  # stable: equal files keep collection order


def claim(folder: Path, root: Path, file: Path) -> bool:
    """Whether this process is the first to claim `file` in `folder` (one marker file per claimed file)."""
    name = re.sub(r"[^\w.-]", "_", os.path.relpath(file, root))
    try:
        os.close(os.open(folder / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    folder = session.config.getoption("lanes_dir")
    if folder is None:
        return None  # pytest's own loop
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        raise session.Interrupted(f"{session.testsfailed} errors during collection")
    if session.config.option.collectonly:
        return True
    folder = Path(folder)
    if not folder.is_dir():
        raise pytest.UsageError(f"--lanes-dir {folder}: expected an existing folder (empty when the run starts)")
    root = Path(session.config.rootpath)
    queue = iter(files_in_order(session.items))

    def next_claimed() -> list[pytest.Item] | None:
        return next((f for f in queue if claim(folder, root, Path(f[0].path))), None)

    ran = []
    current = next_claimed()
    while current:
        ran.append(current)
        following = None
        for i, item in enumerate(current):
            if i + 1 < len(current):
                nextitem = current[i + 1]
            else:  # claimed before the last test ends, so that fixtures both files use are kept
                following = next_claimed()
                nextitem = following[0] if following else None
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
            if session.shouldfail:
                raise session.Failed(session.shouldfail)
            if session.shouldstop:
                raise session.Interrupted(session.shouldstop)
        current = following
    session.config.stash[_RAN] = (len(ran), sum(map(len, ran)))
    return True


_RAN = pytest.StashKey[tuple[int, int]]()


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    if config.getoption("lanes_dir") is None or _RAN not in config.stash:
        return
    files, tests = config.stash[_RAN]
    terminalreporter.write_line(f"lanes: {files} files ({tests} tests) ran in this process, "
                                "the rest in the others sharing --lanes-dir")
