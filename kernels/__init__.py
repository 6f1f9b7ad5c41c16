"""The toolkit of the CUDA-kernels-for-PyTorch lessons: build, check and benchmark .cu files.

    from kernels import load, device, profile, barrier_trace
    from kernels.check import check, elementwise, like
    from kernels.bench import bench

`load` builds a .cu file (`load_inline` a string of CUDA source) on the `cuda` backend (a GPU) or the
`sim` backend (the CPU simulator in kernels/sim), `check` compares a kernel with PyTorch, `bench` times
it against PyTorch, `profile` counts a sim kernel's memory accesses per source line (sectors, bank
conflicts, lanes) and `barrier_trace` shows which warp of a sim kernel waited on which mbarrier, and
for how long.

The package: the public API here and in check.py, bench.py, backend.py; the notebooks' set-up on Colab in
colab.py; the engine in build/ (the loader) and sim/ (the simulator); what each lesson declares in lessons/; the
lessons' GPU benchmarks in benchmarks/; the GPU tools (Nsight Compute, compute-sanitizer, ptxas, doctor) in tools/;
the maintainers' tools (the test runner, the nvcc compile check, the notebook runner, the notebooks' Colab cells)
in dev/.
"""
from .backend import device, gpu_available, resolve as resolve_backend
from .build import BuildError, load, load_inline

TOOLKIT = "cuda-kernels-for-pytorch"  # tells this package apart from other packages named `kernels`

__all__ = ["load", "load_inline", "BuildError", "profile", "barrier_trace", "device", "resolve_backend", "gpu_available",
           "TOOLKIT"]


# Names imported on first use, so that `import kernels` on the nvcc path loads nothing of the simulator:
# `profile` (the simulator's access profiler), `barrier_trace` (its mbarrier trace) and lesson 11's routes by their
# short names.
_LAZY = {"profile": (".sim.profile", "profile"), "barrier_trace": (".sim.trace", "barrier_trace"),
         "cupy_route": (".lessons.lesson11_cupy", None),
         "triton_ops": (".lessons.lesson11_triton", None)}


def __getattr__(name: str):
    import importlib

    if name in _LAZY:
        module, attr = _LAZY[name]
        found = importlib.import_module(module, __name__)
        return getattr(found, attr) if attr else found
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
