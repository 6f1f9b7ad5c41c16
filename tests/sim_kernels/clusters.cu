// clusters.cu: thread-block clusters (sm_90), the way published Hopper kernels use them: distributed shared
// memory through cooperative_groups (map_shared_rank, cluster.sync()), the same through inline PTX (mapa,
// ld/st.shared::cluster, an arrival on another block's mbarrier, barrier.cluster), the cluster's special
// registers, and a TMA load multicast to every block of a cluster. tests/test_sim_clusters.py runs each on the
// simulator and, on an H100 (TORCH_CUDA_ARCH_LIST=9.0a), on cuda, against PyTorch; `misuse` holds the mistakes
// the simulator must report (simulator only).
// build-cache: make test-toolkit (only its tests load this file, so make test-all does not build it first)
// needs compute capability: 9.0 for thread-block clusters, mbarrier transactions and TMA
//
//   op                   what it computes
//   rotate(x)            x [blocks * 256] floats, clusters of 4 blocks (__cluster_dims__): block r of a cluster
//                        returns 2 * (block (r + 1) % 4's values, read from its shared memory) + r
//   histogram(x, bins, c)  the histogram of int32 x in [0, bins), bins a multiple of c; clusters of c blocks
//                        (cudaLaunchKernelEx's attribute), each block holding bins / c counters that every
//                        block of the cluster adds to
//   ids(gx, gy)          per block of a (gx, gy) grid in clusters of 2 x 2: its rank, the cluster's size, the
//                        cluster's id and the block's place in it, read from the special registers
//   swap(x)              x [2 * clusters] floats, clusters of 2: each block stores its value into the other's
//                        shared memory (st.shared::cluster) and arrives on the other's mbarrier; out[b] = x[b ^ 1]
//   multicast(x)         x [rows, 64] floats, rows a multiple of 64: clusters of 2 blocks share each 64-row slab,
//                        each block loading half of it by TMA multicast into both; out [rows / 64, 2, 64, 64]
//                        is what each block of each cluster received
//   occupancy(c, opt_in) cudaOccupancyMaxActiveClusters for clusters of c blocks, with or without the opt-in to
//                        more than 8: the number of clusters or the error's name
//   misuse(x, what)      a mistake with clusters (simulator only); 11-13 leave out a cluster barrier that a block
//                        which starts later or finishes earlier than the other needs
#include "helpers.cuh"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <cooperative_groups.h>
#include <cstdint>
#include <cuda.h>

#include "ptx_common.cuh"

namespace cg = cooperative_groups;

// ---------------------------------------------------------------------------------------------
// Distributed shared memory through cooperative_groups.
__global__ void __cluster_dims__(4, 1, 1) rotate_kernel(const float* x, float* out) {
  __shared__ float mine[256];
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank();
  mine[threadIdx.x] = x[blockIdx.x * 256 + threadIdx.x];
  cluster.sync();  // every block's values are in
  const float* next = cluster.map_shared_rank(mine, (rank + 1) % cluster.num_blocks());
  out[blockIdx.x * 256 + threadIdx.x] = 2.0f * next[threadIdx.x] + static_cast<float>(rank);
  cluster.sync();  // no block leaves while another still reads its memory
}

__global__ void histogram_kernel(const int* x, int64_t n, int* counts, int bins) {
  extern __shared__ int slice[];
  cg::cluster_group cluster = cg::this_cluster();
  const int per = bins / static_cast<int>(cluster.num_blocks());
  for (int i = threadIdx.x; i < per; i += blockDim.x) slice[i] = 0;
  cluster.sync();  // every block's counters are zero before anyone adds
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int v = x[i];
    int* owner = cluster.map_shared_rank(slice, v / per);
    atomicAdd(owner + v % per, 1);
  }
  cluster.sync();  // every addition is in
  const int first = static_cast<int>(cluster.block_rank()) * per;
  for (int i = threadIdx.x; i < per; i += blockDim.x) atomicAdd(&counts[first + i], slice[i]);
}

