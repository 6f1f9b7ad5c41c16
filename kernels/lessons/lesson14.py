"""Lesson 14's exercise: a one-shot all-reduce over symmetric memory (all_reduce.cu), checked in two ranks.

An all-reduce is one op run by every rank at once, so its check starts the ranks: WORLD processes
(kernels.ranks.run_ranks), each with its own GPU when the machine has that many, else each on the simulator,
where the ranks' buffers are shared memory between the processes (kernels/sim/peers.py). Every rank runs the
checker (kernels.check) on its own inputs, in lockstep with the others: the same cases in the same order.
The inputs come from seeds that every rank knows, so each rank computes the expected sum of all ranks' inputs
itself, and no collective runs inside a case (a rank whose kernel fails cannot leave another waiting in one).
On the simulator the race check follows the ranks' accesses to each other's buffers through the signals
(kernels/sim/README.md, "Peer memory between processes"): a missing barrier or fence is reported as a race,
whatever the timing. After the cases, the ranks compare their outputs of one float32 sum bit for bit.
"""
from __future__ import annotations

import zlib

import torch

from ..backend import resolve
from ..check import Case, Diagnosis, Report, check, like, race_check_on
from . import Exercise, Hint

WORLD = 2                  # ranks the self-check starts
SIZES = (0, 1, 7, 33, 1000, 4099, 70_001)  # elements; 70001 needs more than one pass of the exercise's grid
BUFFER_BYTES = 1 << 20     # each rank's symmetric buffer: the largest case in float32, and room
IDENTICAL_SIZE = 4099      # the float32 sum every rank must hold bit for bit (bf16 inputs summed in float32 are exact
                           # in any order: only float32 inputs show an order that differs between ranks, and only from
                           # three ranks on: with two, a + b and b + a are the same bits)


def rank_input(size: int, dtype: torch.dtype, rank: int, device) -> torch.Tensor:
    """Rank `rank`'s input of a case: normal values from a seed every rank can compute."""
    g = torch.Generator().manual_seed(zlib.crc32(f"{size}/{dtype}/{rank}".encode()))
    return torch.randn(size, generator=g).to(dtype).to(device)


def expected_sum(size: int, dtype: torch.dtype, world: int, device) -> torch.Tensor:
    """The sum of every rank's input, added in rank order in float32 and rounded once to dtype."""
    acc = torch.zeros(size, dtype=torch.float32, device=device)
    for r in range(world):
        acc += rank_input(size, dtype, r, device).float()
    return acc.to(dtype)


PEER_TIMEOUT = 15  # seconds a rank waits for a peer's signal in the check (on the simulator) before it fails the case


