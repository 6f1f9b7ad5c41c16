"""The GPU route: link the library that `make` built into a PyTorch extension.

    make && python setup.py build_ext --inplace      (then `import vector_add_ext` from this folder)

CUDAExtension compiles binding.cpp with the host compiler (it has no .cu sources, so nvcc is not run), adds
the CUDA toolkit's include folder and links libcudart; libraries/library_dirs link libvector_add.a. On the
simulator this file is not used: kernels.load(binding.cpp, "sim", extra_objects=[...]) links the library
that `make NVCC=kernels/sim/nvcc-sim` built (kernels/lessons/lesson11.py, build_cuda_library).
"""
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

BUILD = os.environ.get("BUILD", "build")  # where `make` put the library (make's BUILD)
# the module's name; the course's checks give each planted copy's build its own (with one name for all, a planted
# copy's module imported after the fixed one behaved as the fixed one, and its bug passed the check)
NAME = os.environ.get("EXT_NAME", "vector_add_ext")

setup(
    name=NAME,
    ext_modules=[CUDAExtension(NAME, ["binding.cpp"], libraries=["vector_add"], library_dirs=[BUILD])],
    cmdclass={"build_ext": BuildExtension},
)
