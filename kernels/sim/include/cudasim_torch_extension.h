// cudasim_torch_extension.h: what a sim build includes in place of <torch/extension.h> when the file
// uses pybind11 (PYBIND11_MODULE, py::) or Python's C API: cudasim_torch_all.h (tensors, ATen's
// functions, AT_DISPATCH, the op registry), pybind11 with PyTorch's type casters for tensors, and
// torch::wrap_pybind_function (what the bindings that PyTorch's load_inline writes call).
// kernels/sim/build.py chooses between the two (see LIGHT_TORCH there).
#pragma once

#include <cudasim_torch_all.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/Exceptions.h>