// ---------------------------------------------------------------------------------------------
// The same machinery in PTX.
__device__ __forceinline__ uint32_t special(int which) {
  uint32_t v = 0;
  switch (which) {
    case 0: asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(v)); break;
    case 1: asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(v)); break;
    case 2: asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(v)); break;
    case 3: asm volatile("mov.u32 %0, %%clusterid.y;" : "=r"(v)); break;
    case 4: asm volatile("mov.u32 %0, %%cluster_ctaid.x;" : "=r"(v)); break;
    case 5: asm volatile("mov.u32 %0, %%cluster_ctaid.y;" : "=r"(v)); break;
    case 6: asm volatile("mov.u32 %0, %%cluster_nctaid.x;" : "=r"(v)); break;
    case 7: asm volatile("mov.u32 %0, %%nclusterid.x;" : "=r"(v)); break;
    default:  // a predicate register
      asm volatile("{\n.reg .pred p;\nmov.pred p, %%is_explicit_cluster;\nselp.u32 %0, 1, 0, p;\n}" : "=r"(v));
      break;
  }
  return v;
}

constexpr int kIds = 9;

__global__ void __cluster_dims__(2, 2, 1) ids_kernel(int* out) {
  if (threadIdx.x < kIds)
    out[(blockIdx.y * gridDim.x + blockIdx.x) * kIds + threadIdx.x] = static_cast<int>(special(threadIdx.x));
}

__device__ __forceinline__ void cluster_sync_ptx() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n"
               "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ uint32_t mapa(uint32_t addr, uint32_t rank) {
  uint32_t out;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(out) : "r"(addr), "r"(rank));
  return out;
}

__global__ void __cluster_dims__(2, 1, 1) swap_kernel(const float* x, float* out) {
  __shared__ float value;
  __shared__ alignas(8) uint64_t bar;
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  if (threadIdx.x == 0) {
    mbar_init(&bar, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  cluster_sync_ptx();  // both barriers exist before anyone arrives on them
  if (threadIdx.x == 0) {
    const uint32_t other = rank ^ 1u;
    asm volatile("st.shared::cluster.f32 [%0], %1;" :: "r"(mapa(smem_addr(&value), other)), "f"(x[blockIdx.x])
                 : "memory");
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" :: "r"(mapa(smem_addr(&bar), other))
                 : "memory");
    mbar_wait(&bar, 0);  // the other block's value has come
    float got;
    asm volatile("ld.shared::cta.f32 %0, [%1];" : "=f"(got) : "r"(smem_addr(&value)) : "memory");
    out[blockIdx.x] = got;
  }
  cluster_sync_ptx();
}

// A 64 x 64 float slab per cluster: the block of rank r loads rows 32 r .. 32 r + 31 and multicasts them to both
// blocks, each of which waits on its own barrier for the whole 16 KB.
constexpr int kSlab = 64, kHalf = 32;

__device__ __forceinline__ void tma_load_multicast(void* dst, const CUtensorMap* map, int x, int y, uint64_t* bar,
                                                   uint16_t mask) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
               " [%0], [%1, {%2, %3}], [%4], %5;"
               :: "r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(smem_addr(bar)),
                  "h"(mask) : "memory");
}

