// peers.cu: all-reduce kernels over peer memory (symmetric memory: every rank's buffer and signal pad mapped into
// every rank), as lesson 14 writes them, and the same kernels with planted mistakes. tests/test_sim_peers.py runs them
// on the simulator in 2 and 3 processes (kernels.ranks.run_ranks, kernels.sim.peers.PeerMemory); on GPUs the pointers
// would come from torch.distributed._symmetric_memory.
//
// The ops take x (this rank's input, float32), the addresses of every rank's buffer and signal pad (int64 CPU
// tensors, one per rank, as this process sees them), the rank and the world size, and return the sum over ranks.
// Each block reduces its own slice; the ranks meet per block through their signal pads: thread p < world signals
// peer p (an atomicCAS 0 -> 1 of slot (block, my rank) in p's pad), then consumes peer p's signal in its own pad (an
// atomicCAS 1 -> 0 of slot (block, p)), which leaves every pad at zero.
//
//   one_shot(bug)   copy x into my buffer, barrier, sum every rank's buffer, barrier. `bug` plants a mistake:
//                   1 no barrier before the reads, 2 no __threadfence_system() before the signal, 3 none after the
//                   wait, 4 the reads between the signal and the wait, 5 no barrier at the end (the next call's copy
//                   races a peer still reading), 6 the wait polls the wrong slot (it never comes); 7 the barriers
//                   in inline PTX (atom.release.sys.cas, ld.acquire.sys: correct), 8 its signal .relaxed, 9 its
//                   wait .relaxed
//   two_shot        copy, barrier, each rank sums its part of the slice into its own buffer (reduce-scatter),
//                   barrier, each rank gathers every part from its owner (all-gather), barrier
//   block_order     the order in which the blocks of a launch ran (a ticket per block)
#include "helpers.cuh"

#include <ATen/ops/empty_like.h>

constexpr int kMaxRanks = 8;
enum PeerBug { kCorrect = 0, kNoBarrierBeforeRead, kNoFenceBeforeSignal, kNoFenceAfterWait, kReadBeforeWait,
               kNoEndBarrier, kWrongSlot, kPtx, kPtxRelaxedSignal, kPtxRelaxedWait, kLastBug = kPtxRelaxedWait };

// Every rank's memory, as this rank reaches it: passed by value, so the kernel needs no device array of pointers.
struct Peers {
  float* buf[kMaxRanks];
  unsigned* pad[kMaxRanks];
  int rank, world;
};

__device__ unsigned slot(int block, int rank, int world) { return static_cast<unsigned>(block * world + rank); }

// Thread p < world tells peer p that this block of this rank got here.
__device__ void signal_peers(const Peers& p, bool fence) {
  __syncthreads();                   // the block's accesses so far come before thread p's fence (cumulativity)
  if (fence) __threadfence_system();  // release: they are visible before the signal
  const int t = threadIdx.x;
  if (t < p.world)
    while (atomicCAS_system(p.pad[t] + slot(blockIdx.x, p.rank, p.world), 0u, 1u) != 0u) {}
}

// Thread p < world waits for peer p's signal to this block (and consumes it).
__device__ void wait_peers(const Peers& p, bool fence, bool wrong_slot) {
  const int t = threadIdx.x;
  if (t < p.world) {
    unsigned* flag = p.pad[p.rank] + slot(blockIdx.x, wrong_slot ? p.rank : t, p.world);
    while (atomicCAS_system(flag, 1u, 0u) != 1u) {}
  }
  if (fence) __threadfence_system();  // acquire: the peers' accesses before their signals are visible after it
  __syncthreads();                   // and to the whole block after the barrier
}

