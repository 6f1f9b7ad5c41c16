"""Which backend runs the kernels: `cuda` (a GPU) or `sim` (the CPU simulator), and on which device."""
from __future__ import annotations

import os

BACKENDS = ("cuda", "sim")
ENV = "KERNELS_BACKEND"
THREADS_ENV = "OMP_NUM_THREADS"  # set, it also decides PyTorch's intra-op threads on the sim backend
_threads_settled = False


def gpu_available() -> bool:
    """True when PyTorch sees a CUDA GPU."""
    import torch

    return torch.cuda.is_available()


def gpu_capability() -> tuple[int, int] | None:
    """The compute capability of the GPU the cuda backend runs on (the current device), as (major, minor);
    None without a GPU. What kernels.gates compares with each kernel's needs (and what its tests stand in for)."""
    import torch

    return tuple(torch.cuda.get_device_capability()) if gpu_available() else None


def resolve(backend: str | None = None) -> str:
    """The backend to use: the argument, else $KERNELS_BACKEND, else `cuda` with a GPU and `sim` without."""
    choice = backend or os.environ.get(ENV) or ("cuda" if gpu_available() else "sim")
    choice = choice.strip().lower()
    if choice not in BACKENDS:
        raise ValueError(f"unknown backend {choice!r}: expected one of {', '.join(BACKENDS)}")
    if choice == "cuda" and not gpu_available():
        raise RuntimeError(
            "the cuda backend needs a GPU that PyTorch can see (torch.cuda.is_available() is False); "
            "use backend='sim' to run the same code on the CPU simulator"
        )
    return choice


def reason(backend: str | None = None) -> str:
    """One line saying which backend is chosen and why."""
    if backend:
        return f"{backend} (asked for by argument)"
    if os.environ.get(ENV):
        return f"{os.environ[ENV]} (from ${ENV})"
    if gpu_available():
        return "cuda (PyTorch sees a GPU)"
    return "sim (PyTorch sees no GPU, so kernels run on the CPU simulator)"


def device(backend: str | None = None):
    """The torch.device that a backend's kernels take tensors on: cuda for `cuda`, cpu for `sim`."""
    import torch

    return torch.device("cuda" if resolve(backend) == "cuda" else "cpu")


def settle_torch_threads() -> None:
    """Give PyTorch one intra-op thread, once per process, when a kernel is first loaded for the simulator.

    The simulator runs a kernel on the calling thread, and the PyTorch ops around it in the lessons are small. With
    several intra-op threads, PyTorch's idle workers keep spinning after each op and take the cores the simulator
    needs; on a loaded 2-core machine a loop of a 64x32 @ 32x96 matmul and one simulated launch took 0.6-0.9 ms
    per iteration with two threads and 0.2-0.3 ms with one. $OMP_NUM_THREADS, when set, is left to decide."""
    global _threads_settled
    if _threads_settled or THREADS_ENV in os.environ:
        return
    import torch

    torch.set_num_threads(1)
    _threads_settled = True
