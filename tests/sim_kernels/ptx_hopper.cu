// ptx_hopper.cu: Hopper's asynchronous instructions one at a time, with raw data in and out, so that
// the simulator's results can be compared with an H100's (tests/test_sim_ptx.py, tests/ptx_cases.py).
// The wgmma instructions exist only for sm_90a: on the cuda backend build with TORCH_CUDA_ARCH_LIST=9.0a
// (a build for plain sm_90 compiles, and its wgmma kernels trap).
// build-cache: make test-toolkit (only its tests load this file, so make test-all does not build it first)
// needs compute capability: 9.0 for TMA, wgmma and mbarrier transactions
//
//   op                 what it runs
//   wgmma_raw          one warpgroup: wgmma.mma_async m64nNk16 (m64n64k32 on the 8-bit floats) on a
//                      shared-memory image, with A and B from matrix descriptors (or A from registers),
//                      the scale and transpose immediates and scale-d; the accumulators come in and go
//                      out as registers
//   tma_encode_status  cuTensorMapEncodeTiled's result for the given parameters (the tensor's address
//                      `offset` bytes into `glob`)
//   tma_load_raw       cp.async.bulk.tensor.Nd (global to shared) with an mbarrier: the shared image
//   tma_store_raw      cp.async.bulk.tensor.Nd (shared to global, bulk_group): the global tensor after
//   bulk_raw           cp.async.bulk (1-D) into shared memory and back out to global memory
//   mbarrier_ring      column sums of [rows, 256] floats: a producer thread streams rows with
//                      cp.async.bulk through a ring of stages, 64 consumer threads wait on each
//                      stage's mbarrier (phase parity) and release it on another
//   cp_async_mbarrier  64 threads copy 16 bytes each with cp.async and have the copies complete on an
//                      mbarrier (cp.async.mbarrier.arrive, .noinc or with a plain arrive), then each
//                      thread reads its neighbour's bytes after the wait
//   barrier_tma_tile   libcu++'s forms (<cuda/barrier>): a 32 x 64 tile of a float matrix loaded with
//                      cuda::device::experimental::cp_async_bulk_tensor_2d_global_to_shared into a
//                      1024-aligned static __shared__ tile, completing on a cuda::barrier
//   store_ring         2 x for a [rows, 64] float matrix, written out through two staging tiles of 16 rows
//                      with TMA stores (or 1-D cp.async.bulk stores): while one tile's store reads it,
//                      128 threads fill the other; cp.async.bulk.wait_group.read 1 before a tile is refilled
//   two_issuers        y = x for [64, 64] floats: lane 0 of each of two warps stores its 32 rows with a 1-D bulk
//                      store; the second warp waits first, with the first warp's store still in flight
//   bulk_reduce        y op= every row of x (add, min or max; float32, float64, int32, int64; float16 and
//                      bfloat16: add.noftz, min, max), each block
//                      reducing its row into y with cp.reduce.async.bulk (two halves, one bulk group); with
//                      plain_store a thread of block 0 also stores y[0] unordered with the reductions (a race)
#include "helpers.cuh"

#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/full_like.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <cstdint>
#include <cuda.h>
#include <cuda/barrier>

#include "ptx_common.cuh"

