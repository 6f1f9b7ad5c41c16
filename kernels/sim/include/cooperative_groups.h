// cooperative_groups.h for the simulator: the block- and warp-level groups.
//
// thread_block, thread_block_tile<N> (N = 1, 2, 4, ..., 32, and 64 ... 512 threads: several warps)
// from tiled_partition<N>, the type-erased thread_group, coalesced_threads() and grid_group. Every
// collective goes through the runtime's barrier and warp operations, so it keeps their checks: a
// divergent block.sync() or a tile shuffle that waits for a lane stuck elsewhere is an error naming
// the line of the call. Tiles of several warps meet at a barrier of their own (multi_warp_sync).
// Grid-wide synchronisation (this_grid().sync()) raises an error: blocks run one at a time here
// (a cluster's blocks together), so no block can wait for one outside its cluster. this_cluster():
// cluster_group, with sync(), ranks and map_shared_rank (distributed shared memory). cg::reduce and
// its operators are in cooperative_groups/reduce.h, inclusive_scan and exclusive_scan in
// cooperative_groups/scan.h.
#pragma once
#include "cudasim.h"

namespace cooperative_groups {
namespace details {

inline ::cudasim::Thread& me(const char* what) {
  if (!::cudasim::g.cur) ::cudasim::fail(std::string("cooperative_groups: ") + what + " called outside a kernel");
  return *::cudasim::g.cur;
}
inline unsigned lane() { return static_cast<unsigned>(me("a group operation").linear) & 31u; }
inline unsigned block_threads() {
  const dim3& b = ::cudasim::g.block_dim;
  return b.x * b.y * b.z;
}
// A barrier site for a call written at file:line (the runtime compares sites to detect threads
// waiting at different barriers; bit 30 keeps these apart from __syncthreads' counters).
inline int site(const char* file, int line) {
  unsigned f = static_cast<unsigned>((reinterpret_cast<uintptr_t>(file) * 0x9E3779B97F4A7C15ull) >> 54);  // 10 bits
  return static_cast<int>(0x40000000u | f << 20 | (static_cast<unsigned>(line) & 0xFFFFFu));
}
inline void block_sync(const char* file, int line) {
  me("sync()");
  ::cudasim::barrier(::cudasim::BarKind::Plain, 0, file, line, site(file, line));
}
inline void warp_sync(unsigned mask, const char* file, int line) {
  me("sync()");
  ::cudasim::warp_op(::cudasim::WarpOp::Sync, mask, nullptr, 0, 0, 32, file, line);
}
inline unsigned ballot(unsigned mask, int pred, const char* file, int line) {
  ::cudasim::warp_op(::cudasim::WarpOp::Ballot, mask, nullptr, 0, pred != 0, 32, file, line);
  return static_cast<unsigned>(::cudasim::g.cur->wres);
}
// The lane of the warp that holds the rank-th set bit of mask.
inline int lane_of_rank(unsigned mask, unsigned rank) {
  for (int l = 0; l < 32; ++l)
    if ((mask >> l & 1u) && rank-- == 0) return l;
  return -1;
}
// The bits of a lane ballot moved to the ranks of the group's members.
inline unsigned pack(unsigned mask, unsigned lanes) {
  unsigned out = 0, rank = 0;
  for (int l = 0; l < 32; ++l)
    if (mask >> l & 1u) out |= ((lanes >> l) & 1u) << rank++;
  return out;
}
template <class T>
using plain = std::remove_cv_t<std::remove_reference_t<T>>;

}  // namespace details

// Any group, its kind decided at run time: a whole block, or a subset of one warp (a tile or
// coalesced threads) given by its lane mask.
class thread_group {
 public:
  void sync(const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
    if (block_) details::block_sync(file, line);
    else details::warp_sync(mask_, file, line);
  }
  unsigned long long thread_rank() const {
    details::me("thread_rank()");
    return block_ ? static_cast<unsigned>(::cudasim::g.cur->local)
                  : __builtin_popcount(mask_ & ((1u << details::lane()) - 1u));
  }
  unsigned long long num_threads() const { return block_ ? details::block_threads() : __builtin_popcount(mask_); }
  unsigned long long size() const { return num_threads(); }

