"""The simulator's knobs (kernels/sim/knobs.py): the names and values that Python writes are the ones
cudasim.h reads, an unknown value is refused on both sides with the values it takes, and a block that
sets a knob gives back what it found."""
import os
import re
from pathlib import Path

import pytest
import torch

from kernels import load
from kernels.sim import knobs

ROOT = Path(__file__).resolve().parent.parent
CUDASIM_H = ROOT / "kernels" / "sim" / "include" / "cudasim.h"
RUNTIME_H = CUDASIM_H.with_name("cudasim_runtime.h")  # the device's properties: the capability knob
FEATURES = Path(__file__).parent / "sim_kernels" / "features.cu"


def test_the_python_orders_are_cudasims_kordernames_in_the_same_order():
    m = re.search(r"kOrderNames\[\]\s*=\s*\{([^}]*)\}", CUDASIM_H.read_text())
    assert m, "cudasim.h no longer defines kOrderNames"
    assert tuple(re.findall(r'"(\w+)"', m.group(1))) == knobs.ORDERS


def test_every_knob_python_writes_is_one_cudasim_reads():
    read = set(re.findall(r'std::getenv\("(CUDASIM_\w+)"\)', CUDASIM_H.read_text() + RUNTIME_H.read_text()))
    assert set(knobs.NAMES) == read


@pytest.mark.parametrize("kwargs, message", [
    ({"order": "reversed"}, "CUDASIM_ORDER=reversed is not a thread order; use one of: forward, reverse, random"),
    ({"shuffle_blocks": "yes"}, "CUDASIM_SHUFFLE_BLOCKS=yes is not a switch; use 1 (blocks in random order) or 0"),
    ({"seed": -3}, "CUDASIM_SEED=-3 is not a seed; use a whole number from 0 up"),
    ({"stack_kb": 8}, "CUDASIM_STACK_KB must be a number of KB from 16 to 1048576, got 8"),
    ({"spin_seconds": 0.1}, "CUDASIM_SPIN_SECONDS must be a number of seconds from 0.5 to 86400, got 0.1"),
    ({"capability": "seven"}, "CUDASIM_CAPABILITY=seven is not a compute capability; use one such as 7.5 or 9.0"),
])
def test_an_unknown_value_is_refused_in_python_with_the_values_it_takes(kwargs, message):
    before = dict(os.environ)
    with pytest.raises(ValueError, match=re.escape(message)):
        with knobs.set(**kwargs):
            pass
    assert dict(os.environ) == before


def test_a_block_with_knobs_gives_back_what_it_found(monkeypatch):
    monkeypatch.setenv("CUDASIM_ORDER", "reverse")
    monkeypatch.delenv("CUDASIM_SEED", raising=False)
    with knobs.set(order="random", seed=7, shuffle_blocks=True):
        assert knobs.current()["CUDASIM_ORDER"] == "random" and os.environ["CUDASIM_SEED"] == "7"
        assert os.environ["CUDASIM_SHUFFLE_BLOCKS"] == "1"
    assert os.environ["CUDASIM_ORDER"] == "reverse" and "CUDASIM_SEED" not in os.environ


@pytest.mark.sim_only
def test_the_simulator_refuses_an_unknown_order_at_the_launch_naming_the_orders_it_takes(monkeypatch):
    ext = load(FEATURES, "sim", quiet=True)
    monkeypatch.setenv("CUDASIM_ORDER", "reversed")  # written by hand: the test is of the C++ side
    with pytest.raises(RuntimeError, match=re.escape(
            "CUDASIM_ORDER=reversed is not a thread order; use one of: " + ", ".join(knobs.ORDERS))):
        ext.smem_reverse(torch.randn(256))


@pytest.mark.sim_only
def test_the_simulator_refuses_a_spin_limit_outside_the_range_python_takes(monkeypatch):
    ext = load(FEATURES, "sim", quiet=True)
    low, high = knobs.SPIN_SECONDS_RANGE  # the range is written on both sides: this fails when they drift
    monkeypatch.setenv(knobs.SPIN_SECONDS, "0.1")
    with pytest.raises(RuntimeError, match=re.escape(f"CUDASIM_SPIN_SECONDS must be a number of seconds from {low} "
                                                     f"to {high}, got '0.1'")):
        ext.smem_reverse(torch.randn(256))
    for edge in (low, high):
        monkeypatch.setenv(knobs.SPIN_SECONDS, str(edge))
        ext.smem_reverse(torch.randn(256))  # both ends are taken


@pytest.mark.sim_only
def test_the_simulated_device_reports_the_capability_the_knob_names_and_refuses_one_it_cannot_read(monkeypatch):
    ext = load(FEATURES, "sim", quiet=True)
    assert ext.device_capability() == [9, 0]  # an H100's, unset
    with knobs.set(capability=(7, 5)):
        assert ext.device_capability() == [7, 5]
    monkeypatch.setenv("CUDASIM_CAPABILITY", "7.5x")  # written by hand: the test is of the C++ side
    with pytest.raises(RuntimeError, match=re.escape("CUDASIM_CAPABILITY=7.5x is not a compute capability; use one "
                                                     "such as 7.5 or 9.0")):
        ext.device_capability()