// =============================================================================================
// wgmma_raw
template <int SA, int SB, int TA, int TB>
__device__ void wgmma_m64n8_f32_bf16(float (&d)[4], uint64_t adesc, uint64_t bdesc, int scale_d) {
  asm volatile("{\n"
               ".reg .pred p;\n"
               "setp.ne.b32 p, %6, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {"
               "%0, %1, %2, %3}, "
               "%4, %5, p, %7, %8, %9, %10;\n"
               "}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "l"(adesc), "l"(bdesc), "r"(scale_d), "n"(SA), "n"(SB), "n"(TA), "n"(TB));
}

template <int SA, int SB, int TA, int TB>
__device__ void wgmma_m64n16_f32_bf16(float (&d)[8], uint64_t adesc, uint64_t bdesc, int scale_d) {
  asm volatile("{\n"
               ".reg .pred p;\n"
               "setp.ne.b32 p, %10, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {"
               "%0, %1, %2, %3, %4, %5, %6, %7}, "
               "%8, %9, p, %11, %12, %13, %14;\n"
               "}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
               : "l"(adesc), "l"(bdesc), "r"(scale_d), "n"(SA), "n"(SB), "n"(TA), "n"(TB));
}

template <int SA, int SB, int TA, int TB>
__device__ void wgmma_m64n64_f32_bf16(float (&d)[32], uint64_t adesc, uint64_t bdesc, int scale_d) {
  asm volatile("{\n"
               ".reg .pred p;\n"
               "setp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
               "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
               "%32, %33, p, %35, %36, %37, %38;\n"
               "}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                 "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                 "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "l"(adesc), "l"(bdesc), "r"(scale_d), "n"(SA), "n"(SB), "n"(TA), "n"(TB));
}

template <int SA, int SB, int TA, int TB>
__device__ void wgmma_m64n128_f32_bf16(float (&d)[64], uint64_t adesc, uint64_t bdesc, int scale_d) {
  asm volatile("{\n"
               ".reg .pred p;\n"
               "setp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
               "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
               "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
               "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
               "%64, %65, p, %67, %68, %69, %70;\n"
               "}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                 "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                 "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                 "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                 "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                 "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                 "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
               : "l"(adesc), "l"(bdesc), "r"(scale_d), "n"(SA), "n"(SB), "n"(TA), "n"(TB));
}

template <int SA, int SB, int TA, int TB>
__device__ void wgmma_m64n256_f32_bf16(float (&d)[128], uint64_t adesc, uint64_t bdesc, int scale_d) {
  asm volatile("{\n"
               ".reg .pred p;\n"
               "setp.ne.b32 p, %130, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
               "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
               "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
               "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"
               "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"
               "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,"
               "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111,"
               "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
               "%128, %129, p, %131, %132, %133, %134;\n"
               "}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                 "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                 "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                 "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                 "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                 "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                 "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
                 "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
                 "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
                 "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
                 "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
                 "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
                 "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
                 "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
                 "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
               : "l"(adesc), "l"(bdesc), "r"(scale_d), "n"(SA), "n"(SB), "n"(TA), "n"(TB));
}

template <int SA, int SB, int TA, int TB>
__device__ void wgmma_m64n64_f32_f16(float (&d)[32], uint64_t adesc, uint64_t bdesc, int scale_d) {
  asm volatile("{\n"
               ".reg .pred p;\n"
               "setp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
               "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
               "%32, %33, p, %35, %36, %37, %38;\n"
               "}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                 "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                 "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "l"(adesc), "l"(bdesc), "r"(scale_d), "n"(SA), "n"(SB), "n"(TA), "n"(TB));
}

template <int SA, int SB, int TA, int TB>
__device__ void wgmma_m64n64_f16_f16(uint32_t (&d)[16], uint64_t adesc, uint64_t bdesc, int scale_d) {
  asm volatile("{\n"
               ".reg .pred p;\n"
               "setp.ne.b32 p, %18, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f16.f16.f16 {"
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
               "%16, %17, p, %19, %20, %21, %22;\n"
               "}\n"
               : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
                 "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15])
               : "l"(adesc), "l"(bdesc), "r"(scale_d), "n"(SA), "n"(SB), "n"(TA), "n"(TB));
}

template <int SA, int SB, int TA, int TB>
__device__ void wgmma_m64n64_f32_bf16_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t bdesc, int scale_d) {
  asm volatile("{\n"
               ".reg .pred p;\n"
               "setp.ne.b32 p, %37, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
               "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
               "{%32, %33, %34, %35}, %36, p, %38, %39, %40;\n"
               "}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                 "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                 "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(bdesc), "r"(scale_d), "n"(SA), "n"(SB), "n"(TB));
}

// The 8-bit floats, K = 32 (both operands K-major: no transpose immediates): KIND 4 e4m3 x e4m3, 5 e5m2 x e5m2,
// 6 e4m3 x e5m2.
template <int KIND, int SA, int SB>
__device__ void wgmma_m64n64_f32_fp8(float (&d)[32], uint64_t adesc, uint64_t bdesc, int scale_d) {
  if constexpr (KIND == 4) {
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "setp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "%32, %33, p, %35, %36;\n"
                 "}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(adesc), "l"(bdesc), "r"(scale_d), "n"(SA), "n"(SB));
  } else if constexpr (KIND == 5) {
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "setp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k32.f32.e5m2.e5m2 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "%32, %33, p, %35, %36;\n"
                 "}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(adesc), "l"(bdesc), "r"(scale_d), "n"(SA), "n"(SB));
  } else {
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "setp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e5m2 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "%32, %33, p, %35, %36;\n"
                 "}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(adesc), "l"(bdesc), "r"(scale_d), "n"(SA), "n"(SB));
  }
}

constexpr int kImageBytes = 32 * 1024;

template <int N, int KIND, int SA, int SB, int TA, int TB>
__global__ void wgmma_raw_kernel(const uint32_t* image, uint64_t adesc_rel, uint64_t bdesc_rel, const uint32_t* a_regs,
                                 const uint32_t* c, uint32_t* d_out, int scale_d) {
  extern __shared__ __align__(16) unsigned char raw[];
  unsigned char* buf = align1024(raw);
  const int t = threadIdx.x;
  for (int i = t; i < kImageBytes / 4; i += 128) reinterpret_cast<uint32_t*>(buf)[i] = image[i];
  asm volatile("fence.proxy.async.shared::cta;");  // the threads' stores, seen by the async proxy
  __syncthreads();
  const uint64_t base = smem_addr(buf) >> 4;  // descriptors hold the start address in 16-byte units
  const uint64_t adesc = adesc_rel + base, bdesc = bdesc_rel + base;
  constexpr int ND = KIND == 2 ? N / 4 : N / 2;
  uint32_t a[4];
  for (int r = 0; r < 4; ++r) a[r] = a_regs[t * 4 + r];
#ifdef HAS_SM90A
  if constexpr (KIND == 2) {  // f16 accumulators
    uint32_t d[ND];
    for (int r = 0; r < ND; ++r) d[r] = c[t * ND + r];
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    wgmma_m64n64_f16_f16<SA, SB, TA, TB>(d, adesc, bdesc, scale_d);
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    for (int r = 0; r < ND; ++r) d_out[t * ND + r] = d[r];
  } else {
    float d[ND];
    for (int r = 0; r < ND; ++r) d[r] = __uint_as_float(c[t * ND + r]);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    if constexpr (KIND == 0 && N == 8) wgmma_m64n8_f32_bf16<SA, SB, TA, TB>(d, adesc, bdesc, scale_d);
    if constexpr (KIND == 0 && N == 16) wgmma_m64n16_f32_bf16<SA, SB, TA, TB>(d, adesc, bdesc, scale_d);
    if constexpr (KIND == 0 && N == 64) wgmma_m64n64_f32_bf16<SA, SB, TA, TB>(d, adesc, bdesc, scale_d);
    if constexpr (KIND == 0 && N == 128) wgmma_m64n128_f32_bf16<SA, SB, TA, TB>(d, adesc, bdesc, scale_d);
    if constexpr (KIND == 0 && N == 256) wgmma_m64n256_f32_bf16<SA, SB, TA, TB>(d, adesc, bdesc, scale_d);
    if constexpr (KIND == 1) wgmma_m64n64_f32_f16<SA, SB, TA, TB>(d, adesc, bdesc, scale_d);
    if constexpr (KIND == 3) wgmma_m64n64_f32_bf16_rs<SA, SB, TA, TB>(d, a, bdesc, scale_d);
    if constexpr (KIND >= 4) wgmma_m64n64_f32_fp8<KIND, SA, SB>(d, adesc, bdesc, scale_d);
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    for (int r = 0; r < ND; ++r) d_out[t * ND + r] = __float_as_uint(d[r]);
  }
#else
  (void)adesc, (void)bdesc, (void)c, (void)d_out, (void)scale_d;
  __trap();  // built without sm_90a, where wgmma does not exist
#endif
}

// kind: 0 f32 += bf16 x bf16 (N = 8, 16, 64, 128, 256), 1 f32 += f16 x f16 (N = 64), 2 f16 += f16 x f16
// (N = 64), 3 f32 += bf16 x bf16 with A from registers (N = 64), 4 f32 += e4m3 x e4m3, 5 f32 += e5m2 x e5m2,
// 6 f32 += e4m3 x e5m2 (N = 64, K = 32, no transposes). flags: bit 0 trans-a, bit 1 trans-b, bit 2 scale-a -1,
// bit 3 scale-b -1.
template <int N, int KIND>
void launch_wgmma(int flags, const uint32_t* image, uint64_t ad, uint64_t bd, const uint32_t* a, const uint32_t* c,
                  uint32_t* d, int scale_d) {
  const size_t smem = kImageBytes + 1024;
  switch (flags) {
#define WGMMA_CASE(F, SA, SB, TA, TB)                                                                   \
    case F:                                                                                             \
      C10_CUDA_CHECK(cudaFuncSetAttribute(wgmma_raw_kernel<N, KIND, SA, SB, TA, TB>,                    \
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));     \
      wgmma_raw_kernel<N, KIND, SA, SB, TA, TB><<<1, 128, smem>>>(image, ad, bd, a, c, d, scale_d);    \
      break;
    WGMMA_CASE(0, 1, 1, 0, 0)
    WGMMA_CASE(1, 1, 1, 1, 0)
    WGMMA_CASE(2, 1, 1, 0, 1)
    WGMMA_CASE(3, 1, 1, 1, 1)
    WGMMA_CASE(4, -1, 1, 0, 0)
    WGMMA_CASE(8, 1, -1, 0, 0)
    WGMMA_CASE(12, -1, -1, 1, 1)
#undef WGMMA_CASE
    default: TORCH_CHECK(false, "flags must be 0-4, 8 or 12, got ", std::to_string(flags));
  }
}

at::Tensor wgmma_raw(const at::Tensor& image, int64_t adesc, int64_t bdesc, const at::Tensor& a_regs, const at::Tensor& c,
                     int64_t n, int64_t kind, int64_t flags, int64_t scale_d) {
  CHECK_INPUT(image);
  CHECK_INPUT(a_regs);
  CHECK_INPUT(c);
  TORCH_CHECK(image.numel() * 4 == kImageBytes, "image must hold 32 KB as int32");
  const int nd = kind == 2 ? static_cast<int>(n) / 4 : static_cast<int>(n) / 2;
  TORCH_CHECK(c.numel() == 128 * nd && a_regs.numel() == 128 * 4, "c must be [128, ", std::to_string(nd), "], a_regs [128, 4]");
  at::Tensor d = at::zeros({128, nd}, c.options());
  auto* im = reinterpret_cast<const uint32_t*>(image.data_ptr<int>());
  auto* ar = reinterpret_cast<const uint32_t*>(a_regs.data_ptr<int>());
  auto* cc = reinterpret_cast<const uint32_t*>(c.data_ptr<int>());
  auto* dd = reinterpret_cast<uint32_t*>(d.data_ptr<int>());
  const int f = static_cast<int>(flags), sd = static_cast<int>(scale_d);
  const uint64_t ad = static_cast<uint64_t>(adesc), bd = static_cast<uint64_t>(bdesc);
  const bool fp8_flags = f == 0 || f == 4 || f == 8;  // the scales only: the 8-bit forms have no transposes
  if (kind == 0 && n == 8) launch_wgmma<8, 0>(f, im, ad, bd, ar, cc, dd, sd);
  else if (kind == 0 && n == 16) launch_wgmma<16, 0>(f, im, ad, bd, ar, cc, dd, sd);
  else if (kind == 0 && n == 64) launch_wgmma<64, 0>(f, im, ad, bd, ar, cc, dd, sd);
  else if (kind == 0 && n == 128) launch_wgmma<128, 0>(f, im, ad, bd, ar, cc, dd, sd);
  else if (kind == 0 && n == 256) launch_wgmma<256, 0>(f, im, ad, bd, ar, cc, dd, sd);
  else if (kind == 1 && n == 64) launch_wgmma<64, 1>(f, im, ad, bd, ar, cc, dd, sd);
  else if (kind == 2 && n == 64) launch_wgmma<64, 2>(f, im, ad, bd, ar, cc, dd, sd);
  else if (kind == 3 && n == 64) launch_wgmma<64, 3>(f, im, ad, bd, ar, cc, dd, sd);
  else if (kind == 4 && n == 64 && fp8_flags) launch_wgmma<64, 4>(f, im, ad, bd, ar, cc, dd, sd);
  else if (kind == 5 && n == 64 && fp8_flags) launch_wgmma<64, 5>(f, im, ad, bd, ar, cc, dd, sd);
  else if (kind == 6 && n == 64 && fp8_flags) launch_wgmma<64, 6>(f, im, ad, bd, ar, cc, dd, sd);
  else TORCH_CHECK(false, "no wgmma_raw variant for kind ", std::to_string(kind), ", n ", std::to_string(n),
                   " and flags ", std::to_string(flags), " (the 8-bit kinds take flags 0, 4 or 8: no transposes)");
  CHECK_LAUNCH();
  return d;
}

// =============================================================================================
// Tensor maps, from the parameters in `p`: rank, dtype, swizzle, oob fill, then dims[5], strides[4]
// (bytes), box[5], elementStrides[5], and for an interleaved map its interleave (1: 16B, 2: 32B).
struct MapParams {
  int rank, dtype, swizzle, oob, interleave;
  cuuint64_t dims[5], strides[4];
  cuuint32_t box[5], estride[5];
  // The bytes a load brings, its mbarrier's transaction count. For an interleaved map the recorded answers were
  // made with the element-shaped box's bytes here (footprint's, below), and none depends on it: of the loads that
  // bring more, all but one stopped the kernel, and that one answers with its box's first line, there whether the
  // wait ends after the first line's bytes or after all of them.
  uint64_t box_bytes;
  // The shared memory the kernels below give the box: ceil(box / elementStride) elements of the data type along
  // each dimension, a row narrower than the swizzle's span taking the span. That is a plain map's box. The H100
  // lays an interleaved box out otherwise (cudasim_ptx/async.h, interleaved_walk), mostly larger: its load then
  // runs past the buffer and stops the kernel, its store reads shared memory past the image. The recorded
  // answers (tests/ptx_vectors/ptx_tma_interleave.pt) were made with this size, so it stays.
  uint64_t footprint;
};

MapParams map_params(const at::Tensor& p) {
  TORCH_CHECK((p.numel() == 23 || p.numel() == 24) && p.scalar_type() == at::kLong, "p must hold 23 or 24 int64");
  auto v = p.cpu();
  const int64_t* x = v.data_ptr<int64_t>();
  MapParams m{};
  m.rank = static_cast<int>(x[0]);
  m.dtype = static_cast<int>(x[1]);
  m.swizzle = static_cast<int>(x[2]);
  m.oob = static_cast<int>(x[3]);
  m.interleave = p.numel() == 24 ? static_cast<int>(x[23]) : 0;
  static const int sizes[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
  const uint64_t es = m.dtype >= 0 && m.dtype < 13 ? sizes[m.dtype] : 0;
  uint64_t elems = 1, lines = 1, n0 = 1;
  for (int d = 0; d < 5; ++d) {
    m.dims[d] = static_cast<cuuint64_t>(x[4 + d]);
    if (d < 4) m.strides[d] = static_cast<cuuint64_t>(x[9 + d]);
    m.box[d] = static_cast<cuuint32_t>(x[13 + d]);
    m.estride[d] = static_cast<cuuint32_t>(x[18 + d]);
    const cuuint32_t step = d > 0 || m.interleave ? m.estride[d] : 1;  // dim 0's counts only when interleaved
    const uint64_t n = step ? (m.box[d] + step - 1) / step : 0;
    if (d >= m.rank) continue;
    elems *= n;
    if (d == 0) n0 = n;
    else if (d != m.rank - 2) lines *= n;  // an interleaved map's dimension rank - 2 is not walked
  }
  const uint64_t row = (m.rank ? n0 : 1) * es, span = m.swizzle ? 16ull << m.swizzle : 0;
  m.footprint = row && row < span ? elems * es / row * span : elems * es;
  const uint64_t slice = m.interleave == 1 ? 16 : m.interleave == 2 ? 32 : 0;
  m.box_bytes = m.interleave ? lines * n0 * slice : elems * es;  // an interleaved box: lines of n0 slices
  return m;
}

// The dynamic shared memory to ask for so that a buffer of `bytes` + 1024, aligned to 1024 bytes inside it, has
// after it the room it has on an H100. There a block's shared memory starts with 1 KB that the system reserves,
// then the kernel's static variables (`static_bytes`), then the dynamic memory (16-byte aligned), allocated in
// units of 128 bytes. The simulator's window starts with the dynamic memory, 1024-aligned, so it is asked for
// just that room: a box that the H100 lays past the end of the buffer (an interleaved one, see MapParams) runs
// past it on the simulator too.
size_t smem_for(uint64_t bytes, size_t static_bytes) {
  const size_t asked = bytes + 1024;
#ifdef CUDASIM
  const size_t start = 1024 + (static_bytes + 15) / 16 * 16, buffer = (start + 1023) / 1024 * 1024;
  return (start + asked + 127) / 128 * 128 - buffer;
#else
  (void)static_bytes;
  return asked;
#endif
}

CUresult encode(CUtensorMap* map, const MapParams& m, void* global) {
  return tensor_map_encoder()(map, static_cast<CUtensorMapDataType>(m.dtype), static_cast<cuuint32_t>(m.rank), global, m.dims,
                   m.strides, m.box, m.estride, static_cast<CUtensorMapInterleave>(m.interleave),
                   static_cast<CUtensorMapSwizzle>(m.swizzle), CU_TENSOR_MAP_L2_PROMOTION_NONE,
                   static_cast<CUtensorMapFloatOOBfill>(m.oob));
}

int64_t tma_encode_status(const at::Tensor& global, const at::Tensor& p, int64_t offset) {
  CHECK_CUDA(global);
  TORCH_CHECK(offset >= 0 && offset < global.numel(), "offset must lie inside glob");
  alignas(128) CUtensorMap map;
  return static_cast<int64_t>(encode(&map, map_params(p), static_cast<uint8_t*>(global.data_ptr()) + offset));
}

__global__ void tma_load_raw_kernel(const __grid_constant__ CUtensorMap map, int rank, int4 c0, int c4, uint32_t bytes,
                                    uint32_t footprint, uint8_t* out) {
  extern __shared__ __align__(16) unsigned char raw[];
  unsigned char* buf = align1024(raw);
  __shared__ alignas(8) uint64_t bar;
  for (uint32_t i = threadIdx.x; i < footprint; i += blockDim.x) buf[i] = 0;  // gaps between narrow rows stay 0
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  if (threadIdx.x == 0) {
    mbar_init(&bar, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbar_expect_bytes(&bar, bytes);
    const uint32_t dst = smem_addr(buf), b = smem_addr(&bar);
    const uint64_t m = reinterpret_cast<uint64_t>(&map);
    switch (rank) {
      case 1:
        asm volatile("cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3}], [%2];"
                     :: "r"(dst), "l"(m), "r"(b), "r"(c0.x) : "memory");
        break;
      case 2:
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
                     :: "r"(dst), "l"(m), "r"(b), "r"(c0.x), "r"(c0.y) : "memory");
        break;
      case 3:
        asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];"
                     :: "r"(dst), "l"(m), "r"(b), "r"(c0.x), "r"(c0.y), "r"(c0.z) : "memory");
        break;
      case 4:
        asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];"
                     :: "r"(dst), "l"(m), "r"(b), "r"(c0.x), "r"(c0.y), "r"(c0.z), "r"(c0.w) : "memory");
        break;
      default:
        asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6, %7}], [%2];"
                     :: "r"(dst), "l"(m), "r"(b), "r"(c0.x), "r"(c0.y), "r"(c0.z), "r"(c0.w), "r"(c4) : "memory");
        break;
    }
  }
  mbar_wait(&bar, 0);
  for (uint32_t i = threadIdx.x; i < footprint; i += blockDim.x) out[i] = buf[i];
}