 protected:
  thread_group(bool block, unsigned mask) : block_(block), mask_(mask) {}
  bool block_;
  unsigned mask_;
};

class thread_block : public thread_group {
 public:
  thread_block() : thread_group(true, 0) {}
  void sync(const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
    details::block_sync(file, line);
  }
  static unsigned int thread_rank() { return static_cast<unsigned>(details::me("thread_rank()").local); }
  static unsigned int num_threads() { return details::block_threads(); }
  static unsigned int size() { return num_threads(); }
  static dim3 group_index() { return dim3(::cudasim::g.block_idx); }
  static dim3 thread_index() { return dim3(details::me("thread_index()").idx); }
  static dim3 dim_threads() { return ::cudasim::g.block_dim; }
  static dim3 group_dim() { return dim_threads(); }
};

inline thread_block this_thread_block() {
  details::me("this_thread_block()");
  return thread_block();
}

// The scratch that CUDA's tiles larger than a warp communicate through (the CUDA samples declare
// `__shared__ cg::block_tile_memory<BlockSize> scratch;` and take `this_thread_block(scratch)`).
// The block it gives is the plain one; tiles larger than a warp are still not simulated.
template <unsigned int MaxBlockSize = 1024>
struct block_tile_memory {
  unsigned char unused_;
};

template <unsigned int MaxBlockSize>
inline thread_block this_thread_block(block_tile_memory<MaxBlockSize>&) {
  return this_thread_block();
}

// The whole grid. Ranks and sizes work; sync() is an error (blocks run one at a time here).
class grid_group {
 public:
  static bool is_valid() { return false; }  // the simulator has no cooperative launch
  void sync(const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
    details::me("sync()");
    char buf[160];
    std::snprintf(buf, sizeof buf, "grid-wide synchronisation (this_grid().sync()) at %s:%d ",
                  ::cudasim::base_name(file).c_str(), line);
    ::cudasim::fail(std::string(buf) + "is not supported by the simulator: blocks run one at a time, so no "
                    "block can wait for another; split the kernel into two launches");
  }
  static unsigned long long num_blocks() {
    const dim3& g = ::cudasim::g.grid_dim;
    return 1ull * g.x * g.y * g.z;
  }
  static unsigned long long block_rank() {
    const uint3& b = ::cudasim::g.block_idx;
    const dim3& g = ::cudasim::g.grid_dim;
    return b.x + 1ull * g.x * (b.y + 1ull * g.y * b.z);
  }
  static unsigned long long num_threads() { return num_blocks() * details::block_threads(); }
  static unsigned long long size() { return num_threads(); }
  static unsigned long long thread_rank() {
    return block_rank() * details::block_threads() + static_cast<unsigned>(details::me("thread_rank()").local);
  }
  static dim3 block_index() { return dim3(::cudasim::g.block_idx); }
  static dim3 dim_blocks() { return ::cudasim::g.grid_dim; }
  static dim3 dim_threads() { return ::cudasim::g.block_dim; }
};

inline grid_group this_grid() { return grid_group(); }

// The thread-block cluster of the running block (a block launched without one is a cluster of one): its blocks
// run together here, so sync() (barrier.cluster) and distributed shared memory (map_shared_rank) work as on a GPU.
class cluster_group {
 public:
  static bool is_valid() { return true; }
  void sync(const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
    details::me("sync()");
    ::cudasim::cluster_arrive(file, line);
    ::cudasim::cluster_wait(file, line);
  }
  struct arrival_token {};
  arrival_token barrier_arrive(const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
    details::me("barrier_arrive()");
    ::cudasim::cluster_arrive(file, line);
    return {};
  }
  void barrier_wait(const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
    details::me("barrier_wait()");
    ::cudasim::cluster_wait(file, line);
  }
  void barrier_wait(arrival_token&&, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
    barrier_wait(file, line);
  }
  static unsigned int block_rank() { return static_cast<unsigned>(details::me("block_rank()").cta); }
  static unsigned int num_blocks() { return ::cudasim::g.cluster_size; }
  static dim3 dim_blocks() { return ::cudasim::g.cluster_dim; }
  static dim3 block_index() {
    const uint3& b = ::cudasim::g.block_idx;
    const dim3& c = ::cudasim::g.cluster_dim;
    return dim3(b.x % c.x, b.y % c.y, b.z % c.z);
  }
  static unsigned int thread_rank() {
    return block_rank() * details::block_threads() + static_cast<unsigned>(details::me("thread_rank()").local);
  }
  static unsigned int num_threads() { return num_blocks() * details::block_threads(); }
  static unsigned int size() { return num_threads(); }
  static dim3 dim_threads() { return ::cudasim::g.block_dim; }
  // The same place in the shared memory of the cluster's block of rank `rank` (distributed shared memory).
  template <class T>
  static T* map_shared_rank(T* addr, unsigned int rank, const char* file = __builtin_FILE(),
                            int line = __builtin_LINE()) {
    return static_cast<T*>(map(const_cast<void*>(static_cast<const void*>(addr)), rank, file, line));
  }
  static unsigned int query_shared_rank(const void* addr, const char* file = __builtin_FILE(),
                                        int line = __builtin_LINE()) {
    return static_cast<unsigned>(offset(addr, "query_shared_rank", file, line) / ::cudasim::kCtaStride);
  }