// The same barrier in inline PTX, as PyTorch's symmetric-memory kernels write theirs: the signal an atom.cas with
// release semantics at system scope (the fence is the instruction's), the wait a poll of ld.acquire.sys and then a
// relaxed store of 0 that takes the signal. `release` and `acquire` false plant the .relaxed forms.
__device__ void signal_peers_ptx(const Peers& p, bool release) {
  __syncthreads();
  const int t = threadIdx.x;
  if (t < p.world) {
    unsigned* flag = p.pad[t] + slot(blockIdx.x, p.rank, p.world);
    unsigned old = 1;
    while (old != 0) {
      if (release) asm volatile("atom.global.release.sys.cas.b32 %0, [%1], 0, 1;" : "=r"(old) : "l"(flag) : "memory");
      else asm volatile("atom.relaxed.sys.global.cas.b32 %0, [%1], 0, 1;" : "=r"(old) : "l"(flag) : "memory");
    }
  }
}

__device__ void wait_peers_ptx(const Peers& p, bool acquire) {
  const int t = threadIdx.x;
  if (t < p.world) {
    unsigned* flag = p.pad[p.rank] + slot(blockIdx.x, t, p.world);
    unsigned seen = 0;
    while (seen != 1) {
      if (acquire) asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(seen) : "l"(flag) : "memory");
      else asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(seen) : "l"(flag) : "memory");
    }
    asm volatile("st.relaxed.sys.global.u32 [%0], 0;" ::"l"(flag) : "memory");
  }
  __syncthreads();
}

__device__ void sum_peers(const Peers& p, float* out, int lo, int hi) {
  for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    float s = 0.0f;
    for (int r = 0; r < p.world; ++r) s += p.buf[r][i];  // the same order on every rank: the same sums
    out[i] = s;
  }
}

__global__ void one_shot_kernel(const float* x, float* out, Peers p, int n, int bug) {
  const int chunk = (n + gridDim.x - 1) / gridDim.x, lo = blockIdx.x * chunk, hi = min(n, lo + chunk);
  for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) p.buf[p.rank][i] = x[i];
  if (bug >= kPtx) {  // the barriers in PTX
    signal_peers_ptx(p, bug != kPtxRelaxedSignal);
    wait_peers_ptx(p, bug != kPtxRelaxedWait);
    sum_peers(p, out, lo, hi);
    signal_peers_ptx(p, true);
    wait_peers_ptx(p, true);
    return;
  }
  if (bug == kReadBeforeWait) {
    signal_peers(p, true);
    sum_peers(p, out, lo, hi);  // a peer's part may not be there yet: its signal was not waited for
    wait_peers(p, true, false);
  } else {
    if (bug != kNoBarrierBeforeRead) {
      signal_peers(p, bug != kNoFenceBeforeSignal);
      wait_peers(p, bug != kNoFenceAfterWait, bug == kWrongSlot);
    }
    sum_peers(p, out, lo, hi);
  }
  if (bug != kNoEndBarrier) {  // no rank overwrites its buffer (the next call's copy) while a peer still reads it
    signal_peers(p, true);
    wait_peers(p, true, false);
  }
}

__global__ void two_shot_kernel(const float* x, float* out, Peers p, int n) {
  const int chunk = (n + gridDim.x - 1) / gridDim.x, lo = blockIdx.x * chunk, hi = min(n, lo + chunk);
  const int part = (chunk + p.world - 1) / p.world;
  for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) p.buf[p.rank][i] = x[i];
  signal_peers(p, true);
  wait_peers(p, true, false);
  // reduce-scatter: this rank's part of the slice, summed into its own buffer (the peers read only their parts)
  const int mine_lo = lo + p.rank * part, mine_hi = min(hi, mine_lo + part);
  for (int i = mine_lo + threadIdx.x; i < mine_hi; i += blockDim.x) {
    float s = 0.0f;
    for (int r = 0; r < p.world; ++r) s += p.buf[r][i];
    p.buf[p.rank][i] = s;
  }
  signal_peers(p, true);
  wait_peers(p, true, false);
  // all-gather: every part from the rank that summed it
  for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) out[i] = p.buf[(i - lo) / part][i];
  signal_peers(p, true);
  wait_peers(p, true, false);
}