__global__ void tma_store_raw_kernel(const __grid_constant__ CUtensorMap map, int rank, int4 c0, int c4, uint32_t bytes,
                                     const uint8_t* image) {
  extern __shared__ __align__(16) unsigned char raw[];
  unsigned char* buf = align1024(raw);
  for (uint32_t i = threadIdx.x; i < bytes; i += blockDim.x) buf[i] = image[i];
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the stores above, seen by the TMA unit
  __syncthreads();
  if (threadIdx.x == 0) {
    const uint32_t src = smem_addr(buf);
    const uint64_t m = reinterpret_cast<uint64_t>(&map);
    switch (rank) {
      case 1: asm volatile("cp.async.bulk.tensor.1d.global.shared::cta.bulk_group [%0, {%2}], [%1];" :: "l"(m), "r"(src), "r"(c0.x) : "memory"); break;
      case 2: asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" :: "l"(m), "r"(src), "r"(c0.x), "r"(c0.y) : "memory"); break;
      case 3:
        asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];"
                     :: "l"(m), "r"(src), "r"(c0.x), "r"(c0.y), "r"(c0.z) : "memory");
        break;
      case 4:
        asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];"
                     :: "l"(m), "r"(src), "r"(c0.x), "r"(c0.y), "r"(c0.z), "r"(c0.w) : "memory");
        break;
      default:
        asm volatile("cp.async.bulk.tensor.5d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5, %6}], [%1];"
                     :: "l"(m), "r"(src), "r"(c0.x), "r"(c0.y), "r"(c0.z), "r"(c0.w), "r"(c4) : "memory");
        break;
    }
    asm volatile("cp.async.bulk.commit_group;");
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
}

