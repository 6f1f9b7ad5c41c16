// 14_multi_gpu.cu: all-reduce written as a kernel. Every rank (one process, one GPU) holds a tensor
// x; afterwards every rank holds the sum of all of them, x_0 + x_1 + ... , as NCCL's all_reduce gives.
// Load with `ext = load("14")`; every op is an out-variant over symmetric memory:
// ext.all_reduce1(x, out, buffer, buffer_ptrs, signal_pad_ptrs, rank, signal_pad_bytes).
//
//   all_reduce1   one-shot: each rank copies x into its own symmetric buffer, waits until every peer
//                 has done the same, then reads every peer's buffer and sums; one trip over the
//                 NVLink, latency-bound at small sizes (the one to beat NCCL there)
//   all_reduce2   two-shot: rank r sums only chunk r of every buffer (a reduce-scatter) into its own
//                 buffer, then every rank gathers the summed chunks from their owners (an all-gather):
//                 each rank reads 2 (world - 1) / world of the data from its peers, the least an
//                 all-reduce can move (the one for large sizes from three ranks on; with two, both read
//                 the same bytes). In place (x is the buffer), it leaves the sums over x's chunk `rank`
//
// Symmetric memory (kernels/distributed.py, torch.distributed._symmetric_memory on GPUs): every rank
// allocates a buffer and a signal pad (uint32 flags, zero at the start) of the same size, and a
// rendezvous maps all of them into every rank: buffer_ptrs[r] and signal_pad_ptrs[r] are rank r's,
// as addresses this rank's kernels may load from and store to (over NVLink on GPUs; shared memory
// between processes on the simulator). `buffer` is this rank's own buffer as a tensor.
//
// Synchronisation between ranks is a signal: block b of rank r tells block b of rank p that its
// writes are done by setting the flag pads[p][b * world + r] from 0 to 1, and rank p takes it by
// setting it back from 1 to 0 (a mailbox of one place: a second signal waits until the first is
// taken, so one slot serves every barrier of every call). The writes before the signal must reach
// the peer before the flag does: a system-scope fence before setting the flag (release), and one after
// seeing it (acquire), since a GPU and its peers are different devices (a gpu-scope fence orders only
// within one GPU).
//
// Every rank must call the same op with the same shape and dtype, as with NCCL's collectives: a rank
// waiting for a signal that never comes traps after about 30 seconds (on the simulator, the wait's own
// timeout says which flag it waited for).

// ---------------------------------------------------------------------------------------------
// Includes.
#include "helpers.cuh"

#include <algorithm>
#include <cstdint>
#include <string>

constexpr int BLOCK = 512;       // threads per block
constexpr int MAX_RANKS = 8;     // the most GPUs one NVLink domain of a node holds
constexpr int MAX_BLOCKS = 132;  // an H100's SMs: one block each at the largest sizes
constexpr int UNROLL = 4;        // 16-byte packs each thread has in flight from each rank
constexpr long long WAIT_CYCLES = 1ll << 36;  // about 30 s at 2 GHz: a rank that never signals

// ---------------------------------------------------------------------------------------------
// Signals between ranks.

// Tells block blockIdx.x of every rank that this block's writes before it are done, and waits until
// every rank's block blockIdx.x has said the same: a barrier of the ranks, block by block. Thread p
// (p < world) talks to rank p (itself included, so that the loop has no special case).
__device__ __forceinline__ void barrier_ranks(uint32_t* const* pads, int rank, int world) {
  __syncthreads();  // every thread of the block has made its writes
  const int p = threadIdx.x;
  if (p < world) {
    // Release: the block's writes (ordered before this thread's by the barrier above) become visible to
    // other devices before the flag does.
    __threadfence_system();
    uint32_t* theirs = pads[p] + blockIdx.x * world + rank;
    const long long start = clock64();
    while (atomicCAS_system(theirs, 0u, 1u) != 0u) {  // wait until rank p took our last signal
      if (clock64() - start > WAIT_CYCLES) __trap();
    }
    uint32_t* mine = pads[rank] + blockIdx.x * world + p;
    while (atomicCAS_system(mine, 1u, 0u) != 1u) {  // wait for rank p's signal, and take it
      if (clock64() - start > WAIT_CYCLES) __trap();
    }
    // Acquire: what rank p wrote before its signal is visible to this thread's (and, through the
    // barrier below, the block's) later reads.
    __threadfence_system();
  }
  __syncthreads();
}