 private:
  static size_t offset(const void* p, const char* what, const char* file, int line) {
    const auto a = reinterpret_cast<uintptr_t>(p), lo = reinterpret_cast<uintptr_t>(::cudasim::arena);
    if (a < lo || a - lo >= sizeof ::cudasim::arena)
      ::cudasim::fail(std::string("cluster_group::") + what + " at " + ::cudasim::base_name(file) + ":" +
                      std::to_string(line) + ": the pointer is not shared memory (a __shared__ variable or extern "
                      "__shared__ array)");
    return a - lo;
  }
  static void* map(void* p, unsigned rank, const char* file, int line) {
    details::me("map_shared_rank()");
    const size_t off = offset(p, "map_shared_rank", file, line);
    if (rank >= ::cudasim::g.cluster_size)
      ::cudasim::fail("cluster_group::map_shared_rank at " + ::cudasim::base_name(file) + ":" + std::to_string(line) +
                      ": rank " + std::to_string(rank) + ", but the cluster has " +
                      std::to_string(::cudasim::g.cluster_size) + " block(s)");
    return ::cudasim::arena + ::cudasim::at_rank(off, rank);
  }
};

inline cluster_group this_cluster() {
  details::me("this_cluster()");
  return cluster_group();
}

// A subset of one warp given by a lane mask: the common part of tiles and coalesced groups.
// Shuffles name a source by its rank in the group; a rank outside the group reads the caller's
// own value, as the hardware does for a lane outside the shuffle's width.
class warp_group : public thread_group {
 public:
  unsigned int thread_rank() const {
    details::me("thread_rank()");
    return __builtin_popcount(mask_ & ((1u << details::lane()) - 1u));
  }
  unsigned int num_threads() const { return __builtin_popcount(mask_); }
  unsigned int size() const { return num_threads(); }
  unsigned int meta_group_rank() const { return meta_rank_; }
  unsigned int meta_group_size() const { return meta_size_; }
  void sync(const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
    details::warp_sync(mask_, file, line);
  }

  template <class T>
  details::plain<T> shfl(T&& var, int src_rank, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
    unsigned n = num_threads();
    return from_lane(var, details::lane_of_rank(mask_, static_cast<unsigned>(src_rank) % n), file, line);
  }
  template <class T>
  details::plain<T> shfl_down(T&& var, unsigned delta, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
    unsigned r = thread_rank() + delta;
    return from_lane(var, r < num_threads() ? details::lane_of_rank(mask_, r) : static_cast<int>(details::lane()), file, line);
  }
  template <class T>
  details::plain<T> shfl_up(T&& var, unsigned delta, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
    unsigned r = thread_rank();
    return from_lane(var, r >= delta ? details::lane_of_rank(mask_, r - delta) : static_cast<int>(details::lane()), file, line);
  }
  template <class T>
  details::plain<T> shfl_xor(T&& var, unsigned lane_mask, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
    unsigned r = thread_rank() ^ lane_mask;
    return from_lane(var, r < num_threads() ? details::lane_of_rank(mask_, r) : static_cast<int>(details::lane()), file, line);
  }
  int any(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
    return details::ballot(mask_, pred, file, line) != 0;
  }
  int all(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
    return details::ballot(mask_, pred, file, line) == mask_;
  }
  // One bit per member, bit i for the member of rank i.
  unsigned int ballot(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
    return details::pack(mask_, details::ballot(mask_, pred, file, line));
  }