std::vector<at::Tensor> tma_load_raw(const at::Tensor& global, const at::Tensor& p, const at::Tensor& coords) {
  CHECK_INPUT(global);
  MapParams m = map_params(p);
  alignas(128) CUtensorMap map;
  CUresult r = encode(&map, m, global.data_ptr());
  at::Tensor status = at::full({1}, static_cast<int64_t>(r), global.options().dtype(at::kLong));
  if (r != CUDA_SUCCESS) return {status, at::empty({0}, global.options().dtype(at::kByte))};
  auto c = coords.cpu();
  const int* x = c.data_ptr<int>();
  at::Tensor out = at::empty({static_cast<int64_t>(m.footprint)}, global.options().dtype(at::kByte));
  const size_t smem = smem_for(m.footprint, sizeof(uint64_t));  // the kernel's static mbarrier
  C10_CUDA_CHECK(cudaFuncSetAttribute(tma_load_raw_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  tma_load_raw_kernel<<<1, 128, smem>>>(map, m.rank, make_int4(x[0], x[1], x[2], x[3]), x[4],
                                        static_cast<uint32_t>(m.box_bytes), static_cast<uint32_t>(m.footprint),
                                        out.data_ptr<uint8_t>());
  CHECK_LAUNCH();
  return {status, out};
}

// The global tensor (a copy of `global`) after a TMA store of `image` at `coords`.
std::vector<at::Tensor> tma_store_raw(const at::Tensor& global, const at::Tensor& p, const at::Tensor& coords,
                                      const at::Tensor& image) {
  CHECK_INPUT(global);
  CHECK_INPUT(image);
  MapParams m = map_params(p);
  at::Tensor after = global.clone();
  alignas(128) CUtensorMap map;
  CUresult r = encode(&map, m, after.data_ptr());
  at::Tensor status = at::full({1}, static_cast<int64_t>(r), global.options().dtype(at::kLong));
  if (r != CUDA_SUCCESS) return {status, after};
  TORCH_CHECK(static_cast<uint64_t>(image.numel()) == m.footprint, "image must hold the box's shared-memory bytes");
  auto c = coords.cpu();
  const int* x = c.data_ptr<int>();
  const size_t smem = smem_for(m.footprint, 0);
  C10_CUDA_CHECK(cudaFuncSetAttribute(tma_store_raw_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  tma_store_raw_kernel<<<1, 128, smem>>>(map, m.rank, make_int4(x[0], x[1], x[2], x[3]), x[4],
                                         static_cast<uint32_t>(m.footprint), image.data_ptr<uint8_t>());
  CHECK_LAUNCH();
  return {status, after};
}

// =============================================================================================
// bulk_raw: `size` bytes from src + offset into shared memory (cp.async.bulk with an mbarrier), then
// back out to out + offset (cp.async.bulk to global, bulk_group).
__global__ void bulk_raw_kernel(const uint8_t* src, uint8_t* out, uint32_t size) {
  extern __shared__ __align__(16) unsigned char buf[];
  __shared__ alignas(8) uint64_t bar;
  if (threadIdx.x == 0) {
    mbar_init(&bar, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbar_expect_bytes(&bar, size);
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(smem_addr(buf)), "l"(src), "r"(size), "r"(smem_addr(&bar)) : "memory");
  }
  mbar_wait(&bar, 0);
  if (threadIdx.x == 0) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" :: "l"(out), "r"(smem_addr(buf)), "r"(size) : "memory");
    asm volatile("cp.async.bulk.commit_group;");
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");  // the shared buffer may be reused
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");       // and the global bytes are written
  }
}

at::Tensor bulk_raw(const at::Tensor& src, int64_t offset, int64_t size) {
  CHECK_INPUT(src);
  CHECK_DTYPE(src, at::kByte);
  TORCH_CHECK(offset % 16 == 0 && size % 16 == 0 && size > 0 && offset + size <= src.numel(), "offset and size must be multiples of 16 inside src");
  at::Tensor out = at::zeros_like(src);
  bulk_raw_kernel<<<1, 32, size>>>(src.data_ptr<uint8_t>() + offset, out.data_ptr<uint8_t>() + offset,
                                   static_cast<uint32_t>(size));
  CHECK_LAUNCH();
  return out;
}

// =============================================================================================
// mbarrier_ring: warp 0 lane 0 produces, warps 1 and 2 (64 threads) consume. full[s] completes when
// row r's 1 KB has landed (one arrival with expect_tx + the copy's bytes); empty[s] when the 64
// consumers are done with the stage. Round k of stage s waits for phase k of full[s] (parity k % 2)
// and, before refilling, for phase k - 1 of empty[s].
template <int STAGES>
__global__ void mbarrier_ring_kernel(const float* x, float* out, int rows) {
  __shared__ alignas(128) float ring[STAGES][256];
  __shared__ alignas(8) uint64_t full[STAGES];
  __shared__ alignas(8) uint64_t empty[STAGES];
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 64);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int r = 0; r < rows; ++r) {
      const int s = r % STAGES, round = r / STAGES;
      if (round > 0) mbar_wait(&empty[s], (round - 1) % 2);  // the consumers are done with round - 1
      mbar_expect_bytes(&full[s], 1024);
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 1024, [%2];"
                   :: "r"(smem_addr(ring[s])), "l"(x + (int64_t)r * 256), "r"(smem_addr(&full[s])) : "memory");
    }
  } else if (threadIdx.x >= 32 && threadIdx.x < 96) {
    const int t = threadIdx.x - 32;
    float sum[4] = {0.f, 0.f, 0.f, 0.f};
    for (int r = 0; r < rows; ++r) {
      const int s = r % STAGES;
      mbar_wait(&full[s], (r / STAGES) % 2);
      for (int e = 0; e < 4; ++e) sum[e] += ring[s][t * 4 + e];
      mbar_arrive(&empty[s]);
    }
    for (int e = 0; e < 4; ++e) out[t * 4 + e] = sum[e];
  }
}

