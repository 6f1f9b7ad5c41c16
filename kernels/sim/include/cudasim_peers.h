// cudasim_peers.h: the race check (cudasim_check.h) across processes, for peer memory (kernels/sim/peers.py): the
// buffers that ranks read and write in each other's memory, ordered only through their signal pads.
//
// Every access to a peer buffer is kept in a shadow that every rank sees: the segments' own shadow area (a cell per
// 4-byte word, in the segment of the rank that owns the word, under that segment's process-shared lock). A cell keeps
// the last write and the last two reads (by two warps), each with its rank, the rank's launch (counted while the check
// runs), block, barrier epoch, warp operations, thread and the thread's system fences so far, and where it was made
// (an offset into the library, which every rank has loaded from the same file, so that any rank can name its line).
//
// Two accesses of different ranks are ordered only by a chain of release and acquire through a signal pad, as PTX
// orders them at system scope:
//   - release: a thread's __threadfence_system() (fence.sc.sys, fence.acq_rel.sys, membar.sys) and then, in that
//     thread, an atomic on a signal pad. It covers the thread's accesses before the fence and, cumulatively, its
//     block's accesses before the last __syncthreads() that the thread passed before the fence, and everything that
//     the block knew (had acquired) by then. The pad's word keeps the join of every release made into it (a clock:
//     per rank, the rank's launch it knows of and, per block of that launch, how far);
//   - acquire: an atomic on a signal pad reads the word's clock; the thread knows it after its next
//     __threadfence_system(), and its block after the next __syncthreads();
//   - a rank's launches are ordered (stream order): a launch knows all of the rank's earlier launches and what they
//     knew; within a launch the usual rules hold (one block: barriers, warp operations; two blocks: nothing).
// A gpu-scope __threadfence() orders nothing between ranks (PTX's .gpu scope is one device); a race report says so
// when one was made. Where the model is unsure it errs towards no report: a word's clock keeps every release made
// into it, an atomic that does not change the pad still releases and acquires (but a strong load, PTX ld.acquire or
// ld.relaxed.sys run as an atomic, only acquires: it writes nothing), two threads' fences in one epoch of
// a block cover that whole epoch, more than 64 blocks or 8 ranks are taken as known, and a pool of clocks used up
// is taken as ordering everything.
#pragma once

#include <sched.h>

#include <unordered_map>

