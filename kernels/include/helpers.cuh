// helpers.cuh: the one header of helpers every kernel file in this repository includes.
//
//   CHECK_CUDA(x), CHECK_CONTIGUOUS(x), CHECK_DTYPE(x, dtype), CHECK_SAME_SHAPE(x, y), CHECK_INPUT(x),
//   CHECK_MATMUL_SHAPES(a, b, c)
//       input checks whose errors say what was expected and what came
//   ceil_div(a, b)            blocks needed to cover a elements, b per block
//   CHECK_LAUNCH()            the launch error, checked right after a launch
//   device_attribute(attr)    an attribute of the current device (SMs, shared memory per block)
//   arch_at_least(arch), tensor_core_arch<T>(), check_capability(op, arch, what)
//       gates for kernels that need more than compute capability 7.5 (the lessons' smallest GPU, a T4)
//   warp_reduce_sum/max, block_reduce_sum/max      (lesson 06 builds these)
//   block_sums<N>(v, scratch)  N block sums with one barrier (lessons 07, 08)
//   to_float(v), from_float<T>(f)      float32, bfloat16 and fp16 widened to float and rounded back
//   kVec<T>, Pack<T>, load16, store16  16 bytes of T moved by one instruction (lessons 05, 07, 08)
//   keep_packed(p)            keeps a pack 16 bytes in registers, not widened to floats (lessons 07, 08)
//   dispatch(x, f), ptr<T>(t), mut<T>(t), aligned16(t)
//       run a generic lambda for x's dtype (float32 or bfloat16); a tensor's data as const T* / T*
//   TORCH_LIBRARY_EXPAND / TORCH_LIBRARY_FRAGMENT_EXPAND / TORCH_LIBRARY_IMPL_EXPAND
//       register ops under this build's own name
//
// The same header compiles with nvcc (the cuda backend) and in the CPU simulator (the sim
// backend, where CUDASIM is defined and "CUDA tensors" are CPU tensors).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>
#include <cstring>
#include <string>
#include <torch/library.h>
#include <type_traits>

// ---------------------------------------------------------------------------------------------
// Input checks. On a GPU a kernel needs CUDA tensors; the simulator runs the same kernel on CPU
// tensors, so there "CUDA tensor" means a tensor on the device the simulator uses.
#ifdef CUDASIM
#define KERNELS_ON_DEVICE(x) ((x).device().is_cpu())
#define KERNELS_DEVICE_WORD "a CPU tensor (the simulator runs CUDA kernels on CPU tensors)"
#else
#define KERNELS_ON_DEVICE(x) ((x).device().is_cuda())
#define KERNELS_DEVICE_WORD "a CUDA tensor"
#endif

// A tensor's shape as "[2, 3]". Messages in kernels/ format shapes with shape_str and numbers with
// std::to_string: one form on every backend. Streamed straight into TORCH_CHECK, an integer or
// sizes() killed the process (SIGSEGV) in an nvcc-built extension on an H100 machine (torch 2.11,
// CUDA 13.0), while the simulator's build took them; tests/toolkit/check_message.cu is the probe.
inline std::string shape_str(c10::IntArrayRef sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}