// ---------------------------------------------------------------------------------------------
// Kernels. A thread's elements are 16-byte packs: pack i of a tensor is elements [i V, i V + V),
// V = kVec<T> (4 floats, 8 bf16). The last n % V elements (the tail) are block 0's, one per thread.
// Block b owns the same packs on every rank, so that barrier_ranks, block by block, is enough.

// Sums pack i of every rank's buffer, in rank order (so every rank rounds alike and all get the same
// bits), into 16-byte packs of float.
template <typename T>
__device__ __forceinline__ void sum_packs(T* const* buffers, int world, int64_t i, float (&acc)[kVec<T>]) {
  for (int j = 0; j < kVec<T>; ++j) acc[j] = 0.0f;
  for (int r = 0; r < world; ++r) {
    const Pack<T> p = load16(buffers[r] + i * kVec<T>);
    for (int j = 0; j < kVec<T>; ++j) acc[j] += to_float(p.v[j]);
  }
}

template <typename T>
__device__ __forceinline__ Pack<T> round_pack(const float (&acc)[kVec<T>]) {
  Pack<T> p;
  for (int j = 0; j < kVec<T>; ++j) p.v[j] = from_float<T>(acc[j]);
  return p;
}

// The tail: element j of every buffer summed in rank order.
template <typename T>
__device__ __forceinline__ T sum_element(T* const* buffers, int world, int64_t j) {
  float acc = 0.0f;
  for (int r = 0; r < world; ++r) acc += to_float(buffers[r][j]);
  return from_float<T>(acc);
}

// Copies x's packs [first, last) (those of this block: b, b + grid, ... within the range) and, in block 0,
// the tail into this rank's buffer: the data the peers will read. Nothing to copy when x is the buffer.
template <typename T>
__device__ __forceinline__ void copy_in(const T* x, T* mine, int64_t first, int64_t last, int64_t n) {
  if (x == mine) return;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = first + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < last; i += stride)
    store16(mine + i * kVec<T>, load16(x + i * kVec<T>));
  const int64_t tail = n / kVec<T> * kVec<T> + threadIdx.x;
  if (blockIdx.x == 0 && tail < n) mine[tail] = x[tail];
}

