"""Memory that every rank's kernels can read and write: `SymmetricBuffer`, on both backends (lesson 14).

    buf = SymmetricBuffer(1 << 20)          # collective: every rank of the group calls it with the same size
    ext.all_reduce1(x, out, buf.buffer, buf.buffer_ptrs, buf.signal_pad_ptrs, buf.rank, buf.signal_pad_bytes)

Every rank allocates `nbytes` of buffer and a signal pad (uint32 flags, zero at the start); a rendezvous maps
every rank's buffer and pad into every rank, and the kernels get their addresses in two int64 tensors,
`buffer_ptrs[r]` and `signal_pad_ptrs[r]` for rank r. On GPUs that is PyTorch's symmetric memory
(torch.distributed._symmetric_memory: the buffers live on the GPUs, and a kernel's loads and stores to a peer's
address cross NVLink); on the simulator it is shared memory between the ranks' processes
(kernels/sim/peers.py), and the simulator knows which addresses belong to which rank.

torch.distributed must be initialised (NCCL on GPUs, gloo on the simulator: kernels.ranks.run_ranks does it).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from .backend import resolve

__all__ = ["SymmetricBuffer"]


class SymmetricBuffer:
    """`nbytes` of symmetric memory and a signal pad on every rank of `group` (default: every rank).

    buffer: this rank's buffer, a uint8 tensor (a CUDA tensor on GPUs, a CPU tensor on the simulator);
    buffer_ptrs, signal_pad_ptrs: int64 tensors of every rank's addresses, on the device the kernels run on;
    signal_pad_bytes: the size of each signal pad; rank, world_size: this rank's place in the group.
    """

    def __init__(self, nbytes: int, group: dist.ProcessGroup | None = None, backend: str | None = None):
        if not dist.is_initialized():
            raise RuntimeError("SymmetricBuffer needs torch.distributed initialised first (init_process_group; "
                               "kernels.ranks.run_ranks starts ranks with it)")
        if nbytes <= 0:
            raise ValueError(f"a symmetric buffer needs a positive size in bytes, got {nbytes}")
        self.backend = resolve(backend)
        group = group or dist.group.WORLD
        self._peers = None
        if self.backend == "cuda":
            from torch.distributed import _symmetric_memory as symm_mem

            device = torch.device("cuda", torch.cuda.current_device())
            self.buffer = symm_mem.empty(nbytes, dtype=torch.uint8, device=device)
            handle = symm_mem.rendezvous(self.buffer, group.group_name)
            self.rank, self.world_size = handle.rank, handle.world_size
            self.signal_pad_bytes = handle.signal_pad_size
            self._handle = handle  # keeps the peers' mappings alive
            buffers, pads = list(handle.buffer_ptrs), list(handle.signal_pad_ptrs)
        else:
            from .sim.peers import PeerMemory

            device = torch.device("cpu")
            self._peers = PeerMemory(nbytes, group=group)
            self.rank, self.world_size = self._peers.rank, self._peers.world_size
            self.buffer = self._peers.buffer(self.rank)
            self.signal_pad_bytes = self._peers.signal_pad(self.rank).numel()
            buffers, pads = self._peers.buffer_ptrs, self._peers.signal_pad_ptrs
        self.buffer_ptrs = torch.tensor(buffers, dtype=torch.int64, device=device)
        self.signal_pad_ptrs = torch.tensor(pads, dtype=torch.int64, device=device)

    def view(self, dtype: torch.dtype, numel: int) -> torch.Tensor:
        """The buffer's first `numel` elements as a tensor of `dtype`: write a rank's data there and an op reads it
        in place, without the copy into the buffer."""
        size = torch.empty(0, dtype=dtype).element_size()
        if numel * size > self.buffer.numel():
            raise ValueError(f"{numel} {dtype} elements ({numel * size} bytes) do not fit in the symmetric buffer "
                             f"({self.buffer.numel()} bytes)")
        return self.buffer[: numel * size].view(dtype)

    def args(self) -> tuple:
        """What the lesson's ops take after x and out: buffer, buffer_ptrs, signal_pad_ptrs, rank, signal_pad_bytes."""
        return self.buffer, self.buffer_ptrs, self.signal_pad_ptrs, self.rank, self.signal_pad_bytes

    def close(self) -> None:
        """Unmaps the peers' memory (the simulator's segments); the GPU's is freed with the tensor."""
        if self._peers is not None:
            self._peers.close()
            self._peers = None

    def __enter__(self) -> SymmetricBuffer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
