"""What each lesson declares (kernels/lessons/lessonNN.py) is what its reference file holds, every
variant that `make profile` (the simulator's tables and Nsight Compute) offers runs on the simulator with
the inputs those tools give it, at small sizes, and on a simulated T4 (compute capability 7.5) exactly the
variants the lesson gates (Variant.needs) are refused, in the words the toolkit says."""
import re

import pytest
import torch

from kernels import gates, lessons, load
from kernels.paths import reference_file
from kernels.sim import knobs
from kernels.tools import nsight
from kernels.tools.profile import probes

DECLARING = lessons.with_variants()
# a small size of each lesson's kind, for the variants Nsight Compute runs at GPU_SIZE
SMALL = {"02": 1000, "04": 1000, "05": (7, 33), "06": 4099, "07": (8, 33), "08": (7, 33), "09": 40,
         "12": (1, 2, 40, 64), "13": 72}  # 13: K and N multiples of 8 (TMA's rows), K past one 64-deep step
T4 = (7, 5)  # the smallest GPU the lessons run on: what a variant needs beyond it, it declares (kernels/gates.py)


def defined_ops(lesson: str) -> set[str]:
    return set(re.findall(r'm\.def\("(\w+)\(', reference_file(lesson).read_text()))


def test_the_lessons_that_declare_variants_are_those_make_profile_offered():
    assert DECLARING == ["02", "04", "05", "06", "07", "08", "09", "12", "13"]
    assert lessons.with_probes() == ["04", "06", "09"]
    assert set(SMALL) == set(DECLARING)


@pytest.mark.parametrize("lesson", DECLARING)
def test_every_declared_variant_is_an_op_of_the_lessons_file_and_every_numbered_op_is_declared(lesson):
    declared = [v.name for v in lessons.variants(lesson)]
    defined = defined_ops(lesson)
    assert len(declared) == len(set(declared)) and set(declared) <= defined, set(declared) - defined
    # the file's other ops that the lesson declares with their needs (OP_NEEDS: lesson 13's functional `matmul13`
    # ends in a number too) are declared as well
    others = set(getattr(lessons.module(lesson), "OP_NEEDS", {}))
    numbered = {op for op in defined if re.fullmatch(r"[a-z_]+\d+", op)} - others
    assert numbered <= set(declared), f"lesson {lesson}'s file defines {sorted(numbered - set(declared))}, not declared"


def test_nsight_offers_each_matmul_variant_in_a_dtype_it_takes():
    # the drift this declaration ended: matmul1-11 offered in float32, matmul9/10 refusing it, matmul12 missing
    offered = nsight.workloads("09")
    assert list(offered) == [f"matmul{k}" for k in range(1, 13)]
    for name in ("matmul9", "matmul10", "matmul12"):
        assert offered[name].dtype == torch.bfloat16


def gate_mismatches(lesson: str, ext) -> list[str]:
    """Where a lesson's declaration (Variant.needs) and its reference file's launchers disagree on a simulated T4
    (compute capability 7.5): a variant refused in a dtype that the lesson does not gate, or run in one it does, or
    refused in other words than the line the toolkit says. Each variant runs in every dtype it takes."""
    out = []
    with knobs.set(capability=T4):
        for name, v in nsight.workloads(lesson).items():
            for dtype in v.dtypes or (torch.float32,):
                want = gates.shortfall(name, v.needs, dtype, capability=T4)
                try:
                    getattr(ext, name)(*v.args(SMALL[lesson], dtype, "cpu"))
                    got = None
                except RuntimeError as e:
                    got = str(e)
                if (got is None) != (want is None) or (want and want not in got):
                    out.append(f"{name} in {dtype}: the launcher {'refused: ' + got.splitlines()[0] if got else 'ran'};"
                               f" the lesson declares {want or 'no gate'}")
    return out


@pytest.mark.parametrize("lesson", DECLARING)
def test_every_variant_nsight_profiles_runs_on_the_simulator_and_a_simulated_t4_refuses_just_the_gated_ones(lesson):
    ext = load(reference_file(lesson), "sim", quiet=True)
    assert gate_mismatches(lesson, ext) == []  # on a T4 what is gated is refused, and the rest runs
    for name, v in nsight.workloads(lesson).items():
        for dtype in v.dtypes or (torch.float32,):
            if gates.shortfall(name, v.needs, dtype, capability=T4):
                getattr(ext, name)(*v.args(SMALL[lesson], dtype, "cpu"))  # and on an H100 it runs


@pytest.mark.parametrize("lesson", lessons.with_probes())
def test_every_probe_make_profile_shows_runs_on_the_simulator(lesson):
    shown = probes(lesson)
    assert shown and len({title for title, _ in shown}) == len(shown)
    for _, call in shown:
        call()
