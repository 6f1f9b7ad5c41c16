"""Thread-block clusters on the simulator: a cluster's blocks run together, with distributed shared memory,
barrier.cluster, mapa, arrivals on another block's mbarrier and TMA multicast (tests/sim_kernels/clusters.cu);
each kernel against PyTorch on every backend (the H100 with TORCH_CUDA_ARCH_LIST=9.0a), mistakes reported with
the line."""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
import torch

from kernels import barrier_trace, load
from kernels.sim import knobs
from kernels.sim.translate import translate_source
from planting import plant

# The simulator's reach beyond the lessons: `make test-toolkit` (kernels/dev/all_tests.py).
pytestmark = pytest.mark.toolkit

HERE = Path(__file__).parent / "sim_kernels"
CLUSTERS = HERE / "clusters.cu"
BACKENDS = ["sim"] + (["cuda"] if torch.cuda.is_available() else [])
sim_only = pytest.mark.sim_only


def _load(backend: str, path: Path = CLUSTERS):
    if backend == "sim":
        return load(path, "sim")
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("thread-block clusters need compute capability 9.0")
    before = os.environ.get("TORCH_CUDA_ARCH_LIST")
    os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0a"
    try:
        return load(path, "cuda")
    finally:
        if before is None:
            del os.environ["TORCH_CUDA_ARCH_LIST"]
        else:
            os.environ["TORCH_CUDA_ARCH_LIST"] = before


@pytest.fixture(scope="module", params=BACKENDS)
def clusters(request):
    return request.param, _load(request.param)


def _dev(backend: str) -> torch.device:
    return torch.device("cuda" if backend == "cuda" else "cpu")


def _rotated(x: torch.Tensor) -> torch.Tensor:
    blocks = x.view(-1, 4, 256)
    return (2 * torch.roll(blocks, -1, dims=1) + torch.arange(4, device=x.device).view(1, 4, 1)).reshape(-1)


def test_blocks_of_a_cluster_read_each_others_shared_memory(clusters):
    backend, ext = clusters
    x = torch.randn(3 * 1024, device=_dev(backend))
    assert torch.equal(ext.rotate(x), _rotated(x))


@pytest.mark.parametrize("cluster", [1, 2, 4, 8])
def test_a_histogram_spread_over_the_shared_memory_of_a_cluster(clusters, cluster):
    backend, ext = clusters
    x = torch.randint(0, 512, (20000,), dtype=torch.int32, device=_dev(backend))
    assert torch.equal(ext.histogram(x, 512, cluster), torch.bincount(x, minlength=512).int())


