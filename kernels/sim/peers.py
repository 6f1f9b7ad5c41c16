"""The simulator's symmetric memory: `PeerMemory`, a buffer and a signal pad per rank that every rank can reach.

On GPUs, `torch.distributed._symmetric_memory` gives each rank (a process, one GPU each) a buffer and a signal pad
(uint32 flags, zero at first) of the same size, and maps every peer's into every rank, so that a kernel reaches
another GPU's memory through a plain pointer (`buffer_ptrs[r]`, `signal_pad_ptrs[r]`). Here each rank is a process on
the CPU and the memory is a shared-memory segment per rank, mapped into every process:

    with PeerMemory(nbytes, signal_bytes=4096) as mem:     # collective: every rank of the group calls it
        ptrs = torch.tensor(mem.buffer_ptrs)                # int64 addresses, this process's
        ext.all_reduce(x, out, ptrs, torch.tensor(mem.signal_pad_ptrs), mem.rank, mem.world_size)

It is collective over the default process group (or `group`): each rank makes its segment, the ranks exchange the
segments' names (all_gather_object) and map each other's, then each removes its segment's name (the mappings stay),
so nothing is left in /dev/shm once they are mapped, even if a rank dies later. kernels.ranks.run_ranks removes what a
rank that died earlier left (the segments' names carry its call's tag). While it is open the simulator knows which
addresses are peer memory (the knob CUDASIM_PEERS, read at every launch): a poll of a signal pad waits by the clock
for the other ranks (CUDASIM_PEER_TIMEOUT, 60 s unset), and the race check (racecheck.checked) follows the accesses
of every rank through a shadow kept in the same segments (kernels/sim/README.md, "Peer memory between processes").
"""
from __future__ import annotations

import atexit
import itertools
import mmap
import os
import tempfile
import uuid
from pathlib import Path

import torch

from . import knobs

__all__ = ["PeerMemory", "remove_segments"]

PAGE = 4096
CELL_BYTES = 128     # the race check's shadow of one 4-byte word of a buffer (cudasim_peers.h: PeerCell fits in it)
CLOCK_BYTES = 8192   # one signal-pad word's vector clock (cudasim_peers.h: PeerClock fits in it)
MAX_CLOCKS = 1024    # signal-pad words that can carry a release (more: the check takes them as ordering everything)
PREFIX = "kernels-peers-"

_open: list["PeerMemory"] = []  # open in this process, in order: their entries make up the knob
_serial = itertools.count()


