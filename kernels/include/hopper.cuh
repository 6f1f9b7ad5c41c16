// hopper.cuh: what the Hopper kernels (lessons 12 and 13) share: the sm_90a gate, mbarriers, TMA loads and tensor
// maps, wgmma's descriptors and fences. Lesson 13 introduces each of them; its notebook walks through them.
//
//   HAS_SM90A, hopper_kernels_built        defined / 1 where the device code has wgmma and setmaxnreg (sm_90a, or
//                                          the simulator)
//   smem_addr(p), align1024(raw)           shared-state-space addresses; the 128-byte swizzle's 1024-byte boundary
//   mbar_init/expect_bytes/arrive/wait     mbarriers with transaction counts, waited on by phase parity
//   tma_load(dst, map, x, y, bar), tma_load3(..., z, bar), tma_load4(..., z, w, bar)   TMA loads of a 2-, 3-, 4-D box
//   fence_async_shared(), named_barrier(id, count), named_barrier_arrive(id, count)
//   desc128(addr, lbo, sbo)                a wgmma shared-memory matrix descriptor (128-byte swizzle)
//   wgmma_fence(), wgmma_commit(), wgmma_wait<N>()
//   bulk_commit(), bulk_wait_read<N>()   a thread's bulk async-groups (TMA stores, bulk reductions)
//   check_hopper(op), hopper_kernels_in_build()     the launchers' gate (host)
//   tensor_map(t, box_cols, box_rows), tensor_map_nd(t, rank, dims, strides, box)   tensor maps (host)
//
// All in namespace hopper (the macro aside): a file takes the ones it uses by `using hopper::name;`.
#pragma once

#include "helpers.cuh"

#include <cuda.h>
#include <cstdint>
#include <string>

// wgmma and setmaxnreg exist only in the arch-specific target sm_90a (TMA and the mbarrier's transaction counts in
// sm_90 and up); the simulator runs them all. Built for any other target the Hopper kernels trap, and their
// launchers refuse to start them (check_hopper).
#if defined(CUDASIM) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define HAS_SM90A 1
#endif

// Everything below is in namespace hopper: a file names what it uses (`using hopper::mbar_wait;` ...), so that the
// helpers never collide with a file's own of the same names when several files are compiled as one (the compile
// check), nor with another header's.
namespace hopper {

// 1 in a build whose device code has the Hopper kernels (sm_90a), 0 otherwise: the launchers read it once.
__device__ int hopper_kernels_built =
#ifdef HAS_SM90A
    1;
#else
    0;
#endif

// The shared-state-space address of a pointer into shared memory, as ldmatrix, cp.async, TMA and mbarriers take it.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

#ifdef HAS_SM90A
// A fresh mbarrier expects `count` arrivals per phase.
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}
// One arrival that also announces `bytes` of copies completing on the barrier in this phase: the phase completes
// when every arrival is in and every announced byte has landed.
__device__ __forceinline__ void mbar_expect_bytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
// Wait until the phase of the given parity has completed. A barrier's phases alternate 0, 1, 0, ...: a waiter that
// knows which use of the barrier it waits for (use u: parity u % 2) needs no counter shared with the arriving side.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(smem_addr(bar)), "r"(parity) : "memory");
}

