"""The simulator's race and bounds check (kernels/sim/racecheck.py, include/cudasim_check.h): every race and
out-of-range access of tests/sim_kernels/races.cu is reported with its lines, every correct form (a hand-off
through mbarriers too, in every thread order) and the correct kernels of the other test files pass, the checker
turns the findings into failing cases, and code that nvcc refuses is refused.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
import torch

from kernels import load
from kernels.check import Diagnosis, check, elementwise, rows
from kernels.sim import knobs
from kernels.sim.instrumented import compiler_problem
from kernels.sim.racecheck import checked

HERE = Path(__file__).resolve().parent
KERNELS = HERE / "sim_kernels"
pytestmark = [pytest.mark.sim_only]


@pytest.fixture(scope="module")
def races():
    if compiler_problem():
        pytest.skip(compiler_problem())
    return load(KERNELS / "races.cu", "sim")


def _finding(fn, *args) -> str:
    """The message of what the check reports for fn(*args) (the test fails when it reports nothing)."""
    with pytest.raises(RuntimeError) as info:
        checked(fn, *args)
    return str(info.value)


def _line(text: str) -> int:
    """The line of races.cu whose text contains `text` (so the tests follow the file)."""
    lines = (KERNELS / "races.cu").read_text().splitlines()
    found = [i + 1 for i, line in enumerate(lines) if text in line]
    assert len(found) == 1, f"{text!r} is on lines {found} of races.cu, expected one"
    return found[0]


def test_warps_adding_into_one_global_sum_without_atomics_is_a_race_naming_both_threads(races):
    x = torch.randn(300, 100)
    msg = _finding(races.column_sums, x, True)
    at = f"races.cu:{_line('sums[c] += s;')}"
    assert msg.startswith("cudasim: data race on global memory: thread (32,0,0) of block (0,0,0) read")
    assert f"at {at}, which thread (0,0,0) of block (0,0,0) wrote at {at}" in msg
    assert "no __syncthreads() comes between them" in msg and "atomicAdd" in msg
    torch.testing.assert_close(checked(races.column_sums, x, False), x.sum(0), rtol=1e-4, atol=1e-4)


def test_blocks_adding_into_one_element_without_an_atomic_is_a_race_between_blocks(races):
    x = torch.randn(1000)
    msg = _finding(races.block_total, x, True)
    assert "data race on global memory: thread (0,0,0) of block (1,0,0) read" in msg
    assert "thread (0,0,0) of block (0,0,0) wrote" in msg and "they are in different blocks" in msg
    torch.testing.assert_close(checked(races.block_total, x, False), x.sum().reshape(1), rtol=1e-4, atol=1e-3)


def test_a_wmma_loop_without_its_trailing_barrier_is_a_race_on_shared_memory(races):
    a, b = torch.randn(64, 64).half(), torch.randn(64, 64).half()
    msg = _finding(races.wmma_tiles, a, b, True)
    assert "data race on shared memory" in msg and "of the __shared__ `as`" in msg
    assert f"races.cu:{_line('wmma::load_matrix_sync(fa, as')}" in msg  # the warp's read of the tile
    torch.testing.assert_close(checked(races.wmma_tiles, a, b, False), a.float() @ b.float(), rtol=1e-3, atol=1e-3)


def test_a_missing_barrier_and_a_missing_syncwarp_are_races_on_shared_memory(races):
    x = torch.randn(1000)
    msg = _finding(races.reverse_block, x, True)
    assert "data race on shared memory" in msg and "put __syncthreads() between" in msg
    assert torch.equal(checked(races.reverse_block, x, False)[:256], x[:256].flip(0))
    w = torch.randn(32)
    msg = _finding(races.warp_swap, w, True)
    assert "lanes of one warp with no __syncwarp() between them" in msg
    assert "__syncthreads" not in msg  # a block of one warp: no other warp to wait for
    assert torch.equal(checked(races.warp_swap, w, False), w.flip(0))


def test_a_cluster_barrier_in_a_launch_without_clusters_orders_the_block_as_syncthreads_does(races):
    """Launched without clusters, a block is a cluster of one: its cluster.sync() (barrier.cluster.arrive and .wait)
    waits for every thread of the block, so the writes before it come before the reads after it; left out, the two
    warps' writes and reads of the shared array race."""
    x = torch.randn(64)
    assert torch.equal(checked(races.cluster_reverse, x, False), x.flip(0))
    msg = _finding(races.cluster_reverse, x, True)
    assert msg.startswith("cudasim: data race on shared memory: "), msg
    assert "of the __shared__ `mirror` (256 bytes)" in msg
    assert f"races.cu:{_line('mirror[threadIdx.x] = x[threadIdx.x];')}" in msg
    assert f"races.cu:{_line('out[threadIdx.x] = mirror[63 - threadIdx.x];')}" in msg