at::Tensor mbarrier_ring(const at::Tensor& x, int64_t stages) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  TORCH_CHECK(x.dim() == 2 && x.size(1) == 256 && aligned16(x), "x must be [rows, 256] and 16-byte aligned");
  at::Tensor out = at::empty({256}, x.options());
  const int rows = static_cast<int>(x.size(0));
  if (stages == 2) mbarrier_ring_kernel<2><<<1, 96>>>(x.data_ptr<float>(), out.data_ptr<float>(), rows);
  else if (stages == 3) mbarrier_ring_kernel<3><<<1, 96>>>(x.data_ptr<float>(), out.data_ptr<float>(), rows);
  else TORCH_CHECK(false, "stages must be 2 or 3");
  CHECK_LAUNCH();
  return out;
}

// =============================================================================================
// cp_async_mbarrier
__global__ void cp_async_mbarrier_kernel(const uint8_t* src, uint8_t* out, bool noinc) {
  __shared__ alignas(16) uint8_t staged[64 * 16];
  __shared__ alignas(8) uint64_t bar;
  const int t = threadIdx.x;
  if (t == 0) mbar_init(&bar, 64);  // 64 arrivals: the copies' (.noinc) or the threads' own
  __syncthreads();
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" :: "r"(smem_addr(&staged[t * 16])), "l"(src + t * 16));
  if (noinc) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" :: "r"(smem_addr(&bar)));
  } else {
    asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];" :: "r"(smem_addr(&bar)));
    mbar_arrive(&bar);
  }
  mbar_wait(&bar, 0);
  const int from = (t + 1) % 64;
  for (int i = 0; i < 16; ++i) out[from * 16 + i] = staged[from * 16 + i];
}

