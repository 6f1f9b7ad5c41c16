// cudasim_torch_extension.h: what a sim build includes in place of <torch/extension.h> when the file
// uses pybind11 (PYBIND11_MODULE, py::) or Python's C API: cudasim_torch_all.h (tensors, ATen's
// functions, AT_DISPATCH, the op registry) and pybind11 with PyTorch's type casters for tensors.
// kernels/sim/build.py chooses between the two (see LIGHT_TORCH there).
#pragma once

#include <cudasim_torch_all.h>
#include <torch/csrc/utils/pybind.h>
