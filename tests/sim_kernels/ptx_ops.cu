// ptx_ops.cu: single PTX instructions, one op each, with raw registers in and out, so that the
// simulator's results can be compared with a GPU's bit for bit (tests/test_sim_ptx.py; the GPU's
// answers are recorded into tests/ptx_vectors/ by tests/ptx_cases.py). Ampere-level instructions here;
// Hopper's (wgmma, TMA) are in ptx_hopper.cu.
// build-cache: make test-toolkit (only its tests load this file, so make test-all does not build it first)
// needs compute capability: 9.0 for stmatrix (cp.async and mma.sync on bf16 and TF32: 8.0)
//
//   op             what it runs (registers are int32 tensors holding the bits)
//   mma_raw        one warp: mma.sync with lane l's A, B, C registers in row l; `form` picks the
//                  shape and types (MMA_FORMS in the test); D comes back the same way
//   ldmatrix_raw   one warp reads a 2 KB shared buffer with ldmatrix .x1/.x2/.x4 (.trans): lane l
//                  gives the byte offset offsets[l]; the 1-4 registers of each lane come back
//   stmatrix_raw   the inverse: the registers are stored with stmatrix into a zeroed 2 KB buffer
//   alu_raw        one thread per element: d = op(a, b, c) for a list of integer, conversion and
//                  float instructions (ALU_OPS in the test)
//   shfl_raw       one warp: shfl.sync with a per-lane b, a c operand and a member mask; returns d
//                  and the predicate p
//   specials_raw   %laneid, %tid, %ntid, %ctaid, %nctaid, %lanemask_* for every thread of a grid
//   cp_async_raw   64 threads copy 16-byte chunks with cp.async.{ca,cg} and a src-size (zero fill)
//   cp_async_ring  column sums through a ring of shared buffers filled with cp.async ahead of use
//                  (commit_group, wait_group N)
#include "helpers.cuh"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <cstdint>