def _folder() -> Path:
    """Where segments live: /dev/shm (memory) where there is one, else the temporary folder (a file every process
    maps: shared all the same)."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() else Path(tempfile.gettempdir())


def remove_segments(tag: str) -> None:
    """Remove the segments that ranks of the run tagged `tag` still have (a rank that died before it removed its
    own); kernels.ranks.run_ranks calls it when a call ends."""
    for p in _folder().glob(f"{PREFIX}{tag}-*"):
        p.unlink(missing_ok=True)


def _round(n: int) -> int:
    return (n + PAGE - 1) // PAGE * PAGE


def shadow_bytes(nbytes: int, signal_bytes: int) -> int:
    """The race check's shadow of one rank's buffer and signal pad: a header, a cell per buffer word, a clock index
    per pad word and a pool of clocks. Mapped but not touched unless the check runs (the pages are made on use)."""
    clocks = min(signal_bytes // 4, MAX_CLOCKS)
    return _round(PAGE + nbytes // 4 * CELL_BYTES + signal_bytes // 4 * 4 + clocks * CLOCK_BYTES)


class PeerMemory:
    """A buffer of `nbytes` and a signal pad of `signal_bytes` (zeros) on every rank of `group`, each mapped into
    every rank. `buffer(r)` and `signal_pad(r)` are uint8 tensors over rank r's memory; `buffer_ptrs` and
    `signal_pad_ptrs` their addresses in this process, for a kernel. Collective: every rank must make it, with the
    same sizes, in the same order."""

    def __init__(self, nbytes: int, group=None, signal_bytes: int = 4096):
        import torch.distributed as dist

        if nbytes <= 0 or nbytes % 4 or signal_bytes <= 0 or signal_bytes % 4:
            raise ValueError(f"PeerMemory takes sizes in bytes that are multiples of 4 and above 0, got nbytes="
                             f"{nbytes} and signal_bytes={signal_bytes}")
        if not dist.is_initialized():
            raise RuntimeError("PeerMemory is collective over a torch.distributed process group, and none is "
                               "initialised: run it in ranks (kernels.ranks.run_ranks) or call "
                               "dist.init_process_group first")
        self.group = group
        self.rank, self.world_size = dist.get_rank(group), dist.get_world_size(group)
        self.nbytes, self.signal_bytes = nbytes, signal_bytes
        sizes = [None] * self.world_size
        dist.all_gather_object(sizes, (nbytes, signal_bytes), group=group)
        if any(s != (nbytes, signal_bytes) for s in sizes):
            raise ValueError(f"PeerMemory must have the same sizes on every rank (symmetric memory); the ranks asked "
                             f"for (nbytes, signal_bytes) = {sizes}")
        self._pad_at = _round(nbytes)
        self._shadow_at = self._pad_at + _round(signal_bytes)
        self._shadow_bytes = shadow_bytes(nbytes, signal_bytes)
        total = self._shadow_at + self._shadow_bytes
        tag = os.environ.get("KERNELS_RANKS_TAG") or uuid.uuid4().hex[:12]
        name = f"{PREFIX}{tag}-{os.getpid()}-{next(_serial)}-r{self.rank}"
        self._own: Path | None = _folder() / name
        atexit.register(self._unlink)
        fd = os.open(self._own, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, total)
        finally:
            os.close(fd)
        self._maps: list[mmap.mmap] = []
        self._views: list[torch.Tensor] = []
        try:
            names = [None] * self.world_size
            dist.all_gather_object(names, name, group=group)
            for other in names:
                fd = os.open(_folder() / other, os.O_RDWR)
                try:
                    self._maps.append(mmap.mmap(fd, total))
                finally:
                    os.close(fd)
            self._views = [torch.frombuffer(m, dtype=torch.uint8) for m in self._maps]
            dist.barrier(group=group)  # every rank has mapped every segment: the names can go
        finally:
            self._unlink()
        self.buffer_ptrs = [v.data_ptr() for v in self._views]
        self.signal_pad_ptrs = [p + self._pad_at for p in self.buffer_ptrs]
        _open.append(self)
        _write_knob()

    def _unlink(self) -> None:
        if self._own is not None:
            self._own.unlink(missing_ok=True)
            self._own = None

    def _check_open(self) -> None:
        if not self._views:
            raise RuntimeError("this PeerMemory is closed: expected it open (make a new one)")

    def buffer(self, r: int) -> torch.Tensor:
        """Rank r's buffer as a uint8 tensor (its bytes, mapped: a write here is a write there)."""
        self._check_open()
        return self._views[r][:self.nbytes]

    def signal_pad(self, r: int) -> torch.Tensor:
        """Rank r's signal pad as a uint8 tensor (`.view(torch.int32)` for its slots)."""
        self._check_open()
        return self._views[r][self._pad_at:self._pad_at + self.signal_bytes]

    def knob_entries(self) -> list[str]:
        """This memory's entries of CUDASIM_PEERS: a rank's segment each (knobs.peers_value says the format)."""
        return [f"{r}:{self.rank}:{p:x}:{self.nbytes:x}:{p + self._pad_at:x}:{self.signal_bytes:x}:"
                f"{p + self._shadow_at:x}:{self._shadow_bytes:x}" for r, p in enumerate(self.buffer_ptrs)]

    def close(self) -> None:
        """Unmap every segment (a tensor still viewing one keeps its mapping until the process ends)."""
        if self in _open:
            _open.remove(self)
            _write_knob()
        self._views = []
        for m in self._maps:
            try:
                m.close()
            except BufferError:  # a tensor from buffer() still views it
                pass
        self._maps = []
        self._unlink()

    def __enter__(self) -> "PeerMemory":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _write_knob() -> None:
    entries = [e for m in _open for e in m.knob_entries()]
    knobs.put(knobs.PEERS, ";".join(entries) if entries else None)