at::Tensor cp_async_mbarrier(const at::Tensor& src, bool noinc) {
  CHECK_INPUT(src);
  CHECK_DTYPE(src, at::kByte);
  TORCH_CHECK(src.numel() == 1024 && aligned16(src), "src must be 1024 bytes, 16-byte aligned");
  at::Tensor out = at::zeros_like(src);
  cp_async_mbarrier_kernel<<<1, 64>>>(src.data_ptr<uint8_t>(), out.data_ptr<uint8_t>(), noinc);
  CHECK_LAUNCH();
  return out;
}

// =============================================================================================
// barrier_tma_tile: the tile of x [rows, cols] at (row0, col0), 32 rows x 64 columns (zeros outside x)
using block_barrier = cuda::barrier<cuda::thread_scope_block>;
namespace cde = cuda::device::experimental;

__global__ void barrier_tma_tile_kernel(const __grid_constant__ CUtensorMap map, int row0, int col0, float* out,
                                        uint32_t* tile_address) {
  __shared__ alignas(1024) float tile[32 * 64];
#pragma nv_diag_suppress static_var_with_dynamic_init
  __shared__ block_barrier bar;
  if (threadIdx.x == 0) {
    init(&bar, blockDim.x);
    cde::fence_proxy_async_shared_cta();
  }
  __syncthreads();
  block_barrier::arrival_token token;
  if (threadIdx.x == 0) {
    cde::cp_async_bulk_tensor_2d_global_to_shared(tile, &map, col0, row0, bar);
    token = cuda::device::barrier_arrive_tx(bar, 1, sizeof(tile));  // one arrival, and the bytes to expect
  } else {
    token = bar.arrive();
  }
  bar.wait(std::move(token));
  for (int i = threadIdx.x; i < 32 * 64; i += blockDim.x) out[i] = tile[i];
  if (threadIdx.x == 0) *tile_address = smem_addr(tile);
}

