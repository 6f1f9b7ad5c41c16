"""Peer memory between processes (kernels/sim/peers.py, kernels/ranks.py, include/cudasim_peers.h): all-reduce
kernels over symmetric memory (tests/sim_kernels/peers.cu) run in 2 and 3 ranks, each a process of its own. The
correct ones give the sums in every thread order with shuffled blocks (the ranks shuffle alike), a wait on the wrong
slot is an error after CUDASIM_PEER_TIMEOUT instead of a hang, and the race check reports every planted mistake of
the barrier between ranks, in every order. Nothing is left in /dev/shm.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from kernels.ranks import RankError, run_ranks
from kernels.sim import knobs
from kernels.sim.peers import PREFIX, _folder

KERNELS = Path(__file__).resolve().parent / "sim_kernels"
N = 1000  # floats per rank: 4 blocks of 250
pytestmark = [pytest.mark.sim_only]
BUGS = {1: "no barrier before the reads", 2: "no fence before the signal", 3: "no fence after the wait",
        4: "reads before the wait", 5: "no barrier at the end"}
WRONG_SLOT = 6
PTX, PTX_BUGS = 7, {8: "a .relaxed signal", 9: "a .relaxed wait"}


def _line(text: str) -> int:
    lines = (KERNELS / "peers.cu").read_text().splitlines()
    found = [i + 1 for i, line in enumerate(lines) if text in line]
    assert len(found) == 1, f"{text!r} is on lines {found} of peers.cu, expected one"
    return found[0]


def _setup(rank: int):
    """This rank's build of peers.cu, its input and the sums expected (every rank's input, added in rank order)."""
    import torch.distributed as dist

    from kernels import load

    ext = load(KERNELS / "peers.cu", "sim", quiet=True)
    torch.manual_seed(rank)
    x = torch.randn(N)
    xs = [torch.empty(N) for _ in range(dist.get_world_size())]
    dist.all_gather(xs, x)
    want = xs[0].clone()
    for other in xs[1:]:
        want += other
    return ext, x, want


def _correct_rank(rank: int, world: int, check: bool) -> list:
    """Both all-reduces, twice each, in every thread order with shuffled blocks: whether each gave the sums; and the
    order the blocks of a launch ran in."""
    import torch.distributed as dist

    from kernels.sim.peers import PeerMemory
    from kernels.sim.racecheck import checked, prepare

    ext, x, want = _setup(rank)
    run = checked if check else (lambda fn, *a: fn(*a))
    if check:
        prepare(ext)
    found = []
    with PeerMemory(N * 4) as mem:
        assert not mem.signal_pad(rank).any(), "a fresh signal pad must be zeros"
        mem.buffer((rank + 1) % world)[rank] = 100 + rank  # a write into a peer's memory lands there
        dist.barrier()
        assert int(mem.buffer(rank)[(rank - 1) % world]) == 100 + (rank - 1) % world
        bufs, pads = torch.tensor(mem.buffer_ptrs), torch.tensor(mem.signal_pad_ptrs)
        for order in knobs.ORDERS:
            with knobs.set(order=order, shuffle_blocks=True, seed=5):
                for _ in range(2):
                    found.append(torch.equal(run(ext.one_shot, x, bufs, pads, rank, world, 0), want))
                    found.append(torch.equal(run(ext.two_shot, x, bufs, pads, rank, world), want))
                tickets = torch.zeros(9, dtype=torch.int32)
                ext.block_order(tickets)
                found.append(tickets[1:].tolist())
        assert not mem.signal_pad(rank).any(), "the barriers must leave the signal pad at zero"
    return found


def _bug_rank(rank: int, world: int, bug: int, orders: tuple) -> list[str]:
    """The planted mistake `bug` of one_shot, called twice under the race check in each order: what each order
    raised in this rank ("" for nothing). A fresh PeerMemory per order: a stopped kernel leaves signals behind."""
    import torch.distributed as dist

    from kernels.sim.peers import PeerMemory
    from kernels.sim.racecheck import checked, prepare

    ext, x, _ = _setup(rank)
    prepare(ext)
    said = []
    for order in orders:
        with PeerMemory(N * 4) as mem, knobs.set(order=order, shuffle_blocks=True, peer_timeout=2):
            bufs, pads = torch.tensor(mem.buffer_ptrs), torch.tensor(mem.signal_pad_ptrs)
            dist.barrier()
            try:
                for _ in range(2):
                    checked(ext.one_shot, x, bufs, pads, rank, world, bug)
                said.append("")
            except RuntimeError as e:
                said.append(str(e))
            dist.barrier()  # every rank is done with the memory before it goes
    return said


def _ptx_rank(rank: int, world: int) -> tuple[bool, list[str]]:
    """The barriers written in inline PTX under the race check in one order: "" when two calls of the correct one
    gave the sums, and what one call of each of its planted mistakes raised in this rank. (A strong load acquires and
    releases nothing: were the polls' ld.acquire.sys taken as releases, a rank's polls of its own pad would carry
    its writes to a peer whose signal lands there, and a .relaxed signal could go unreported.)"""
    import torch.distributed as dist

    from kernels.sim.peers import PeerMemory
    from kernels.sim.racecheck import checked, prepare

    ext, x, want = _setup(rank)
    prepare(ext)
    said = []
    for bug in (PTX, *PTX_BUGS):
        with PeerMemory(N * 4) as mem, knobs.set(order="random", shuffle_blocks=True, seed=3, peer_timeout=2):
            bufs, pads = torch.tensor(mem.buffer_ptrs), torch.tensor(mem.signal_pad_ptrs)
            dist.barrier()
            try:
                calls = 2 if bug == PTX else 1  # one call of a mistake: a report must not wait for the next call
                ok = all([torch.equal(checked(ext.one_shot, x, bufs, pads, rank, world, bug), want)
                          for _ in range(calls)])
                said.append("" if ok or bug != PTX else "wrong sums")
            except RuntimeError as e:
                said.append(str(e))
            dist.barrier()
    return said


def _wrong_slot_rank(rank: int, world: int) -> None:
    import torch.distributed as dist

    from kernels.sim.peers import PeerMemory

    ext, x, _ = _setup(rank)
    with PeerMemory(N * 4) as mem, knobs.set(peer_timeout=1):
        dist.barrier()
        ext.one_shot(x, torch.tensor(mem.buffer_ptrs), torch.tensor(mem.signal_pad_ptrs), rank, world, WRONG_SLOT)


def _env_rank(rank: int, world: int) -> str | None:
    import os

    return os.environ.get("CUDASIM_TEST_RANK_ENV")


def _failing_rank(rank: int, world: int) -> int:
    if rank == 1:
        raise ValueError("planted failure")
    return rank


def _no_segments_left():
    left = sorted(p.name for p in _folder().glob(f"{PREFIX}*"))
    assert not left, f"shared-memory segments left behind: {left}"


def test_both_all_reduces_give_the_sums_in_every_order_and_every_rank_runs_its_blocks_in_one_order():
    results = run_ranks(_correct_rank, world_size=2, args=(False,), timeout=240)
    for found in results:
        assert all(ok for ok in found if isinstance(ok, bool)), found
    orders = [[o for o in found if isinstance(o, list)] for found in results]
    assert orders[0] == orders[1], "the ranks must run the blocks of a launch in the same order"
    assert any(o != sorted(o) for o in orders[0]), "the blocks were expected shuffled"
    _no_segments_left()


def test_a_wait_on_the_wrong_slot_is_an_error_after_the_timeout_naming_what_it_polls():
    with pytest.raises(RankError) as info:
        run_ranks(_wrong_slot_rank, world_size=2, timeout=240)
    msg = info.value.message
    assert re.search(r"rank \d waited 1 s \(CUDASIM_PEER_TIMEOUT\) in atomicCAS at peers\.cu:"
                     + str(_line("while (atomicCAS_system(flag, 1u, 0u) != 1u) {}")), msg), msg
    assert re.search(r"which polls slot \d+ of rank \d's signal pad \(uint32 slots\): it waits for the value 1 and "
                     r"has read 0", msg) and "check the slot index" in msg and "[kernel one_shot_kernel, block" in msg
    _no_segments_left()


def test_a_rank_that_raises_is_named_with_its_traceback_and_the_others_are_stopped():
    with pytest.raises(RankError) as info:
        run_ranks(_failing_rank, world_size=2, timeout=120)
    assert info.value.rank == 1 and info.value.kind == "ValueError" and info.value.message == "planted failure"
    assert "in _failing_rank" in info.value.traceback and str(info.value).startswith("rank 1 raised ValueError")


def test_env_reaches_every_rank_and_leaves_this_process_as_it_was():
    import os

    assert run_ranks(_env_rank, world_size=2, env={"CUDASIM_TEST_RANK_ENV": "1"}) == ["1", "1"]
    assert "CUDASIM_TEST_RANK_ENV" not in os.environ and run_ranks(_env_rank, world_size=2) == [None, None]


def test_the_knobs_refuse_a_peer_list_or_a_timeout_they_cannot_read():
    with pytest.raises(ValueError, match=re.escape("CUDASIM_PEER_TIMEOUT=0 is not a time; use a number of seconds "
                                                   "above 0")):
        with knobs.set(peer_timeout=0):
            pass
    with pytest.raises(ValueError, match="is not a list of peer memory segments: expected entries owner:me:"):
        knobs.put(knobs.PEERS, "0:0:zz")
    assert knobs.peers_value("0:1:7f00:1000:8f00:1000:9f00:2000") == "0:1:7f00:1000:8f00:1000:9f00:2000"


@pytest.mark.toolkit
@pytest.mark.parametrize("world", [2, 3])
def test_the_race_check_passes_both_all_reduces_in_every_order(world):
    for found in run_ranks(_correct_rank, world_size=world, args=(True,), timeout=400):
        assert all(ok for ok in found if isinstance(ok, bool)), found
    _no_segments_left()


@pytest.mark.toolkit
@pytest.mark.parametrize("bug", sorted(BUGS), ids=[BUGS[b].replace(" ", "_") for b in sorted(BUGS)])
def test_each_mistake_in_the_barrier_between_ranks_is_a_race_in_every_order(bug):
    said = run_ranks(_bug_rank, world_size=2, args=(bug, knobs.ORDERS), timeout=400)
    for i, order in enumerate(knobs.ORDERS):
        races = [s[i] for s in said if "data race on peer memory" in s[i]]
        assert races, f"{BUGS[bug]}, order {order}: no rank reported a race: {[s[i] for s in said]}"
        msg = races[0]
        assert re.search(r"thread \(\d+,0,0\) of block \(\d,0,0\) of rank \d (read|wrote) element \d+ \(4-byte word\) "
                         r"of rank \d's buffer at peers\.cu:\d+, which thread \(\d+,0,0\) of block \(\d,0,0\) of rank "
                         r"\d (read|wrote) at peers\.cu:\d+", msg), msg
        assert "they are in different ranks" in msg and "__threadfence_system()" in msg
        assert f"peers.cu:{_line('for (int r = 0; r < p.world; ++r) s += p.buf[r][i];  // the same')}" in msg
    _no_segments_left()


def test_a_barrier_in_inline_ptx_orders_the_ranks_through_its_release_and_acquire_and_each_relaxed_one_is_a_race():
    said = run_ranks(_ptx_rank, world_size=2, timeout=300)
    assert [s[0] for s in said] == ["", ""], said  # atom.release.sys.cas and ld.acquire.sys: the sums, no report
    for i, what in enumerate(PTX_BUGS.values(), start=1):
        assert any("data race on peer memory" in s[i] for s in said), f"{what}: {[s[i] for s in said]}"
    _no_segments_left()


def test_the_segment_layout_peers_py_makes_is_the_one_the_race_checks_header_reads():
    # kernels/sim/peers.py sizes each rank's shadow from PAGE, CELL_BYTES and CLOCK_BYTES; cudasim_peers.h reads the
    # shadow with kHeader, kCellBytes and kClockBytes: the two must be the same numbers
    from kernels.sim import peers

    header = (Path(peers.__file__).parent / "include" / "cudasim_peers.h").read_text()
    found = re.search(r"constexpr size_t kHeader = (\d+), kCellBytes = (\d+), kClockBytes = (\d+);", header)
    assert found, "cudasim_peers.h no longer declares kHeader, kCellBytes and kClockBytes on one line"
    assert tuple(map(int, found.groups())) == (peers.PAGE, peers.CELL_BYTES, peers.CLOCK_BYTES)
