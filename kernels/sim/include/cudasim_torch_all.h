// cudasim_torch_all.h: what a sim build includes in place of <torch/all.h>, and of <torch/extension.h>
// when the file does not use pybind11 or Python's C API (it registers its ops with TORCH_LIBRARY, as
// PyTorch's current extension examples do).
//
// torch/extension.h brings all of libtorch's C++ API (torch::nn, autograd, optimizers, ...) and
// pybind11; parsing it, instantiating its templates and generating its code costs a sim build
// about 20 s of compiler time. Extension code mostly uses a small part of it: tensors and their
// methods, checks, AT_DISPATCH_*, ATen's functions (torch::zeros_like, torch::sigmoid, ...),
// packed accessors and the op registry. This header holds that part, with torch::'s names for
// at::, as torch/types.h gives them. (ATen/Functions.h declares every ATen function; against only
// the few factory functions' headers it costs about 1 s a build and 110 MB of precompiled header,
// and spares most extension files the slower fallback.) pybind11 is left out: it generates about
// 4 s of code in every file that includes it, used or not; cudasim_torch_extension.h adds it for
// files that bind with PYBIND11_MODULE.
// kernels/sim/build.py maps the include here or there on sim builds and, when a file uses something
// outside this set, builds it again with the real torch/extension.h.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/DeviceGuard.h>
#include <ATen/Dispatch.h>
#include <ATen/Functions.h>
#include <torch/library.h>

#include <optional>

namespace torch {
using namespace at;  // NOLINT: torch::Tensor, torch::zeros_like, torch::RestrictPtrTraits, ...

using std::nullopt;
using std::optional;

using Dtype = at::ScalarType;

constexpr auto kUInt8 = at::kByte;
constexpr auto kInt8 = at::kChar;
constexpr auto kInt16 = at::kShort;
constexpr auto kInt32 = at::kInt;
constexpr auto kInt64 = at::kLong;
constexpr auto kUInt16 = at::kUInt16;
constexpr auto kUInt32 = at::kUInt32;
constexpr auto kUInt64 = at::kUInt64;
constexpr auto kFloat16 = at::kHalf;
constexpr auto kFloat32 = at::kFloat;
constexpr auto kFloat64 = at::kDouble;

constexpr auto kU8 = kUInt8;
constexpr auto kU16 = kUInt16;
constexpr auto kU32 = kUInt32;
constexpr auto kU64 = kUInt64;
constexpr auto kI8 = kInt8;
constexpr auto kI16 = kInt16;
constexpr auto kI32 = kInt32;
constexpr auto kI64 = kInt64;
constexpr auto kF16 = kFloat16;
constexpr auto kF32 = kFloat32;
constexpr auto kF64 = kFloat64;
}  // namespace torch