std::vector<at::Tensor> barrier_tma_tile(const at::Tensor& x, int64_t row0, int64_t col0) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  CHECK_DIM(x, 2);
  TORCH_CHECK(x.size(1) % 4 == 0 && aligned16(x), "x's rows must be 16-byte multiples and x 16-byte aligned");
  alignas(128) CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(x.size(1)), static_cast<cuuint64_t>(x.size(0))};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(x.size(1)) * 4};
  const cuuint32_t box[2] = {64, 32}, estride[2] = {1, 1};
  CUresult r = tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, x.data_ptr(), dims, strides, box, estride,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                    CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TORCH_CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed with error ", std::to_string(static_cast<int>(r)));
  at::Tensor out = at::empty({32, 64}, x.options());
  at::Tensor address = at::zeros({1}, x.options().dtype(at::kInt));
  barrier_tma_tile_kernel<<<1, 128>>>(map, static_cast<int>(row0), static_cast<int>(col0), out.data_ptr<float>(),
                                      reinterpret_cast<uint32_t*>(address.data_ptr<int>()));
  CHECK_LAUNCH();
  return {out, address};
}

// =============================================================================================
// store_ring: y = 2 x through two staging tiles. Tile t goes through stage[t % 2]: thread 0 waits until the
// store two tiles back has read the stage (every group but the newest, the other stage's), everyone fills it,
// and thread 0 stores it. Rows past the end of x are not stored (the TMA store drops them; the 1-D store
// takes only the rows inside).
__global__ void store_ring_kernel(const __grid_constant__ CUtensorMap map, const float* x, float* y, int rows,
                                  bool bulk) {
  __shared__ alignas(128) float stage[2][16 * 64];
  const int tiles = (rows + 15) / 16;
  for (int t = 0; t < tiles; ++t) {
    float* buf = stage[t % 2];
    if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");  // STORE-RING-WAIT
    __syncthreads();  // ... and every thread knows it
    for (int i = threadIdx.x; i < 16 * 64; i += blockDim.x) {
      const int r = 16 * t + i / 64;
      buf[i] = r < rows ? 2.0f * x[r * 64 + i % 64] : 0.0f;
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the stores above, seen by the TMA unit
    __syncthreads();
    if (threadIdx.x == 0) {
      if (bulk) {
        const uint32_t bytes = (rows - 16 * t < 16 ? rows - 16 * t : 16) * 64 * 4;
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                     :: "l"(y + 16 * t * 64), "r"(smem_addr(buf)), "r"(bytes) : "memory");
      } else {
        asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                     :: "l"(reinterpret_cast<uint64_t>(&map)), "r"(0), "r"(16 * t), "r"(smem_addr(buf)) : "memory");
      }
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    }
  }
  if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// two_issuers: the stores of two threads in flight together. The second warp waits for its store first, while the
// first warp's (issued before it) is still pending behind a barrier: that store must land all the same.
__global__ void two_issuers_kernel(const float* x, float* y) {
  __shared__ alignas(128) float stage[64 * 64];
  for (int i = threadIdx.x; i < 64 * 64; i += blockDim.x) stage[i] = x[i];
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  const int w = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                 :: "l"(y + 32 * w * 64), "r"(smem_addr(stage + 32 * w * 64)), "r"(32 * 64 * 4) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 32) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

at::Tensor two_issuers(const at::Tensor& x) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  TORCH_CHECK(x.dim() == 2 && x.size(0) == 64 && x.size(1) == 64, "x must be [64, 64]");
  at::Tensor y = at::full_like(x, -1.0f);
  two_issuers_kernel<<<1, 64>>>(x.data_ptr<float>(), y.data_ptr<float>());
  CHECK_LAUNCH();
  return y;
}

// bulk_reduce: block b adds (or takes the min or max of) row b of x into y with bulk reductions. KIND picks the
// instruction: 0 add.f32, 1 add.f64, 2 add.s32, 3 min.s32, 4 max.s32, 5 add.u64, 6 min.s64, 7 max.s64,
// 8 add.noftz.f16, 9 add.noftz.bf16, 10 min.f16, 11 max.f16, 12 min.bf16, 13 max.bf16.
template <int KIND>
__device__ __forceinline__ void reduce_into(void* dst, const void* src, uint32_t bytes) {
  if constexpr (KIND == 0)
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" :: "l"(dst), "r"(smem_addr(src)), "r"(bytes) : "memory");
  else if constexpr (KIND == 1)
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f64 [%0], [%1], %2;" :: "l"(dst), "r"(smem_addr(src)), "r"(bytes) : "memory");
  else if constexpr (KIND == 2)
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.s32 [%0], [%1], %2;" :: "l"(dst), "r"(smem_addr(src)), "r"(bytes) : "memory");
  else if constexpr (KIND == 3)
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.min.s32 [%0], [%1], %2;" :: "l"(dst), "r"(smem_addr(src)), "r"(bytes) : "memory");
  else if constexpr (KIND == 4)
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.max.s32 [%0], [%1], %2;" :: "l"(dst), "r"(smem_addr(src)), "r"(bytes) : "memory");
  else if constexpr (KIND == 5)
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u64 [%0], [%1], %2;" :: "l"(dst), "r"(smem_addr(src)), "r"(bytes) : "memory");
  else if constexpr (KIND == 6)
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.min.s64 [%0], [%1], %2;" :: "l"(dst), "r"(smem_addr(src)), "r"(bytes) : "memory");
  else if constexpr (KIND == 7)
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.max.s64 [%0], [%1], %2;" :: "l"(dst), "r"(smem_addr(src)), "r"(bytes) : "memory");
  else if constexpr (KIND == 8)
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.f16 [%0], [%1], %2;" :: "l"(dst), "r"(smem_addr(src)), "r"(bytes) : "memory");
  else if constexpr (KIND == 9)
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.bf16 [%0], [%1], %2;" :: "l"(dst), "r"(smem_addr(src)), "r"(bytes) : "memory");
  else if constexpr (KIND == 10)
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.min.f16 [%0], [%1], %2;" :: "l"(dst), "r"(smem_addr(src)), "r"(bytes) : "memory");
  else if constexpr (KIND == 11)
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.max.f16 [%0], [%1], %2;" :: "l"(dst), "r"(smem_addr(src)), "r"(bytes) : "memory");
  else if constexpr (KIND == 12)
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.min.bf16 [%0], [%1], %2;" :: "l"(dst), "r"(smem_addr(src)), "r"(bytes) : "memory");
  else
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.max.bf16 [%0], [%1], %2;" :: "l"(dst), "r"(smem_addr(src)), "r"(bytes) : "memory");
}