 protected:
  warp_group(unsigned mask, unsigned meta_rank, unsigned meta_size)
      : thread_group(false, mask), meta_rank_(meta_rank), meta_size_(meta_size) {}
  template <class T>
  details::plain<T> from_lane(const T& var, int src_lane, const char* file, int line) const {
    return ::cudasim::shuffle<details::plain<T>>(::cudasim::WarpOp::ShflIdx, mask_, var, src_lane, 32, file, line);
  }
  unsigned meta_rank_, meta_size_;
};

// Tiles of 64 to 512 threads: several whole warps. Their sync() is a barrier of the tile's threads
// alone (threads that have exited are not waited for); shfl, any, all, cg::reduce and the scans
// exchange values through the simulator's scratch, between two such barriers, as CUDA's exchange
// them through the block's scratch memory.
namespace details {
struct MultiWarpTiles {
  unsigned long long gen = ~0ull;  // the block these belong to (g.block_gen)
  std::vector<unsigned> arrived, epoch;     // per tile: threads at its barrier, barriers passed
  std::vector<unsigned long long> slots;    // per thread: the value it put in for an exchange
  std::vector<unsigned> stamps;             // per thread: the tile's epoch when it put it in
};
inline MultiWarpTiles multi_warp_tiles[4];  // tiles of 64, 128, 256 and 512 threads

CUDASIM_INTERNAL inline MultiWarpTiles& tiles_of(unsigned n) {
  MultiWarpTiles& s = multi_warp_tiles[__builtin_ctz(n) - 6];
  if (s.gen != ::cudasim::g.block_gen) {
    const unsigned threads = static_cast<unsigned>(::cudasim::g.nthreads), tiles = (threads + n - 1) / n;
    s.arrived.assign(tiles, 0);
    s.epoch.assign(tiles, 0);
    s.slots.assign(threads, 0);
    s.stamps.assign(threads, ~0u);
    s.gen = ::cudasim::g.block_gen;
  }
  return s;
}

// The race check orders accesses on either side of a barrier of the block; a tile's barrier orders
// them for its own threads only, and counts here as one of the block's (erring towards no report).
CUDASIM_INTERNAL inline void tile_barrier_released() {
#ifdef CUDASIM_INSTRUMENTED
  if (::cudasim::check::S.on) ::cudasim::check::S.epoch += 1;
#endif
}

CUDASIM_INTERNAL inline void multi_warp_sync(unsigned n, const char* file, int line) {
  using ::cudasim::g;
  ::cudasim::SimScope scope;
  const ::cudasim::Thread& t = me("sync()");
  MultiWarpTiles& s = tiles_of(n);
  const unsigned tile = static_cast<unsigned>(t.linear) / n, first = tile * n;
  const unsigned last = std::min<unsigned>(first + n, static_cast<unsigned>(g.nthreads));
  const unsigned mine = s.epoch[tile];
  s.arrived[tile] += 1;
  g.progress += 1;
  unsigned long long seen = g.progress, idle = 0;
  for (;;) {
    if (s.epoch[tile] != mine) return;  // released by the last to arrive
    unsigned running = 0;
    for (unsigned i = first; i < last; ++i) running += g.threads[i].state != ::cudasim::State::Done;
    if (s.arrived[tile] >= running) {
      s.arrived[tile] = 0;
      s.epoch[tile] += 1;
      g.progress += 1;
      tile_barrier_released();
      return;
    }
    if (g.progress != seen) {
      seen = g.progress;
      idle = 0;
    } else if (++idle > 4ull * static_cast<unsigned>(g.nthreads) + 64) {  // nothing else in the block can move
      std::string elsewhere;
      for (unsigned i = first; i < last && elsewhere.size() < 300; ++i) {
        const ::cudasim::Thread& o = g.threads[i];
        if (o.state == ::cudasim::State::Barrier || o.state == ::cudasim::State::Warp)
          elsewhere += (elsewhere.empty() ? "" : ", ") + std::to_string(i) +
                       (o.state == ::cudasim::State::Barrier ? " (at __syncthreads, " : " (in a warp operation, ") +
                       ::cudasim::base_name(o.state == ::cudasim::State::Barrier ? o.bar_file : o.wfile) + ":" +
                       std::to_string(o.state == ::cudasim::State::Barrier ? o.bar_line : o.wline) + ")";
      }
      char buf[300];
      std::snprintf(buf, sizeof buf, "deadlock: thread_block_tile<%u>::sync() at %s:%d waits for threads of its tile "
                    "(threads %u-%u of the block) that never arrive: %u of %u have", n,
                    ::cudasim::base_name(file).c_str(), line, first, last - 1, s.arrived[tile], running);
      ::cudasim::fail(buf + (elsewhere.empty() ? std::string() : "; waiting elsewhere: threads " + elsewhere));
    }
    ::cudasim::yield_thread();
  }
}

// Every thread of the tile puts in `v`; each gets back the values of the threads that put one in,
// by rank in the tile (`have` says which). Values of at most 8 bytes, as in CUDA.
template <class T>
CUDASIM_INTERNAL inline void multi_warp_exchange(unsigned n, const T& v, T* all, bool* have, const char* file,
                                                 int line) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>,
                "a tile of more than 32 threads exchanges values of at most 8 bytes (as in CUDA)");
  multi_warp_sync(n, file, line);  // the last exchange's values have been read
  {
    ::cudasim::SimScope scope;
    MultiWarpTiles& s = tiles_of(n);
    const unsigned me_ = static_cast<unsigned>(::cudasim::g.cur->linear), tile = me_ / n;
    std::memcpy(&s.slots[me_], &v, sizeof(T));
    s.stamps[me_] = s.epoch[tile];
  }
  multi_warp_sync(n, file, line);  // every value is in
  ::cudasim::SimScope scope;
  MultiWarpTiles& s = tiles_of(n);
  const unsigned tile = static_cast<unsigned>(::cudasim::g.cur->linear) / n, first = tile * n;
  for (unsigned r = 0; r < n; ++r) {
    const unsigned id = first + r;
    have[r] = id < s.slots.size() && s.stamps[id] == s.epoch[tile] - 1;
    if (have[r]) std::memcpy(&all[r], &s.slots[id], sizeof(T));
  }
}

