// cutlass13.cu: lesson 13's problem, C = A @ B (bf16 or fp16 in, fp32 accumulation, A [M, K] and B [K, N] row-major)
// as CUTLASS 3 builds it for Hopper, for the lesson's benchmark to set beside the lesson's own kernels. It is the
// practical route: no PTX is written here; CUTLASS's collective builders choose the TMA boxes, the swizzle, the
// number of ring stages and the wgmma shapes from a few type choices, and the kernel is the lesson's ladder in a
// library: a producer warp issuing TMA, two consumer warpgroups (the "cooperative" schedule: both work on one
// 128 x 256 tile), a persistent tile scheduler, a TMA-store epilogue, and a cluster of 2 blocks along M that
// share each B tile by TMA multicast (the step the lesson's kernels stop before).
//
// It needs CUTLASS's headers, which the project does not install: `pip install nvidia-cutlass` brings them (6 MB,
// headers and Python, nothing compiled); kernels/benchmarks/lesson13.py finds them there and builds this file with
// load(..., extra_include_paths=...), else it leaves the CUTLASS rows out and says why. The build takes minutes.
// Not run by the simulator or the compile check:
// compile-check: skip (needs CUTLASS's headers and an H100)
//
//   cutlass13(a, b, c)   out-variant, as the lesson's matmul13_N; H100 (compute capability 9.0) only.
#include "helpers.cuh"

#include <ATen/ops/empty.h>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>

#include <string>

// wgmma exists only in the target sm_90a: the loader builds a file for it when the file names the macro below.
constexpr bool kBuiltForSm90a =
#ifdef __CUDA_ARCH_FEAT_SM90_ALL
    true;
#else
    false;
#endif

namespace {

// The choices, in CUTLASS's words: element types and layouts (RowMajor B is [K, N] with N contiguous), 16-byte
// aligned accesses, the block's tile, the cluster, and the schedule of the main loop and of the epilogue.
template <class T>
struct HopperGemm {
  using Layout = cutlass::layout::RowMajor;
  static constexpr int kAlign = 16 / sizeof(T);  // elements per 16 bytes: what TMA needs of every row
  using Tile = cute::Shape<cute::_128, cute::_256, cute::_64>;
  using Cluster = cute::Shape<cute::_2, cute::_1, cute::_1>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float,  // accumulator, alpha/beta
      T, Layout, kAlign,                                              // C (read only when beta != 0)
      T, Layout, kAlign,                                              // D, the result
      cutlass::epilogue::TmaWarpSpecializedCooperative>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, T, Layout, kAlign, T, Layout, kAlign, float, Tile, Cluster,
      // as many ring stages as fit in shared memory beside the epilogue's
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue,
                                                      cutlass::gemm::PersistentScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

template <class T>
void run(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
  using Gemm = typename HopperGemm<T>::Gemm;
  using K = typename Gemm::GemmKernel;
  const int m = static_cast<int>(a.size(0)), k = static_cast<int>(a.size(1)), n = static_cast<int>(b.size(1));
  auto stride_a = cutlass::make_cute_packed_stride(typename K::StrideA{}, cute::make_shape(m, k, 1));
  auto stride_b = cutlass::make_cute_packed_stride(typename K::StrideB{}, cute::make_shape(n, k, 1));
  auto stride_c = cutlass::make_cute_packed_stride(typename K::StrideC{}, cute::make_shape(m, n, 1));
  auto stride_d = cutlass::make_cute_packed_stride(typename K::StrideD{}, cute::make_shape(m, n, 1));
  auto* pa = reinterpret_cast<const T*>(a.data_ptr());
  auto* pb = reinterpret_cast<const T*>(b.data_ptr());
  auto* pc = reinterpret_cast<T*>(c.data_ptr());
  typename Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                                {m, n, k, 1},
                                {pa, stride_a, pb, stride_b},
                                {{1.0f, 0.0f}, pc, stride_c, pc, stride_d}};  // D = 1 * A @ B + 0 * C
  args.hw_info.sm_count = device_attribute(cudaDevAttrMultiProcessorCount);
  Gemm gemm;
  cutlass::Status ok = gemm.can_implement(args);
  TORCH_CHECK(ok == cutlass::Status::kSuccess, "cutlass13: CUTLASS cannot run this problem (",
              std::to_string(m) + " x " + std::to_string(n) + " x " + std::to_string(k), "): ",
              cutlassGetStatusString(ok));
  at::Tensor workspace = at::empty({static_cast<int64_t>(Gemm::get_workspace_size(args))},
                                   a.options().dtype(at::kByte));
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  ok = gemm.initialize(args, workspace.data_ptr(), stream);
  TORCH_CHECK(ok == cutlass::Status::kSuccess, "cutlass13: initialize failed: ", cutlassGetStatusString(ok));
  ok = gemm.run(stream);
  TORCH_CHECK(ok == cutlass::Status::kSuccess, "cutlass13: run failed: ", cutlassGetStatusString(ok));
  CHECK_LAUNCH();
}

}  // namespace

void cutlass13(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
  CHECK_CUDA(a);
  CHECK_CUDA(b);
  CHECK_CUDA(c);
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && c.dim() == 2, "cutlass13: a, b and c must be 2-D, got shapes ",
              shape_str(a.sizes()), ", ", shape_str(b.sizes()), " and ", shape_str(c.sizes()));
  CHECK_MATMUL_SHAPES(a, b, c);
  TORCH_CHECK(a.dtype() == b.dtype() && c.dtype() == a.dtype() &&
                  (a.scalar_type() == at::kBFloat16 || a.scalar_type() == at::kHalf),
              "cutlass13: a, b and c must be one dtype, bfloat16 or float16; got ", a.dtype(), ", ", b.dtype(),
              " and ", c.dtype());
  TORCH_CHECK(a.is_contiguous() && b.is_contiguous() && c.is_contiguous(),
              "cutlass13: a, b and c must be contiguous (row-major)");
  TORCH_CHECK(a.size(1) % 8 == 0 && b.size(1) % 8 == 0, "cutlass13: K and N must be multiples of 8 (rows of 16-byte "
              "multiples, as TMA needs), got K = ", std::to_string(a.size(1)), ", N = ", std::to_string(b.size(1)));
  check_capability("cutlass13", 900, "wgmma and TMA");
  TORCH_CHECK(device_attribute(cudaDevAttrComputeCapabilityMajor) == 9,
              "cutlass13: this build is for sm_90a (an H100 or H200), which runs on no other GPU");
  if (c.numel() == 0) return;
  if (a.size(1) == 0) {
    c.zero_();
    return;
  }
  if (a.scalar_type() == at::kBFloat16) run<cutlass::bfloat16_t>(a, b, c);
  else run<cutlass::half_t>(a, b, c);
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) { m.def("cutlass13(Tensor a, Tensor b, Tensor(a!) c) -> ()"); }

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("cutlass13", &cutlass13); }
