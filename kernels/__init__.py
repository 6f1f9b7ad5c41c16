"""The toolkit of the CUDA-kernels-for-PyTorch lessons: build, check and benchmark .cu files.

    from kernels import load, check, bench, device

`load` builds a .cu file (`load_inline` a string of CUDA source) on the `cuda` backend (a GPU) or the `sim` backend (the CPU simulator
in kernels/sim), `check` compares a kernel with PyTorch, `bench` times it against PyTorch, and
`profile` counts a sim kernel's memory accesses per source line (sectors, bank conflicts, lanes).
"""
from .backend import device, gpu_available, resolve as resolve_backend
from .build import BuildError, build, load, load_inline
from .profiling import profile

TOOLKIT = "cuda-kernels-for-pytorch"  # tells this package apart from other packages named `kernels`

__all__ = ["load", "load_inline", "build", "BuildError", "profile", "device", "resolve_backend", "gpu_available", "TOOLKIT"]