__global__ void block_order_kernel(int* counter, int* order) {
  if (threadIdx.x == 0) order[blockIdx.x] = atomicAdd(counter, 1);
}

Peers peers_of(const at::Tensor& bufs, const at::Tensor& pads, int64_t rank, int64_t world, int64_t n) {
  TORCH_CHECK(world >= 1 && world <= kMaxRanks, "expected a world size from 1 to ", std::to_string(kMaxRanks),
              ", got ", std::to_string(world));
  TORCH_CHECK(rank >= 0 && rank < world, "expected a rank from 0 to ", std::to_string(world - 1), ", got ",
              std::to_string(rank));
  for (const at::Tensor* t : {&bufs, &pads})
    TORCH_CHECK(t->device().is_cpu() && t->scalar_type() == at::kLong && t->dim() == 1 && t->size(0) == world,
                "expected the buffer and signal pad addresses as int64 CPU tensors of one address per rank (",
                std::to_string(world), "), got ", shape_str(t->sizes()));
  TORCH_CHECK(n > 0, "expected a non-empty input");
  Peers p{};
  for (int r = 0; r < world; ++r) {
    p.buf[r] = reinterpret_cast<float*>(bufs[r].item<int64_t>());
    p.pad[r] = reinterpret_cast<unsigned*>(pads[r].item<int64_t>());
  }
  p.rank = static_cast<int>(rank);
  p.world = static_cast<int>(world);
  return p;
}

constexpr int kBlocks = 4, kThreads = 64;

at::Tensor one_shot(const at::Tensor& x, const at::Tensor& bufs, const at::Tensor& pads, int64_t rank, int64_t world,
                    int64_t bug) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  TORCH_CHECK(bug >= kCorrect && bug <= kLastBug, "one_shot: expected bug from 0 (none) to ",
              std::to_string(static_cast<int>(kLastBug)), ", got ", std::to_string(bug));
  const Peers p = peers_of(bufs, pads, rank, world, x.numel());
  auto out = at::empty_like(x);
  one_shot_kernel<<<kBlocks, kThreads>>>(x.data_ptr<float>(), out.data_ptr<float>(), p, static_cast<int>(x.numel()),
                                         static_cast<int>(bug));
  CHECK_LAUNCH();
  return out;
}

at::Tensor two_shot(const at::Tensor& x, const at::Tensor& bufs, const at::Tensor& pads, int64_t rank, int64_t world) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  const Peers p = peers_of(bufs, pads, rank, world, x.numel());
  auto out = at::empty_like(x);
  two_shot_kernel<<<kBlocks, kThreads>>>(x.data_ptr<float>(), out.data_ptr<float>(), p, static_cast<int>(x.numel()));
  CHECK_LAUNCH();
  return out;
}

// order: zeros, [blocks + 1] int32: order[0] counts, order[1 + b] is block b's ticket.
void block_order(const at::Tensor& order) {
  CHECK_INPUT(order);
  CHECK_DTYPE(order, at::kInt);
  TORCH_CHECK(order.dim() == 1 && order.size(0) >= 2 && order.size(0) <= 65536,
              "block_order: expected order of shape [blocks + 1] with 1 to 65535 blocks, got ", shape_str(order.sizes()));
  int* o = order.data_ptr<int>();
  block_order_kernel<<<static_cast<unsigned>(order.size(0) - 1), 32>>>(o, o + 1);
  CHECK_LAUNCH();
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("one_shot(Tensor x, Tensor bufs, Tensor pads, int rank, int world, int bug) -> Tensor");
  m.def("two_shot(Tensor x, Tensor bufs, Tensor pads, int rank, int world) -> Tensor");
  m.def("block_order(Tensor(a!) order) -> ()");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("one_shot", &one_shot);
  m.impl("two_shot", &two_shot);
  m.impl("block_order", &block_order);
}