def test_threads_setting_a_flag_to_one_value_pass_and_to_different_values_race(races):
    x = torch.randn(1000).abs() + 0.1
    assert checked(races.flag_any, x, False).item() == 1
    msg = _finding(races.flag_any, x, True)
    assert "nothing orders the two writes" in msg and "they wrote different values" in msg


def test_the_samples_last_block_reduction_through_a_fence_and_an_atomic_ticket_is_no_race(races):
    x = torch.randn(5000)
    torch.testing.assert_close(checked(races.last_block, x), x.sum().reshape(1), rtol=1e-4, atol=1e-3)


def test_a_tile_written_past_a_ragged_output_stops_before_the_write_naming_the_distance(races):
    out = torch.empty(70, 70)
    msg = _finding(races.fill_tiles, out, True)
    assert msg.startswith(f"cudasim: out-of-bounds write at races.cu:{_line('if (bug || (r < rows')}")
    assert "past the end of `argument 0 of fill_tiles` (4900 float32)" in msg
    checked(races.fill_tiles, out, False)
    assert torch.equal(out, torch.arange(70 * 70, dtype=torch.float32).view(70, 70))


def test_a_read_past_the_last_row_is_out_of_bounds_naming_the_tensor(races):
    x = torch.randn(70, 33)
    with pytest.raises(RuntimeError, match=r"out-of-bounds read at races.cu:\d+: .*1 element of 4 bytes past the end "
                                           r"of `x` \(2310 float32\)"):
        checked(races.row_sums_window, x, True, labels={x.data_ptr(): "`x` (2310 float32)"})
    torch.testing.assert_close(checked(races.row_sums_window, x, False), x.sum(1), rtol=1e-4, atol=1e-4)


# mbarrier_ring's thread orders: the simulator's three, the random one with a few seeds
RING_ORDERS = [("forward", 0), ("reverse", 0), ("random", 1), ("random", 2), ("random", 3)]


@pytest.mark.parametrize("bulk", [False, True], ids=["plain_stores", "bulk_copies"])
def test_a_hand_off_through_mbarriers_is_no_race_in_any_thread_order(races, bulk):
    """Warp 0 fills a stage and arrives on its `full` barrier (lane 0, after a __syncwarp() behind every lane's
    stores; or with expect_tx before a cp.async.bulk that completes on it); every consumer lane waits for the phase
    and reads; lane 0 of each consumer warp arrives on `empty`, which the producer waits on before it refills the
    stage. A completed phase orders the arrivals' accesses (and the copy's bytes) before the waiters' later ones."""
    x = torch.randn(7, 64)
    want = x.sum(0) + x.sum(0).flip(0)
    for order, seed in RING_ORDERS:
        with knobs.set(order=order, seed=seed):
            torch.testing.assert_close(checked(races.mbarrier_ring, x, 0, bulk), want, rtol=1e-5, atol=1e-5)


# (bug, bulk): what mbarrier_ring's RingBug plants (races.cu), with plain stores or cp.async.bulk copies
RING_BUGS = {"consumers_read_without_waiting": (1, False), "consumers_wait_for_the_wrong_parity": (2, False),
             "producer_refills_without_waiting_on_empty": (3, False), "producer_arrives_before_it_writes": (4, False),
             "consumers_release_before_they_read": (5, False), "copy_lands_under_reads_without_a_wait": (1, True),
             "copy_lands_under_reads_after_an_early_release": (5, True)}