__global__ void __cluster_dims__(2, 1, 1) multicast_kernel(const __grid_constant__ CUtensorMap map, float* out) {
  __shared__ alignas(128) float slab[kSlab * kSlab];
  __shared__ alignas(8) uint64_t bar;
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  const int cluster = blockIdx.x / 2;
  if (threadIdx.x == 0) {
    mbar_init(&bar, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  cluster_sync_ptx();  // both barriers exist before a copy completes on them
  if (threadIdx.x == 0) {
    mbar_expect_bytes(&bar, kSlab * kSlab * 4);  // both halves land here, one from each block
    tma_load_multicast(&slab[rank * kHalf * kSlab], &map, 0, cluster * kSlab + rank * kHalf, &bar, 0x3);
  }
  mbar_wait(&bar, 0);
  float* dst = out + static_cast<int64_t>(blockIdx.x) * kSlab * kSlab;
  for (int i = threadIdx.x; i < kSlab * kSlab; i += blockDim.x) dst[i] = slab[i];
  cluster_sync_ptx();  // no block leaves while a copy into the other may still be landing
}

// ---------------------------------------------------------------------------------------------
// Mistakes (the simulator reports each; never launched on a GPU).
__global__ void __cluster_dims__(2, 1, 1) misuse_kernel(float* x, int what) {
  __shared__ float s[32];
  cg::cluster_group cluster = cg::this_cluster();
  s[threadIdx.x] = x[threadIdx.x];
  if (what == 1) {  // rank 1's first thread goes on to the cluster barrier; its others wait for it at __syncthreads
    if (cluster.block_rank() == 1 && threadIdx.x != 0) __syncthreads();
    cluster.sync();  // MISUSE-DEADLOCK
    return;
  }
  if (what == 2) {
    x[threadIdx.x] = *cluster.map_shared_rank(&s[threadIdx.x], 2);  // MISUSE-RANK: the cluster has 2 blocks
    return;
  }
  if (what == 3) {
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");  // MISUSE-WAIT: no arrive before it
    return;
  }
  if (what == 4) {
    uint32_t a = mapa(smem_addr(&s[0]), 5);  // MISUSE-MAPA: rank 5 of 2
    x[0] = static_cast<float>(a);
    return;
  }
  if (what == 5) {  // the block of rank 1 leaves at once; rank 0 then reads its shared memory
    if (cluster.block_rank() == 1) return;
    for (int i = 0; i < 64; ++i) __nanosleep(100);
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(mapa(smem_addr(&s[threadIdx.x]), 1)));  // MISUSE-GONE
    x[threadIdx.x] = v;
    return;
  }
  if (what == 6) {
    asm volatile("barrier.cluster.arrive.aligned;" ::: "memory");
    asm volatile("barrier.cluster.arrive.aligned;" ::: "memory");  // MISUSE-TWICE
  }
  if (what == 7) {  // the block of rank 0 leaves once its mbarrier is set; rank 1 then arrives on that mbarrier
    __shared__ alignas(8) uint64_t bar;
    if (threadIdx.x == 0) {
      mbar_init(&bar, 1);
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    cluster.sync();  // both barriers exist before anyone arrives on them
    if (cluster.block_rank() == 0) return;
    for (int i = 0; i < 64; ++i) __nanosleep(100);
    const uint32_t remote = mapa(smem_addr(&bar), 0);
    if (threadIdx.x == 0)
      asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" :: "r"(remote) : "memory");  // MISUSE-ARRIVE-GONE
    return;
  }
  if (what == 8) {  // an address in the other block's memory through .shared::cta, which reaches only this block's
    cluster.sync();
    float v;
    asm volatile("ld.shared::cta.f32 %0, [%1];" : "=f"(v) : "r"(mapa(smem_addr(&s[threadIdx.x]), cluster.block_rank() ^ 1)));  // MISUSE-CTA-SPACE
    x[threadIdx.x] = v;
    cluster.sync();
    return;
  }
  if (what == 9) {  // the block of rank 1 leaves at once; rank 0 then writes into its shared memory
    if (cluster.block_rank() == 1) return;
    for (int i = 0; i < 64; ++i) __nanosleep(100);
    *cluster.map_shared_rank(&s[threadIdx.x], 1) = 1.0f;
    return;
  }
  if (what == 10) {  // not a mistake: rank 1 takes __activemask() while rank 0 already waits at the cluster barrier
    if (cluster.block_rank() == 1) x[32 + threadIdx.x] = static_cast<float>(__popc(__activemask()));
    cluster.sync();
    return;
  }
  // 11-13: cluster barriers left out where the blocks of a cluster may be apart: a block may start later than the
  // others, and finish earlier. The simulator runs one block of each cluster ahead of the others (unless
  // CUDASIM_CLUSTER_LEAD=none, where they start together and take turns, and each of these runs to its end).
  const uint32_t other = cluster.block_rank() ^ 1u;
  if (what == 11) {  // each block hands a token to the other's mbarrier after a block barrier, not a cluster barrier
    __shared__ alignas(8) uint64_t token;
    if (threadIdx.x == 0) {
      mbar_init(&token, 2);
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();  // this block's barrier is initialised; the other block's need not be (nor the block started)
    if (threadIdx.x == 0) {
      mbar_arrive(&token);
      const uint32_t remote = mapa(smem_addr(&token), other);
      asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" :: "r"(remote) : "memory");  // MISUSE-EARLY-ARRIVE
      mbar_wait(&token, 0);
    }
    cluster.sync();
    return;
  }
  if (what == 12) {  // each block stores its values into the other's shared memory before any cluster barrier
    __shared__ float got[32];
    *cluster.map_shared_rank(&got[threadIdx.x], other) = x[threadIdx.x];  // MISUSE-EARLY-STORE
    cluster.sync();
    x[threadIdx.x] = got[threadIdx.x];
    cluster.sync();
    return;
  }
  if (what == 13) {  // four steps, each handed back to both blocks' mbarriers (as matmul13_6's consumers hand a stage
                     // back), then an epilogue and no cluster barrier before exit: nothing waits for the last hand-back
    __shared__ alignas(8) uint64_t handed;
    if (threadIdx.x == 0) {
      mbar_init(&handed, 8);  // the four steps of both blocks
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    cluster.sync();  // both barriers exist before anyone arrives on them
    float acc = 0.0f;
    for (int step = 0; step < 4; ++step) {
      acc += __shfl_xor_sync(0xffffffffu, x[threadIdx.x] * static_cast<float>(step), 1);
      if (threadIdx.x == 0) {
        mbar_arrive(&handed);
        const uint32_t remote = mapa(smem_addr(&handed), other);
        asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" :: "r"(remote) : "memory");  // MISUSE-HANDBACK-GONE
      }
    }
    acc = __shfl_xor_sync(0xffffffffu, acc, 2);  // the epilogue
    acc = __shfl_xor_sync(0xffffffffu, acc, 4);
    if (cluster.block_rank() == 0) x[32 + threadIdx.x] = acc;
    return;  // without cluster.sync(): a block may exit while the other still arrives on its barrier
  }
  cluster.sync();
}

// ---------------------------------------------------------------------------------------------
// Launchers.
at::Tensor rotate(const at::Tensor& x) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  TORCH_CHECK(x.numel() % 1024 == 0 && x.numel() > 0, "x needs a multiple of 1024 values (clusters of 4 blocks of "
              "256), got ", std::to_string(x.numel()));
  at::Tensor out = at::empty_like(x);
  rotate_kernel<<<x.numel() / 256, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(),
                                                                               out.data_ptr<float>());
  CHECK_LAUNCH();
  return out;
}

// A launch configuration of `grid` blocks in clusters of `cluster` along x, through cudaLaunchKernelEx's attribute
// (held in `attr`, which must outlive the launch).
cudaLaunchConfig_t cluster_launch(int64_t grid, unsigned block, size_t smem, int64_t cluster,
                                  cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(grid));
  config.blockDim = dim3(block);
  config.dynamicSmemBytes = smem;
  config.stream = c10::cuda::getCurrentCUDAStream();
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(cluster);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  return config;
}

at::Tensor histogram(const at::Tensor& x, int64_t bins, int64_t cluster) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kInt);
  TORCH_CHECK(cluster >= 1 && cluster <= 8 && bins > 0 && bins % cluster == 0 && bins / cluster <= 8192,
              "bins must be a multiple of the cluster size (1 to 8), at most 8192 per block; got bins = ",
              std::to_string(bins), ", cluster = ", std::to_string(cluster));
  at::Tensor counts = at::zeros({bins}, x.options());
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t config = cluster_launch(4 * cluster, 128, static_cast<size_t>(bins / cluster) * sizeof(int),
                                                   cluster, attr);
  C10_CUDA_CHECK(cudaLaunchKernelEx(&config, histogram_kernel, x.data_ptr<int>(), x.numel(), counts.data_ptr<int>(),
                                    static_cast<int>(bins)));
  return counts;
}

