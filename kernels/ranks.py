"""Run a function in several processes at once, one per rank, with torch.distributed set up: `run_ranks`.

    from kernels.ranks import run_ranks
    sums = run_ranks(all_reduce_once, world_size=2, args=(1024,))   # all_reduce_once(rank, world_size, 1024) in each

Each rank is a fresh process (spawn), so `fn` must be a function at module level of a module the child can import
(a test file, a lesson's module), and its arguments and result must pickle. The processes join a process group over
localhost (gloo; nccl with one GPU per rank when asked) before `fn` runs and leave it after. The results come back in
rank order. A rank that raises stops the others at once, and its exception comes back here as a RankError naming the
rank, with the rank's traceback as text; a rank that runs past `timeout` seconds, or dies without a result, is an error
too: nothing waits for ever. Shared-memory segments that the ranks' PeerMemory left behind (kernels/sim/peers.py) are
removed when the call ends, whatever happened.
"""
from __future__ import annotations

import contextlib
import datetime
import multiprocessing as mp
import os
import queue
import socket
import sys
import time
import traceback
import uuid
from typing import Any, Callable

__all__ = ["RankError", "run_ranks", "TAG"]

# NVLink multicast (NVLS, NVLink SHARP) stays off in every rank this module starts, unless the caller's environment says
# otherwise: the lessons' communication is plain peer loads and stores, and NCCL and PyTorch's symmetric memory
# would otherwise set up multicast objects on machines that have them.
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
TAG = "KERNELS_RANKS_TAG"  # the call's name for its ranks' shared-memory segments (kernels/sim/peers.py)


class RankError(RuntimeError):
    """A rank failed: `rank`, the exception's `kind` (its class name) and `message`, and the rank's `traceback`."""

    def __init__(self, rank: int, kind: str, message: str, trace: str):
        self.rank, self.kind, self.message, self.traceback = rank, kind, message, trace
        super().__init__(f"rank {rank} raised {kind}: {message}\n\nthe traceback in rank {rank}:\n{trace}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(fn, rank: int, world_size: int, args: tuple, backend: str, port: int, tag: str, timeout: float,
               out, env: dict[str, str]) -> None:
    """One rank: join the group, run fn, send (rank, ok, result or failure) to the parent."""
    os.environ.update(env)
    os.environ[TAG] = tag
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size))
    try:
        import torch
        import torch.distributed as dist

        if backend == "nccl":
            for name, value in NO_MULTICAST.items():
                os.environ.setdefault(name, value)
            torch.cuda.set_device(rank)
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout),
                                device_id=torch.device("cuda", rank) if backend == "nccl" else None)
        dist.barrier()  # every rank's side of the connections is up: a rank whose fn returns at once and leaves the
        # group could otherwise close its end while a peer is still connecting (gloo's "Connection closed by peer")
        try:
            result = fn(rank, world_size, *args)
        finally:
            dist.destroy_process_group()
        out.put((rank, True, result))
    except BaseException as e:  # noqa: BLE001 - every failure goes back to the caller, named
        out.put((rank, False, (type(e).__name__, str(e), traceback.format_exc())))


@contextlib.contextmanager
def _main_not_rerun():
    """While the ranks start: a spawned process runs the parent's main script again before anything else, unless
    the script sits under `if __name__ == "__main__":`. A learner's script that calls a self-check at its top level
    would start the ranks again from every rank (multiprocessing refuses that). Nothing the ranks run lives in the
    main script (fn must be importable), so they are started without it: __main__'s file and spec are hidden while
    the processes are made."""
    main = sys.modules.get("__main__")
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if main is not None and k in main.__dict__}
    try:
        for k in saved:
            setattr(main, k, None) if k == "__spec__" else delattr(main, k)
        yield
    finally:
        for k, v in saved.items():
            setattr(main, k, v)


def _remove_segments(tag: str) -> None:
    from .sim.peers import remove_segments

    remove_segments(tag)


def run_ranks(fn: Callable[..., Any], world_size: int = 2, args: tuple = (), backend: str = "gloo",
              timeout: float = 300, env: dict[str, str] | None = None) -> list:
    """[fn(0, world_size, *args), ..., fn(world_size - 1, world_size, *args)], each run in a process of its own
    with torch.distributed initialised (`backend`: "gloo", or "nccl" with GPU `rank` for each rank), with `env`
    added to each rank's environment before it starts torch (this process's stays as it is). A rank's
    exception is raised here as a RankError naming the rank; past `timeout` seconds every rank is stopped and a
    TimeoutError says which ranks had not finished."""
    if world_size < 1:
        raise ValueError(f"world_size must be 1 or more, got {world_size}")
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'gloo' or 'nccl', got {backend!r}")
    if getattr(fn, "__module__", None) == "__main__":
        raise ValueError(f"run_ranks needs fn from a module the ranks can import, got {getattr(fn, '__name__', fn)!r} "
                         "defined in the main script or notebook (each rank is a fresh process): put it in a .py file "
                         "beside it and import it from there")
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port, tag = _free_port(), uuid.uuid4().hex[:12]
    procs = [ctx.Process(target=_rank_main, args=(fn, r, world_size, tuple(args), backend, port, tag, timeout, out,
                                                  dict(env or {})),
                         daemon=True, name=f"rank-{r}") for r in range(world_size)]
    results: dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    try:
        with _main_not_rerun():
            for p in procs:
                p.start()
        gone: dict[int, float] = {}  # rank -> when its process was first seen ended without a result
        while len(results) < world_size:
            try:
                rank, ok, payload = out.get(timeout=0.1)
            except queue.Empty:
                now = time.monotonic()
                for r, p in enumerate(procs):
                    if r not in results and p.exitcode is not None:
                        if now - gone.setdefault(r, now) > 2.0:  # its last message had time to arrive
                            raise RankError(r, "ProcessDied", f"the process of rank {r} ended with exit code "
                                            f"{p.exitcode} without a result (expected fn to return or raise; a "
                                            "negative code is the signal that killed it)", "(no traceback)")
                if now > deadline:
                    late = [r for r in range(world_size) if r not in results]
                    raise TimeoutError(f"run_ranks: ranks {late} of {world_size} had not finished after {timeout} s "
                                       "(expected every rank to return); every rank was stopped. A rank waiting for "
                                       "another that never signals looks like this")
                continue
            if not ok:
                raise RankError(rank, *payload)
            results[rank] = payload
        return [results[r] for r in range(world_size)]
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        for p in procs:
            if p.pid is not None:  # started (a failure to start leaves the others to join)
                p.join(timeout=10)
        out.close()
        _remove_segments(tag)