@pytest.mark.parametrize("name", list(RING_BUGS))
def test_a_broken_mbarrier_hand_off_is_a_race_on_the_ring_in_every_thread_order(races, name):
    """The hand-off orders only the threads that wait for the phase that the writes' arrival completes: a read
    without a wait, a wait for the phase before (the wrong parity), a refill before the readers' release, an arrival
    before the writes it should cover and a release before the reads it should cover each leave a write (a store,
    or a copy's bytes landing for the thread that issued it) and a read of the ring unordered."""
    bug, bulk = RING_BUGS[name]
    x = torch.randn(7, 64)
    write = _line("cp.async.bulk.shared::cluster.global.mbarrier") if bulk else _line("ring[s][c] = row[c];")
    read = _line("sum += ring[s][c] + ring[s][63 - c];")
    for order, seed in RING_ORDERS:
        with knobs.set(order=order, seed=seed):
            msg = _finding(races.mbarrier_ring, x, bug, bulk)
        assert msg.startswith("cudasim: data race on shared memory: "), (order, msg)
        assert "of the __shared__ `ring` (512 bytes)" in msg
        assert f"races.cu:{write}" in msg and f"races.cu:{read}" in msg, (order, msg)  # both sides, in either order
        assert "nor an mbarrier phase that the first thread arrived on" in msg


# named_handoff's bugs (races.cu): the line of the write and of the read that the check must name
HANDOFF_BUGS = {"a_warp_outside_the_barrier_reads": (1, "tile[c] = 2.0f * x[c];", "out[64 + c] = tile[c];"),
                "the_arriving_warp_reads_after_its_arrival": (2, "back[c] = 1.0f;", "out[64 + c] = back[c];")}


def test_a_named_barrier_orders_its_arrivals_before_its_waiters_and_nothing_else_in_every_thread_order(races):
    """bar.arrive 1, 64 by warp 0 after its stores and bar.sync 1, 64 by warp 1 before its reads: a hand-off (PTX's
    producer-consumer barrier), no race in any order. A warp that takes no part, and the arriving warp after its
    arrival, stay unordered with the others: each is a race naming both lines (before, every completed named barrier
    ordered the whole block, as __syncthreads, and both passed)."""
    x = torch.randn(64)
    want = torch.cat([2 * x + 2 * x.flip(0), torch.zeros(64)])
    for order, seed in RING_ORDERS:
        with knobs.set(order=order, seed=seed):
            torch.testing.assert_close(checked(races.named_handoff, x, 0), want)
            for name, (bug, write, read) in HANDOFF_BUGS.items():
                msg = _finding(races.named_handoff, x, bug)
                assert msg.startswith("cudasim: data race on shared memory: "), (order, name, msg)
                assert f"races.cu:{_line(write)}" in msg and f"races.cu:{_line(read)}" in msg, (order, name, msg)
                assert "nor a named barrier for part of the block" in msg


def test_the_checker_fails_racy_cases_as_races_and_passes_the_correct_form(races, capsys):
    def ref(x):
        return x.double().sum(0).float()

    good = check(lambda x: races.column_sums(x, False), ref, rows(1), sizes=[(40, 100)], quiet=True,
                 tolerance={torch.float32: (1e-4, 1e-4)})
    bad = check(lambda x: races.column_sums(x, True), ref, rows(1), sizes=[(40, 100)], quiet=True)
    assert good.passed
    assert [c.diagnosis for c in bad.cases] == [Diagnosis.RACE]
    assert "data race on global memory" in bad.cases[0].detail
    skipped = check(lambda x: races.column_sums(x, True), ref, rows(1), sizes=[(40, 100)], quiet=True, races=False)
    assert skipped.passed  # what the check adds: without it, the simulator's orders never interleave the +=