// all_reduce_kernel1 (one-shot): block b copies its packs of x into this rank's buffer, meets block b of
// every rank, then sums its packs of all `world` buffers into out, and meets them again (so that no
// rank's next call overwrites its buffer while a peer still reads it). Reads world x the data, (world -
// 1) x of it from peers: for small tensors the cost is the two barriers' round trips, not the bytes.
template <typename T>
__global__ void __launch_bounds__(BLOCK) all_reduce_kernel1(const T* x, T* out, int64_t n, T* const* buffers,
                                                            uint32_t* const* pads, int rank, int world) {
  const int64_t packs = n / kVec<T>;
  copy_in(x, buffers[rank], 0, packs, n);
  barrier_ranks(pads, rank, world);
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  // UNROLL packs from each rank in flight before the sums: a peer's load crosses NVLink (about a
  // microsecond), and one at a time would leave the link idle.
  for (int64_t i0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i0 < packs; i0 += UNROLL * stride) {
    float acc[UNROLL][kVec<T>] = {};
    for (int r = 0; r < world; ++r) {
      Pack<T> p[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u)
        if (i0 + u * stride < packs) p[u] = load16(buffers[r] + (i0 + u * stride) * kVec<T>);
#pragma unroll
      for (int u = 0; u < UNROLL; ++u)
        for (int j = 0; j < kVec<T>; ++j) acc[u][j] += i0 + u * stride < packs ? to_float(p[u].v[j]) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
      if (i0 + u * stride < packs) store16(out + (i0 + u * stride) * kVec<T>, round_pack<T>(acc[u]));
  }
  const int64_t tail = packs * kVec<T> + threadIdx.x;
  if (blockIdx.x == 0 && tail < n) out[tail] = sum_element(buffers, world, tail);
  barrier_ranks(pads, rank, world);
}

// all_reduce_kernel2 (two-shot): the packs split into `world` chunks, chunk c [c P, c P + P) with P =
// ceil(packs / world), and block b owns the same offsets in every chunk. (1) Block b copies its
// packs of x, every chunk, into this rank's buffer; a barrier. (2) Reduce-scatter: it sums its packs of
// chunk `rank` over every buffer and writes the sums into out and over its own buffer's chunk (no peer
// reads that chunk before the next barrier: each reads its own chunk); a barrier. (3) All-gather: it
// copies its packs of every other chunk c from rank c's buffer, where they are summed now; a last
// barrier, as in all_reduce_kernel1. Each rank reads 2 (world - 1) / world of the data from its peers.
template <typename T>
__global__ void __launch_bounds__(BLOCK) all_reduce_kernel2(const T* x, T* out, int64_t n, T* const* buffers,
                                                            uint32_t* const* pads, int rank, int world) {
  const int64_t packs = n / kVec<T>;
  const int64_t chunk = (packs + world - 1) / world;
  T* mine = buffers[rank];
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  const int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  for (int c = 0; c < world; ++c) copy_in(x, mine, std::min(c * chunk, packs), std::min(c * chunk + chunk, packs), n);
  barrier_ranks(pads, rank, world);
  const int64_t first = std::min(rank * chunk, packs), last = std::min(first + chunk, packs);
  for (int64_t i = first + t; i < last; i += stride) {
    float acc[kVec<T>];
    sum_packs(buffers, world, i, acc);
    const Pack<T> s = round_pack<T>(acc);
    store16(out + i * kVec<T>, s);
    store16(mine + i * kVec<T>, s);
  }
  const int64_t tail = packs * kVec<T> + threadIdx.x;  // the tail: every rank sums it itself
  if (blockIdx.x == 0 && tail < n) out[tail] = sum_element(buffers, world, tail);
  barrier_ranks(pads, rank, world);
  for (int c = 1; c < world; ++c) {
    const int owner = (rank + c) % world;  // ranks start on different peers: no peer serves everyone first
    const int64_t from = std::min(owner * chunk, packs), to = std::min(from + chunk, packs);
    const T* theirs = buffers[owner];
    for (int64_t i0 = from + t; i0 < to; i0 += UNROLL * stride) {
      Pack<T> p[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u)
        if (i0 + u * stride < to) p[u] = load16(theirs + (i0 + u * stride) * kVec<T>);
#pragma unroll
      for (int u = 0; u < UNROLL; ++u)
        if (i0 + u * stride < to) store16(out + (i0 + u * stride) * kVec<T>, p[u]);
    }
  }
  barrier_ranks(pads, rank, world);
}

// ---------------------------------------------------------------------------------------------
// Launchers.

// The arguments every variant takes: x and out of one shape and dtype (float32 or bfloat16), contiguous,
// 16-byte aligned; `buffer`, this rank's symmetric buffer, large enough for x; the pointer tables (int64, one
// address per rank, on the device the kernel reads them from); `rank` among them. Returns the grid: enough
// blocks for one pack per thread, at most MAX_BLOCKS, and as many signal slots as the pad holds.
int64_t check_all_reduce_args(const at::Tensor& x, const at::Tensor& out, const at::Tensor& buffer,
                              const at::Tensor& buffer_ptrs, const at::Tensor& signal_pad_ptrs, int64_t rank,
                              int64_t signal_pad_bytes) {
  CHECK_INPUT(x);
  CHECK_INPUT(out);
  CHECK_INPUT(buffer);
  CHECK_INPUT(buffer_ptrs);
  CHECK_INPUT(signal_pad_ptrs);
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16,
              "x must be float32 or bfloat16, got ", x.scalar_type());
  CHECK_SAME_DTYPE(x, out);
  CHECK_SAME_SHAPE(x, out);
  TORCH_CHECK(buffer_ptrs.scalar_type() == at::kLong && signal_pad_ptrs.scalar_type() == at::kLong &&
                  buffer_ptrs.dim() == 1 && buffer_ptrs.sizes() == signal_pad_ptrs.sizes(),
              "buffer_ptrs and signal_pad_ptrs must be 1-D int64 tensors of one address per rank, got ",
              buffer_ptrs.scalar_type(), " ", shape_str(buffer_ptrs.sizes()), " and ", signal_pad_ptrs.scalar_type(),
              " ", shape_str(signal_pad_ptrs.sizes()));
  const int64_t world = buffer_ptrs.numel();
  TORCH_CHECK(world >= 1 && world <= MAX_RANKS, "between 1 and ", std::to_string(MAX_RANKS),
              " ranks are supported, got ", std::to_string(world));
  TORCH_CHECK(rank >= 0 && rank < world, "rank must be in [0, ", std::to_string(world), "), got ", std::to_string(rank));
  TORCH_CHECK(x.nbytes() <= buffer.nbytes(), "x (", std::to_string(x.nbytes()),
              " bytes) does not fit in the symmetric buffer (", std::to_string(buffer.nbytes()), " bytes)");
  TORCH_CHECK(aligned16(x) && aligned16(out) && aligned16(buffer),
              "x, out and the buffer must be 16-byte aligned (a tensor of its own, not a view at an odd offset)");
  TORCH_CHECK(buffer_ptrs.device() == x.device() && signal_pad_ptrs.device() == x.device(),
              "buffer_ptrs and signal_pad_ptrs must be on x's device (", x.device().str(), "), got ",
              buffer_ptrs.device().str(), " and ", signal_pad_ptrs.device().str());
  const auto* o = static_cast<const char*>(out.data_ptr());
  const auto* b = static_cast<const char*>(buffer.data_ptr());
  const auto* xi = static_cast<const char*>(x.data_ptr());
  TORCH_CHECK(o + out.nbytes() <= b || b + buffer.nbytes() <= o,
              "out must not lie in the symmetric buffer: the peers read the buffer while out is written");
  TORCH_CHECK(xi == b || xi + x.nbytes() <= b || b + buffer.nbytes() <= xi,
              "x must start at the symmetric buffer's first byte (in place) or lie outside it: the copy into the "
              "buffer would overwrite x while other blocks read it");
  const int64_t packs = x.numel() / (16 / x.element_size());
  const int64_t fit = signal_pad_bytes / (4 * world);  // blocks whose slots the signal pad holds
  TORCH_CHECK(fit >= 1, "the signal pad (", std::to_string(signal_pad_bytes), " bytes) holds no block's ",
              std::to_string(world), " flags");
  return std::max<int64_t>(1, std::min<int64_t>({ceil_div(packs, BLOCK), MAX_BLOCKS, fit}));
}

