"""Shared fixtures: the backend under test (the default one: cuda with a GPU, else sim)."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `kernels` is this repository's toolkit, whatever else is installed
    sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def dev():
    from kernels import device

    return device()


@pytest.fixture(scope="session")
def backend():
    from kernels import resolve_backend

    return resolve_backend()


def pytest_collection_modifyitems(config, items):
    """A test marked sim_only (what only the simulator defines: its errors, undefined behaviour on a
    GPU) must never be launched on cuda: refuse the run if one is parametrised onto that backend."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.get_closest_marker("sim_only") and "cuda" in params.values():
            raise pytest.UsageError(f"{item.nodeid} is marked sim_only but is parametrised to run on cuda")