# make test-toolkit: the simulator's test kernels and public-style code (the lessons' own kernels raise no false
# alarm in make test-all: every solution's self-check runs the race check)
@pytest.mark.toolkit
def test_the_correct_kernels_of_the_other_test_files_raise_no_false_alarm():
    """Barriers, warp shuffles, cooperative groups, cp.async pipelines, WMMA, a spin lock under atomics."""
    if compiler_problem():
        pytest.skip(compiler_problem())
    cg = load(HERE / "sim_compat" / "cg_reductions.cu", "sim")
    x = torch.randn(33, 1000)
    torch.testing.assert_close(checked(cg.softmax_rows, x), torch.softmax(x, -1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(checked(cg.online_softmax, x), torch.softmax(x, -1), rtol=1e-5, atol=1e-6)
    xi = torch.randint(-1000, 1000, (33, 1000), dtype=torch.int32)
    torch.testing.assert_close(checked(cg.row_min, xi), xi.min(-1).values)
    v = torch.randn(1000)
    torch.testing.assert_close(checked(cg.block_sums, v, 256).sum(), v.sum(), rtol=1e-4, atol=1e-3)
    pipe = load(KERNELS / "pipeline.cu", "sim")
    m = torch.randn(70, 256)
    for stages in (2, 4):
        torch.testing.assert_close(checked(pipe.pipelined_colsum, m, stages, 0), m.sum(0), rtol=1e-4, atol=1e-4)
    wm = load(KERNELS / "wmma.cu", "sim")
    a, b = torch.randn(64, 48).half(), torch.randn(48, 32).half()
    torch.testing.assert_close(checked(wm.wmma_matmul, a, b), a.float() @ b.float(), rtol=1e-3, atol=1e-3)
    pub = load(KERNELS / "public_styles.cu", "sim")
    assert checked(pub.block_lock, torch.empty(1), 64, 3).tolist() == [0, 64 * 3]
    torch.testing.assert_close(checked(pub.samples_reduce, v)[-1], v.sum(), rtol=1e-4, atol=1e-3)
    # back to the first file's build: each build's allocation tracker sits once in the chain in front of
    # PyTorch's CPU allocator (put on again over a later one, the two called each other until the stack overflowed)
    for _ in range(2):
        torch.testing.assert_close(checked(cg.softmax_rows, x), torch.softmax(x, -1), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(checked(wm.wmma_matmul, a, b), a.float() @ b.float(), rtol=1e-3, atol=1e-3)
    assert torch.ones(1000).sum().item() == 1000  # an allocation after the checks, through the whole chain


def test_a_far_overshoot_in_a_plain_run_faults_in_the_guard_and_the_process_lives_on(tmp_path):
    """Without the race check (a large case), the checker's buffers sit between inaccessible pages: a whole tile
    written past a ragged output faults there instead of corrupting the heap, and the check reports it."""
    script = tmp_path / "overshoot.py"
    script.write_text(textwrap.dedent(f"""
        import torch
        from kernels import load
        from kernels.check import check, like
        ext = load({str(KERNELS / "races.cu")!r}, "sim", quiet=True)
        report = check(lambda x, out: ext.fill_tiles(out, True),
                       lambda x: torch.arange(x.numel(), dtype=torch.float32).view(x.shape),
                       lambda size, dtype, device: [torch.empty(size)], out=like(0), sizes=[(100, 1000)],
                       races=False, quiet=True)
        print("diagnosis:", report.cases[0].diagnosis.name)
        print("still alive")
    """))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=HERE.parent, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "diagnosis: OUT_OF_BOUNDS" in run.stdout and "still alive" in run.stdout


def test_the_race_check_leaves_dynamo_unloaded_in_a_process_that_compiles_nothing(tmp_path):
    """PyTorch wraps a dispatch mode's handler in dynamo's disable, which imports torch._dynamo (seconds) on its
    first call; the check's mode leaves the wrapper off while dynamo is not loaded, and keeps it once it is."""
    script = tmp_path / "no_dynamo.py"
    script.write_text(textwrap.dedent(f"""
        import sys, torch
        from kernels import load
        from kernels.check import check, elementwise, like
        ext = load({str(HERE / "toolkit" / "vector_add.cu")!r}, "sim", quiet=True)
        good = check(ext.add, torch.add, elementwise(2), out=like(0), sizes=[1000], quiet=True)
        bad = check(ext.add_le, torch.add, elementwise(2), out=like(0), sizes=[1000], orders=("forward",), quiet=True)
        print("checks:", good.passed, bad.cases[0].diagnosis.name)
        print("dynamo loaded:", "torch._dynamo" in sys.modules)
        import torch._dynamo
        bad = check(ext.add_le, torch.add, elementwise(2), out=like(0), sizes=[1000], orders=("forward",), quiet=True)
        print("with dynamo:", bad.cases[0].diagnosis.name)
    """))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=HERE.parent, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "checks: True WROTE_PAST_END" in run.stdout, run.stdout
    assert "dynamo loaded: False" in run.stdout and "with dynamo: WROTE_PAST_END" in run.stdout, run.stdout


CATCH_ALL_OP = """#include "helpers.cuh"
__global__ void fill(float* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n) p[i] = 1.0f;  // one past the end
}
at::Tensor ones(at::Tensor x) {
  at::Tensor y = x.clone();
  fill<<<(x.numel() + 32) / 32, 32>>>(y.data_ptr<float>(), x.numel());
  return y;
}
TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) { m.def("ones(Tensor x) -> Tensor", &ones); }
"""


@pytest.mark.toolkit  # two builds of a file of its own
def test_an_op_registered_for_every_dispatch_key_is_checked_when_it_is_the_function_checked(tmp_path):
    """m.def(schema, &function), as public extensions often register, gives the op one kernel for every dispatch
    key (CompositeImplicitAutograd), which runs below the check's TorchDispatchMode: the op itself is taken to its
    twin directly."""
    if compiler_problem():
        pytest.skip(compiler_problem())
    (tmp_path / "catch_all.cu").write_text(CATCH_ALL_OP)
    ext = load(tmp_path / "catch_all.cu", "sim", quiet=True)
    with pytest.raises(RuntimeError, match="catch_all.cu:4"):
        checked(ext.ones, torch.zeros(40))


STRUCT_SHUFFLE = """
struct Pair {{ float m, s; }};
__global__ void k(const float* x, float* out) {{
  Pair p{{x[threadIdx.x], 1.0f}};
  {shuffle}
  short h = static_cast<short>(threadIdx.x);
  out[threadIdx.x] = p.m + p.s + __shfl_xor_sync(0xffffffffu, h, 1);
}}
"""


def test_a_struct_shuffle_is_refused_as_nvcc_refuses_it_and_its_members_shuffle(tmp_path):
    body = textwrap.dedent("""
        #include "helpers.cuh"
        #include <ATen/ops/empty_like.h>
        {kernel}
        at::Tensor f(const at::Tensor& x) {{
          auto out = at::empty_like(x);
          k<<<1, 32>>>(x.data_ptr<float>(), out.data_ptr<float>());
          return out;
        }}
        TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {{ m.def("f(Tensor x) -> Tensor"); }}
        TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {{ m.impl("f", &f); }}
    """)
    whole = STRUCT_SHUFFLE.format(shuffle="p = __shfl_xor_sync(0xffffffffu, p, 1);")
    members = STRUCT_SHUFFLE.format(shuffle="p.m = __shfl_xor_sync(0xffffffffu, p.m, 1); "
                                            "p.s = __shfl_xor_sync(0xffffffffu, p.s, 1);")
    bad, good = tmp_path / "struct_shuffle.cu", tmp_path / "member_shuffle.cu"
    bad.write_text(body.format(kernel=whole))
    good.write_text(body.format(kernel=members))
    from kernels import BuildError

    with pytest.raises(BuildError) as refused:
        load(bad, "sim", quiet=True)
    first = str(refused.value).split("The compiler said:\n\n")[1].splitlines()[0]
    line = bad.read_text().splitlines().index("  p = __shfl_xor_sync(0xffffffffu, p, 1);") + 1
    assert f"struct_shuffle.cu:{line}:" in first, first  # the learner's line comes first
    assert "__shfl*_sync takes int, unsigned" in first and "nvcc refuses a struct" in first
    x = torch.arange(32, dtype=torch.float32)
    lane = torch.arange(32)
    torch.testing.assert_close(load(good, "sim", quiet=True).f(x), x[lane ^ 1] + 1 + (lane ^ 1).float())
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists():
        return
    for kernel, ok in ((whole, False), (members, True)):  # nvcc alone, no torch: a second or two
        src = tmp_path / ("ok.cu" if ok else "refused.cu")
        src.write_text(kernel)
        run = subprocess.run([nvcc, "-c", str(src), "-o", str(tmp_path / "k.o")], capture_output=True, text=True)
        assert (run.returncode == 0) == ok, run.stderr


def test_the_race_checks_build_is_made_beside_the_plain_one_and_only_when_missing(tmp_path):
    """check_exercise starts the instrumented build in a child process before it builds the file itself, so
    the two compile at once; a file whose instrumented build is cached starts no child."""
    from kernels.build import is_cached
    from kernels.sim.build import instrumented_flags
    from kernels.sim.instrumented import build_beside

    if compiler_problem():
        pytest.skip(compiler_problem())
    src = tmp_path / "beside.cu"
    # a comment no earlier run wrote: the cache of a checkout that ran the tests before has no build of it
    src.write_text((HERE / "toolkit" / "vector_add.cu").read_text() + f"// {uuid.uuid4().hex}\n")
    assert not is_cached(src, "sim", instrumented_flags())
    child = build_beside(src)
    assert child is not None and child.wait(timeout=600) == 0
    assert is_cached(src, "sim", instrumented_flags()) and not is_cached(src, "sim")  # the twin only
    assert build_beside(src) is None

