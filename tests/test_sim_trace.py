"""The simulator's mbarrier trace, `kernels.barrier_trace`: per warp, which barrier it waited on, whether and how long
it blocked, and what it arrived on, in the first blocks of a launch. On lesson 13's warp-specialised matmul (a
producer warp issues TMA and waits on the empty barriers, the consumer warps wait on the full ones) and on a
hand-off through one barrier (tests/sim_kernels/barrier_trace.cu). Barriers are found by the line of their
mbarrier.init, read from the source."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernels import barrier_trace, load
from kernels.build import toolchain
from kernels.paths import reference_file
from kernels.sim import knobs, trace

HANDOFF = Path(__file__).parent / "sim_kernels" / "barrier_trace.cu"
M, N, K = 256, 256, 512   # two blocks of 128 x 256; eight 64-deep k-steps, so the 4-stage ring wraps
STEPS, STAGES, STAGE_BYTES = K // 64, 4, (128 + 256) * 64 * 2


def _line(path: Path, marker: str, last_before: str | None = None) -> str:
    """'file.cu:NN' of the first line of code holding `marker` (or, with `last_before`, of the last one before the
    first line holding that)."""
    found = None
    for i, text in enumerate(path.read_text().splitlines(), 1):
        if text.lstrip().startswith("//"):
            continue
        if last_before is not None and last_before in text:
            break
        if marker in text:
            found = f"{path.name}:{i}"
            if last_before is None:
                break
    assert found, f"{marker} not in {path.name}"
    return found


# A barrier's name is the line that called the helper around its mbarrier.init: GNU addr2line (2.40) leaves that
# inlined caller out of its answer, LLVM's keeps it (clang's package brings it).
needs_llvm_addr2line = pytest.mark.skipif(not trace.llvm_addr2line(),
                                          reason="naming a barrier by its caller's line needs llvm-addr2line (LLVM)")
# The line of an arrival or a wait made through such a helper is its caller's only in clang's line tables: a machine
# with LLVM's tools but no clang++ builds the simulator's libraries with g++, and those lines are then the helper's
# own (ptx_common.cuh).
needs_clang_lines = pytest.mark.skipif("clang" not in toolchain.cxx_version("sim"),
                                       reason="the caller's line of an arrival or a wait needs simulator builds by clang++")


@pytest.fixture(autouse=True)
def _default_order():
    """The tests' expectations are the default thread order's, blocks in order, whatever CUDASIM_ORDER or
    CUDASIM_SHUFFLE_BLOCKS the run was started with (a test that wants another order sets it inside)."""
    with knobs.set(order="forward", shuffle_blocks=False):
        yield


@pytest.fixture(scope="module")
def lesson13():
    return load("13", "sim")


@pytest.fixture(scope="module")
def handoff():
    return load(HANDOFF, "sim")


def _operands():
    torch.manual_seed(0)
    a, b = torch.randn(M, K).bfloat16(), torch.randn(K, N).bfloat16()
    return a, b, torch.full((M, N), float("nan")).bfloat16()


@needs_llvm_addr2line
@pytest.mark.parametrize("order", ["forward", "reverse"])
def test_matmul13_3s_producer_blocks_only_on_the_empty_barriers_and_its_consumers_only_on_the_full_ones(lesson13,
                                                                                                        order):
    source = reference_file("13")
    empty = _line(source, "mbar_init(&empty[")
    full = _line(source, "mbar_init(&full[", last_before="mbar_init(&empty[")  # the ws kernel's, not matmul13_2's
    a, b, c = _operands()
    with knobs.set(order=order):
        report = barrier_trace(lesson13.matmul13_3, a, b, c)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-2, atol=0.1)  # the traced run computed C
    assert len(report.blocks) == 1  # blocks=1: the first block of the launch's two
    block = report.blocks[0]
    assert block.kernel.startswith("matmul13_ws_kernel") and block.block == (0, 0, 0) and block.threads == 384

    names = {b.name: [x for x in block.barriers if x.name == b.name] for b in block.barriers}
    assert set(names) == {full, empty}
    assert [(b.arrivals, b.phases) for b in names[full]] == [(1, STEPS // STAGES)] * STAGES  # each stage's uses
    assert [(b.arrivals, b.phases) for b in names[empty]] == [(8, STEPS // STAGES)] * STAGES
    assert sum(b.bytes for b in names[full]) == STEPS * STAGE_BYTES and sum(b.bytes for b in names[empty]) == 0

    rows = block.rows
    producers = {r.warp for r in rows if r.op == "copy"}
    consumers = {r.warp for r in rows if r.op == "wait" and r.barrier == full}
    assert producers == {0} and consumers == set(range(4, 12))  # warpgroup 0's thread 0; warpgroups 1 and 2
    def total(warp, barrier, op, field):
        return sum(getattr(r, field) for r in rows if (r.warp, r.barrier, r.op) == (warp, barrier, op))

    assert total(0, full, "arrive.expect_tx", "arrivals") == STEPS
    assert total(0, full, "arrive.expect_tx", "bytes") == total(0, full, "copy", "bytes") == STEPS * STAGE_BYTES
    assert total(0, full, "copy", "times") == STEPS * 5  # a box of A and four of B a stage, from two lines
    assert total(0, empty, "wait", "times") == STEPS - STAGES  # the ring's second use of each stage
    for w in consumers:
        assert total(w, full, "wait", "times") == STEPS and total(w, empty, "arrive", "arrivals") == STEPS
    assert {r.lanes for r in rows if r.op == "wait"} == {1, 32}  # one elected producer thread; all of a consumer warp
    assert {r.lanes for r in rows if r.op != "wait"} == {1}  # one thread issues; lane 0 of a consumer warp arrives
    assert {r.warp for r in rows if r.op == "wait" and r.lanes == 1} == {0}
    assert {(r.warp, r.barrier, r.op) for r in rows} == (
        {(0, full, "arrive.expect_tx"), (0, full, "copy"), (0, empty, "wait")}
        | {(w, full, "wait") for w in consumers} | {(w, empty, "arrive") for w in consumers})

    blocked = [e for e in block.waits() if e.blocked]
    assert blocked and all(e.end is not None and e.end > e.blocked_from for e in blocked)  # each ended, later
    assert all(e.barrier == (empty if e.warp in producers else full) for e in blocked)
    if order == "forward":  # the producer (thread 0) runs first in a round: it fills the ring, then waits for room
        assert [e.warp for e in blocked] == [0] * (STEPS - STAGES)
    else:  # the consumers run first: each waits for the producer's first stage
        assert {e.warp for e in blocked if e.barrier == full} == consumers


@needs_llvm_addr2line
def test_the_report_names_barriers_by_their_init_lines_and_is_the_same_at_every_run(lesson13):
    source = reference_file("13")
    empty = _line(source, "mbar_init(&empty[")
    texts = {str(barrier_trace(lesson13.matmul13_3, *_operands())) for _ in range(2)}
    assert len(texts) == 1
    text = texts.pop()
    assert f"B  {empty}         4                 8                 8" in text  # the barriers table's row
    assert "mbar_init(&empty[s], 8 * CLUSTER);" in text  # the line that initialised it
    assert "\n4-11  A " in text  # the consumer warps' rows, shared
    timeline = text.split("timeline:")[1].splitlines()
    assert timeline[1].startswith("  warp 0    |.BBBB") and timeline[2].startswith("  warp 4-11 |....")


def test_the_recording_is_off_unless_asked_for(lesson13, handoff):
    out = torch.zeros(64)
    handoff.handoff(out, 3, 1)  # a library that was never traced
    assert trace._library(handoff).cudasim_trace_events(None, 0) == 0
    barrier_trace(lesson13.matmul13_3, *_operands())
    lesson13.matmul13_3(*_operands())  # after a trace: recording is off again, and its record was freed
    lib = trace._library(lesson13)
    assert lib.cudasim_trace_events(None, 0) == 0 and lib.cudasim_trace_blocks(None, 0) == 0


@needs_llvm_addr2line
@needs_clang_lines
def test_a_warp_waits_on_a_barrier_a_step_for_each_step_of_the_work_of_the_warp_that_arrives(handoff):
    init, arrive, wait = (_line(HANDOFF, m) for m in ("// INIT", "// ARRIVE", "// WAIT"))
    blocked = {}
    for work in (2, 8):
        out = torch.zeros(64)
        block = barrier_trace(handoff.handoff, out, work, 1).blocks[0]
        assert out[0] == sum(range(work)) and torch.equal(out[32:], out[0] + torch.arange(32.0))
        assert block.kernel == "handoff_kernel" and [b.name for b in block.barriers] == [init]
        rows = [(r.warp, r.barrier, r.line, r.op, r.times, r.lanes, r.blocked, r.arrivals) for r in block.rows]
        assert rows == [(0, init, arrive, "arrive", 1, 1, 0, 1), (1, init, wait, "wait", 1, 32, 1, 0)]
        blocked[work] = block.rows[1].steps_blocked
        (w,) = block.waits()
        assert (w.warp, w.phase, w.parity, w.lanes, w.blocked_lanes) == (1, 0, True, 32, 32)
        assert block.timeline().splitlines()[2].count("A") == blocked[work]  # warp 1's line
    assert blocked[8] - blocked[2] == 6  # one step a __syncwarp of warp 0


@needs_llvm_addr2line
@needs_clang_lines
def test_a_wait_that_never_ends_is_in_the_trace_the_deadlock_error_carries(handoff):
    init, wait = _line(HANDOFF, "// INIT"), _line(HANDOFF, "// WAIT")
    with pytest.raises(RuntimeError, match="deadlock") as caught:
        barrier_trace(handoff.handoff, torch.zeros(64), -1, 1)  # warp 0 never arrives
    block = caught.value.barrier_trace.blocks[0]
    (w,) = block.waits()
    assert (w.warp, w.barrier, w.line, w.blocked_lanes, w.end, w.steps_blocked) == (1, init, wait, 32, None, None)
    assert not [e for e in block.events if e.kind in ("arrive", "complete")]
    assert f"1 blocked wait(s) never ended: warp 1 at {wait} on {init} (phase 0)" in str(block)
    assert trace._library(handoff).cudasim_trace_events(None, 0) == 0  # and the record was freed


def test_only_the_first_blocks_of_each_launch_are_recorded(handoff):
    out = torch.zeros(3 * 64)
    assert [b.block for b in barrier_trace(handoff.handoff, out, 2, 3).blocks] == [(0, 0, 0)]
    twice = barrier_trace(lambda: [handoff.handoff(out, 2, 3) for _ in range(2)], blocks=2)
    assert [(b.launch, b.block) for b in twice.blocks] == [(1, (0, 0, 0)), (1, (1, 0, 0)), (2, (0, 0, 0)),
                                                          (2, (1, 0, 0))]


def test_barrier_trace_refuses_what_it_cannot_trace(handoff):
    with pytest.raises(ValueError, match="blocks must be a whole number from 1 up"):
        barrier_trace(handoff.handoff, torch.zeros(64), 2, 1, blocks=0)
    with pytest.raises(ValueError, match="launched no kernel of a file loaded with the sim backend"):
        barrier_trace(lambda: None)