#define CHECK_CUDA(x) \
  TORCH_CHECK(KERNELS_ON_DEVICE(x), #x " must be " KERNELS_DEVICE_WORD ", got a tensor on ", (x).device())
#define CHECK_CONTIGUOUS(x)                                                                                \
  TORCH_CHECK((x).is_contiguous(), #x " must be contiguous, got strides ", shape_str((x).strides()),        \
              " for shape ", shape_str((x).sizes()), " (call .contiguous() first)")
#define CHECK_DTYPE(x, dt) \
  TORCH_CHECK((x).scalar_type() == (dt), #x " must have dtype ", c10::toString(dt), ", got ", (x).scalar_type())
#define CHECK_SAME_SHAPE(x, y)                                                                     \
  TORCH_CHECK((x).sizes() == (y).sizes(), #x " and " #y " must have the same shape, got ",           \
              shape_str((x).sizes()), " and ", shape_str((y).sizes()))
#define CHECK_SAME_DTYPE(x, y) \
  TORCH_CHECK((x).scalar_type() == (y).scalar_type(), #x " and " #y " must have the same dtype, got ", \
              (x).scalar_type(), " and ", (y).scalar_type())
#define CHECK_DIM(x, d) \
  TORCH_CHECK((x).dim() == (d), #x " must have ", std::to_string(d), " dimensions, got shape ", shape_str((x).sizes()))
#define CHECK_INPUT(x) \
  CHECK_CUDA(x);       \
  CHECK_CONTIGUOUS(x)
// a: [M, K] times b: [K, N] into c: [M, N] (2-D tensors).
#define CHECK_MATMUL_SHAPES(a, b, c)                                                                          \
  TORCH_CHECK((a).size(1) == (b).size(0), #a "'s columns must equal " #b "'s rows (" #a ": [M, K], " #b         \
              ": [K, N]), got " #a " ", shape_str((a).sizes()), " and " #b " ", shape_str((b).sizes()));         \
  TORCH_CHECK((c).size(0) == (a).size(0) && (c).size(1) == (b).size(1), #c " must have shape [M, N] = ",         \
              shape_str({(a).size(0), (b).size(1)}), ", got ", shape_str((c).sizes()))

// ---------------------------------------------------------------------------------------------
// Launch configuration.
template <typename A, typename B>
__host__ __device__ constexpr auto ceil_div(A a, B b) {
  return (a + b - 1) / b;
}

// A <<<...>>> launch returns no status: a configuration CUDA refuses (too many threads, too much
// shared memory) is only recorded in CUDA's error state, where the next op that looks would
// report it as its own. So ask right after the launch. Errors raised while the kernel runs (an
// illegal address) surface only at a later synchronisation; CUDA_LAUNCH_BLOCKING=1 or
// compute-sanitizer pin those down. (No cudaDeviceSynchronize here: it would stall the CPU.)
#define CHECK_LAUNCH() C10_CUDA_KERNEL_LAUNCH_CHECK()

// An attribute of the current device: device_attribute(cudaDevAttrMultiProcessorCount) is its number of
// SMs, cudaDevAttrMaxSharedMemoryPerBlockOptin the most dynamic shared memory a block may opt in to.
inline int device_attribute(cudaDeviceAttr attr) {
  int dev = 0, value = 0;
  C10_CUDA_CHECK(cudaGetDevice(&dev));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&value, attr, dev));
  return value;
}

// Compute-capability gates. The lessons run on GPUs of compute capability 7.5 (a T4) and up. Device code that
// needs a later GPU (bf16 or TF32 tensor cores: 8.0) sits under `if constexpr (arch_at_least(...))` with a body
// that traps otherwise, so that the file still builds for every GPU; its launcher refuses an older GPU first,
// with check_capability. The kernel's lesson declares the same gate (kernels/lessons/lessonNN.py: Needs), and on
// an older GPU the toolkit runs the op on the simulator instead (kernels/gates.py); the message is the same.

// Whether device code is being compiled for architecture `arch` or later, written as __CUDA_ARCH__ writes it
// (compute capability x 100: 800 for 8.0); true in host code and on the simulator, which compile every branch.
__host__ __device__ constexpr bool arch_at_least(int arch) {
#ifdef __CUDA_ARCH__
  return __CUDA_ARCH__ >= arch;
#else
  return arch > 0;
#endif
}

// The first architecture whose tensor cores (WMMA) take T: 700 for fp16, 800 for bf16 and for float as TF32.
template <typename T>
__host__ __device__ constexpr int tensor_core_arch() {
  return std::is_same<T, __half>::value ? 700 : 800;
}

// Refuses a GPU below architecture `arch` (800 for 8.0) for `op` ("`matmul11` needs compute capability 8.0 for
// TF32 tensor cores (this GPU has 7.5)"; `dtype`, when the gate holds in one dtype only, is named after the op).
inline void check_capability(const char* op, int arch, const char* what, const char* dtype = nullptr) {
  const int major = device_attribute(cudaDevAttrComputeCapabilityMajor);
  const int minor = device_attribute(cudaDevAttrComputeCapabilityMinor);
  TORCH_CHECK(major * 100 + minor * 10 >= arch, "`", op, "`", dtype ? std::string(" in ") + dtype : std::string(),
              " needs compute capability ", std::to_string(arch / 100) + "." + std::to_string(arch / 10 % 10), " for ",
              what, " (this GPU has ", std::to_string(major) + "." + std::to_string(minor), ")");
}

// A 1-D grid may hold at most 2^31 - 1 blocks.
#define CHECK_GRID(blocks) \
  TORCH_CHECK((blocks) <= 2147483647LL, "the input is too large for a 1-D grid: ", std::to_string(blocks), " blocks needed")

// ---------------------------------------------------------------------------------------------
// Registering ops. TORCH_LIBRARY turns its namespace argument into a string before macros
// expand, so TORCH_LIBRARY(TORCH_EXTENSION_NAME, m) would register the literal name
// "TORCH_EXTENSION_NAME". One more macro layer expands it first, so each build of a file gets
// its own namespace and an edited exercise can be rebuilt and loaded in the same session.
#define TORCH_LIBRARY_EXPAND(ns, m) TORCH_LIBRARY(ns, m)
#define TORCH_LIBRARY_FRAGMENT_EXPAND(ns, m) TORCH_LIBRARY_FRAGMENT(ns, m)
#define TORCH_LIBRARY_IMPL_EXPAND(ns, k, m) TORCH_LIBRARY_IMPL(ns, k, m)

// ---------------------------------------------------------------------------------------------
// Warp and block reductions (lesson 06 explains them).
constexpr unsigned FULL_MASK = 0xffffffffu;

// Every lane of a full warp calls this; lane 0 ends with the warp's sum.
template <typename T>
__device__ __forceinline__ T warp_reduce_sum(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(FULL_MASK, v, offset);
  return v;
}

// Every lane ends with the warp's maximum (a butterfly: xor exchanges keep all lanes equal).
template <typename T>
__device__ __forceinline__ T warp_reduce_max(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v = max(v, __shfl_xor_sync(FULL_MASK, v, offset));
  return v;
}

// Every lane ends with the warp's sum.
template <typename T>
__device__ __forceinline__ T warp_allreduce_sum(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(FULL_MASK, v, offset);
  return v;
}

// All threads of the block call these (blockDim.x a multiple of 32, at most 1024); every thread
// gets the block's result. `scratch` is 32 values of shared memory the caller owns.
template <typename T>
__device__ __forceinline__ T block_reduce_sum(T v, T* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  v = warp_allreduce_sum(v);
  __syncthreads();  // scratch may still be read by an earlier call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();  // wait until every warp has written its partial sum
  v = lane < nwarps ? scratch[lane] : T(0);
  return warp_allreduce_sum(v);
}

// The block's totals of N per-thread values, in every thread, with one barrier for all N. block_reduce_sum
// takes two for each value: its first keeps a call from overwriting what slower threads still read from
// the previous call. Here the caller keeps calls apart instead: each call between two barriers of the
// block gets its own `scratch` (N x 32 floats). Two buffers used in turn do it, since a warp can run at
// most one call ahead of the slowest (it waits for it at the next call's barrier).
template <int N>
__device__ __forceinline__ void block_sums(float (&v)[N], float (*scratch)[32]) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = warp_allreduce_sum(v[i]);
  if (lane == 0) {
#pragma unroll
    for (int i = 0; i < N; ++i) scratch[i][warp] = v[i];
  }
  __syncthreads();  // every warp's sums are in shared memory
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = warp_allreduce_sum(lane < nwarps ? scratch[i][lane] : 0.0f);
}

template <typename T>
__device__ __forceinline__ T block_reduce_max(T v, T* scratch, T lowest) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  v = warp_reduce_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : lowest;
  return warp_reduce_max(v);
}