def _any_rank(flag: bool, device) -> bool:
    """Whether `flag` holds on some rank (a collective: every rank calls it at the same point)."""
    import torch.distributed as dist

    t = torch.tensor([int(flag)], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def _rank_check(rank: int, world: int, path: str, backend: str, op: str, races: bool,
                inplace: bool = False, pad_bytes: int | None = None) -> tuple[Report, bytes | None]:
    """One rank's part of the check (run in its own process): the checker's cases one by one, every rank in step,
    until one fails on some rank (a failed all-reduce can leave a peer waiting for a signal, and the ranks out of
    step); then the sum that every rank must hold bit for bit, as bytes for the caller to compare. `inplace`: the
    input is copied into the symmetric buffer and the op reads it there. `pad_bytes`: the signal pad's size as the op
    is told it (a smaller one caps the grid, so that every thread loops over several packs)."""
    from ..build import load
    from ..distributed import SymmetricBuffer

    ext = load(path, backend, quiet=True)
    fn = getattr(ext, op)
    device = torch.device("cuda", rank) if backend == "cuda" else torch.device("cpu")
    if backend == "sim":
        from ..sim import knobs

        knobs.put(knobs.PEER_TIMEOUT, str(PEER_TIMEOUT))
    report = Report(op)
    with SymmetricBuffer(BUFFER_BYTES, backend=backend) as buf:
        def all_reduce(x: torch.Tensor, out: torch.Tensor) -> None:
            if inplace:
                x = buf.view(x.dtype, x.numel()).copy_(x)
            args = buf.args()
            fn(x, out, *args[:-1], pad_bytes or args[-1])

        def reference(x: torch.Tensor) -> torch.Tensor:
            return expected_sum(x.numel(), x.dtype, world, x.device)

        def inputs(size, dtype, dev):
            return [rank_input(size, dtype, rank, dev)]

        all_reduce.__name__ = op
        cases = [(size, dtype) for dtype in (torch.float32, torch.bfloat16) for size in SIZES]
        for k, (size, dtype) in enumerate(cases):
            one = check(all_reduce, reference, inputs, out=like(0), sizes=(size,), dtypes=(dtype,), name=op,
                        backend=backend, orders=("forward",), quiet=True, races=races)
            report.cases += one.cases
            report.hints += [h for h in one.hints if h not in report.hints]
            report.stopped = report.stopped or one.stopped
            if _any_rank(not one.passed, device):
                if k + 1 < len(cases):
                    report.stopped = (f"the check stopped after case {k + 1} of {len(cases)}: a failed all-reduce can "
                                      "leave the ranks out of step (a rank waiting for a signal that never comes); "
                                      "fix this case first")
                return report, None
        x = rank_input(IDENTICAL_SIZE, torch.float32, rank, device)
        out = torch.empty_like(x)
        try:
            all_reduce(x, out)
            got = out.cpu().view(torch.int32).numpy().tobytes()
        except Exception as e:  # noqa: BLE001 (reported as the case's failure by the caller)
            got = f"raised {type(e).__name__}: {e}".encode()
    return report, got


def _merged(op: str, results: list[tuple[Report, bytes | None]]) -> Report:
    """One report of the ranks' reports: a case passes only where it passed on every rank, and a failure names the
    rank (the one whose diagnosis says most: a race before a wait that ran out of time). Then, when every case
    passed, one more: every rank holds the same bits of one sum."""
    merged = Report(op)
    for k, case in enumerate(results[0][0].cases):
        failed = [(r, rep.cases[k]) for r, (rep, _) in enumerate(results) if not rep.cases[k].passed]
        if failed:
            r, c = min(failed, key=lambda f: (f[1].diagnosis is not Diagnosis.RACE, f[0]))
            case = Case(c.size, c.dtype, False, f"rank {r}: {c.problem}", c.detail, c.diagnosis, c.part)
        merged.cases.append(case)
    for rep, _ in results:
        merged.hints += [h for h in rep.hints if h not in merged.hints]
        merged.stopped = merged.stopped or rep.stopped
    outs = [got for _, got in results]
    if any(o is None for o in outs):
        return merged
    same = Case(f"{IDENTICAL_SIZE} on every rank", torch.float32)
    if any(o.startswith(b"raised ") for o in outs) or any(o != outs[0] for o in outs):
        bad = next(r for r, o in enumerate(outs) if o != outs[0] or o.startswith(b"raised "))
        same.passed, same.diagnosis = False, Diagnosis.WRONG_VALUES
        same.problem = (f"rank {bad}'s sum differs from rank 0's: every rank must hold the same bits (add the ranks in "
                        "one order everywhere, 0, 1, 2, ..., not starting from your own: from three ranks on the "
                        "order changes the rounding)")
        merged.hints.append("an all-reduce's result must be the same bits on every rank: data-parallel training "
                            "keeps the ranks' weights equal only if every rank applies the same gradient")
    merged.cases.append(same)
    return merged


def ranks_backend(backend: str | None, world: int = WORLD) -> str:
    """The backend the ranks run on: the GPUs when there are `world` of them, else the simulator (said once)."""
    from ..gates import ON_SIMULATOR, say

    be = resolve(backend)
    if be == "cuda" and torch.cuda.device_count() < world:
        say(f"{world} ranks need {world} GPUs, one each (this machine has {torch.cuda.device_count()})" + ON_SIMULATOR)
        return "sim"
    return be


def check_all_reduce(path, backend: str | None = None, op: str = "all_reduce", world: int = WORLD,
                     races: bool | None = None, inplace: bool = False, pad_bytes: int | None = None,
                     timeout: float | None = None) -> Report:
    """Run `op` of the built file at `path` (all_reduce.cu's signature) in `world` ranks and check it; with the
    simulator's race check on the smaller cases unless `races` is False (default: as kernels.check says). `timeout`:
    seconds before the ranks are stopped (default 600 on the simulator, 180 on GPUs, where a kernel waiting for a
    signal that never comes traps after about 30 seconds)."""
    from ..ranks import run_ranks

    from ..build import load

    be = ranks_backend(backend, world)
    plain = load(path, be, quiet=True)  # built once here, found in the cache by every rank (not built by all at once)
    if races is None:
        races = race_check_on()
    if be == "sim" and races:
        from ..sim.instrumented import twin_of

        twin_of(plain)  # the race check's build too
    results = run_ranks(_rank_check, world, args=(str(path), be, op, races, inplace, pad_bytes),
                        backend="nccl" if be == "cuda" else "gloo", timeout=timeout or (180 if be == "cuda" else 600))
    return _merged(op, results)


def run(ext, backend: str | None = None) -> Report:
    """The exercise's self-check: all_reduce.cu's op in two ranks."""
    report = check_all_reduce(ext.path, backend)
    print(report)
    return report


EXERCISES = [
    Exercise("14", "all_reduce", "all_reduce.cu", run, hints=[
        "Two parts: barrier_ranks (thread p < world signals rank p and waits for rank p's signal, between two "
        "__syncthreads), and the sum loop (the copy loop's shape, with an inner loop over the ranks).",
        Hint("The sum: for (int64_t i = first; i < n; i += stride) { float acc = 0.0f; for (int r = 0; r < world; "
             "++r) acc += to_float(buffers[r][i]); out[i] = from_float<T>(acc); }",
             answers=(Diagnosis.UNWRITTEN, Diagnosis.WRONG_VALUES)),
        Hint("A race between ranks means a signal that does not order what it should: __threadfence_system() before "
             "the atomicCAS_system that puts the signal (release) and after the one that takes it (acquire), and "
             "__syncthreads() before and after, so that the whole block's writes and reads are covered.",
             answers=(Diagnosis.RACE,)),
        "Put: uint32_t* theirs = pads[p] + blockIdx.x * world + rank; const long long start = clock64(); while "
        "(atomicCAS_system(theirs, 0u, 1u) != 0u) give_up_after(start);  Take: uint32_t* mine = pads[rank] + "
        "blockIdx.x * world + p; while (atomicCAS_system(mine, 1u, 0u) != 1u) give_up_after(start);",
    ]),
]


def first_collective(rank: int, world: int) -> list[float]:
    """The notebook's first collective: each rank holds [rank + 1, 10 (rank + 1)] and dist.all_reduce sums them in
    place on every rank (gloo on CPUs, NCCL on GPUs)."""
    import torch.distributed as dist

    device = torch.device("cuda", rank) if dist.get_backend() == "nccl" else torch.device("cpu")
    x = torch.tensor([rank + 1.0, 10.0 * (rank + 1)], device=device)
    dist.all_reduce(x)
    return x.tolist()
