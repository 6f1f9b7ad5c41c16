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