namespace cudasim {
namespace check {
namespace peer {

constexpr int kRanks = 8, kBlocks = 64;
constexpr size_t kHeader = 4096, kCellBytes = 128, kClockBytes = 8192;  // peers.py's PAGE, CELL_BYTES, CLOCK_BYTES
constexpr uint16_t kNoThread = 0xFFFF, kAnyThread = 0xFFFE;

// How far a rank's block is known: every access of epoch < full, and of epoch == full those of thread `tid` (or of
// every thread, kAnyThread) made before its fence number `flimit`.
struct Entry {
  uint32_t full;
  uint16_t tid, flimit;
};

struct Know {
  uint32_t cur[kRanks];      // per rank: its launches before `cur` are known whole, `cur` by block (0: nothing)
  uint8_t sat[kRanks];       // `cur` known whole (too much to follow)
  Entry e[kRanks][kBlocks];  // per rank and block of its launch `cur`
};

struct PAccess {
  uint32_t launch = 0, block = 0, epoch = 0, wgen = 0;  // launch 0: no access
  uint16_t tid = 0, fseq = 0;
  uint8_t rank = 0, flags = 0, mask = 0, spare = 0;
  uint64_t where = 0;  // offset into the library (a code address, or with kHasFile a file name's) | line << 48
};

struct PCell {
  PAccess w, r, r2;
};

struct Header {
  uint32_t lock, used;  // a spin lock; clocks of the pool handed out
};

static_assert(sizeof(PCell) <= kCellBytes, "a shadow cell must fit the bytes peers.py gives it");
static_assert(sizeof(Know) <= kClockBytes, "a clock must fit the bytes peers.py gives it");

struct Local {
  std::string session;   // the CUDASIM_PEERS this state belongs to
  uint32_t launch = 0;   // this rank's launches with the check on
  int me = 0;
  Know prev{}, acc{}, blk{};              // what earlier launches knew; this launch's blocks; the running block
  std::unordered_map<int, Know> thr, pending;  // per thread: acquired and fenced; acquired, not yet fenced
  uint16_t fseq[1024] = {}, flimit[1024] = {};
  uint32_t fence_epoch[1024] = {};
  bool fenced[1024] = {};
  bool gpu_fence = false;  // a __threadfence() in this rank's launch (named in a report)
  bool load = false;       // the next atomic is a strong load (PTX ld.acquire, ld.relaxed.sys): it releases nothing
  uintptr_t base = 0;      // this library's load address
};

inline Local L;

CUDASIM_INTERNAL inline Header* header(const PeerSegment& s) { return reinterpret_cast<Header*>(s.shadow); }

struct Lock {
  Header* h;
  CUDASIM_INTERNAL explicit Lock(const PeerSegment& s) : h(header(s)) {
    for (unsigned n = 0; __atomic_exchange_n(&h->lock, 1u, __ATOMIC_ACQUIRE); ++n)
      if (n > 64) sched_yield();
  }
  CUDASIM_INTERNAL ~Lock() { __atomic_store_n(&h->lock, 0u, __ATOMIC_RELEASE); }
};

CUDASIM_INTERNAL inline PCell& cell(const PeerSegment& s, uintptr_t word) {
  return *reinterpret_cast<PCell*>(s.shadow + kHeader + (word - s.buf) / 4 * kCellBytes);
}

CUDASIM_INTERNAL inline uint32_t* pad_index(const PeerSegment& s, uintptr_t word) {
  return reinterpret_cast<uint32_t*>(s.shadow + kHeader + s.buf_bytes / 4 * kCellBytes) + (word - s.pad) / 4;
}

// Clock i (from 1) of the segment's pool, or nullptr past its end.
CUDASIM_INTERNAL inline Know* pool_clock(const PeerSegment& s, uint32_t i) {
  const size_t at = (kHeader + s.buf_bytes / 4 * kCellBytes + s.pad_bytes + 7) / 8 * 8 + (i - 1) * kClockBytes;
  return at + kClockBytes <= s.shadow_bytes ? reinterpret_cast<Know*>(s.shadow + at) : nullptr;
}

CUDASIM_INTERNAL inline void join_entry(Entry& a, const Entry& b) {
  if (b.full > a.full) a = b;
  else if (b.full == a.full && b.tid != kNoThread) {
    if (a.tid == kNoThread || (a.tid == b.tid && b.flimit > a.flimit)) a = b;
    else if (a.tid != b.tid) a.tid = kAnyThread;
  }
}

CUDASIM_RT void join(Know& a, const Know& b) {
  for (int r = 0; r < kRanks; ++r) {
    if (b.cur[r] < a.cur[r] || b.cur[r] == 0) continue;
    if (b.cur[r] > a.cur[r]) {
      a.cur[r] = b.cur[r];
      a.sat[r] = b.sat[r];
      std::memcpy(a.e[r], b.e[r], sizeof a.e[r]);
      continue;
    }
    a.sat[r] |= b.sat[r];
    for (int k = 0; k < kBlocks; ++k) join_entry(a.e[r][k], b.e[r][k]);
  }
}

CUDASIM_RT void clear(Know& k) {
  std::memset(&k, 0, sizeof k);
  for (auto& row : k.e)
    for (auto& e : row) e.tid = kNoThread;
}

CUDASIM_RT bool knows(const Know& k, const PAccess& a) {
  if (a.rank >= kRanks || a.block >= kBlocks) return true;
  if (a.launch < k.cur[a.rank]) return true;
  if (a.launch > k.cur[a.rank]) return false;
  if (k.sat[a.rank]) return true;
  const Entry& e = k.e[a.rank][a.block];
  return a.epoch < e.full || (a.epoch == e.full && (e.tid == kAnyThread || (e.tid == a.tid && a.fseq < e.flimit)));
}

CUDASIM_INTERNAL inline uint32_t block_linear() {
  return g.block_idx.x + g.grid_dim.x * (g.block_idx.y + g.grid_dim.y * g.block_idx.z);
}

// Whether the running thread `t` knows `a` (made earlier by a thread of any rank).
CUDASIM_RT bool ordered(const PAccess& a, const PAccess& me, int t) {
  if (a.rank == me.rank) {
    if (a.launch < me.launch) return true;
    if (a.launch == me.launch && a.block == me.block)
      return a.tid == me.tid || a.epoch < me.epoch || ((a.tid >> 5) == (me.tid >> 5) && a.wgen < me.wgen);
  }
  if (knows(L.blk, a)) return true;
  auto it = L.thr.find(t);
  return it != L.thr.end() && knows(it->second, a);
}

CUDASIM_INTERNAL inline bool conflicts(const PAccess& prev, const PAccess& me, int t) {
  if (!prev.launch || !(prev.mask & me.mask) || !((prev.flags | me.flags) & kWrite)) return false;
  if ((prev.flags & kAtomic) && (me.flags & kAtomic)) return false;
  return !ordered(prev, me, t);
}

CUDASIM_RT std::string who(const PAccess& a) {
  const dim3 &b = g.block_dim, &gr = g.grid_dim;
  char buf[200];
  std::snprintf(buf, sizeof buf, "thread (%u,%u,%u) of block (%u,%u,%u) of rank %u", a.tid % b.x, (a.tid / b.x) % b.y,
                a.tid / (b.x * b.y), a.block % gr.x, (a.block / gr.x) % gr.y, a.block / (gr.x * gr.y), a.rank);
  return buf;
}

CUDASIM_RT std::string line_of(const PAccess& a) {
  Access local;
  local.flags = a.flags;
  const uintptr_t keep = (uintptr_t(1) << 48) - 1;
  local.where = ((a.where & keep) + L.base) | (a.where & ~keep);
  return access_line(local);
}

CUDASIM_INTERNAL inline const char* verb_of(const PAccess& a) {
  return (a.flags & kAtomic) ? "made an atomic on" : (a.flags & kWrite) ? "wrote" : "read";
}

[[noreturn]] CUDASIM_RT void report(const PAccess& first, const PAccess& second, const PeerSegment& s, uintptr_t word) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "element %zu (4-byte word) of rank %d's buffer", static_cast<size_t>((word - s.buf) / 4),
                s.owner);
  std::string why, fix;
  if (first.rank != second.rank) {
    why = "they are in different ranks (processes, GPUs), and no release and acquire through a signal pad orders "
          "them";
    fix = "before the second access, the first access's rank must release it (a __syncthreads(), then "
          "__threadfence_system() in the thread that signals, then its atomic on the other rank's signal pad) and the "
          "second access's rank must acquire it (wait until it reads that signal, then __threadfence_system() in the "
          "thread that waited, then __syncthreads() for the rest of its block): a barrier between the ranks";
    if (L.gpu_fence)
      fix += ". This rank made a __threadfence(), whose scope is one GPU (PTX .gpu): it orders nothing between ranks; "
             "use __threadfence_system()";
  } else {
    why = "they are in different blocks of one rank, and nothing orders them";
    fix = "let one block own each part of the buffer, or order the blocks through the signal pads";
  }
  throw std::runtime_error("data race on peer memory: " + who(second) + " " + verb_of(second) + " " + buf + " at " +
                           line_of(second) + ", which " + who(first) + " " + verb_of(first) + " at " + line_of(first) +
                           "; " + why + ", so the result depends on timing. To fix it: " + fix);
}

CUDASIM_RT void start_session() {
  if (L.session == g.peers_text && L.base) return;
  L.session = g.peers_text;
  L.launch = 0;
  L.me = g.peers.empty() ? 0 : g.peers[0].me;
  clear(L.prev);
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&L), &info)) L.base = reinterpret_cast<uintptr_t>(info.dli_fbase);
}