at::Tensor ids(int64_t gx, int64_t gy) {
  TORCH_CHECK(gx > 0 && gy > 0 && gx % 2 == 0 && gy % 2 == 0, "the grid must be a multiple of the 2 x 2 clusters");
  at::Tensor out = at::full({gy, gx, kIds}, -1, at::TensorOptions().dtype(at::kInt).device(at::kCUDA));
  ids_kernel<<<dim3(gx, gy), 32, 0, c10::cuda::getCurrentCUDAStream()>>>(out.data_ptr<int>());
  CHECK_LAUNCH();
  return out;
}

at::Tensor swap(const at::Tensor& x) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  TORCH_CHECK(x.numel() % 2 == 0 && x.numel() > 0, "x needs an even number of values (clusters of 2 blocks)");
  at::Tensor out = at::empty_like(x);
  swap_kernel<<<x.numel(), 32, 0, c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), out.data_ptr<float>());
  CHECK_LAUNCH();
  return out;
}

at::Tensor multicast(const at::Tensor& x) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  CHECK_DIM(x, 2);
  TORCH_CHECK(x.size(1) == kSlab && x.size(0) % kSlab == 0 && x.size(0) > 0, "x must be [rows, 64] with rows a "
              "multiple of 64, got ", shape_str(x.sizes()));
  CUtensorMap map;
  const cuuint64_t dims[2] = {kSlab, static_cast<cuuint64_t>(x.size(0))};
  const cuuint64_t strides[1] = {kSlab * 4};
  const cuuint32_t box[2] = {kSlab, kHalf}, estride[2] = {1, 1};
  CUresult r = tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, x.data_ptr(), dims, strides, box,
                                    estride, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                    CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TORCH_CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed with error ", std::to_string(static_cast<int>(r)));
  const int64_t clusters = x.size(0) / kSlab;
  at::Tensor out = at::empty({clusters, 2, kSlab, kSlab}, x.options());
  multicast_kernel<<<2 * clusters, 128, 0, c10::cuda::getCurrentCUDAStream()>>>(map, out.data_ptr<float>());
  CHECK_LAUNCH();
  return out;
}