// =============================================================================================
// mma_raw: registers in, registers out.
__global__ void mma_raw_kernel(const uint32_t* ain, const uint32_t* bin, const uint32_t* cin, uint32_t* dout, int form) {
  const int lane = threadIdx.x;
  uint32_t a[4], b[2], cr[4], dr[4] = {0, 0, 0, 0};
  float cf[4], df[4] = {0.f, 0.f, 0.f, 0.f};
  for (int i = 0; i < 4; ++i) a[i] = ain[lane * 4 + i];
  for (int i = 0; i < 2; ++i) b[i] = bin[lane * 2 + i];
  for (int i = 0; i < 4; ++i) {
    cr[i] = cin[lane * 4 + i];
    cf[i] = __uint_as_float(cr[i]);
  }
  switch (form) {
    case 0:
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                   "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
                   : "=f"(df[0]), "=f"(df[1]), "=f"(df[2]), "=f"(df[3])
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(cf[0]), "f"(cf[1]), "f"(cf[2]), "f"(cf[3]));
      break;
    case 1:
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                   "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
                   : "=f"(df[0]), "=f"(df[1]), "=f"(df[2]), "=f"(df[3])
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(cf[0]), "f"(cf[1]), "f"(cf[2]), "f"(cf[3]));
      break;
    case 2:
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 "
                   "{%0, %1}, {%2, %3, %4, %5}, {%6, %7}, {%8, %9};"
                   : "=r"(dr[0]), "=r"(dr[1])
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(cr[0]), "r"(cr[1]));
      break;
    case 3:
      asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 "
                   "{%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %8, %9, %10};"
                   : "=f"(df[0]), "=f"(df[1]), "=f"(df[2]), "=f"(df[3])
                   : "r"(a[0]), "r"(a[1]), "r"(b[0]), "f"(cf[0]), "f"(cf[1]), "f"(cf[2]), "f"(cf[3]));
      break;
    case 4:
      asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 "
                   "{%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %8, %9, %10};"
                   : "=f"(df[0]), "=f"(df[1]), "=f"(df[2]), "=f"(df[3])
                   : "r"(a[0]), "r"(a[1]), "r"(b[0]), "f"(cf[0]), "f"(cf[1]), "f"(cf[2]), "f"(cf[3]));
      break;
    case 5:
      asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                   "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
                   : "=f"(df[0]), "=f"(df[1]), "=f"(df[2]), "=f"(df[3])
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(cf[0]), "f"(cf[1]), "f"(cf[2]), "f"(cf[3]));
      break;
    case 6:
      asm volatile("mma.sync.aligned.m16n8k4.row.col.f32.tf32.tf32.f32 "
                   "{%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %8, %9, %10};"
                   : "=f"(df[0]), "=f"(df[1]), "=f"(df[2]), "=f"(df[3])
                   : "r"(a[0]), "r"(a[1]), "r"(b[0]), "f"(cf[0]), "f"(cf[1]), "f"(cf[2]), "f"(cf[3]));
      break;
    case 7:
      asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
                   "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
                   : "=r"(dr[0]), "=r"(dr[1]), "=r"(dr[2]), "=r"(dr[3])
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(cr[0]), "r"(cr[1]), "r"(cr[2]), "r"(cr[3]));
      break;
    case 8:
      asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32 "
                   "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
                   : "=r"(dr[0]), "=r"(dr[1]), "=r"(dr[2]), "=r"(dr[3])
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(cr[0]), "r"(cr[1]), "r"(cr[2]), "r"(cr[3]));
      break;
    case 9:
      asm volatile("mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32 "
                   "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
                   : "=r"(dr[0]), "=r"(dr[1]), "=r"(dr[2]), "=r"(dr[3])
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(cr[0]), "r"(cr[1]), "r"(cr[2]), "r"(cr[3]));
      break;
    case 10:
      asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 "
                   "{%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %8, %9, %10};"
                   : "=r"(dr[0]), "=r"(dr[1]), "=r"(dr[2]), "=r"(dr[3])
                   : "r"(a[0]), "r"(a[1]), "r"(b[0]), "r"(cr[0]), "r"(cr[1]), "r"(cr[2]), "r"(cr[3]));
      break;
    case 11:
      asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.u8.s32 "
                   "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
                   : "=r"(dr[0]), "=r"(dr[1]), "=r"(dr[2]), "=r"(dr[3])
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(cr[0]), "r"(cr[1]), "r"(cr[2]), "r"(cr[3]));
      break;
    case 12:
      asm volatile("mma.sync.aligned.m16n8k8.row.col.f16.f16.f16.f16 "
                   "{%0, %1}, {%2, %3}, {%4}, {%5, %6};"
                   : "=r"(dr[0]), "=r"(dr[1])
                   : "r"(a[0]), "r"(a[1]), "r"(b[0]), "r"(cr[0]), "r"(cr[1]));
      break;
    case 13:
      asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
                   "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
                   : "=f"(df[0]), "=f"(df[1]), "=f"(df[2]), "=f"(df[3])
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(cf[0]), "f"(cf[1]), "f"(cf[2]), "f"(cf[3]));
      break;
  }
  const bool f32_out = form <= 1 || (form >= 3 && form <= 6) || form == 13;
  for (int i = 0; i < 4; ++i) dout[lane * 4 + i] = f32_out ? __float_as_uint(df[i]) : dr[i];
}

at::Tensor mma_raw(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, int64_t form) {
  CHECK_INPUT(a);
  CHECK_INPUT(b);
  CHECK_INPUT(c);
  TORCH_CHECK(a.numel() == 128 && b.numel() == 64 && c.numel() == 128, "a and c must be [32, 4], b [32, 2] int32");
  TORCH_CHECK(form >= 0 && form <= 13, "form must be 0 to 13");
  at::Tensor d = at::zeros({32, 4}, a.options());
  mma_raw_kernel<<<1, 32>>>(reinterpret_cast<const uint32_t*>(a.data_ptr<int>()),
                            reinterpret_cast<const uint32_t*>(b.data_ptr<int>()),
                            reinterpret_cast<const uint32_t*>(c.data_ptr<int>()),
                            reinterpret_cast<uint32_t*>(d.data_ptr<int>()), static_cast<int>(form));
  CHECK_LAUNCH();
  return d;
}

// =============================================================================================
// ldmatrix_raw / stmatrix_raw: a 2 KB shared buffer; lane l's row address is buf + offsets[l].
constexpr int kBufWords = 512;

__global__ void ldmatrix_raw_kernel(const uint32_t* image, const int* offsets, uint32_t* out, int form) {
  __shared__ alignas(128) uint32_t buf[kBufWords];
  const int lane = threadIdx.x;
  for (int i = lane; i < kBufWords; i += 32) buf[i] = image[i];
  __syncwarp();
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(buf)) + offsets[lane];
  uint32_t r[4] = {0, 0, 0, 0};
  switch (form) {
    case 0: asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(addr)); break;
    case 1: asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(addr)); break;
    case 2:
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                   : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
      break;
    case 3: asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(addr)); break;
    case 4:
      asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared::cta.b16 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
      break;
    case 5:
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                   : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
      break;
  }
  for (int i = 0; i < 4; ++i) out[lane * 4 + i] = r[i];
}

__global__ void stmatrix_raw_kernel(const uint32_t* regs, const int* offsets, uint32_t* image, int form) {
  __shared__ alignas(128) uint32_t buf[kBufWords];
  const int lane = threadIdx.x;
  for (int i = lane; i < kBufWords; i += 32) buf[i] = 0;
  __syncwarp();
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(buf)) + offsets[lane];
  uint32_t r[4];
  for (int i = 0; i < 4; ++i) r[i] = regs[lane * 4 + i];
  switch (form) {
    case 0: asm volatile("stmatrix.sync.aligned.m8n8.x1.shared.b16 [%0], {%1};" :: "r"(addr), "r"(r[0])); break;
    case 1: asm volatile("stmatrix.sync.aligned.m8n8.x2.shared.b16 [%0], {%1, %2};" :: "r"(addr), "r"(r[0]), "r"(r[1])); break;
    case 2:
      asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
                   :: "r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]));
      break;
    case 3: asm volatile("stmatrix.sync.aligned.m8n8.x1.trans.shared.b16 [%0], {%1};" :: "r"(addr), "r"(r[0])); break;
    case 4:
      asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared::cta.b16 [%0], {%1, %2};" :: "r"(addr), "r"(r[0]), "r"(r[1]));
      break;
    case 5:
      asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};"
                   :: "r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]));
      break;
  }
  __syncwarp();
  for (int i = lane; i < kBufWords; i += 32) image[i] = buf[i];
}

at::Tensor ldmatrix_raw(const at::Tensor& image, const at::Tensor& offsets, int64_t form) {
  CHECK_INPUT(image);
  CHECK_INPUT(offsets);
  TORCH_CHECK(image.numel() == kBufWords && offsets.numel() == 32, "image must hold 512 int32, offsets 32");
  TORCH_CHECK(form >= 0 && form <= 5, "form must be 0 to 5");
  at::Tensor out = at::zeros({32, 4}, image.options());
  ldmatrix_raw_kernel<<<1, 32>>>(reinterpret_cast<const uint32_t*>(image.data_ptr<int>()), offsets.data_ptr<int>(),
                                 reinterpret_cast<uint32_t*>(out.data_ptr<int>()), static_cast<int>(form));
  CHECK_LAUNCH();
  return out;
}

at::Tensor stmatrix_raw(const at::Tensor& regs, const at::Tensor& offsets, int64_t form) {
  CHECK_INPUT(regs);
  CHECK_INPUT(offsets);
  TORCH_CHECK(regs.numel() == 128 && offsets.numel() == 32, "regs must be [32, 4] int32, offsets 32");
  TORCH_CHECK(form >= 0 && form <= 5, "form must be 0 to 5");
  at::Tensor image = at::zeros({kBufWords}, regs.options());
  stmatrix_raw_kernel<<<1, 32>>>(reinterpret_cast<const uint32_t*>(regs.data_ptr<int>()), offsets.data_ptr<int>(),
                                 reinterpret_cast<uint32_t*>(image.data_ptr<int>()), static_cast<int>(form));
  CHECK_LAUNCH();
  return image;
}

// =============================================================================================
// alu_raw: d[i] = op(a[i], b[i], c[i]); floats travel as their bits.
__global__ void alu_raw_kernel(const uint32_t* a_in, const uint32_t* b_in, const uint32_t* c_in, uint32_t* d_out, int n,
                               int op) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint32_t a = a_in[i], b = b_in[i], c = c_in[i];
  const float fa = __uint_as_float(a), fb = __uint_as_float(b), fc = __uint_as_float(c);
  uint32_t d = 0;
  uint16_t h = 0;
  float f = 0.f;
  switch (op) {
    case 0: asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(fa), "f"(fb)); break;
    case 1: asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(fa), "f"(fb)); break;
    case 2: asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(d) : "f"(fa)); break;
    case 3: asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(fa)); d = h; break;
    case 4: asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(fa)); d = h; break;
    case 5: h = static_cast<uint16_t>(a); asm("cvt.f32.bf16 %0, %1;" : "=f"(f) : "h"(h)); d = __float_as_uint(f); break;
    case 6: h = static_cast<uint16_t>(a); asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); d = __float_as_uint(f); break;
    case 7: asm("cvt.rzi.s32.f32 %0, %1;" : "=r"(d) : "f"(fa)); break;
    case 8: asm("cvt.rni.s32.f32 %0, %1;" : "=r"(d) : "f"(fa)); break;
    case 9: asm("cvt.rn.f32.s32 %0, %1;" : "=f"(f) : "r"(a)); d = __float_as_uint(f); break;
    case 10: asm("cvt.rn.relu.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(fa), "f"(fb)); break;
    case 11: asm("cvt.rzi.u32.f32 %0, %1;" : "=r"(d) : "f"(fa)); break;
    case 12: asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c)); break;
    case 13: asm("prmt.b32.f4e %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c)); break;
    case 14: asm("prmt.b32.b4e %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c)); break;
    case 15: asm("prmt.b32.rc8 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c)); break;
    case 16: asm("prmt.b32.ecl %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c)); break;
    case 17: asm("prmt.b32.ecr %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c)); break;
    case 18: asm("prmt.b32.rc16 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c)); break;
    case 19: asm("lop3.b32 %0, %1, %2, %3, 0x96;" : "=r"(d) : "r"(a), "r"(b), "r"(c)); break;
    case 20: asm("lop3.b32 %0, %1, %2, %3, 0xE8;" : "=r"(d) : "r"(a), "r"(b), "r"(c)); break;
    case 21: asm("lop3.b32 %0, %1, %2, %3, %4;" : "=r"(d) : "r"(a), "r"(b), "r"(c), "n"(0xCA)); break;
    case 22: asm("lop3.b32 %0, %1, %2, %3, 0x1;" : "=r"(d) : "r"(a), "r"(b), "r"(c)); break;
    case 23: asm("ex2.approx.f32 %0, %1;" : "=f"(f) : "f"(fa)); d = __float_as_uint(f); break;
    case 24: asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(f) : "f"(fa)); d = __float_as_uint(f); break;
    case 25: asm("shf.l.wrap.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c)); break;
    case 26: asm("shf.r.clamp.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c)); break;
    case 27: asm("bfe.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b & 0xFF), "r"(c & 0xFF)); break;
    case 28: asm("bfe.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b & 0xFF), "r"(c & 0xFF)); break;
    case 29: asm("bfi.b32 %0, %1, %2, %3, %4;" : "=r"(d) : "r"(a), "r"(b), "r"(c & 0xFF), "r"((c >> 8) & 0xFF)); break;
    case 30: asm("mul.hi.s32 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b)); break;
    case 31: asm("mad.lo.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c)); break;
    case 32: asm("tanh.approx.f32 %0, %1;" : "=f"(f) : "f"(fa)); d = __float_as_uint(f); break;
    case 33: asm("rcp.rn.f32 %0, %1;" : "=f"(f) : "f"(fa)); d = __float_as_uint(f); break;
    case 34: asm("rsqrt.approx.f32 %0, %1;" : "=f"(f) : "f"(fa)); d = __float_as_uint(f); break;
    case 35: asm("lg2.approx.f32 %0, %1;" : "=f"(f) : "f"(fa)); d = __float_as_uint(f); break;
    case 36: asm("add.sat.s32 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b)); break;
    case 37: asm("min.u32 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b)); break;
    case 38: asm("max.s32 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b)); break;
    case 39: asm("popc.b32 %0, %1;" : "=r"(d) : "r"(a)); break;
    case 40: asm("clz.b32 %0, %1;" : "=r"(d) : "r"(a)); break;
    case 41: asm("brev.b32 %0, %1;" : "=r"(d) : "r"(a)); break;
    case 42:
      asm("{\n"
          "  .reg .pred p;\n"
          "  setp.lt.f32 p, %1, %2;\n"
          "  selp.b32 %0, 1, 0, p;\n"
          "}" : "=r"(d) : "f"(fa), "f"(fb));
      break;
    case 43: {
      uint64_t w;
      asm("mul.wide.u32 %0, %1, %2;" : "=l"(w) : "r"(a), "r"(b));
      d = static_cast<uint32_t>(w >> 32);
      break;
    }
    case 44: asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(f) : "f"(fa), "f"(fb), "f"(fc)); d = __float_as_uint(f); break;
    case 45: asm("sqrt.rn.f32 %0, %1;" : "=f"(f) : "f"(fa)); d = __float_as_uint(f); break;
    case 46: asm("div.rn.f32 %0, %1, %2;" : "=f"(f) : "f"(fa), "f"(fb)); d = __float_as_uint(f); break;
    case 47: {
      uint32_t lo, hi;
      asm("mov.b64 {%0, %1}, %2;" : "=r"(lo), "=r"(hi) : "l"((static_cast<uint64_t>(a) << 32) | b));
      uint16_t x, y;  // x is the low half of lo, y the high one
      asm("mov.b32 {%0, %1}, %2;" : "=h"(x), "=h"(y) : "r"(lo));
      (void)x;
      asm("mov.b32 %0, {%1, %2};" : "=r"(d) : "h"(y), "h"(static_cast<uint16_t>(hi)));
      break;
    }
    case 48: asm("shl.b32 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b & 63)); break;
    case 49: asm("shr.s32 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b & 63)); break;
    case 50: asm("sub.s32 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b)); break;
    case 51: asm("mul.rn.f32 %0, %1, %2;" : "=f"(f) : "f"(fa), "f"(fb)); d = __float_as_uint(f); break;
    case 52: asm("add.rn.ftz.f32 %0, %1, %2;" : "=f"(f) : "f"(fa), "f"(fb)); d = __float_as_uint(f); break;
    case 53: asm("max.f32 %0, %1, %2;" : "=f"(f) : "f"(fa), "f"(fb)); d = __float_as_uint(f); break;
  }
  d_out[i] = d;
}

constexpr int kAluOps = 54;

at::Tensor alu_raw(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, int64_t op) {
  CHECK_INPUT(a);
  CHECK_INPUT(b);
  CHECK_INPUT(c);
  CHECK_SAME_SHAPE(a, b);
  CHECK_SAME_SHAPE(a, c);
  TORCH_CHECK(op >= 0 && op < kAluOps, "op must be 0 to ", std::to_string(kAluOps - 1));
  at::Tensor d = at::empty_like(a);
  const int n = static_cast<int>(a.numel());
  if (n == 0) return d;
  alu_raw_kernel<<<ceil_div(n, 128), 128>>>(reinterpret_cast<const uint32_t*>(a.data_ptr<int>()),
                                            reinterpret_cast<const uint32_t*>(b.data_ptr<int>()),
                                            reinterpret_cast<const uint32_t*>(c.data_ptr<int>()),
                                            reinterpret_cast<uint32_t*>(d.data_ptr<int>()), n, static_cast<int>(op));
  CHECK_LAUNCH();
  return d;
}

// =============================================================================================
// shfl_raw: lanes in `mask` execute shfl.sync.mode d|p, v, b[lane], c, mask.
__global__ void shfl_raw_kernel(const uint32_t* v, const uint32_t* b, uint32_t c, uint32_t mask, int mode, uint32_t* d,
                                uint32_t* p) {
  const int lane = threadIdx.x;
  if (!(mask >> lane & 1u)) return;
  uint32_t r = 0, q = 0;
  switch (mode) {
    case 0:
      asm volatile("{ .reg .pred q; shfl.sync.up.b32 %0|q, %2, %3, %4, %5; selp.u32 %1, 1, 0, q; }"
                   : "=r"(r), "=r"(q) : "r"(v[lane]), "r"(b[lane]), "r"(c), "r"(mask));
      break;
    case 1:
      asm volatile("{ .reg .pred q; shfl.sync.down.b32 %0|q, %2, %3, %4, %5; selp.u32 %1, 1, 0, q; }"
                   : "=r"(r), "=r"(q) : "r"(v[lane]), "r"(b[lane]), "r"(c), "r"(mask));
      break;
    case 2:
      asm volatile("{ .reg .pred q; shfl.sync.bfly.b32 %0|q, %2, %3, %4, %5; selp.u32 %1, 1, 0, q; }"
                   : "=r"(r), "=r"(q) : "r"(v[lane]), "r"(b[lane]), "r"(c), "r"(mask));
      break;
    default:
      asm volatile("{ .reg .pred q; shfl.sync.idx.b32 %0|q, %2, %3, %4, %5; selp.u32 %1, 1, 0, q; }"
                   : "=r"(r), "=r"(q) : "r"(v[lane]), "r"(b[lane]), "r"(c), "r"(mask));
      break;
  }
  d[lane] = r;
  p[lane] = q;
}

std::vector<at::Tensor> shfl_raw(const at::Tensor& v, const at::Tensor& b, int64_t c, int64_t mask, int64_t mode) {
  CHECK_INPUT(v);
  CHECK_INPUT(b);
  TORCH_CHECK(v.numel() == 32 && b.numel() == 32, "v and b must hold 32 int32");
  at::Tensor d = at::zeros({32}, v.options()), p = at::zeros({32}, v.options());
  shfl_raw_kernel<<<1, 32>>>(reinterpret_cast<const uint32_t*>(v.data_ptr<int>()),
                             reinterpret_cast<const uint32_t*>(b.data_ptr<int>()), static_cast<uint32_t>(c),
                             static_cast<uint32_t>(mask), static_cast<int>(mode),
                             reinterpret_cast<uint32_t*>(d.data_ptr<int>()), reinterpret_cast<uint32_t*>(p.data_ptr<int>()));
  CHECK_LAUNCH();
  return {d, p};
}

// =============================================================================================
// specials_raw: one row per thread of a (2, 3) grid of (40, 2) blocks (a partial warp in each).
// %laneid and %ctaid.x are written with one '%', as published kernels write them (nvcc takes either).
constexpr int kSpecials = 11;
__global__ void specials_raw_kernel(uint32_t* out) {
  uint32_t v[kSpecials];
  asm("mov.u32 %0, %laneid;" : "=r"(v[0]));
  asm("mov.u32 %0, %%tid.x;" : "=r"(v[1]));
  asm("mov.u32 %0, %%tid.y;" : "=r"(v[2]));
  asm("mov.u32 %0, %%ntid.x;" : "=r"(v[3]));
  asm("mov.u32 %0, %%ntid.y;" : "=r"(v[4]));
  asm("mov.u32 %0, %ctaid.x;" : "=r"(v[5]));
  asm("mov.u32 %0, %%ctaid.y;" : "=r"(v[6]));
  asm("mov.u32 %0, %%nctaid.x;" : "=r"(v[7]));
  asm("mov.u32 %0, %%nctaid.y;" : "=r"(v[8]));
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(v[9]));
  asm("mov.u32 %0, %%lanemask_ge;" : "=r"(v[10]));
  const int block = blockIdx.y * gridDim.x + blockIdx.x, thread = threadIdx.y * blockDim.x + threadIdx.x;
  const int row = block * blockDim.x * blockDim.y + thread;
  for (int k = 0; k < kSpecials; ++k) out[row * kSpecials + k] = v[k];
}

at::Tensor specials_raw(const at::Tensor& like) {
  at::Tensor out = at::zeros({6 * 80, kSpecials}, like.options().dtype(at::kInt));
  specials_raw_kernel<<<dim3(2, 3), dim3(40, 2)>>>(reinterpret_cast<uint32_t*>(out.data_ptr<int>()));
  CHECK_LAUNCH();
  return out;
}

// =============================================================================================
// cp_async_raw: thread t copies src[16t .. 16t+15] with cp-size `size` and src-size `src_size`
// (bytes past it are zeros), waits, and the block writes the shared buffer back, shifted by one
// thread so that the barrier after the wait matters.
template <int SIZE, bool CG>
__global__ void cp_async_raw_kernel(const uint8_t* src, uint8_t* out, int src_size) {
  __shared__ alignas(16) uint8_t staged[64 * 16];
  const int t = threadIdx.x;
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(&staged[t * 16]));
  if constexpr (CG)
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], %2, %3;" :: "r"(dst), "l"(src + t * 16), "n"(SIZE), "r"(src_size));
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" :: "r"(dst), "l"(src + t * 16), "n"(SIZE), "r"(src_size));
  asm volatile("cp.async.commit_group;");
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  __syncthreads();
  const int from = (t + 1) % 64;
  for (int i = 0; i < SIZE; ++i) out[from * 16 + i] = staged[from * 16 + i];
}

at::Tensor cp_async_raw(const at::Tensor& src, int64_t size, int64_t src_size, bool cg) {
  CHECK_INPUT(src);
  CHECK_DTYPE(src, at::kByte);
  TORCH_CHECK(src.numel() == 64 * 16 && aligned16(src), "src must be 1024 bytes, 16-byte aligned");
  TORCH_CHECK(size == 4 || size == 8 || size == 16, "size must be 4, 8 or 16");
  TORCH_CHECK(!cg || size == 16, "cp.async.cg copies 16 bytes");
  at::Tensor out = at::zeros_like(src);
  const uint8_t* s = src.data_ptr<uint8_t>();
  uint8_t* o = out.data_ptr<uint8_t>();
  const int n = static_cast<int>(src_size);
  if (cg) cp_async_raw_kernel<16, true><<<1, 64>>>(s, o, n);
  else if (size == 4) cp_async_raw_kernel<4, false><<<1, 64>>>(s, o, n);
  else if (size == 8) cp_async_raw_kernel<8, false><<<1, 64>>>(s, o, n);
  else cp_async_raw_kernel<16, false><<<1, 64>>>(s, o, n);
  CHECK_LAUNCH();
  return out;
}

// cp_async_ring: column sums of a [rows, 256] float matrix through STAGES shared buffers, one row
// per step, each filled STAGES - 1 steps ahead (the pattern of a multi-stage matmul).
template <int STAGES>
__global__ void cp_async_ring_kernel(const float* x, float* out, int rows) {
  __shared__ alignas(16) float ring[STAGES][256];
  const int t = threadIdx.x, from = (t + 1) % 64;
  float sum[4] = {0.f, 0.f, 0.f, 0.f};
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < rows)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
                   :: "r"(static_cast<uint32_t>(__cvta_generic_to_shared(&ring[s][t * 4]))), "l"(x + s * 256 + t * 4));
    asm volatile("cp.async.commit_group;");
  }
  for (int r = 0; r < rows; ++r) {
    asm volatile("cp.async.wait_group %0;" :: "n"(STAGES - 2) : "memory");
    __syncthreads();  // row r has landed for every thread; row r - 1's buffer is free
    const int next = r + STAGES - 1;
    if (next < rows)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
                   :: "r"(static_cast<uint32_t>(__cvta_generic_to_shared(&ring[next % STAGES][t * 4]))),
                      "l"(x + next * 256 + t * 4));
    asm volatile("cp.async.commit_group;");
    for (int e = 0; e < 4; ++e) sum[e] += ring[r % STAGES][from * 4 + e];
  }
  for (int e = 0; e < 4; ++e) out[from * 4 + e] = sum[e];
}

at::Tensor cp_async_ring(const at::Tensor& x, int64_t stages) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  TORCH_CHECK(x.dim() == 2 && x.size(1) == 256 && aligned16(x), "x must be [rows, 256] and 16-byte aligned");
  at::Tensor out = at::empty({256}, x.options());
  const int rows = static_cast<int>(x.size(0));
  if (stages == 2) cp_async_ring_kernel<2><<<1, 64>>>(x.data_ptr<float>(), out.data_ptr<float>(), rows);
  else if (stages == 3) cp_async_ring_kernel<3><<<1, 64>>>(x.data_ptr<float>(), out.data_ptr<float>(), rows);
  else if (stages == 4) cp_async_ring_kernel<4><<<1, 64>>>(x.data_ptr<float>(), out.data_ptr<float>(), rows);
  else TORCH_CHECK(false, "stages must be 2, 3 or 4");
  CHECK_LAUNCH();
  return out;
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("mma_raw(Tensor a, Tensor b, Tensor c, int form) -> Tensor");
  m.def("ldmatrix_raw(Tensor image, Tensor offsets, int form) -> Tensor");
  m.def("stmatrix_raw(Tensor regs, Tensor offsets, int form) -> Tensor");
  m.def("alu_raw(Tensor a, Tensor b, Tensor c, int op) -> Tensor");
  m.def("shfl_raw(Tensor v, Tensor b, int c, int mask, int mode) -> Tensor[]");
  m.def("specials_raw(Tensor like) -> Tensor");
  m.def("cp_async_raw(Tensor src, int size, int src_size, bool cg) -> Tensor");
  m.def("cp_async_ring(Tensor x, int stages) -> Tensor");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("mma_raw", &mma_raw);
  m.impl("ldmatrix_raw", &ldmatrix_raw);
  m.impl("stmatrix_raw", &stmatrix_raw);
  m.impl("alu_raw", &alu_raw);
  m.impl("shfl_raw", &shfl_raw);
  m.impl("specials_raw", &specials_raw);
  m.impl("cp_async_raw", &cp_async_raw);
  m.impl("cp_async_ring", &cp_async_ring);
}