// ---------------------------------------------------------------------------------------------
// The events (cudasim_instrument.h calls them while the check is on and peer memory is registered).
CUDASIM_RT void launch_begin() {
  start_session();
  L.launch += 1;
  clear(L.acc);
  L.gpu_fence = false;
}

CUDASIM_RT void launch_end() { join(L.prev, L.acc); }

CUDASIM_RT void block_begin() {
  L.blk = L.prev;
  L.thr.clear();
  L.pending.clear();
  std::memset(L.fseq, 0, sizeof L.fseq);
  std::memset(L.fenced, 0, sizeof L.fenced);
}

CUDASIM_RT void block_end() {
  for (auto& [t, k] : L.thr) join(L.blk, k);
  join(L.acc, L.blk);
}

CUDASIM_RT void barrier_released() {
  for (auto& [t, k] : L.thr) join(L.blk, k);
  L.thr.clear();
}

CUDASIM_RT void fence(int t, bool system) {
  if (t < 0 || t >= 1024) return;
  if (!system) {
    L.gpu_fence = true;
    return;
  }
  auto it = L.pending.find(t);
  if (it != L.pending.end()) {
    auto mine = L.thr.find(t);
    if (mine == L.thr.end()) L.thr.emplace(t, it->second);
    else join(mine->second, it->second);
    L.pending.erase(it);
  }
  L.fenced[t] = true;
  L.fence_epoch[t] = S.epoch;
  L.flimit[t] = static_cast<uint16_t>(++L.fseq[t]);
}