// The common part of tiles of several warps.
template <unsigned int N>
class multi_warp_tile {
  static_assert(N == 64 || N == 128 || N == 256 || N == 512,
                "thread_block_tile<N>: N must be 1, 2, 4, 8, 16, 32, 64, 128, 256 or 512");

 public:
  static constexpr unsigned int num_threads() { return N; }
  static constexpr unsigned int size() { return N; }
  static unsigned int thread_rank() { return static_cast<unsigned>(me("thread_rank()").local) & (N - 1); }
  unsigned int meta_group_rank() const { return meta_rank_; }
  unsigned int meta_group_size() const { return meta_size_; }
  void sync(const char* file = __builtin_FILE(), int line = __builtin_LINE()) const { multi_warp_sync(N, file, line); }
  template <class T>
  plain<T> shfl(T&& var, unsigned src_rank, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
    plain<T> all[N];
    bool have[N];
    multi_warp_exchange<plain<T>>(N, var, all, have, file, line);
    unsigned r = src_rank % N;
    if (!have[r]) {
      char buf[240];
      std::snprintf(buf, sizeof buf, "thread_block_tile<%u>::shfl at %s:%d reads rank %u, a thread that has exited or "
                    "does not exist (the block has %d threads): what it would read is undefined on a GPU", N,
                    ::cudasim::base_name(file).c_str(), line, r, ::cudasim::g.cta_threads);
      ::cudasim::fail(buf);
    }
    return all[r];
  }
  int any(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
    return count(pred, file, line) > 0;
  }
  int all(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
    int vals[N];
    bool have[N];
    multi_warp_exchange<int>(N, pred != 0, vals, have, file, line);
    for (unsigned r = 0; r < N; ++r)
      if (have[r] && !vals[r]) return 0;
    return 1;
  }
  // What cg::reduce and the scans need: the values of the tile's running threads in rank order.
  template <class T>
  unsigned gather(const T& v, T* all, const char* file, int line) const {
    bool have[N];
    multi_warp_exchange<T>(N, v, all, have, file, line);
    unsigned k = 0;
    for (unsigned r = 0; r < N; ++r)
      if (have[r]) all[k++] = all[r];
    return k;
  }

 protected:
  multi_warp_tile(unsigned meta_rank, unsigned meta_size) : meta_rank_(meta_rank), meta_size_(meta_size) {}
  int count(int pred, const char* file, int line) const {
    int vals[N];
    bool have[N];
    multi_warp_exchange<int>(N, pred != 0, vals, have, file, line);
    int c = 0;
    for (unsigned r = 0; r < N; ++r) c += have[r] && vals[r];
    return c;
  }
  unsigned meta_rank_, meta_size_;
};

