"""Builds mulop._C, the CUDA kernels of the mulop package, with nvcc (pyproject.toml has the rest).

CUDAExtension adds PyTorch's include paths, libraries and the CUDA runtime; BuildExtension
compiles .cu files with nvcc and .cpp files with the C++ compiler, with PyTorch's flags, and
defines TORCH_EXTENSION_NAME (here `_C`). TORCH_CUDA_ARCH_LIST picks the GPUs to compile for
(default: the GPUs of this machine), e.g. TORCH_CUDA_ARCH_LIST=9.0 for an H100.
"""
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    ext_modules=[
        CUDAExtension(
            name="mulop._C",
            sources=["mulop/csrc/mulop.cu"],
            extra_compile_args={"cxx": ["-O2"], "nvcc": ["-O3", "-lineinfo"]},
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