// A TMA load of the box at (x, y) (x along the contiguous dimension) into shared memory, completing on `bar`.
// Parts of the box outside the tensor arrive as zeros, and still count in the barrier's bytes.
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, int x, int y, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
      ::"r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(smem_addr(bar)) : "memory");
}
// The same for a 3-D tensor map: the box at (x, y, z), x along the contiguous dimension.
__device__ __forceinline__ void tma_load3(void* dst, const CUtensorMap* map, int x, int y, int z, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
      ::"r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(z), "r"(smem_addr(bar))
      : "memory");
}
// The same for a 4-D tensor map: the box at (x, y, z, w).
__device__ __forceinline__ void tma_load4(void* dst, const CUtensorMap* map, int x, int y, int z, int w, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];"
      ::"r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(z), "r"(w), "r"(smem_addr(bar))
      : "memory");
}
// Ordinary stores to shared memory made visible to the async proxy (TMA) that reads it next.
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// A thread's bulk async-group (TMA stores, bulk reductions: operations from shared to global memory): close the
// open group, and wait until at most N of the thread's groups still read their shared memory (before that memory is
// written again, and before the block's threads exit).
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
// A barrier for `count` threads of the block (a multiple of 32) under id 1..15; id 0 is __syncthreads'.
__device__ __forceinline__ void named_barrier(int id, int count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}
// Arrive at named barrier `id` without waiting for it: the arriving threads count towards its `count`, and the
// threads that wait there (named_barrier) go on once all have come. One group of warps signals another.
__device__ __forceinline__ void named_barrier_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// A shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"): start address, leading and stride byte
// offsets in 16-byte units, layout 1 (128-byte swizzle) in bits 62-63.
__device__ __forceinline__ uint64_t desc128(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return ((addr >> 4) & 0x3FFFull) | (uint64_t((lbo >> 4) & 0x3FFF) << 16) | (uint64_t((sbo >> 4) & 0x3FFF) << 32) |
         (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Wait until at most N of the warpgroup's committed wgmma groups are in flight.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
#endif

// The first 1024-byte boundary in a dynamic shared buffer: the 128-byte swizzle repeats every 1024 bytes, from
// shared address 0, so TMA and wgmma agree on a tile that starts there.
__device__ __forceinline__ unsigned char* align1024(unsigned char* raw) {
  return raw + (((smem_addr(raw) + 1023) & ~1023u) - smem_addr(raw));
}

// Whether this build's device code has the Hopper kernels (an sm_90a build; the simulator runs them all).
inline bool hopper_kernels_in_build() {
#ifdef CUDASIM
  return true;
#else
  static int built = -1;  // read once: the value is fixed by the build
  if (built < 0) C10_CUDA_CHECK(cudaMemcpyFromSymbol(&built, hopper_kernels_built, sizeof(int)));
  return built == 1;
#endif
}

// The Hopper variants need a 9.x GPU (an sm_90a cubin runs on no other) and a build whose device code has them.
inline void check_hopper(const char* op) {
  check_capability(op, 900, "TMA, mbarrier transactions and wgmma");
  const int major = device_attribute(cudaDevAttrComputeCapabilityMajor);
  // past Hopper, the toolkit's line (kernels/gates.py: Needs(only_major=True)) and what is missing
  TORCH_CHECK(major == 9, "`", op, "` needs compute capability 9.x for TMA, mbarrier transactions and wgmma (this GPU "
              "has ", std::to_string(major) + "." + std::to_string(device_attribute(cudaDevAttrComputeCapabilityMinor)),
              "): an sm_90a binary runs on Hopper alone, and wgmma exists there only");
  TORCH_CHECK(hopper_kernels_in_build(), "`", op, "` needs a build for sm_90a (wgmma and setmaxnreg exist in that "
              "target only), got a build without it: load() builds for sm_90a on an H100 unless TORCH_CUDA_ARCH_LIST "
              "names the targets, so add 9.0a to it");
}

// cuTensorMapEncodeTiled through the runtime's driver entry point, so that the extension needs no libcuda link.
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

inline EncodeTiled tensor_map_encoder() {
  static EncodeTiled fn = nullptr;
  if (!fn) {
    void* got = nullptr;
    cudaDriverEntryPointQueryResult found;
    C10_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &got, 12000, cudaEnableDefault, &found));
    TORCH_CHECK(found == cudaDriverEntryPointSuccess && got,
                "cuTensorMapEncodeTiled is not available from this driver");
    fn = reinterpret_cast<EncodeTiled>(got);
  }
  return fn;
}

// A tensor map of a bf16/fp16/e4m3/float32 tensor of `rank` dimensions (dims[0] contiguous; strides[d - 1]: the bytes
// from one index of dimension d to the next), read or written in boxes of box[0] x ..., with the 128-byte swizzle
// unless told otherwise; elements outside the tensor read as zeros. (TMA moves bytes: e4m3 values are UINT8 to it.)
inline CUtensorMap tensor_map_nd(const at::Tensor& t, uint32_t rank, const cuuint64_t* dims, const cuuint64_t* strides,
                                 const cuuint32_t* box, CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B) {
  CUtensorMap map;
  const cuuint32_t unit[5] = {1, 1, 1, 1, 1};
  const at::ScalarType st = t.scalar_type();
  TORCH_CHECK(st == at::kHalf || st == at::kBFloat16 || st == at::kFloat8_e4m3fn || st == at::kFloat,
              "tensor_map: no TMA data type for ", st, " here (float16, bfloat16, float8_e4m3fn or float32)");
  const auto dtype = st == at::kHalf       ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                     : st == at::kBFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                     : st == at::kFloat    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                           : CU_TENSOR_MAP_DATA_TYPE_UINT8;
  const CUresult r = tensor_map_encoder()(&map, dtype, rank, t.data_ptr(), dims, strides, box, unit,
                                          CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TORCH_CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled refused a tensor of shape ", shape_str(t.sizes()), " and strides ",
              shape_str(t.strides()), " (error ", std::to_string((int)r), ")");
  return map;
}

// A 2-D row-major tensor (rows x cols) in boxes of box_cols x box_rows.
inline CUtensorMap tensor_map(const at::Tensor& t, uint32_t box_cols, uint32_t box_rows) {
  const cuuint64_t dims[2] = {(cuuint64_t)t.size(1), (cuuint64_t)t.size(0)};
  const cuuint64_t strides[1] = {(cuuint64_t)(t.size(1) * t.element_size())};  // bytes from one row to the next
  const cuuint32_t box[2] = {box_cols, box_rows};
  return tensor_map_nd(t, 2, dims, strides, box);
}

}  // namespace hopper