// A tile of one warp or less (warp_group) or of several warps (multi_warp_tile).
template <unsigned int N, bool Multi = (N > 32)>
class tile_base;

template <unsigned int N>
class tile_base<N, false> : public warp_group {
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0,
                "thread_block_tile<N>: N must be 1, 2, 4, 8, 16, 32, 64, 128, 256 or 512");

 public:
  static constexpr unsigned int num_threads() { return N; }
  static constexpr unsigned int size() { return N; }
  static unsigned int thread_rank() { return static_cast<unsigned>(me("thread_rank()").local) & (N - 1); }

 protected:
  tile_base(unsigned meta_rank, unsigned meta_size)
      : warp_group(N == 32 ? 0xFFFFFFFFu : ((1u << N) - 1u) << (lane() & ~(N - 1)), meta_rank, meta_size) {}
};

template <unsigned int N>
class tile_base<N, true> : public multi_warp_tile<N> {
 protected:
  tile_base(unsigned meta_rank, unsigned meta_size) : multi_warp_tile<N>(meta_rank, meta_size) {}
};
}  // namespace details

// A tile of N consecutive threads of the block (N a power of two up to 512), from tiled_partition<N>.
template <unsigned int N, class Parent = void>
class thread_block_tile;

template <unsigned int N>
class thread_block_tile<N, void> : public details::tile_base<N> {
 protected:
  thread_block_tile(unsigned meta_rank, unsigned meta_size) : details::tile_base<N>(meta_rank, meta_size) {}
};

template <unsigned int N, class Parent>
class thread_block_tile : public thread_block_tile<N, void> {
 public:
  thread_block_tile(unsigned meta_rank, unsigned meta_size) : thread_block_tile<N, void>(meta_rank, meta_size) {}
};

namespace details {
template <class Group>
inline constexpr bool is_multi_warp = false;
template <unsigned int N, class Parent>
inline constexpr bool is_multi_warp<thread_block_tile<N, Parent>> = (N > 32);
}  // namespace details

// Split a block (or a larger tile) into tiles of N threads; meta_group_rank() says which tile.
template <unsigned int N, class Parent>
thread_block_tile<N, Parent> tiled_partition(const Parent& parent) {
  unsigned rank = static_cast<unsigned>(parent.thread_rank()), size = static_cast<unsigned>(parent.size());
  return thread_block_tile<N, Parent>(rank / N, (size + N - 1) / N);
}

// The threads of the warp that are here together (CUDA's __activemask; see the README's note on it).
class coalesced_group : public warp_group {
 public:
  explicit coalesced_group(unsigned mask) : warp_group(mask, 0, 1) {}
};

inline coalesced_group coalesced_threads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  details::me("coalesced_threads()");
  return coalesced_group(static_cast<unsigned>(::cudasim::activemask_(file, line)));
}

// The type-erased split: tiles of tile_size threads (a power of two up to 32) as a thread_group.
class dynamic_tile : public warp_group {
 public:
  dynamic_tile(unsigned mask, unsigned meta_rank, unsigned meta_size) : warp_group(mask, meta_rank, meta_size) {}
};
inline thread_group tiled_partition(const thread_group& parent, unsigned int tile_size) {
  if (tile_size == 0 || tile_size > 32 || (tile_size & (tile_size - 1)))
    ::cudasim::fail("tiled_partition(group, n): n must be 1, 2, 4, 8, 16 or 32 on the simulator, got " +
                    std::to_string(tile_size));
  unsigned n = tile_size;
  unsigned mask = n == 32 ? 0xFFFFFFFFu : ((1u << n) - 1u) << (details::lane() & ~(n - 1));
  unsigned rank = static_cast<unsigned>(parent.thread_rank()), size = static_cast<unsigned>(parent.size());
  return dynamic_tile(mask, rank / n, (size + n - 1) / n);
}

template <class Group>
inline void sync(const Group& group, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  group.sync(file, line);
}
template <class Group>
inline unsigned long long thread_rank(const Group& group) { return group.thread_rank(); }
template <class Group>
inline unsigned long long group_size(const Group& group) { return group.size(); }

}  // namespace cooperative_groups