template <int KIND>
__global__ void bulk_reduce_kernel(const uint8_t* x, uint8_t* y, uint32_t bytes, bool plain_store, bool wait_writes) {
  __shared__ alignas(128) uint8_t stage[8192];
  for (uint32_t i = threadIdx.x; i < bytes; i += blockDim.x) stage[i] = x[blockIdx.x * (size_t)bytes + i];
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    const uint32_t half = bytes / 32 * 16;  // a multiple of 16
    if (half > 0) reduce_into<KIND>(y, stage, half);
    reduce_into<KIND>(y + half, stage + half, bytes - half);
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    if (wait_writes) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    else asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
  }
  if (plain_store && blockIdx.x == 0 && threadIdx.x == 32) y[0] = 0;
}

at::Tensor bulk_reduce(const at::Tensor& x, const at::Tensor& y0, const std::string& op, bool plain_store,
                       bool wait_writes) {
  CHECK_INPUT(x);
  CHECK_INPUT(y0);
  const int64_t bytes = reduction_row_bytes(x, y0, 8192);
  const at::ScalarType t = x.scalar_type();
  const bool f32 = t == at::kFloat, f64 = t == at::kDouble, i32 = t == at::kInt, i64 = t == at::kLong;
  const bool f16 = t == at::kHalf, bf16 = t == at::kBFloat16;
  const int kind = op == "add" ? (f32 ? 0 : f64 ? 1 : i32 ? 2 : i64 ? 5 : f16 ? 8 : bf16 ? 9 : -1)
                 : op == "min" ? (i32 ? 3 : i64 ? 6 : f16 ? 10 : bf16 ? 12 : -1)
                 : op == "max" ? (i32 ? 4 : i64 ? 7 : f16 ? 11 : bf16 ? 13 : -1) : -1;
  TORCH_CHECK(kind >= 0, "op must be add (float32, float64, int32, int64, float16, bfloat16), min or max (int32, int64, "
              "float16, bfloat16), got ", op);
  at::Tensor y = y0.clone();
  auto kernel = kind == 0 ? bulk_reduce_kernel<0> : kind == 1 ? bulk_reduce_kernel<1> : kind == 2 ? bulk_reduce_kernel<2>
              : kind == 3 ? bulk_reduce_kernel<3> : kind == 4 ? bulk_reduce_kernel<4> : kind == 5 ? bulk_reduce_kernel<5>
              : kind == 6 ? bulk_reduce_kernel<6> : kind == 7 ? bulk_reduce_kernel<7> : kind == 8 ? bulk_reduce_kernel<8>
              : kind == 9 ? bulk_reduce_kernel<9> : kind == 10 ? bulk_reduce_kernel<10> : kind == 11 ? bulk_reduce_kernel<11>
              : kind == 12 ? bulk_reduce_kernel<12> : bulk_reduce_kernel<13>;
  kernel<<<static_cast<unsigned>(x.size(0)), 64>>>(static_cast<const uint8_t*>(x.data_ptr()), static_cast<uint8_t*>(y.data_ptr()),
                                                   static_cast<uint32_t>(bytes), plain_store, wait_writes);
  CHECK_LAUNCH();
  return y;
}

at::Tensor store_ring(const at::Tensor& x, bool bulk) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  TORCH_CHECK(x.dim() == 2 && x.size(1) == 64 && x.size(0) > 0, "x must be [rows, 64]");
  at::Tensor y = at::full_like(x, -1.0f);
  alignas(128) CUtensorMap map;
  const cuuint64_t dims[2] = {64, static_cast<cuuint64_t>(x.size(0))}, strides[1] = {64 * 4};
  const cuuint32_t box[2] = {64, 16}, estride[2] = {1, 1};
  CUresult r = tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, y.data_ptr(), dims, strides, box, estride,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                    CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TORCH_CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed with error ", std::to_string(static_cast<int>(r)));
  store_ring_kernel<<<1, 128>>>(map, x.data_ptr<float>(), y.data_ptr<float>(), static_cast<int>(x.size(0)), bulk);
  CHECK_LAUNCH();
  return y;
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("barrier_tma_tile(Tensor x, int row0, int col0) -> Tensor[]");
  m.def("cp_async_mbarrier(Tensor src, bool noinc) -> Tensor");
  m.def("wgmma_raw(Tensor image, int adesc, int bdesc, Tensor a_regs, Tensor c, int n, int kind, int flags, int scale_d) -> Tensor");
  m.def("tma_encode_status(Tensor glob, Tensor p, int offset=0) -> int");
  m.def("tma_load_raw(Tensor glob, Tensor p, Tensor coords) -> Tensor[]");
  m.def("tma_store_raw(Tensor glob, Tensor p, Tensor coords, Tensor image) -> Tensor[]");
  m.def("bulk_raw(Tensor src, int offset, int size) -> Tensor");
  m.def("mbarrier_ring(Tensor x, int stages) -> Tensor");
  m.def("store_ring(Tensor x, bool bulk) -> Tensor");
  m.def("two_issuers(Tensor x) -> Tensor");
  m.def("bulk_reduce(Tensor x, Tensor y0, str op, bool plain_store, bool wait_writes) -> Tensor");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("wgmma_raw", &wgmma_raw);
  m.impl("tma_load_raw", &tma_load_raw);
  m.impl("tma_store_raw", &tma_store_raw);
  m.impl("bulk_raw", &bulk_raw);
  m.impl("mbarrier_ring", &mbarrier_ring);
  m.impl("tma_encode_status", &tma_encode_status);
  m.impl("barrier_tma_tile", &barrier_tma_tile);
  m.impl("cp_async_mbarrier", &cp_async_mbarrier);
  m.impl("store_ring", &store_ring);
  m.impl("two_issuers", &two_issuers);
  m.impl("bulk_reduce", &bulk_reduce);
}
