// cudasim_check.h: the race and bounds check of an instrumented build (cudasim_instrument.h), what
// the checker's race pass and `make sanitize` run a kernel with.
//
// Races. Every load and store of the learner's code (and every access a simulator function makes on
// a thread's behalf: a WMMA load, a cp.async copy landing, an atomic) is checked against the last
// write and the last two reads of the same 4-byte word, kept in a shadow cell: shared memory's in a
// flat array, global memory's in pages made when first touched. Two accesses conflict when they
// touch a common byte, at least one writes, and not both are atomics. They are ordered, and so no
// race, when one of these comes between them:
//   - the same thread made both;
//   - a barrier of their block (__syncthreads and its forms, cg's block.sync()): each access keeps
//     the number of barriers its block had passed (its epoch);
//   - a warp operation of their warp (__syncwarp, a shuffle, a vote, a WMMA call), when both are in
//     one warp: each access keeps the number of warp operations its warp had completed. Any mask
//     counts, and shuffles and votes count although CUDA only promises memory ordering for
//     __syncwarp: both err towards no report (a wrong report costs a learner more than a missed one);
//   - a chain of mbarrier hand-offs (see "mbarriers" below): the earlier access's thread arrived on a
//     barrier after it (or a warp mate did, after a warp operation), and the later access's thread
//     waited for that phase, saw it complete, and made the access after its wait (or a warp mate
//     waited, before a warp operation). Chains compose: what a thread acquired it passes on with its
//     own arrivals;
//   - an atomic: the earlier access's thread made an atomic on some address after the access, and
//     the later access's block had made an atomic on the same address before it (a lock taken and
//     freed, a counter of finished blocks: the CUDA samples' "last block" reduction). A simplification
//     of release and acquire that again errs towards no report. mbarrier operations are not atomics
//     here: they have the rule of their own above, which follows PTX's release and acquire.
// Blocks run one after another here, but on a GPU they run in any order and at once, so two
// accesses from different blocks are never ordered except through atomics. Two plain writes that
// conflict are reported only if they wrote different values (threads setting one flag to the same
// value is a common, harmless race); that is decided at the next barrier, when the second value is
// in memory. A report names both accesses: their threads, blocks and lines, the memory (the tensor or
// __shared__ array and the element) and what orders such accesses.
//
// Bounds. A global access must lie inside a region the kernel may use: the tensors of the op's call
// (registered from Python with their names), memory allocated while the check runs (the op's own
// outputs, through a CPU allocator that records them), cudaMalloc'd memory and the library's
// `__device__` variables. Anything else (past the end of a tensor, another thread's local
// variables, a pointer to host memory) stops the thread before the access, so nothing is
// corrupted, with the distance to the nearest region. A shared access must lie in the block's
// dynamic shared memory or in its __shared__ variables.
//
// mbarriers. PTX gives mbarrier.arrive release semantics and a wait that sees its phase complete
// (try_wait, test_wait, with a parity or a state) acquire semantics, at the block's scope: a completed
// phase orders what each arriving thread did before its arrival before what each thread that saw that
// phase complete does after its wait. It is a hand-off between those threads, not a barrier of the
// block: a thread that did not wait, or waited for another phase (a wrong parity finds the phase before
// it), stays unordered. The check follows it with vector clocks (Clocks below), for the running block
// only, built when the block first uses an mbarrier: each thread has a clock that ticks after each of
// its arrivals and at each warp operation of its warp, and an access keeps its thread's clock; an
// arrival joins what its thread knows (its own clock, its warp mates' clocks at their last warp
// operation, what it acquired) into the open phase; a phase that completes keeps that join; a wait that
// sees it complete joins it into what the waiting thread knows. A copy that completes on a barrier (TMA,
// cp.async.bulk, cp.async.mbarrier.arrive) lands as a write of the thread that issued it, checked with
// what that thread knows, and joins its phase as that thread's arrival would: the bytes it brings are
// ordered before the waiters' reads, and after whatever the issuing thread had waited for.
// Named barriers for part of the block (bar.sync and bar.arrive with a thread count) are hand-offs of the same kind:
// each participant's arrival releases, and each thread that waited there acquires the completed generation
// (cudasim_ptx/warp.h). A named barrier of the whole block is a barrier of the block, as __syncthreads.
// A wgmma group's reads of shared memory are made by the thread whose wgmma.wait_group completes the group (the
// first of its warpgroup to wait for it: wgmma.h), at that wait; the group is complete for the whole warpgroup then,
// so every thread of the warpgroup knows those reads from then on (clocks_share), and its later arrivals release them.
//
// A finding in a running thread stops it where it is (cudasim.h's stop_thread: the hooks cannot throw
// through the learner's code) and the launch raises it, as the simulator's other errors.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

