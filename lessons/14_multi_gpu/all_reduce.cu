// all_reduce.cu: the exercise of lesson 14 (your file: fill in the two parts marked FILL ME IN).
// A one-shot all-reduce: every rank copies its x into its own symmetric buffer, the ranks meet, then each
// rank sums every rank's buffer into its out, and the ranks meet again.
// Check it with: check_exercise("14", "all_reduce", path="all_reduce.cu")  (or make check LESSON=14); the
// check starts two ranks (two processes; on GPUs, one GPU each when there are two, else the simulator).
#include "helpers.cuh"

#include <algorithm>
#include <cstdint>
#include <string>

constexpr int BLOCK = 256;
constexpr int MAX_RANKS = 8;
constexpr int MAX_BLOCKS = 64;
constexpr long long WAIT_CYCLES = 1ll << 36;  // about 30 s at 2 GHz

// Stops the kernel (a CUDA error, not a GPU that waits for ever) when a wait that began at clock64() == start has
// gone on for WAIT_CYCLES: call it in every loop that waits for a peer. A wrong flag index waits for ever otherwise.
// (The simulator's own limit comes first there: after 15 seconds in the self-check it names the flag.)
__device__ __forceinline__ void give_up_after(long long start) {
  if (clock64() - start > WAIT_CYCLES) __trap();
}

// barrier_ranks: a barrier between the blocks blockIdx.x of every rank. When it returns, every write that
// any rank's block blockIdx.x made before it is visible to this block, and this block's writes to all of
// them. pads[r] is rank r's signal pad: uint32 flags, all 0 between calls. The flag
// pads[p][blockIdx.x * world + r] is a mailbox from rank r to rank p: r puts a signal by turning it from 0
// to 1 (atomicCAS_system, waiting while it is still 1: p has not taken the last one yet), p takes it by
// turning it from 1 back to 0 (waiting while it is 0: nothing has arrived yet). Thread p of the block talks
// to rank p, itself included.
__device__ void barrier_ranks(uint32_t* const* pads, int rank, int world) {
  // FILL ME IN (about 12 lines)
  // 1. a block barrier: the block's writes before this call are made
  // 2. thread p < world only: a system-scope fence (release), then put the signal into rank p's flag
  //    pads[p][blockIdx.x * world + rank] (loop: atomicCAS_system from 0 to 1 until it returns 0)
  // 3. take rank p's signal from this rank's flag pads[rank][blockIdx.x * world + p] (loop: atomicCAS_system from 1
  //    to 0 until it returns 1), then a system-scope fence again (acquire)
  //    (in both loops call give_up_after(start), start = clock64() taken before the first: a GPU never waits for ever)
  // 4. a block barrier: every thread waits until the block's signals are all in
}

// all_reduce_kernel: a grid of T threads; thread t owns elements t, t + T, t + 2T, ... on every rank (so
// block b of every rank touches the same elements, and a barrier of the blocks b is enough).
template <typename T>
__global__ void all_reduce_kernel(const T* x, T* out, int64_t n, T* const* buffers, uint32_t* const* pads, int rank,
                                  int world) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  const int64_t first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  T* mine = buffers[rank];
  for (int64_t i = first; i < n; i += stride) mine[i] = x[i];
  barrier_ranks(pads, rank, world);
  // FILL ME IN (about 5 lines)
  // out[i] = the sum of buffers[r][i] over r = 0, 1, ..., world - 1, in that order, added up in float
  // (to_float, from_float<T>), for every element i this thread owns (the same loop as the copy above)
  // No rank may write its buffer again (its next call) while a peer still reads it.
  barrier_ranks(pads, rank, world);
}

// The launcher (nothing to change here): input checks and a grid of at most MAX_BLOCKS blocks, as many as
// the signal pad has flags for.
void all_reduce(const at::Tensor& x, at::Tensor& out, const at::Tensor& buffer, const at::Tensor& buffer_ptrs,
                const at::Tensor& signal_pad_ptrs, int64_t rank, int64_t signal_pad_bytes) {
  CHECK_INPUT(x);
  CHECK_INPUT(out);
  CHECK_INPUT(buffer);
  CHECK_INPUT(buffer_ptrs);
  CHECK_INPUT(signal_pad_ptrs);
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16,
              "x must be float32 or bfloat16, got ", x.scalar_type());
  CHECK_SAME_DTYPE(x, out);
  CHECK_SAME_SHAPE(x, out);
  TORCH_CHECK(buffer_ptrs.scalar_type() == at::kLong && buffer_ptrs.dim() == 1 &&
                  buffer_ptrs.sizes() == signal_pad_ptrs.sizes() && signal_pad_ptrs.scalar_type() == at::kLong,
              "buffer_ptrs and signal_pad_ptrs must be 1-D int64 tensors of one address per rank, got ",
              shape_str(buffer_ptrs.sizes()), " and ", shape_str(signal_pad_ptrs.sizes()));
  const int64_t world = buffer_ptrs.numel();
  TORCH_CHECK(world >= 1 && world <= MAX_RANKS, "between 1 and ", std::to_string(MAX_RANKS), " ranks are supported, got ",
              std::to_string(world));
  TORCH_CHECK(rank >= 0 && rank < world, "rank must be in [0, ", std::to_string(world), "), got ", std::to_string(rank));
  TORCH_CHECK(x.nbytes() <= buffer.nbytes(), "x (", std::to_string(x.nbytes()),
              " bytes) does not fit in the symmetric buffer (", std::to_string(buffer.nbytes()), " bytes)");
  const int64_t n = x.numel();
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>({ceil_div(n, BLOCK), MAX_BLOCKS, signal_pad_bytes / (4 * world)});
  TORCH_CHECK(blocks >= 1, "the signal pad (", std::to_string(signal_pad_bytes), " bytes) has no room for ",
              std::to_string(world), " flags");
  dispatch(x, [&](auto t) {
    using T = decltype(t);
    all_reduce_kernel<T><<<blocks, BLOCK, 0, c10::cuda::getCurrentCUDAStream()>>>(
        ptr<T>(x), mut<T>(out), n, reinterpret_cast<T* const*>(buffer_ptrs.data_ptr()),
        reinterpret_cast<uint32_t* const*>(signal_pad_ptrs.data_ptr()), static_cast<int>(rank), static_cast<int>(world));
  });
  CHECK_LAUNCH();
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("all_reduce(Tensor x, Tensor(a!) out, Tensor(b!) buffer, Tensor buffer_ptrs, Tensor signal_pad_ptrs, "
        "int rank, int signal_pad_bytes) -> ()");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("all_reduce", &all_reduce); }