// What every launch passes after x and out.
template <typename T>
struct Peers {
  T* const* buffers;
  uint32_t* const* pads;
  int rank, world;
};
template <typename T>
Peers<T> peers(const at::Tensor& buffer_ptrs, const at::Tensor& signal_pad_ptrs, int64_t rank) {
  return {reinterpret_cast<T* const*>(buffer_ptrs.data_ptr()), reinterpret_cast<uint32_t* const*>(signal_pad_ptrs.data_ptr()),
          static_cast<int>(rank), static_cast<int>(buffer_ptrs.numel())};
}

void all_reduce1(const at::Tensor& x, at::Tensor& out, const at::Tensor& buffer, const at::Tensor& buffer_ptrs,
                 const at::Tensor& signal_pad_ptrs, int64_t rank, int64_t signal_pad_bytes) {
  const int64_t blocks = check_all_reduce_args(x, out, buffer, buffer_ptrs, signal_pad_ptrs, rank, signal_pad_bytes);
  if (x.numel() == 0) return;  // every rank returns: the shape is the same everywhere
  dispatch(x, [&](auto t) {
    using T = decltype(t);
    const Peers<T> p = peers<T>(buffer_ptrs, signal_pad_ptrs, rank);
    all_reduce_kernel1<T><<<blocks, BLOCK, 0, c10::cuda::getCurrentCUDAStream()>>>(
        ptr<T>(x), mut<T>(out), x.numel(), p.buffers, p.pads, p.rank, p.world);
  });
  CHECK_LAUNCH();
}

void all_reduce2(const at::Tensor& x, at::Tensor& out, const at::Tensor& buffer, const at::Tensor& buffer_ptrs,
                 const at::Tensor& signal_pad_ptrs, int64_t rank, int64_t signal_pad_bytes) {
  const int64_t blocks = check_all_reduce_args(x, out, buffer, buffer_ptrs, signal_pad_ptrs, rank, signal_pad_bytes);
  if (x.numel() == 0) return;
  dispatch(x, [&](auto t) {
    using T = decltype(t);
    const Peers<T> p = peers<T>(buffer_ptrs, signal_pad_ptrs, rank);
    all_reduce_kernel2<T><<<blocks, BLOCK, 0, c10::cuda::getCurrentCUDAStream()>>>(
        ptr<T>(x), mut<T>(out), x.numel(), p.buffers, p.pads, p.rank, p.world);
  });
  CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------
// Registration. The pointer tables are plain int64 tensors: the op reads addresses, which PyTorch
// cannot see into, so every call must pass the tables of the buffer it was given. `buffer` is written
// (Tensor(b!)): the copy in, and the two-shot's sums.
TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("all_reduce1(Tensor x, Tensor(a!) out, Tensor(b!) buffer, Tensor buffer_ptrs, Tensor signal_pad_ptrs, "
        "int rank, int signal_pad_bytes) -> ()");
  m.def("all_reduce2(Tensor x, Tensor(a!) out, Tensor(b!) buffer, Tensor buffer_ptrs, Tensor signal_pad_ptrs, "
        "int rank, int signal_pad_bytes) -> ()");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("all_reduce1", &all_reduce1);
  m.impl("all_reduce2", &all_reduce2);
}
