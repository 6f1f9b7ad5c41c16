"""What each lesson declares (kernels/lessons/lessonNN.py) is what its reference file holds, and every
variant that `make profile` (the simulator's tables and Nsight Compute) offers runs on the simulator with
the inputs those tools give it, at small sizes."""
import re

import pytest
import torch

from kernels import lessons, load
from kernels.paths import reference_file
from kernels.tools import nsight
from kernels.tools.profile import probes

DECLARING = lessons.with_variants()
# a small size of each lesson's kind, for the variants Nsight Compute runs at GPU_SIZE
SMALL = {"02": 1000, "04": 1000, "05": (7, 33), "06": 4099, "07": (8, 33), "08": (7, 33), "09": 40}


def defined_ops(lesson: str) -> set[str]:
    return set(re.findall(r'm\.def\("(\w+)\(', reference_file(lesson).read_text()))


def test_the_lessons_that_declare_variants_are_those_make_profile_offered():
    assert DECLARING == ["02", "04", "05", "06", "07", "08", "09"]
    assert lessons.with_probes() == ["04", "06", "09"]
    assert set(SMALL) == set(DECLARING)


@pytest.mark.parametrize("lesson", DECLARING)
def test_every_declared_variant_is_an_op_of_the_lessons_file_and_every_numbered_op_is_declared(lesson):
    declared = [v.name for v in lessons.variants(lesson)]
    defined = defined_ops(lesson)
    assert len(declared) == len(set(declared)) and set(declared) <= defined, set(declared) - defined
    numbered = {op for op in defined if re.fullmatch(r"[a-z_]+\d+", op)}
    assert numbered <= set(declared), f"lesson {lesson}'s file defines {sorted(numbered - set(declared))}, not declared"


def test_nsight_offers_each_matmul_variant_in_a_dtype_it_takes():
    # the drift this declaration ended: matmul1-11 offered in float32, matmul9/10 refusing it, matmul12 missing
    offered = nsight.workloads("09")
    assert list(offered) == [f"matmul{k}" for k in range(1, 13)]
    for name in ("matmul9", "matmul10", "matmul12"):
        assert offered[name].dtype == torch.bfloat16


@pytest.mark.parametrize("lesson", DECLARING)
def test_every_variant_nsight_profiles_runs_on_the_simulator_with_the_inputs_it_gets(lesson):
    ext = load(reference_file(lesson), "sim", quiet=True)
    for name, v in nsight.workloads(lesson).items():
        for dtype in v.dtypes or (torch.float32,):
            args = v.args(SMALL[lesson], dtype, "cpu")
            getattr(ext, name)(*args)  # raises on a refused dtype or shape, or a kernel error


@pytest.mark.parametrize("lesson", lessons.with_probes())
def test_every_probe_make_profile_shows_runs_on_the_simulator(lesson):
    shown = probes(lesson)
    assert shown and len({title for title, _ in shown}) == len(shown)
    for _, call in shown:
        call()