namespace cudasim {
namespace check {

enum : uint8_t { kWrite = 1, kAtomic = 2, kHasFile = 4 };

// One access as the shadow keeps it.
struct Access {
  uint32_t blk = 0;     // the serial number of its block (State::serial); 0: none
  uint32_t epoch = 0;   // barriers its block had passed
  uint32_t wgen = 0;    // warp operations its warp had completed
  uint32_t seq = 0;     // atomics its thread had made before it
  uint32_t clk = 0;     // its thread's clock (Clocks::now) at the access
  uint16_t tid = 0;     // its thread's linear index in the block
  uint8_t mask = 0;     // the bytes of the word it touched
  uint8_t flags = 0;    // kWrite, kAtomic, kHasFile
  uintptr_t where = 0;  // the hook's return address, or with kHasFile the file name | line << 48
};

// The shadow of one 4-byte word: the last write, the last read since it and the last read by a warp
// other than that one's (so that a writer from any warp finds a read by another warp when there was one).
struct Cell {
  Access w, r, r2;
};

constexpr size_t kPageBytes = 4096;  // global memory's shadow pages: 1024 cells

struct Span {
  uintptr_t lo, hi;
};

struct Region {
  uintptr_t lo, hi;
  size_t elem;        // its element size, for messages
  std::string label;  // "`out` (output 0, 4900 float32)"
};

struct Pending {  // two plain writes of one word: a race only if they wrote different values
  uintptr_t word;
  uint32_t before;  // the word before the second write: the first write's value
  Access first, second;
  bool shared;
};

struct SharedName {  // a __shared__ variable of the running block, for messages
  size_t offset, bytes;
  const char* name;
};

// One mbarrier's clocks (see "mbarriers" above): per thread of the block, the highest clock of that thread
// whose accesses the phase orders before its waiters' later ones.
struct Phases {
  std::vector<uint32_t> open;     // the arrivals of the phase that has not completed yet
  std::vector<uint32_t> done[2];  // the last two completed phases, by parity
  uint64_t completed = 0;         // phases completed since mbarrier.init
};

// The vector clocks of the running block. `now` and `synced` are kept in every block (a few stores per warp
// operation); the rest exists once the block uses an mbarrier (`on`).
struct Clocks {
  uint32_t now[1024];           // per thread: its clock; ticks after each arrival and each warp operation of its warp
  uint32_t synced[1024];        // per thread: its clock at its warp's last warp operation
  uint8_t fresh[1024];          // per thread: its row of `knows` holds something
  bool on = false;
  int n = 0;                    // the block's threads: the length of a row
  std::vector<uint32_t> knows;  // n rows of n: what each thread acquired since its warp's last warp operation
  std::vector<uint32_t> warp_knows;  // a row per warp: what its lanes had acquired by its last warp operation
  const uint32_t* knows_at = nullptr;       // knows.data(), warp_knows.data(): the hot path reads them directly
  const uint32_t* warp_knows_at = nullptr;
  std::unordered_map<uintptr_t, Phases> bars;  // per mbarrier, by address
};

struct State {
  bool on = false;
  bool busy = false;          // in the check's own code: its hooks leave accesses alone
  uint32_t serial = 0;        // blocks begun while the check was on; the running block's number
  uint32_t launch_first = 1;  // the number of the running launch's first block
  uint32_t epoch = 0;         // the running block's barriers so far
  uint32_t wgen[32] = {};     // per warp of the running block: warp operations completed
  uint32_t seq[1024] = {};    // per thread of the running block: atomics made
  uintptr_t threads_lo = 0, threads_bytes = 0;  // g.threads' storage (the simulator's per-thread records)
  uintptr_t host_stack_lo = 0, host_stack_bytes = 0;  // the stack of the thread that launched the kernel
  std::vector<uint3> blocks;  // per block of the running launch (serial - launch_first): its blockIdx
  // per (block serial, thread): the addresses it made atomics on, each with the index of its last one
  std::unordered_map<uint64_t, std::vector<std::pair<uintptr_t, uint32_t>>> atomics;
  std::unordered_set<uintptr_t> block_atomics;  // addresses the running block made atomics on
  std::vector<Pending> pending;
  std::vector<SharedName> shared_names;
  Clocks clocks;
  int acting = -1;  // >= 0: the access being checked is this thread's (a copy landing for the thread that issued it)
  // shadow
  Cell* shared = nullptr;     // one cell per word of the shared-memory arena, made when first needed
  std::unordered_map<uintptr_t, Cell*> pages;
  uintptr_t cached_page[16];   // a direct-mapped cache of pages: kernels touch a few tensors by turns
  Cell* cached_cells[16] = {};
  // bounds
  bool bounds = false;          // regions were registered: check global accesses against them
  std::vector<Region> regions;  // the op's tensors, from Python
  std::mutex alloc_lock;
  std::map<uintptr_t, std::pair<uintptr_t, std::string>> allocs;  // lo -> (hi, what): made during the check
  bool tracking = false;        // record CPU allocations (while the check is on)
  Span recent[4] = {};         // regions accesses were found in lately (a plain array: see shared_cell)
  unsigned next_recent = 0;
  uintptr_t image_lo = 0, image_hi = 0;  // this library's static data (`__device__` variables)
};

inline State S;

constexpr uint64_t kSaturated = ~uint64_t(0);  // a thread with too many atomic addresses to follow

CUDASIM_INTERNAL inline uint64_t thread_key(uint32_t blk, uint16_t tid) { return uint64_t(blk) << 16 | tid; }

// ---------------------------------------------------------------------------------------------
// Messages.
CUDASIM_RT std::string access_line(const Access& a) {
  if (a.flags & kHasFile) {
    const char* file = reinterpret_cast<const char*>(a.where & ((uintptr_t(1) << 48) - 1));
    return base_name(file) + ":" + std::to_string(a.where >> 48);
  }
  return pc_token(reinterpret_cast<const void*>(a.where));  // resolved off the fiber (resolve_lines)
}

CUDASIM_RT std::string thread_name(const Access& a) {
  const dim3& b = g.block_dim;
  char buf[160];
  std::snprintf(buf, sizeof buf, "thread (%u,%u,%u)", a.tid % b.x, (a.tid / b.x) % b.y, a.tid / (b.x * b.y));
  std::string s = buf;
  if (a.blk >= S.launch_first && a.blk - S.launch_first < S.blocks.size()) {
    const uint3& bi = S.blocks[a.blk - S.launch_first];
    std::snprintf(buf, sizeof buf, " of block (%u,%u,%u)", bi.x, bi.y, bi.z);
    s += buf;
  }
  return s;
}

CUDASIM_INTERNAL inline const char* verb(const Access& a) {
  return (a.flags & kAtomic) ? "made an atomic on" : (a.flags & kWrite) ? "wrote" : "read";
}

// "element 1027 of `partial` (argument 4, 20480 float32)" or "byte 12 of the __shared__ `tile` (1024 bytes)".
CUDASIM_RT std::string memory_name(uintptr_t word, bool shared) {
  char buf[400];
  if (shared) {
    size_t off = word - reinterpret_cast<uintptr_t>(arena);
    for (const SharedName& n : S.shared_names)
      if (off >= n.offset && off < n.offset + n.bytes) {
        std::snprintf(buf, sizeof buf, "byte %zu of the __shared__ `%s` (%zu bytes)", off - n.offset, n.name, n.bytes);
        return buf;
      }
    if (off < g.dyn_bytes) {
      std::snprintf(buf, sizeof buf, "byte %zu of the dynamic shared memory (extern __shared__, %zu bytes)", off,
                    g.dyn_bytes);
      return buf;
    }
    std::snprintf(buf, sizeof buf, "shared memory at byte %zu", off);
    return buf;
  }
  for (const Region& r : S.regions)
    if (word >= r.lo && word < r.hi) {
      std::snprintf(buf, sizeof buf, "element %zu of %s", (word - r.lo) / r.elem, r.label.c_str());
      return buf;
    }
  {
    std::lock_guard<std::mutex> lock(S.alloc_lock);
    auto it = S.allocs.upper_bound(word);
    if (it != S.allocs.begin() && word < std::prev(it)->second.first) {
      --it;
      std::snprintf(buf, sizeof buf, "byte %zu of %s", word - it->first, it->second.second.c_str());
      return buf;
    }
  }
  std::snprintf(buf, sizeof buf, "global memory at %p", reinterpret_cast<void*>(word));
  return buf;
}

[[noreturn]] CUDASIM_RT void report_race(const Access& first, const Access& second, uintptr_t word,
                                                       bool shared) {
  bool same_block = first.blk == second.blk;
  bool same_warp = same_block && (first.tid >> 5) == (second.tid >> 5);
  bool atomic = (first.flags | second.flags) & kAtomic;
  bool two_writes = (first.flags & kWrite) && (second.flags & kWrite) && !atomic;
  std::string what = shared ? "shared memory" : "global memory";
  std::string why, fix;
  if (two_writes) {
    why = std::string("nothing orders the two writes (") +
          (!same_block ? "they are in different blocks" : same_warp ? "lanes of one warp, no __syncwarp() between"
                                                                     : "no __syncthreads() between") +
          ") and they wrote different values";
    fix = "let one thread write it (or every thread the same value), or use an atomic";
  } else if (!same_block) {
    why = "they are in different blocks, and blocks run in any order, and at the same time, on a GPU";
    fix = atomic ? "make every access to it an atomic, or read it in a later kernel"
                 : "to combine values from several blocks, use atomicAdd (or another atomic), or write one value "
                   "per block and combine them in a second kernel (or in the last block, after a __threadfence() "
                   "and an atomic counter)";
  } else if (same_warp) {
    why = "they are lanes of one warp with no __syncwarp() between them, and lanes of a warp do not run in "
          "lockstep (since Volta)";
    fix = "put __syncwarp() between the two accesses, or pass the value with a shuffle";
    if (shared && g.nthreads > 32)  // a tile the whole block shares: the two lanes found may be only the first pair
      fix += " (if other warps also read or write this memory, as they do a tile that the block loads together, the "
             "barrier it needs is __syncthreads())";
  } else if (S.clocks.on && !atomic) {  // a block that hands memory over through mbarriers
    why = "no __syncthreads() comes between them, nor an mbarrier phase that the first thread arrived on after its "
          "access (or a lane of its warp did, after a __syncwarp()) and the second thread waited for, and saw "
          "complete, before its own, nor a named barrier for part of the block (bar.sync, bar.arrive) that the first "
          "thread reached after its access and the second waited at (bar.sync) before its own; different warps run "
          "at their own pace";
    fix = "the thread that writes arrives on an mbarrier after its writes (mbarrier.arrive releases them) and every "
          "thread that reads waits for that phase (try_wait.parity with the parity of the phase it needs) before it "
          "reads, or the writers arrive at a named barrier (bar.arrive or bar.sync) after their writes and the readers "
          "wait there (bar.sync) before their reads; before the buffer is written again, its readers arrive on a "
          "second barrier that the writer waits for (or put __syncthreads() between, where every thread of the block "
          "reaches it)";
  } else {
    why = "no __syncthreads() comes between them, and different warps run at their own pace";
    fix = atomic ? "use atomics for every access to it, or put a __syncthreads() between"
                 : "put __syncthreads() between the write and the read (every thread of the block must reach "
                   "it); if several threads add into one element, use atomicAdd or combine the values through "
                   "shared memory first";
  }
  std::string msg = "data race on " + what + ": " + thread_name(second) + " " + verb(second) + " " +
                    memory_name(word, shared) + " at " + access_line(second) + ", which " + thread_name(first) +
                    (same_block ? "" : "") + " " + verb(first) + " at " + access_line(first) + "; " + why +
                    ", so the result depends on timing. To fix it: " + fix;
  throw std::runtime_error(msg);
}

// ---------------------------------------------------------------------------------------------
// Ordering.
CUDASIM_INTERNAL inline bool live(const Access& a, bool shared) {
  return a.blk != 0 && (shared ? a.blk == S.serial : a.blk >= S.launch_first);
}

// An atomic came after `first` in its thread, at an address that `second`'s block had made an atomic on.
CUDASIM_RT bool through_atomics(const Access& first) {
  auto it = S.atomics.find(thread_key(first.blk, first.tid));
  if (it == S.atomics.end()) return false;
  for (const auto& [addr, last] : it->second) {
    if (addr == kSaturated) return true;
    if (last >= first.seq && S.block_atomics.count(addr)) return true;
  }
  return false;
}

// The highest clock of thread x whose accesses come before thread u's next one through mbarriers (0: none).
CUDASIM_INTERNAL inline uint32_t known_clock(int u, int x) {
  const Clocks& c = S.clocks;
  uint32_t k = c.warp_knows_at[static_cast<size_t>(u >> 5) * c.n + x];
  if (c.fresh[u]) {
    const uint32_t v = c.knows_at[static_cast<size_t>(u) * c.n + x];
    if (v > k) k = v;
  }
  return k;
}

CUDASIM_RT bool ordered(const Access& first, const Access& second) {
  if (first.blk == second.blk) {
    if (first.tid == second.tid || first.epoch < second.epoch) return true;
    if ((first.tid >> 5) == (second.tid >> 5) && first.wgen < second.wgen) return true;
    if (S.clocks.on && first.clk <= known_clock(second.tid, first.tid)) return true;
  }
  return through_atomics(first);
}

// `prev` (an earlier access of the word) and `me`: a race unless they do not conflict or are ordered.
// Returns false for two plain writes that may be a harmless race (to be decided by value).
CUDASIM_RT bool conflict(const Access& prev, const Access& me, bool shared) {
  if (!live(prev, shared) || !(prev.mask & me.mask)) return false;
  if (!((prev.flags | me.flags) & kWrite)) return false;
  if ((prev.flags & kAtomic) && (me.flags & kAtomic)) return false;
  return !ordered(prev, me);
}

// ---------------------------------------------------------------------------------------------
// The shadow.
// The hot path (shadow_access and what it calls) uses no standard-library templates: they are
// instrumented, and an instrumented function is never inlined into this uninstrumented code, so each
// would be a call that runs the hooks again.
CUDASIM_RT Cell& shared_cell(uintptr_t word) {
  if (!S.shared) S.shared = static_cast<Cell*>(std::calloc(sizeof arena / 4, sizeof(Cell)));
  return S.shared[(word - reinterpret_cast<uintptr_t>(arena)) >> 2];
}

CUDASIM_INTERNAL __attribute__((noinline)) inline Cell* new_page(uintptr_t page) {
  Cell*& cells = S.pages[page];
  if (!cells) cells = static_cast<Cell*>(std::calloc(kPageBytes / 4, sizeof(Cell)));
  return cells;
}

CUDASIM_RT Cell& global_cell(uintptr_t word) {
  const uintptr_t page = word / kPageBytes;
  const unsigned slot = static_cast<unsigned>(page ^ (page >> 4)) & 15u;
  if (!S.cached_cells[slot] || S.cached_page[slot] != page) {
    S.cached_cells[slot] = new_page(page);
    S.cached_page[slot] = page;
  }
  return S.cached_cells[slot][(word % kPageBytes) >> 2];
}

CUDASIM_RT void drop_shadow() {
  for (auto& [page, cells] : S.pages) std::free(cells);
  S.pages.clear();
  for (auto& c : S.cached_cells) c = nullptr;
  std::free(S.shared);
  S.shared = nullptr;
}

CUDASIM_INTERNAL inline uint32_t word_bytes(uintptr_t word, uint8_t mask) {
  uint32_t v = 0;
  std::memcpy(&v, reinterpret_cast<const void*>(word), 4);
  uint32_t keep = 0;
  for (int b = 0; b < 4; ++b)
    if (mask >> b & 1) keep |= 0xFFu << (8 * b);
  return v & keep;
}

// One access of [a, a + n) by the running thread, word by word.
CUDASIM_RT void shadow_access(uintptr_t a, size_t n, uint8_t flags, uintptr_t where, bool shared) {
  const int tid = S.acting >= 0 ? S.acting : g.cur->linear;
  Access me;
  me.blk = S.serial;
  me.epoch = S.epoch;
  me.wgen = S.wgen[tid >> 5];
  me.seq = S.seq[tid];
  me.clk = S.clocks.now[tid];
  me.tid = static_cast<uint16_t>(tid);
  me.flags = flags;
  me.where = where;
  const bool write = flags & kWrite;
  for (uintptr_t word = a & ~uintptr_t(3); word < a + n; word += 4) {
    const uintptr_t lo = (a > word ? a : word) - word, hi = (a + n < word + 4 ? a + n : word + 4) - word;
    me.mask = static_cast<uint8_t>(((1u << hi) - 1) & ~((1u << lo) - 1));
    Cell& c = shared ? shared_cell(word) : global_cell(word);
    if (write) {
      if (conflict(c.w, me, shared)) {
        if ((c.w.flags | me.flags) & kAtomic) report_race(c.w, me, word, shared);
        S.pending.push_back(Pending{word, word_bytes(word, c.w.mask & me.mask), c.w, me, shared});
      }
      if (conflict(c.r, me, shared)) report_race(c.r, me, word, shared);
      if (conflict(c.r2, me, shared)) report_race(c.r2, me, word, shared);
      c.w = me;
      c.r.blk = c.r2.blk = 0;
      if (flags & kAtomic) {  // a read too, but one that no later plain write conflicts with by itself
        c.r = me;
        c.r.flags = static_cast<uint8_t>(flags & ~kWrite);
      }
    } else {
      if (conflict(c.w, me, shared)) report_race(c.w, me, word, shared);
      if (live(c.r, shared) && (c.r.tid >> 5) != (me.tid >> 5)) c.r2 = c.r;
      c.r = me;
    }
  }
}

// Two plain writes of one word: a race if the second changed what the first wrote. Called where no
// thread runs (a barrier released, a block or launch over), so a report raises straight away.
CUDASIM_RT void settle_pending() {
  std::vector<Pending> todo;
  todo.swap(S.pending);
  for (const Pending& p : todo) {
    uint8_t mask = p.first.mask & p.second.mask;
    if (word_bytes(p.word, mask) != p.before) report_race(p.first, p.second, p.word, p.shared);
  }
}

// ---------------------------------------------------------------------------------------------
// The mbarriers' vector clocks (see "mbarriers" above). Called from the simulator's events, never on the hot path.
CUDASIM_RT void clocks_block_begin(int nthreads) {
  Clocks& c = S.clocks;
  c.on = false;
  c.n = nthreads;
  c.bars.clear();
  for (int t = 0; t < nthreads; ++t) {
    c.now[t] = 1;  // 0 in a vector means "nothing of that thread"
    c.synced[t] = 0;
    c.fresh[t] = 0;
  }
}

// The block's first mbarrier operation: no thread has acquired anything yet.
CUDASIM_RT void clocks_on() {
  Clocks& c = S.clocks;
  if (c.on) return;
  const size_t n = static_cast<size_t>(c.n), warps = (n + 31) / 32;
  c.knows.assign(n * n, 0u);
  c.warp_knows.assign(warps * n, 0u);
  c.knows_at = c.knows.data();
  c.warp_knows_at = c.warp_knows.data();
  c.on = true;
}

// A warp operation of `warp` completed: what each lane acquired is the whole warp's now, and each lane's
// accesses so far come before its warp mates' later ones (their arrivals release them).
CUDASIM_RT void clocks_warp_synced(int warp) {
  Clocks& c = S.clocks;
  const int lo = warp * 32, hi = lo + 32 < c.n ? lo + 32 : c.n;
  for (int l = lo; l < hi; ++l) {
    if (c.on && c.fresh[l]) {
      uint32_t* row = c.knows.data() + static_cast<size_t>(l) * c.n;
      uint32_t* mine = c.warp_knows.data() + static_cast<size_t>(warp) * c.n;
      for (int x = 0; x < c.n; ++x) {
        if (row[x] > mine[x]) mine[x] = row[x];
        row[x] = 0;
      }
      c.fresh[l] = 0;
    }
    c.synced[l] = c.now[l];
    c.now[l] += 1;
  }
}

CUDASIM_RT Phases& clocks_phases(uintptr_t bar) {
  Phases& p = S.clocks.bars[bar];
  const size_t n = static_cast<size_t>(S.clocks.n);
  if (p.open.size() != n) {
    p.open.assign(n, 0u);
    p.done[0].assign(n, 0u);
    p.done[1].assign(n, 0u);
  }
  return p;
}

// Thread t arrives on `bar`: everything it knows, and its own accesses so far, join the open phase.
CUDASIM_RT void clocks_release(uintptr_t bar, int t) {
  Clocks& c = S.clocks;
  if (t < 0 || t >= c.n) return;
  clocks_on();
  uint32_t* open = clocks_phases(bar).open.data();
  const uint32_t* mine = c.warp_knows.data() + static_cast<size_t>(t >> 5) * c.n;
  const uint32_t* row = c.knows.data() + static_cast<size_t>(t) * c.n;
  for (int x = 0; x < c.n; ++x) {
    uint32_t v = mine[x];
    if (c.fresh[t] && row[x] > v) v = row[x];
    if (v > open[x]) open[x] = v;
  }
  const int lo = t & ~31, hi = lo + 32 < c.n ? lo + 32 : c.n;
  for (int l = lo; l < hi; ++l)
    if (c.synced[l] > open[l]) open[l] = c.synced[l];
  if (c.now[t] > open[t]) open[t] = c.now[t];
  c.now[t] += 1;  // its later accesses are not covered by this arrival
}

CUDASIM_RT void clocks_completed(uintptr_t bar, uint64_t phase) {
  clocks_on();
  Phases& p = clocks_phases(bar);
  p.done[phase & 1].swap(p.open);
  std::fill(p.open.begin(), p.open.end(), 0u);
  p.completed = phase + 1;
}

// Thread u's wait saw phase `phase` of `bar` complete. A phase older than the last two (a state from long ago)
// finds the latest of its parity, which its arrivals' later clocks cover as well.
CUDASIM_RT void clocks_acquire(uintptr_t bar, long long phase, int u) {
  Clocks& c = S.clocks;
  if (u < 0 || u >= c.n) return;
  clocks_on();
  Phases& p = clocks_phases(bar);
  if (phase < 0 || static_cast<uint64_t>(phase) >= p.completed) return;  // nothing completed: nothing to acquire
  const uint32_t* from = p.done[phase & 1].data();
  uint32_t* row = c.knows.data() + static_cast<size_t>(u) * c.n;
  for (int x = 0; x < c.n; ++x)
    if (from[x] > row[x]) row[x] = from[x];
  c.fresh[u] = 1;
}

// Thread `reader`'s accesses so far come before the later accesses of threads [first, first + count) (whole warps):
// a wgmma group that completes for its whole warpgroup at the first wait that covers it (wgmma.h), whose reads were
// made by the thread running that wait. A release by any thread of the warpgroup after it then covers those reads (a
// warp mate's wait came first: CUTLASS's one arrival per warpgroup after every thread's wait).
CUDASIM_RT void clocks_share(int reader, int first, int count) {
  Clocks& c = S.clocks;
  if (!c.on || reader < 0 || reader >= c.n) return;  // no mbarrier yet: epochs and warp operations order the rest
  for (int w = first >> 5; w * 32 < first + count && w * 32 < c.n; ++w) {
    uint32_t& k = c.warp_knows[static_cast<size_t>(w) * c.n + reader];
    if (c.now[reader] > k) k = c.now[reader];
  }
}

// ---------------------------------------------------------------------------------------------
// Bounds.
// The slow part: the registered regions and the allocations; a region found joins the recent ones.
CUDASIM_INTERNAL __attribute__((noinline)) inline bool find_region(uintptr_t a, size_t n) {
  uintptr_t lo = 0, hi = 0;
  for (const Region& r : S.regions)
    if (a >= r.lo && a + n <= r.hi) lo = r.lo, hi = r.hi;
  if (!hi && a >= S.image_lo && a + n <= S.image_hi) lo = S.image_lo, hi = S.image_hi;
  if (!hi) {
    std::lock_guard<std::mutex> lock(S.alloc_lock);
    auto it = S.allocs.upper_bound(a);
    if (it != S.allocs.begin() && a + n <= std::prev(it)->second.first) lo = std::prev(it)->first, hi = std::prev(it)->second.first;
  }
  if (!hi) return false;
  S.recent[S.next_recent++ % 4] = {lo, hi};
  return true;
}

CUDASIM_RT bool known_region(uintptr_t a, size_t n) {
  for (const Span& r : S.recent)
    if (a >= r.lo && a + n <= r.hi) return true;
  return find_region(a, n);
}

// "4117 floats past the end of `c` (output 0, 4900 float32)": the region the address is nearest to.
CUDASIM_RT std::string nearest_region(uintptr_t a, size_t n) {
  std::string best;
  uintptr_t best_gap = ~uintptr_t(0);
  auto consider = [&](uintptr_t lo, uintptr_t hi, size_t elem, const std::string& label) CUDASIM_INTERNAL {
    char buf[400];
    if (a >= hi) {
      if (a - hi >= best_gap) return;
      best_gap = a - hi;
      size_t k = (a - hi) / elem + 1;
      std::snprintf(buf, sizeof buf, "%zu element%s of %zu bytes past the end of %s", k, k == 1 ? "" : "s", elem,
                    label.c_str());
    } else if (a + n <= lo || a < lo) {
      if (lo - a >= best_gap) return;
      best_gap = lo - a;
      size_t k = (lo - a + elem - 1) / elem;
      std::snprintf(buf, sizeof buf, "%zu element%s of %zu bytes before the start of %s", k, k == 1 ? "" : "s", elem,
                    label.c_str());
    } else {  // starts inside, ends past the end
      best_gap = 0;
      std::snprintf(buf, sizeof buf, "an access that runs %zu bytes past the end of %s", a + n - hi, label.c_str());
    }
    best = buf;
  };
  for (const Region& r : S.regions) consider(r.lo, r.hi, r.elem, r.label);
  {
    std::lock_guard<std::mutex> lock(S.alloc_lock);
    for (const auto& [lo, v] : S.allocs) consider(lo, v.first, n, v.second);
  }
  if (best.empty()) return "no tensor of the call is near it";
  return best;
}

[[noreturn]] CUDASIM_RT void report_out_of_bounds(uintptr_t a, size_t n, uint8_t flags, uintptr_t where,
                                                                const std::string& what) {
  Access me;
  me.flags = flags;
  me.where = where;
  char buf[200];
  std::snprintf(buf, sizeof buf, "%zu bytes at %p", n, reinterpret_cast<void*>(a));
  throw std::runtime_error("out-of-bounds " + std::string((flags & kWrite) ? "write" : "read") + " at " +
                           access_line(me) + ": the thread " + ((flags & kWrite) ? "wrote " : "read ") + buf + ", " +
                           what + ". On a GPU this is an illegal memory access, or silently corrupts another "
                           "tensor; check the index against its bound (`if (i < n)`)");
}

CUDASIM_RT void check_shared_bounds(uintptr_t a, size_t n, uint8_t flags, uintptr_t where) {
  size_t off = a - reinterpret_cast<uintptr_t>(arena);
  if (off + n <= g.dyn_bytes) return;
  if (off >= g.static_base && off + n <= g.static_base + g.static_used) return;
  if (off >= kFileBase && off + n <= kFileBase + g.file_static_used) return;
  char buf[300];
  if (off < g.static_base)
    std::snprintf(buf, sizeof buf, "byte %zu of shared memory, past the end of the %zu bytes of dynamic shared "
                  "memory the launch asked for", off, g.dyn_bytes);
  else
    std::snprintf(buf, sizeof buf, "shared memory outside every __shared__ variable of the block (byte %zu past "
                  "the start of the static ones)", off - g.static_base);
  report_out_of_bounds(a, n, flags, where, buf);
}

// ---------------------------------------------------------------------------------------------
// The CPU allocator that records what is allocated while the check is on (an op's own outputs and
// temporaries). It hands out the inner allocator's pointers unchanged (so PyTorch's raw_allocate, which
// wants the data pointer to be its own context, still works) and only notes each range; the ranges are
// dropped when the check stops, so one freed during the call stays allowed until then.
struct TrackingAllocator final : c10::Allocator {
  c10::Allocator* inner = nullptr;
  CUDASIM_INTERNAL c10::DataPtr allocate(size_t n) override {
    c10::DataPtr p = inner->allocate(n);
    if (S.tracking && p.get()) {
      uintptr_t lo = reinterpret_cast<uintptr_t>(p.get());
      std::lock_guard<std::mutex> lock(S.alloc_lock);
      S.allocs[lo] = {lo + n, "memory the op allocated (" + std::to_string(n) + " bytes)"};
    }
    return p;
  }
  CUDASIM_INTERNAL c10::DeleterFnPtr raw_deleter() const override { return inner->raw_deleter(); }
  CUDASIM_INTERNAL void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

inline TrackingAllocator tracker;

// Put this library's tracker in front of PyTorch's CPU allocator, once for the process's life: every
// simulator library loaded (the instrumented build of each file) has its own, and each goes on top of the
// one before, whose allocations it passes down, so the chain is a stack and never a loop (installing one
// again over a later one would make them call each other for ever). False if another allocator with a
// higher priority kept its place: then allocations are not seen, and the bounds check leaves them alone.
CUDASIM_RT bool install_tracker() {
  static bool installed = [] {
    tracker.inner = c10::GetCPUAllocator();
    c10::SetCPUAllocator(&tracker, 0);
    return c10::GetCPUAllocator() == &tracker;
  }();
  return installed;
}

}  // namespace check
}  // namespace cudasim