// What a launch with a cluster shape CUDA refuses returns: the error's name.
std::string bad_cluster(int64_t grid, int64_t cluster) {
  cudaLaunchAttribute attr[1];
  const size_t smem = cluster > 0 && 64 % cluster == 0 ? static_cast<size_t>(64 / cluster) * sizeof(int) : 0;
  const cudaLaunchConfig_t config = cluster_launch(grid, 32, smem, cluster, attr);
  at::Tensor counts = at::zeros({64}, at::TensorOptions().dtype(at::kInt).device(at::kCUDA));
  at::Tensor x = at::zeros({1}, counts.options());
  cudaError_t e = cudaLaunchKernelEx(&config, histogram_kernel, x.data_ptr<int>(), int64_t(1), counts.data_ptr<int>(),
                                     64);
  cudaGetLastError();
  return cudaGetErrorName(e);
}

// What cudaOccupancyMaxActiveClusters answers for histogram_kernel in clusters of `cluster` blocks (128 threads,
// 256 bytes of shared memory a block), with or without the opt-in to clusters of more than 8: the number of
// clusters, or the error's name. The opt-in is taken back afterwards.
std::string occupancy(int64_t cluster, bool non_portable) {
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t config = cluster_launch(cluster, 128, 256, cluster, attr);
  if (non_portable)
    C10_CUDA_CHECK(cudaFuncSetAttribute(histogram_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  int n = -1;
  const cudaError_t e = cudaOccupancyMaxActiveClusters(&n, histogram_kernel, &config);
  cudaGetLastError();
  if (non_portable)
    C10_CUDA_CHECK(cudaFuncSetAttribute(histogram_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 0));
  return e == cudaSuccess ? std::to_string(n) : std::string(cudaGetErrorName(e));
}

at::Tensor misuse(const at::Tensor& x, int64_t what) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  TORCH_CHECK(x.numel() >= 64, "x needs at least 64 values");
  misuse_kernel<<<2, 32>>>(x.data_ptr<float>(), static_cast<int>(what));
  CHECK_LAUNCH();
  return x;
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("rotate(Tensor x) -> Tensor");
  m.def("histogram(Tensor x, int bins, int cluster) -> Tensor");
  m.def("ids(int gx, int gy) -> Tensor", &ids);
  m.def("swap(Tensor x) -> Tensor");
  m.def("multicast(Tensor x) -> Tensor");
  m.def("bad_cluster(int grid, int cluster) -> str", &bad_cluster);
  m.def("occupancy(int cluster, bool non_portable) -> str", &occupancy);
  m.def("misuse(Tensor x, int what) -> Tensor");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("rotate", &rotate);
  m.impl("histogram", &histogram);
  m.impl("swap", &swap);
  m.impl("multicast", &multicast);
  m.impl("misuse", &misuse);
}
