// wmma_misuse.cu: WMMA calls that nvcc compiles but that break CUDA's rules for them (all 32 lanes
// make the same call with the same arguments; a 256-bit aligned pointer; ldm a multiple of 16
// bytes), which the simulator must refuse with a clear error. Simulator tests only: on a GPU these
// are undefined (a hang, a fault or garbage). Each op runs one warp over `buf` (1024 halves).
//
//   op                what breaks the rules
//   half_warp_load    lanes 16-31 return before load_matrix_sync
//   divergent_loads   lanes 0-15 and 16-31 load on two different lines
//   branch_barrier    lanes 16-31 skip mma_sync and wait at __syncthreads
//   lane_pointers     each lane passes its own pointer
//   misaligned        a pointer 16 bytes past a 32-byte boundary
//   odd_ldm           ldm 20 halves (40 bytes)
//   short_block       a block of 48 threads: warp 1 has only 16 lanes
//   uneven_copies     x[i] = i in a __half matrix_a fragment, whose slots hold each element twice
#include "helpers.cuh"

#include <cuda_fp16.h>
#include <mma.h>

using namespace nvcuda;
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major>;
using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

__global__ void half_warp_load_kernel(const __half* buf) {
  if (threadIdx.x >= 16) return;  // HALF-EXIT
  FragA a;
  wmma::load_matrix_sync(a, buf, 16);  // HALF-LOAD
}

__global__ void divergent_loads_kernel(const __half* buf) {
  FragA a;
  if (threadIdx.x < 16)
    wmma::load_matrix_sync(a, buf, 16);  // DIVERGENT-LOW
  else
    wmma::load_matrix_sync(a, buf + 256, 16);  // DIVERGENT-HIGH
}

__global__ void branch_barrier_kernel(const __half* buf, float* out) {
  FragA a;
  FragB b;
  Acc acc;
  wmma::load_matrix_sync(a, buf, 16);
  wmma::load_matrix_sync(b, buf + 256, 16);
  wmma::fill_fragment(acc, 0.0f);
  if (threadIdx.x < 16) wmma::mma_sync(acc, a, b, acc);  // BRANCH-MMA
  __syncthreads();
  wmma::store_matrix_sync(out, acc, 16, wmma::mem_row_major);
}

__global__ void lane_pointers_kernel(const __half* buf) {
  FragA a;
  wmma::load_matrix_sync(a, buf + (threadIdx.x % 2) * 256, 16);  // LANE-POINTERS
}

__global__ void misaligned_kernel(const __half* buf) {
  FragA a;
  wmma::load_matrix_sync(a, buf + 8, 16);  // MISALIGNED
}

__global__ void odd_ldm_kernel(const __half* buf) {
  FragA a;
  wmma::load_matrix_sync(a, buf, 20);  // ODD-LDM
}

__global__ void short_block_kernel(const __half* buf) {
  FragA a;
  wmma::load_matrix_sync(a, buf, 16);  // SHORT-BLOCK
}

__global__ void uneven_copies_kernel(const __half* buf, float* out) {
  FragA a;
  FragB b;
  Acc acc;
  wmma::load_matrix_sync(a, buf, 16);
  wmma::load_matrix_sync(b, buf + 256, 16);
  for (int i = 0; i < a.num_elements; ++i) a.x[i] = __float2half(static_cast<float>(i));
  wmma::fill_fragment(acc, 0.0f);
  wmma::mma_sync(acc, a, b, acc);  // UNEVEN-MMA
  wmma::store_matrix_sync(out, acc, 16, wmma::mem_row_major);
}

static const __half* halves(const at::Tensor& buf) {
  CHECK_INPUT(buf);
  CHECK_DTYPE(buf, at::kHalf);
  TORCH_CHECK(buf.numel() >= 1024, "buf must hold 1024 halves, got ", std::to_string(buf.numel()));
  return static_cast<const __half*>(buf.data_ptr());
}

// the ops that store a 16x16 float tile write it to `out`
static float* floats(const at::Tensor& out) {
  CHECK_INPUT(out);
  CHECK_DTYPE(out, at::kFloat);
  TORCH_CHECK(out.numel() >= 256, "out must hold 256 floats, got ", std::to_string(out.numel()));
  return out.data_ptr<float>();
}

void half_warp_load(const at::Tensor& buf) { half_warp_load_kernel<<<1, 32>>>(halves(buf)); CHECK_LAUNCH(); }
void divergent_loads(const at::Tensor& buf) { divergent_loads_kernel<<<1, 32>>>(halves(buf)); CHECK_LAUNCH(); }
void branch_barrier(const at::Tensor& buf, const at::Tensor& out) {
  branch_barrier_kernel<<<1, 32>>>(halves(buf), floats(out));
  CHECK_LAUNCH();
}
void lane_pointers(const at::Tensor& buf) { lane_pointers_kernel<<<1, 32>>>(halves(buf)); CHECK_LAUNCH(); }
void misaligned(const at::Tensor& buf) { misaligned_kernel<<<1, 32>>>(halves(buf)); CHECK_LAUNCH(); }
void odd_ldm(const at::Tensor& buf) { odd_ldm_kernel<<<1, 32>>>(halves(buf)); CHECK_LAUNCH(); }
void short_block(const at::Tensor& buf) { short_block_kernel<<<1, 48>>>(halves(buf)); CHECK_LAUNCH(); }
void uneven_copies(const at::Tensor& buf, const at::Tensor& out) {
  uneven_copies_kernel<<<1, 32>>>(halves(buf), floats(out));
  CHECK_LAUNCH();
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("half_warp_load(Tensor buf) -> ()");
  m.def("divergent_loads(Tensor buf) -> ()");
  m.def("branch_barrier(Tensor buf, Tensor out) -> ()");
  m.def("lane_pointers(Tensor buf) -> ()");
  m.def("misaligned(Tensor buf) -> ()");
  m.def("odd_ldm(Tensor buf) -> ()");
  m.def("short_block(Tensor buf) -> ()");
  m.def("uneven_copies(Tensor buf, Tensor out) -> ()");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("half_warp_load", &half_warp_load);
  m.impl("divergent_loads", &divergent_loads);
  m.impl("branch_barrier", &branch_barrier);
  m.impl("lane_pointers", &lane_pointers);
  m.impl("misaligned", &misaligned);
  m.impl("odd_ldm", &odd_ldm);
  m.impl("short_block", &short_block);
  m.impl("uneven_copies", &uneven_copies);
}
