"""CPU memory that ends at an inaccessible page: the checker's buffers on the simulator.

The checker carves every tensor it hands a kernel from a larger buffer whose margins hold canaries, so
a write a little past the end is seen afterwards. A write far past the end (a whole tile of a ragged
matmul) would go beyond the margins into the allocator's own memory and corrupt the process (glibc then
aborts it, or a Jupyter kernel dies). A buffer from `guarded_buffer` sits between two large stretches of
address space with no access at all, so such a write faults instead, where the simulator turns the fault
into an error naming the kernel's line ("illegal memory access"), as a GPU would stop the kernel.
"""
from __future__ import annotations

import ctypes
import mmap
import platform
import sys
import weakref

import torch

GUARD = 64 << 20  # bytes of no access on each side: more than a tile's overshoot over any tensor here
ALIGN = 256       # the data of a tensor carved from the buffer starts at a multiple of this

_PROT_NONE, _PROT_RW = 0, mmap.PROT_READ | mmap.PROT_WRITE
# Linux: MAP_NORESERVE, so the guards' address space is not counted against memory (Python 3.11's mmap
# lacks the name; 0x4000 on x86-64 and arm64). macOS has no such flag (0x4000 means another thing there)
# and commits nothing for pages with no access anyway.
_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000 if platform.machine() in ("x86_64", "aarch64") else 0)
_MAP_FLAGS = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | (_NORESERVE if sys.platform.startswith("linux") else 0)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


def _unmap(base: int, size: int) -> None:
    _libc.munmap(base, size)


def guarded_buffer(elements: int, dtype: torch.dtype, tail: int) -> tuple[torch.Tensor, int]:
    """(buffer, start): a 1-D CPU tensor of at least `elements + tail` elements of `dtype`, and the element
    index where `elements` elements can start so that ALIGN-aligned data is followed by `tail` to `tail` +
    ALIGN bytes' worth of elements before the buffer ends at a page with no access. Every element before
    `start` and after `start + elements` is margin (the caller fills it with canaries)."""
    size = torch.empty((), dtype=dtype).element_size()
    page = mmap.PAGESIZE
    need = (elements + tail) * size + ALIGN
    span = -(-need // page) * page
    total = GUARD + span + GUARD
    base = _libc.mmap(None, total, _PROT_NONE, _MAP_FLAGS, -1, 0)
    if base in (None, ctypes.c_void_p(-1).value):
        raise MemoryError(f"could not map {total} bytes of address space for a guarded buffer")
    if _libc.mprotect(base + GUARD, span, _PROT_RW) != 0:
        _libc.munmap(base, total)
        raise MemoryError("could not make a guarded buffer's pages accessible")
    raw = (ctypes.c_uint8 * span).from_address(base + GUARD)
    weakref.finalize(raw, _unmap, base, total)  # the pages go when the last tensor on them does
    buf = torch.frombuffer(raw, dtype=torch.uint8).view(dtype)
    end = span // size  # the buffer ends where the guard after it begins
    start = ((end - tail - elements) * size // ALIGN * ALIGN) // size
    return buf, start