def test_the_cluster_special_registers(clusters):
    backend, ext = clusters
    got = ext.ids(6, 4).cpu()
    want = torch.empty(4, 6, 9, dtype=torch.int32)
    for by in range(4):
        for bx in range(6):
            cx, cy = bx % 2, by % 2
            want[by, bx] = torch.tensor([cx + 2 * cy, 4, bx // 2, by // 2, cx, cy, 2, 3, 1])
    assert torch.equal(got, want)


def test_a_value_stored_into_the_other_block_and_an_arrival_on_its_mbarrier(clusters):
    backend, ext = clusters
    x = torch.randn(10, device=_dev(backend))
    assert torch.equal(ext.swap(x), x.view(-1, 2).flip(1).reshape(-1))


def test_a_tma_load_multicast_reaches_every_block_of_the_cluster(clusters):
    backend, ext = clusters
    x = torch.randn(3 * 64, 64, device=_dev(backend))
    assert torch.equal(ext.multicast(x), x.view(3, 1, 64, 64).expand(3, 2, 64, 64))


@pytest.mark.parametrize("grid, cluster, error", [(8, 8, "cudaSuccess"), (6, 4, "cudaErrorInvalidClusterSize"),
                                                  (16, 16, "cudaErrorInvalidClusterSize")],
                         ids=["portable_8", "grid_not_a_multiple", "16_without_the_opt_in"])
def test_cluster_shapes_cuda_refuses_give_its_error(clusters, grid, cluster, error):
    backend, ext = clusters
    assert ext.bad_cluster(grid, cluster) == error


@pytest.mark.parametrize("cluster, opt_in", [(8, False), (9, False), (16, False), (16, True)],
                         ids=["portable_8", "9_without_the_opt_in", "16_without_the_opt_in", "16_with_the_opt_in"])
def test_the_occupancy_of_a_cluster_shape_is_refused_as_its_launch_is(clusters, cluster, opt_in):
    backend, ext = clusters
    got = ext.occupancy(cluster, opt_in)
    if cluster > 8 and not opt_in:
        assert got == "cudaErrorInvalidClusterSize"
    else:  # the simulator: 132 SMs, one block each (a GPU's GPCs may fit fewer)
        assert got.isdigit() and (backend != "sim" or int(got) == 132 // cluster), got


@sim_only
@pytest.mark.parametrize("lead", [None, "none", "last"], ids=["lead_by_order", "together", "last_ahead"])
def test_cluster_kernels_survive_every_thread_and_block_order(monkeypatch, lead):
    # lead: which block of each cluster runs ahead of the others; unset (None) forward order runs the first ahead,
    # reverse the last, random a drawn one
    ext = load(CLUSTERS, "sim")
    x = torch.randn(2048)
    v = torch.randint(0, 256, (5000,), dtype=torch.int32)
    m = torch.randn(128, 64)
    s = torch.randn(6)
    monkeypatch.delenv(knobs.CLUSTER_LEAD, raising=False)
    for order in ("forward", "reverse", "random"):
        with knobs.set(order=order, shuffle_blocks=order != "forward", cluster_lead=lead):
            assert torch.equal(ext.rotate(x), _rotated(x))
            assert torch.equal(ext.histogram(v, 256, 4), torch.bincount(v, minlength=256).int())
            assert torch.equal(ext.multicast(m), m.view(2, 1, 64, 64).expand(2, 2, 64, 64))
            assert torch.equal(ext.swap(s), s.view(-1, 2).flip(1).reshape(-1))


def _line(marker: str) -> int:
    for i, text in enumerate(CLUSTERS.read_text().splitlines(), 1):
        if marker in text:
            return i
    raise AssertionError(marker)


MISUSE = {
    1: ("MISUSE-DEADLOCK", r"deadlock: barrier\.cluster at clusters\.cu:{line} waits for every thread of the cluster "
                           r"to arrive, and 31 of block rank 1 never will"),
    2: ("MISUSE-RANK", r"map_shared_rank at clusters\.cu:{line}: rank 2, but the cluster has 2 block"),
    3: ("MISUSE-WAIT", r"barrier\.cluster at clusters\.cu:{line}: barrier\.cluster\.wait without a "
                       r"barrier\.cluster\.arrive"),
    4: ("MISUSE-MAPA", r"mapa\.shared::cluster\.u32 at clusters\.cu:\d+ \(called from clusters\.cu:{line}\): mapa to "
                       r"the block of rank 5, but the cluster has 2"),
    5: ("MISUSE-GONE", r"ld\.shared::cluster\.f32 at clusters\.cu:{line}: .* block of rank 1, whose threads have all "
                       r"exited"),
    6: ("MISUSE-TWICE", r"barrier\.cluster at clusters\.cu:{line}: this thread arrives a second time"),
    7: ("MISUSE-ARRIVE-GONE", r"mbarrier\.arrive\S* at clusters\.cu:{line}: .* block of rank 0, whose threads have "
                              r"all exited"),
    8: ("MISUSE-CTA-SPACE", r"ld\.shared::cta\.f32 at clusters\.cu:{line}: .* block of rank \d \(an address from mapa\), "
                            r"where this instruction's \.shared::cta space reaches only"),
    9: ("", r"shared memory byte 0x1\w+ of the cluster's block of rank 1 was written after all of that block's threads "
            r"had exited.*block \(1,0,0\)"),
}


@sim_only
@pytest.mark.parametrize("what", list(MISUSE), ids=["deadlock", "map_rank", "wait_without_arrive", "mapa_rank",
                                                    "read_after_exit", "arrive_twice", "arrive_after_rank_0_exit",
                                                    "cta_space_of_another_block", "write_after_exit"])
def test_misuse_of_a_cluster_is_an_error_naming_the_line(what):
    ext = load(CLUSTERS, "sim")
    marker, pattern = MISUSE[what]
    with pytest.raises(RuntimeError, match=pattern.format(line=_line(marker) if marker else 0)):
        ext.misuse(torch.randn(64), what)


@sim_only
@pytest.mark.parametrize("lead", ["first", "last", "none"])
def test_a_warp_operation_settles_while_another_block_waits_at_the_cluster_barrier(lead):
    # rank 0 polls at cluster.sync() from the start (or runs ahead to it), so the run queue never empties; rank 1's
    # __activemask() must still be settled (all 32 lanes are there)
    with knobs.set(cluster_lead=lead):
        x = load(CLUSTERS, "sim").misuse(torch.zeros(64), 10)
    assert torch.equal(x[32:], torch.full((32,), 32.0))


# A block of a cluster may start later than the others and finish earlier: cluster.sync() is what makes sure every
# block has started (and initialised its barriers and shared memory) before another reaches its memory, and that none
# has exited while another still does. The simulator runs one block of each cluster ahead of the others (the knob
# CUDASIM_CLUSTER_LEAD; unset, forward order runs the first ahead, reverse the last): each of these kernels leaves out
# one such cluster barrier, and is an error naming it with either block ahead. {ahead}: the block run ahead,
# {other}: the other.
SKEWED = {
    11: ("MISUSE-EARLY-ARRIVE", r"mbarrier\.arrive\S* at clusters\.cu:{line}: the mbarrier address 0x\w+ is in the shared "
                                r"memory of the cluster's block of rank {other}, which has not started yet \(the block "
                                r"of rank {ahead} ran ahead of the others\): .* must synchronise"),
    12: ("", r"shared memory byte 0x\w+ of the cluster's block of rank {other} was written before that block started "
             r"\(the block of rank {ahead} ran ahead of the others\).*block \({other},0,0\)"),
    13: ("MISUSE-HANDBACK-GONE", r"mbarrier\.arrive\S* at clusters\.cu:{line}: the mbarrier address 0x\w+ is in the "
                                 r"shared memory of the cluster's block of rank {ahead}, whose threads have all exited"
                                 r".*block \({other},0,0\)"),
}


@sim_only
@pytest.mark.parametrize("lead", ["first", "last"])
@pytest.mark.parametrize("what", list(SKEWED), ids=["arrive_before_the_other_started", "store_before_the_other_started",
                                                    "arrive_after_the_other_exited"])
def test_a_missing_cluster_barrier_is_an_error_when_one_block_runs_ahead(what, lead):
    ext = load(CLUSTERS, "sim")
    marker, pattern = SKEWED[what]
    ahead = 0 if lead == "first" else 1
    with knobs.set(cluster_lead=lead), pytest.raises(RuntimeError, match=pattern.format(
            line=_line(marker) if marker else 0, ahead=ahead, other=1 - ahead)):
        ext.misuse(torch.randn(64), what)
    # with the blocks started together and taking turns (the only schedule before CUDASIM_CLUSTER_LEAD) the same
    # kernel runs to its end: these mistakes went unseen
    with knobs.set(cluster_lead="none"):
        ext.misuse(torch.randn(64), what)


@sim_only
@pytest.mark.parametrize("order, ahead", [("forward", 0), ("reverse", 1), ("random", None)])
def test_the_thread_order_says_which_block_runs_ahead(monkeypatch, order, ahead):
    # what the checker runs (its orders, without the knob set): forward and reverse put each block ahead once
    monkeypatch.delenv(knobs.CLUSTER_LEAD, raising=False)
    ext = load(CLUSTERS, "sim")
    with knobs.set(order=order), pytest.raises(RuntimeError, match=r"which has not started yet \(the block of rank "
                                                                   rf"{ahead if ahead is not None else '[01]'} ran"):
        ext.misuse(torch.randn(64), 11)


def test_the_cluster_lead_knob_is_refused_with_the_values_it_takes_on_both_sides(monkeypatch):
    with pytest.raises(ValueError, match=re.escape("CUDASIM_CLUSTER_LEAD=second is not a cluster lead; use one of: "
                                                   "none, first, last, random")):
        with knobs.set(cluster_lead="second"):
            pass
    m = re.search(r"kLeadNames\[\]\s*=\s*\{([^}]*)\}", (Path(knobs.__file__).parent / "include" / "cudasim.h").read_text())
    assert m and tuple(re.findall(r'"(\w+)"', m.group(1))) == knobs.CLUSTER_LEADS
    if "sim" in BACKENDS:
        monkeypatch.setenv(knobs.CLUSTER_LEAD, "second")  # written by hand: the C++ side refuses it at the launch
        with pytest.raises(RuntimeError, match=re.escape("CUDASIM_CLUSTER_LEAD=second is not a cluster lead; use one "
                                                         "of: none, first, last, random")):
            load(CLUSTERS, "sim").swap(torch.randn(2))


# Planted bugs: a cluster kernel that skips a cluster.sync() computes with memory that is not there (yet, or any
# more): the simulator's poison (NaN) makes the answer wrong.
FIRST_SYNC = "  cluster.sync();  // every block's values are in\n"
LAST_SYNC = "  cluster.sync();  // no block leaves while another still reads its memory\n"


@sim_only
@pytest.mark.parametrize("line", [FIRST_SYNC, LAST_SYNC], ids=["read_before_written", "read_after_exit"])
def test_a_missing_cluster_sync_gives_a_wrong_answer(monkeypatch, line):
    name = "clusters_no_first_sync.cu" if line == FIRST_SYNC else "clusters_no_last_sync.cu"
    path = plant(CLUSTERS, line, "", name)
    shutil.copyfile(HERE / "ptx_common.cuh", path.parent / "ptx_common.cuh")
    ext = load(path, "sim")
    x = torch.randn(1024)
    wrong = []
    for order in ("forward", "reverse"):
        monkeypatch.setenv("CUDASIM_ORDER", order)
        wrong.append(not torch.equal(ext.rotate(x), _rotated(x)))
    assert all(wrong), f"the kernel without that cluster.sync() gave the right answer (forward, reverse: {wrong})"


@sim_only
def test_the_barrier_trace_refuses_a_cluster_launch():
    ext = load(CLUSTERS, "sim")
    with pytest.raises(RuntimeError, match=r"does not record thread-block cluster launches"):
        barrier_trace(ext.swap, torch.randn(2))


def test_cluster_dims_is_registered_by_the_kernel_name_and_the_lines_stay():
    src = ("__global__ void __launch_bounds__(256) __cluster_dims__(2, 1) a(int* p) {}\n"
           "__cluster_dims__(4)\n__global__ void b(int* p) {}\n")
    out = translate_source(src, "t.cu")
    assert "__cluster_dims__" not in out
    assert 'register_cluster_dims("a", 2, 1, 1)' in out and 'register_cluster_dims("b", 4, 1, 1)' in out
    body = out.split('#line 1 "t.cu"\n', 1)[1]
    assert re.search(r"\bb\(int\* p\)", body.splitlines()[2])  # the kernel b is still on line 3