// Thread t's atomic on a signal pad word: it acquires the word's clock (known after its next system fence) and, when
// it fenced before and writes (`release`: not a strong load), releases what it knows into it.
CUDASIM_RT void pad_atomic(const PeerSegment& s, uintptr_t word, int t, bool release) {
  if (t < 0 || t >= 1024) return;
  Lock lock(s);
  uint32_t* idx = pad_index(s, word);
  Know* clock = *idx ? pool_clock(s, *idx) : nullptr;
  if (clock) {
    auto it = L.pending.find(t);
    if (it == L.pending.end()) L.pending.emplace(t, *clock);
    else join(it->second, *clock);
  }
  if (!L.fenced[t] || !release) return;
  if (!*idx) {
    Header* h = header(s);
    Know* fresh = pool_clock(s, h->used + 1);
    if (!fresh) {  // the pool is used up: every later acquire of the word is taken as knowing everything
      *idx = 0xFFFFFFFFu;
      return;
    }
    *idx = ++h->used;
    clock = fresh;
    clear(*clock);
  }
  if (*idx == 0xFFFFFFFFu) return;
  Know mine = L.blk;
  auto it = L.thr.find(t);
  if (it != L.thr.end()) join(mine, it->second);
  if (L.me < kRanks) {  // its own rank: earlier launches whole, this block up to the fence
    Know own;
    clear(own);
    own.cur[L.me] = L.launch;
    const uint32_t b = block_linear();
    if (b < kBlocks) own.e[L.me][b] = Entry{L.fence_epoch[t], static_cast<uint16_t>(t), L.flimit[t]};
    else own.sat[L.me] = 1;
    join(mine, own);
  }
  join(*clock, mine);
}

// An access of the running thread to a peer buffer, word by word: checked against the other ranks' (and this rank's
// other blocks') accesses in the owner's shadow, then recorded there.
CUDASIM_RT void access(const PeerSegment& s, uintptr_t a, size_t n, uint8_t flags, uintptr_t where, int t) {
  PAccess me;
  me.launch = L.launch;
  me.block = block_linear();
  me.epoch = S.epoch;
  me.wgen = S.wgen[(t >> 5) & 31];
  me.tid = static_cast<uint16_t>(t);
  me.fseq = t < 1024 ? L.fseq[t] : 0;
  me.rank = static_cast<uint8_t>(L.me);
  me.flags = flags;
  const uintptr_t keep = (uintptr_t(1) << 48) - 1;
  me.where = ((where & keep) - L.base) | (where & ~keep);
  const bool write = flags & kWrite;
  Lock lock(s);
  for (uintptr_t word = a & ~uintptr_t(3); word < a + n; word += 4) {
    if (word - s.buf >= s.buf_bytes) continue;
    const uintptr_t lo = (a > word ? a : word) - word, hi = (a + n < word + 4 ? a + n : word + 4) - word;
    me.mask = static_cast<uint8_t>(((1u << hi) - 1) & ~((1u << lo) - 1));
    PCell& c = cell(s, word);
    if (conflicts(c.w, me, t)) report(c.w, me, s, word);
    if (write) {
      if (conflicts(c.r, me, t)) report(c.r, me, s, word);
      if (conflicts(c.r2, me, t)) report(c.r2, me, s, word);
      c.w = me;
      c.r.launch = c.r2.launch = 0;
    } else {
      if (c.r.launch && (c.r.rank != me.rank || (c.r.tid >> 5) != (me.tid >> 5))) c.r2 = c.r;
      c.r = me;
    }
  }
}

}  // namespace peer
}  // namespace check
}  // namespace cudasim