// ---------------------------------------------------------------------------------------------
// float32 and bfloat16 kernels (lessons 05, 07, 08): the math runs in float32 registers; bf16
// values are widened on load and rounded once on store.

// to_float is overloaded (one version per argument type); from_float<T> differs only in its return
// type, so it is a template with one explicit specialisation per type.
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }  // lesson 09's tensor cores
template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16(v); }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half(v); }

// How many values of T fill 16 bytes, the widest load one thread issues in one instruction:
// kVec<float> = 4, kVec<__nv_bfloat16> = 8.
template <typename T> constexpr int kVec = 16 / sizeof(T);

// 16 bytes of T: 4 floats or 8 bf16, moved by one load or store instruction.
template <typename T>
struct alignas(16) Pack {
  T v[kVec<T>];
};

// p must be 16-byte aligned. The bytes travel as a uint4 (a type the CUDA headers define for
// 16-byte moves) and memcpy puts them into the pack: no pointer punning between unrelated types.
template <typename T>
__device__ __forceinline__ Pack<T> load16(const T* p) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  Pack<T> r;
  memcpy(&r, &raw, 16);
  return r;
}
template <typename T>
__device__ __forceinline__ void store16(T* p, const Pack<T>& r) {
  uint4 raw;
  memcpy(&raw, &r, 16);
  *reinterpret_cast<uint4*>(p) = raw;
}

// A barrier for the compiler, not the GPU: it must assume the pack's registers change here, so values
// it widened from them before this point are not kept alive past it. A bf16 pack is 4 registers, its
// 8 widened floats are 8: without the barrier ptxas kept the floats of a kernel's first pass over
// its packs for the second (softmax_backward_kernel2: 78 registers a thread instead of about 47 for
// 4 packs of y and dy, ptxas -v), and fewer threads fit on an SM. It emits no instruction; the simulator, which has no registers to save,
// skips it (__CUDA_ARCH__ is defined only when nvcc compiles for the GPU).
template <typename T>
__device__ __forceinline__ void keep_packed(Pack<T>& p) {
#ifdef __CUDA_ARCH__
  uint32_t w[4];
  memcpy(w, &p, 16);
#pragma unroll
  for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(w[i]));
  memcpy(&p, w, 16);
#endif
}

// Calls f(T{}) with T = float or __nv_bfloat16 for x's dtype (the caller has checked it is one of
// them). Launchers pass a generic lambda, [&](auto t) { using T = decltype(t); ... }: its body is a
// template, compiled once for each type. (AT_DISPATCH_FLOATING_TYPES_AND does the same with
// at::BFloat16; CUDA's own __nv_bfloat16 comes with its conversion intrinsics.)
template <typename F>
inline void dispatch(const at::Tensor& x, F&& f) {
  if (x.scalar_type() == at::kFloat) f(float{});
  else f(__nv_bfloat16{});
}

// A tensor's data as T, read-only or writable.
template <typename T> inline const T* ptr(const at::Tensor& t) { return static_cast<const T*>(t.data_ptr()); }
template <typename T> inline T* mut(const at::Tensor& t) { return static_cast<T*>(t.data_ptr()); }

// Whether a tensor's data may be moved in 16-byte packs.
inline bool aligned16(const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }
