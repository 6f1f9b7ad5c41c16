// ptx_atomics.cu: PTX atom, red and the strong loads and stores (ld.acquire, st.release, ld.relaxed.gpu) in
// inline asm, the way low-level code writes its flags, counters and locks. Every op is defined on a GPU and
// gives there what tests/test_sim_ptx.py expects on the simulator.
//
//   op        what it exercises
//   atomics   64 threads, each applying every operation of atom (add on u32, u64 and f32; min, max; and, or,
//             xor; exch; cas in a loop; inc, dec) and red.add to global words, and atom.shared.add to a
//             shared one; out holds the words at the end
//   handoff   warp 1 writes a value, then sets a flag with st.release.gpu; warp 0 polls the flag with
//             ld.acquire.gpu (or ld.relaxed.gpu and a fence) and then reads the value: out[0] is the value read
//   float_adds  a[i] + b[i] six ways, a row each: plain, atomicAdd in global memory, red.global.add.f32,
//             atom.add.f32 through a generic address of shared memory, atomicAdd in shared memory,
//             atom.shared.add.f32 (the global ones flush subnormals to zero on a GPU, the others keep
//             them); a seventh row the old value atomicAdd returned; and 1e-310 + 1e-310 by a double atomicAdd
#include "helpers.cuh"

#include <ATen/ops/zeros.h>

__device__ __forceinline__ unsigned atom_add_u32(unsigned* p, unsigned v) {
  unsigned old;
  asm volatile("atom.global.relaxed.gpu.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

__global__ void atomics_kernel(unsigned long long* out) {
  __shared__ unsigned counter;
  const unsigned t = threadIdx.x;
  if (t == 0) counter = 0;
  __syncthreads();
  unsigned* w = reinterpret_cast<unsigned*>(out);  // out[0..5] as 12 32-bit words, out[6..] 64-bit ones
  unsigned sink;  // the old values nobody reads
  atom_add_u32(w + 0, t + 1);                                                           // sum of 1..64
  asm volatile("atom.relaxed.gpu.global.min.s32 %0, [%1], %2;" : "=r"(sink) : "l"(w + 1), "r"(int(t) - 20) : "memory");
  asm volatile("atom.global.max.u32 %0, [%1], %2;" : "=r"(sink) : "l"(w + 2), "r"(t * 3) : "memory");
  asm volatile("atom.global.or.b32 %0, [%1], %2;" : "=r"(sink) : "l"(w + 3), "r"(1u << (t % 32)) : "memory");
  asm volatile("atom.global.and.b32 %0, [%1], %2;" : "=r"(sink) : "l"(w + 4), "r"(~(1u << (t % 16))) : "memory");
  asm volatile("atom.global.xor.b32 %0, [%1], %2;" : "=r"(sink) : "l"(w + 5), "r"(t) : "memory");
  unsigned expected = 0, seen;  // a CAS loop: add 2 to w[6]
  do {
    asm volatile("atom.acq_rel.gpu.global.cas.b32 %0, [%1], %2, %3;"
                 : "=r"(seen) : "l"(w + 6), "r"(expected), "r"(expected + 2) : "memory");
    if (seen == expected) break;
    expected = seen;
  } while (true);
  asm volatile("atom.global.inc.u32 %0, [%1], %2;" : "=r"(sink) : "l"(w + 7), "r"(9u) : "memory");   // wraps at 9
  asm volatile("atom.global.dec.u32 %0, [%1], %2;" : "=r"(sink) : "l"(w + 8), "r"(100u) : "memory");
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(w + 9), "r"(2u) : "memory");
  float f;
  asm volatile("atom.global.add.f32 %0, [%1], %2;" : "=f"(f) : "l"(w + 10), "f"(0.5f) : "memory");
  unsigned old_exch;
  asm volatile("atom.global.exch.b32 %0, [%1], %2;" : "=r"(old_exch) : "l"(w + 11), "r"(t + 1000) : "memory");
  unsigned long long minus = 0ull - t, sink64;  // a negative number as u64: ptxas has no atom.add.s64
  asm volatile("atom.global.add.u64 %0, [%1], %2;" : "=l"(sink64) : "l"(out + 6), "l"(minus) : "memory");
  unsigned s_addr = static_cast<unsigned>(__cvta_generic_to_shared(&counter));
  asm volatile("atom.shared.add.u32 %0, [%1], %2;" : "=r"(sink) : "r"(s_addr), "r"(1u) : "memory");
  __syncthreads();
  if (t == 0) out[7] = counter;
}

__global__ void handoff_kernel(unsigned* flag, float* data, float* out, int relaxed) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp == 1 && lane == 0) {
    *data = 42.5f;
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(flag), "r"(1u) : "memory");
  } else if (warp == 0 && lane == 0) {
    unsigned seen = 0;
    while (seen == 0) {
      if (relaxed) {
        asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(flag) : "memory");
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
      } else {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(flag) : "memory");
      }
    }
    out[0] = *data;
  }
}

__global__ void float_adds_kernel(const float* a, const float* b, float* out, double* d, int n) {
  __shared__ float sh[3][64];
  const int i = threadIdx.x;
  if (i >= n) return;
  out[i] = a[i] + b[i];
  out[n + i] = a[i];
  out[6 * n + i] = atomicAdd(&out[n + i], b[i]);  // its value used: ATOM, not RED; the old value kept
  out[2 * n + i] = a[i];
  asm volatile("red.global.add.f32 [%0], %1;" ::"l"(&out[2 * n + i]), "f"(b[i]) : "memory");
  sh[0][i] = a[i];
  sh[1][i] = a[i];
  sh[2][i] = a[i];
  float sink;
  asm volatile("atom.add.f32 %0, [%1], %2;" : "=f"(sink) : "l"(&sh[0][i]), "f"(b[i]) : "memory");
  atomicAdd(&sh[1][i], b[i]);
  const unsigned s2 = static_cast<unsigned>(__cvta_generic_to_shared(&sh[2][i]));
  asm volatile("atom.shared.add.f32 %0, [%1], %2;" : "=f"(sink) : "r"(s2), "f"(b[i]) : "memory");
  out[3 * n + i] = sh[0][i];
  out[4 * n + i] = sh[1][i];
  out[5 * n + i] = sh[2][i];
  d[i] = 1e-310;  // a subnormal double
  atomicAdd(&d[i], 1e-310);
}

std::vector<at::Tensor> float_adds(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.is_cuda() && a.dtype() == at::kFloat && a.is_contiguous() && a.sizes() == b.sizes() &&
              b.dtype() == at::kFloat && b.is_contiguous() && a.dim() == 1 && a.numel() <= 64,
              "float_adds takes two contiguous float32 vectors of one length, at most 64");
  const int n = static_cast<int>(a.numel());
  auto out = at::zeros({7, n}, a.options());
  auto d = at::zeros({n}, a.options().dtype(at::kDouble));
  float_adds_kernel<<<1, 64>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(),
                               d.data_ptr<double>(), n);
  CHECK_LAUNCH();
  return {out, d};
}

at::Tensor atomics() {
  auto out = at::zeros({8}, at::TensorOptions().dtype(at::kLong).device(at::kCUDA));
  auto* o = reinterpret_cast<unsigned long long*>(out.data_ptr<int64_t>());
  // starting values: min from 0, and from all ones, dec from 5, exch from 7
  unsigned init[12] = {0, 0, 0, 0, 0xFFFFFFFFu, 0, 0, 0, 5, 0, 0, 7};
  cudaMemcpy(o, init, sizeof init, cudaMemcpyHostToDevice);
  atomics_kernel<<<1, 64>>>(o);
  CHECK_LAUNCH();
  return out;
}

at::Tensor handoff(int64_t relaxed) {
  auto opts = at::TensorOptions().dtype(at::kFloat).device(at::kCUDA);
  auto flag = at::zeros({1}, at::TensorOptions().dtype(at::kInt).device(at::kCUDA));
  auto data = at::zeros({1}, opts), out = at::zeros({1}, opts);
  handoff_kernel<<<1, 64>>>(reinterpret_cast<unsigned*>(flag.data_ptr<int>()), data.data_ptr<float>(),
                            out.data_ptr<float>(), static_cast<int>(relaxed));
  CHECK_LAUNCH();
  return out;
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("atomics() -> Tensor");
  m.def("handoff(int relaxed) -> Tensor");
  m.def("float_adds(Tensor a, Tensor b) -> Tensor[]");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CompositeExplicitAutograd, m) {
  m.impl("atomics", &atomics);
  m.impl("handoff", &handoff);
  m.impl("float_adds", &float_adds);
}
