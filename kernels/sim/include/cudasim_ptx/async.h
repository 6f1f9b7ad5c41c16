// cudasim_ptx/async.h: memory instructions. ld/st (any state space, .v2/.v4, cache qualifiers),
// cp.async (sm_80) with its groups, and Hopper's asynchronous proxy: mbarrier objects (phases,
// arrival counts, transaction counts), cp.async.bulk (1-D) and cp.async.bulk.tensor (TMA, through a
// tensor map) in both directions.
//
// Faithful timing of arrival: nothing an asynchronous copy writes into shared memory is there when
// the copy is issued. A cp.async lands at its thread's cp.async.wait_group / wait_all (as
// __pipeline_wait_prior, whose queue it shares); a copy that completes on an mbarrier (TMA,
// cp.async.bulk, cp.async.mbarrier.arrive) lands when a thread polls that barrier (test_wait or
// try_wait) after all of the phase's arrivals have come, and the phase completes when its
// transaction count returns to zero. Until then the destination holds poison (0xFF bytes, a NaN),
// so a kernel that reads a tile before its barrier says so computes with NaN. Sources are read
// when the copy is issued. Bulk stores to global memory are pending until their thread's
// cp.async.bulk.wait_group{.read} (see "Bulk stores" below).
//
// While a block is traced (cudasim_trace.h, kernels.barrier_trace), every mbarrier operation is reported there too:
// init, arrive, expect_tx, each poll of a wait, a copy issued and landed, a phase completed.
#pragma once
#include "mma.h"
#include "tensormap.h"
#include "../cuda_pipeline_primitives.h"

#include <cstdlib>
#include <deque>

namespace cudasim {
namespace ptx {

// ---------------------------------------------------------------------------------------------
// ld / st
template <int Size, bool Signed, class D>
CUDASIM_INTERNAL inline void load_one(D& d, const unsigned char* p) {
  static_assert(sizeof(D) >= Size && !std::is_same_v<D, bool>, "ld into a register narrower than its type");
  using T = std::conditional_t<Size == 1, uint8_t, std::conditional_t<Size == 2, uint16_t,
            std::conditional_t<Size == 4, uint32_t, uint64_t>>>;
  T v;
  std::memcpy(&v, p, Size);
  if constexpr (Signed) put_wide<std::make_signed_t<T>>(d, static_cast<std::make_signed_t<T>>(v));
  else put_wide<T>(d, v);
}

template <Space Sp, int Size, bool Signed, class... D>
CUDASIM_INTERNAL inline void ld(const Site& s, Addr a, D&... outs) {
  constexpr int n = sizeof...(D);
  const unsigned char* p = resolve(s, Sp, a, Size * n, Size * n);
  note_read(p, Size * n, s.file, s.line);
  int k = 0;
  ((load_one<Size, Signed>(outs, p + Size * k++)), ...);
}

template <int Size, class V>
CUDASIM_INTERNAL inline void store_one(unsigned char* p, const V& v) {
  if constexpr (is_imm<V>) {
    uint64_t bits = as<uint64_t>(v);
    std::memcpy(p, &bits, Size);
  } else {
    static_assert(sizeof(V) >= Size && !std::is_same_v<V, bool>, "st from a register narrower than its type");
    std::memcpy(p, &v, Size);  // the low bytes
  }
}

template <Space Sp, int Size, class... V>
CUDASIM_INTERNAL inline void st(const Site& s, Addr a, const V&... vals) {
  constexpr int n = sizeof...(V);
  unsigned char* p = resolve(s, Sp, a, Size * n, Size * n);
  if (in_arena(p)) check_async_readers(s, p, Size * n, "this store");
  note_write(p, Size * n, s.file, s.line);
  int k = 0;
  ((store_one<Size>(p + Size * k++, vals)), ...);
}

// Strong loads and stores (ld.acquire, ld.relaxed.gpu/.sys, st.release, st.relaxed.gpu/.sys) and atom/red.
// A strong access of a word is an atomic one here: the same atomics as CUDA's functions (cudasim.h), so that the
// race check sees a synchronising access, not a racing one, and a loop polling a word that does not change lets
// the other threads run (or, on peer memory, waits for the other process by the clock). The semantics of an order
// are its fences: .release is a fence of the instruction's scope before the access, .acquire one after it
// (.acq_rel both); at .sys scope that is __threadfence_system(), which the race check's model of peer memory reads
// (cudasim_peers.h), at .gpu scope __threadfence(), at .cta and .cluster nothing (one memory, one order here).
// ld.volatile is ld.relaxed.sys, as PTX defines it. A strong load is an atomic read for the race check.
enum class Scope { Cta, Cluster, Gpu, Sys };
enum class Sem { Relaxed = 0, Acquire = 1, Release = 2, AcqRel = 3 };
enum class AtomOp { Add, Min, Max, And, Or, Xor, Exch, Cas, Inc, Dec };
struct NoDest {};  // red: no destination register

CUDASIM_INTERNAL inline void scope_fence(Scope sc) {
  if (sc == Scope::Sys) ::__threadfence_system();
  else if (sc == Scope::Gpu) ::__threadfence();
}

template <int Size>
using Word = std::conditional_t<Size == 4, unsigned, unsigned long long>;

template <Space Sp, int Size, bool Signed, class D>
CUDASIM_INTERNAL inline void ld_strong(const Site& s, Addr a, Sem sem, Scope sc, D& out) {
  static_assert(Size == 4 || Size == 8, "a strong load of 4 or 8 bytes");
  auto* p = reinterpret_cast<Word<Size>*>(resolve(s, Sp, a, Size, Size));
  CUDASIM_EVENT(atomic_load_next());  // a load: on a signal pad it acquires, and releases nothing
  Word<Size> v = ::atomicOr(p, Word<Size>{0}, s.file, s.line);  // reads, and leaves the word as it was
  if (static_cast<int>(sem) & 1) scope_fence(sc);
  load_one<Size, Signed>(out, reinterpret_cast<const unsigned char*>(&v));
}

template <Space Sp, int Size, class V>
CUDASIM_INTERNAL inline void st_strong(const Site& s, Addr a, Sem sem, Scope sc, const V& val) {
  static_assert(Size == 4 || Size == 8, "a strong store of 4 or 8 bytes");
  auto* p = reinterpret_cast<Word<Size>*>(resolve(s, Sp, a, Size, Size));
  if (static_cast<int>(sem) & 2) scope_fence(sc);
  unsigned char bytes[8] = {};
  store_one<Size>(bytes, val);
  Word<Size> w;
  std::memcpy(&w, bytes, Size);
  ::atomicExch(p, w, s.file, s.line);
}

template <Space Sp, AtomOp Op, class T, class D, class B, class C>
CUDASIM_INTERNAL inline void atom(const Site& s, Addr a, Sem sem, Scope sc, D& d, const B& b, const C& c) {
  T* p = reinterpret_cast<T*>(resolve(s, Sp, a, sizeof(T), sizeof(T)));
  if (static_cast<int>(sem) & 2) scope_fence(sc);
  const T v = as<T>(b);
  T old;
  if constexpr (Op == AtomOp::Add) old = ::atomicAdd(p, v, s.file, s.line);
  else if constexpr (Op == AtomOp::Min) old = ::atomicMin(p, v, s.file, s.line);
  else if constexpr (Op == AtomOp::Max) old = ::atomicMax(p, v, s.file, s.line);
  else if constexpr (Op == AtomOp::And) old = ::atomicAnd(p, v, s.file, s.line);
  else if constexpr (Op == AtomOp::Or) old = ::atomicOr(p, v, s.file, s.line);
  else if constexpr (Op == AtomOp::Xor) old = ::atomicXor(p, v, s.file, s.line);
  else if constexpr (Op == AtomOp::Exch) old = ::atomicExch(p, v, s.file, s.line);
  else if constexpr (Op == AtomOp::Cas) old = ::atomicCAS(p, v, as<T>(c), s.file, s.line);
  else if constexpr (Op == AtomOp::Inc) old = ::atomicInc(p, v);
  else old = ::atomicDec(p, v);
  if (static_cast<int>(sem) & 1) scope_fence(sc);
  if constexpr (!std::is_same_v<D, NoDest>) put<T>(d, old);
}

// ---------------------------------------------------------------------------------------------
// mbarrier: a 64-bit object in shared memory. The simulator keeps its state beside the 8 bytes
// (which hold a token that changes with every operation, so a plain store over a live barrier is
// noticed); a new block starts with none.
struct Delivery {
  unsigned char* dst;  // nullptr once landed
  std::vector<unsigned char> data;
  uint32_t bytes;     // counted against the transaction count
  uint32_t arrivals;  // an arrive-on that comes with it (cp.async.mbarrier.arrive)
  Site site;
  bool records = false;  // data holds (pointer, size, bytes) records of cp.async copies, not one block
  int issuer = -1;       // the thread that issued it: its bytes land as that thread's writes (the race check)
};

struct MBarrier {
  uint64_t off = 0;
  bool valid = false;
  uint32_t count = 0, pending = 0;
  long long tx = 0;
  uint64_t phase = 0;
  uint64_t token = 0;
  std::vector<Delivery> inflight;
  Site init{}, expect{}, copy{};
  long long expected = 0, delivered = 0;  // this phase's bytes, for messages
};

struct MBarriers {
  unsigned long long gen = ~0ull;
  std::deque<MBarrier> all;  // a deque: a thread that yields keeps a valid reference to its barrier
};
CUDASIM_RT_STATE MBarriers mbarriers;

constexpr uint64_t kTokenTag = 0x6D62'0000'0000'0000ull;  // in a state token from mbarrier.arrive

CUDASIM_INTERNAL inline std::string at_line(const Site& s) {
  return s.file ? base_name(s.file) + ":" + std::to_string(s.line) : std::string("?");
}

CUDASIM_INTERNAL inline std::deque<MBarrier>& barriers_now() {
  if (mbarriers.gen != g.block_gen) {
    mbarriers.gen = g.block_gen;
    mbarriers.all.clear();
  }
  return mbarriers.all;
}

CUDASIM_INTERNAL inline void stamp(MBarrier& b) {
  b.token = 0x4D42'0000'0000'0000ull ^ (b.phase << 24) ^ (static_cast<uint64_t>(b.pending) << 2) ^ (b.tx & 0xFFFFFF);
  std::memcpy(arena + b.off, &b.token, 8);
}

CUDASIM_INTERNAL inline MBarrier& find_barrier(const Site& s, Space sp, Addr a) {
  unsigned char* p = resolve(s, sp == Space::SharedCluster || sp == Space::Generic ? sp : Space::Shared, a, 8, 8,
                             "mbarrier address");
  if (!in_arena(p)) fail_at(s, "an mbarrier lives in shared memory; " + hex(a.v) + " is not shared memory");
  uint64_t off = window_offset(p);
  for (MBarrier& b : barriers_now()) {
    if (b.off != off || !b.valid) continue;
    uint64_t now;
    std::memcpy(&now, p, 8);
    if (now != b.token)
      fail_at(s, "the mbarrier at shared address " + hex(off) + " (initialised at " + at_line(b.init) + ") was "
              "overwritten by an ordinary store while it was in use: its 8 bytes belong to the barrier until "
              "mbarrier.inval");
    return b;
  }
  const uint64_t rank = off / kCtaStride;
  if (g.cluster_size > 1 && g.cur && rank != static_cast<uint64_t>(g.cur->cta))
    fail_at(s, "no mbarrier is initialised at shared address " + hex(off) + " in the cluster's block of rank " +
            std::to_string(rank) + " (this thread's block is rank " + std::to_string(g.cur->cta) + "): that block "
            "must initialise it, and the cluster synchronise (fence.mbarrier_init, then barrier.cluster or "
            "cluster.sync()), before another block arrives on it or a copy completes on it");
  fail_at(s, "no mbarrier is initialised at shared address " + hex(off) + " in this block: call mbarrier.init "
          "(and make the other threads wait for it: fence.mbarrier_init or __syncthreads) before using it");
}

// For the race check of an instrumented build (cudasim_check.h, "mbarriers"): every operation on a barrier is an
// atomic access of its 8 bytes (so a plain store over it, or an init unordered with its use, is a race); an arrival
// releases what its thread did before it into the phase, and a wait that sees a phase complete acquires it.
CUDASIM_INTERNAL inline void touch(const MBarrier& b) {
  CUDASIM_EVENT(sync_object_access(arena + b.off, 8, __builtin_return_address(0)));
  (void)b;
}
CUDASIM_INTERNAL inline void release(const MBarrier& b, int thread) {
  touch(b);
  CUDASIM_EVENT(mbar_release(arena + b.off, thread));
  (void)thread;
}

CUDASIM_INTERNAL inline std::string describe(const MBarrier& b) {
  char buf[400];
  std::snprintf(buf, sizeof buf, "the barrier (initialised at %s with %u arrivals) is in phase %llu (parity %llu): %u "
                "of %u arrivals still to come and a transaction count of %lld byte(s)",
                at_line(b.init).c_str(), b.count, static_cast<unsigned long long>(b.phase),
                static_cast<unsigned long long>(b.phase & 1), b.pending, b.count, b.tx);
  std::string out = buf;
  if (b.expected || b.delivered)
    out += " (expect_tx " + std::string(b.expect.file ? "at " + at_line(b.expect) + " " : "") + "announced " +
           std::to_string(b.expected) + " bytes this phase, copies delivered " + std::to_string(b.delivered) + ")";
  if (!b.inflight.empty()) out += "; " + std::to_string(b.inflight.size()) + " copy(ies) in flight";
  return out;
}

CUDASIM_INTERNAL inline void land(const Site& s, const MBarrier& b, Delivery& d);

// Land what is in flight (all of it once the phase's arrivals are in; before that only the
// arrive-ons of cp.async, which are arrivals themselves), then complete the phase if it is done.
CUDASIM_INTERNAL inline void settle(const Site& s, MBarrier& b) {
  bool any = false;
  for (auto& d : b.inflight)
    if (d.arrivals && d.dst != nullptr) {
      land(s, b, d);
      if (d.arrivals > b.pending)
        fail_at(d.site, "the cp.async.mbarrier.arrive.noinc arrival is one more than " + describe(b));
      b.pending -= d.arrivals;
      d.dst = nullptr;
      any = true;
    }
  if (b.pending == 0) {
    for (auto& d : b.inflight)
      if (d.dst) {
        land(s, b, d);
        if (tracing.block) trace::on_land(b.off, static_cast<long long>(b.phase), d.bytes);
        b.tx -= d.bytes;
        b.delivered += d.bytes;
        b.copy = d.site;
        d.dst = nullptr;
        any = true;
      }
    b.inflight.clear();
    if (b.tx < 0)
      fail_at(b.copy, "the copies that complete on this mbarrier brought " + std::to_string(b.delivered) +
              " bytes, more than the " + std::to_string(b.expected) + " bytes that expect_tx announced" +
              (b.expect.file ? " at " + at_line(b.expect) : std::string()) +
              ": the transaction count went below zero (" + describe(b) + ")");
    if (b.tx == 0) {
      if (tracing.block) trace::on_complete(b.off, static_cast<long long>(b.phase));
      CUDASIM_EVENT(mbar_completed(arena + b.off, b.phase));
      b.phase += 1;
      b.pending = b.count;
      b.expected = b.delivered = 0;
      any = true;
    }
  } else if (any) {
    size_t k = 0;
    for (auto& d : b.inflight)
      if (d.dst) b.inflight[k++] = std::move(d);
    b.inflight.resize(k);
  }
  stamp(b);
  if (any) moved_on();
}

CUDASIM_INTERNAL inline void mbar_init(const Site& s, Space sp, Addr a, uint32_t count) {
  SimScope scope;
  unsigned char* p = resolve(s, sp == Space::Generic ? Space::Generic : Space::Shared, a, 8, 8, "mbarrier address");
  if (!in_arena(p)) fail_at(s, "an mbarrier lives in shared memory; " + hex(a.v) + " is not shared memory");
  if (count == 0 || count > (1u << 20) - 1)
    fail_at(s, "the expected arrival count must be 1 to 2^20 - 1, got " + std::to_string(count));
  uint64_t off = window_offset(p);
  auto& all = barriers_now();
  MBarrier* b = nullptr;
  for (MBarrier& x : all)
    if (x.off == off) b = &x;
  if (b && b->valid && (b->pending != b->count || !b->inflight.empty() || b->tx))
    fail_at(s, "mbarrier.init on the barrier at " + hex(off) + " while it is in use (" + describe(*b) +
            "): invalidate it with mbarrier.inval first, and only once nothing is in flight");
  if (!b) b = &all.emplace_back();
  *b = MBarrier{};
  b->off = off;
  b->valid = true;
  b->count = b->pending = count;
  b->init = s;
  stamp(*b);
  if (tracing.block) trace::on_init(off, count, s.file, s.line, s.stmt_line);
  note_write(p, 8, s.file, s.line);
  CUDASIM_EVENT(mbar_reset(arena + off));
  moved_on();
}

CUDASIM_INTERNAL inline void mbar_inval(const Site& s, Space sp, Addr a) {
  SimScope scope;
  MBarrier& b = find_barrier(s, sp, a);
  if (!b.inflight.empty())
    fail_at(s, "mbarrier.inval while copies that complete on it are still in flight (" + describe(b) + ")");
  b.valid = false;
}

CUDASIM_INTERNAL inline void add_tx(const Site& s, MBarrier& b, long long bytes) {
  if (bytes > (1 << 20) - 1) fail_at(s, "a transaction count must be below 2^20, got " + std::to_string(bytes));
  b.tx += bytes;
  b.expected += bytes;
  b.expect = s;
}

CUDASIM_INTERNAL inline uint64_t mbar_arrive(const Site& s, Space sp, Addr a, uint32_t count, uint32_t tx, bool drop,
                                             bool no_complete) {
  SimScope scope;
  MBarrier& b = find_barrier(s, sp, a);
  if (count == 0 || count > (1u << 20) - 1) fail_at(s, "the arrival count must be 1 to 2^20 - 1, got " + std::to_string(count));
  if (b.pending == 0) settle(s, b);  // the phase's arrivals are in: it must complete before new ones count
  if (b.pending == 0)
    fail_at(s, "an arrival on an mbarrier whose phase has all its arrivals but has not completed: " + describe(b) +
            ". Each phase takes exactly the count given to mbarrier.init; this arrival is one too many (or the "
            "copies of this phase never brought the bytes expect_tx announced)");
  if (count > b.pending)
    fail_at(s, "an arrival of " + std::to_string(count) + " on an mbarrier that expects only " +
            std::to_string(b.pending) + " more in this phase (" + describe(b) + ")");
  if (tx) add_tx(s, b, tx);
  if (tracing.block) trace::on_arrive(b.off, static_cast<long long>(b.phase), count, tx, s.file, s.line, s.stmt_line);
  uint64_t token = kTokenTag | (b.phase & 0xFFFFFFFFFFFFull);
  release(b, me(s).linear);
  b.pending -= count;
  if (drop) b.count -= count;
  if (no_complete && b.pending == 0)
    fail_at(s, "mbarrier.arrive.noComplete made the phase's last arrival, which PTX leaves undefined");
  if (b.pending == 0 && b.inflight.empty() && b.tx == 0) settle(s, b);
  else stamp(b);
  moved_on();
  return token;
}

CUDASIM_INTERNAL inline void mbar_expect_tx(const Site& s, Space sp, Addr a, uint32_t tx) {
  SimScope scope;
  MBarrier& b = find_barrier(s, sp, a);
  touch(b);  // relaxed (the only form PTX has): it orders nothing
  add_tx(s, b, tx);
  if (tracing.block) trace::on_expect_tx(b.off, static_cast<long long>(b.phase), tx, s.file, s.line, s.stmt_line);
  stamp(b);
}
CUDASIM_INTERNAL inline void mbar_complete_tx(const Site& s, Space sp, Addr a, uint32_t tx) {
  SimScope scope;
  MBarrier& b = find_barrier(s, sp, a);
  release(b, me(s).linear);  // PTX has it .relaxed only; taken as a release here, which errs towards no report
  b.tx -= tx;
  b.delivered += tx;
  b.copy = s;
  if (b.pending == 0) settle(s, b);
  else stamp(b);
  moved_on();
}

// Polls that see nothing in the block move on, per thread: a wait that can never end is reported,
// with every other thread that waits on an mbarrier then.
struct PollState {
  unsigned long long progress = 0;
  int idle = 0;
  bool waiting = false;  // in a wait that has not seen its phase complete
  Site site{};
  uint64_t bar = 0, want = 0;
  bool parity = false;
};
CUDASIM_RT_STATE PerBlock<PollState> polls;

CUDASIM_INTERNAL inline std::string waited_for(bool parity, uint64_t value) {
  return parity ? "the phase of parity " + std::to_string(value & 1)
                : "phase " + std::to_string(value & 0xFFFFFFFFFFFFull);
}

// The other threads that wait on mbarriers, grouped by where they wait and for what.
CUDASIM_INTERNAL inline std::string other_waits(const Thread& self) {
  std::vector<std::pair<std::string, int>> groups;
  for (const Thread& t : g.threads) {
    if (&t == &self || t.linear >= g.nthreads || t.state == State::Done) continue;
    const PollState& p = polls.at(static_cast<size_t>(t.linear));
    if (!p.waiting) continue;
    std::string what = at_line(p.site) + " for " + waited_for(p.parity, p.want) + " of the barrier at " + hex(p.bar);
    for (const MBarrier& b : barriers_now())
      if (b.valid && b.off == p.bar) what += " (" + describe(b) + ")";
    bool found = false;
    for (auto& gr : groups)
      if (gr.first == what) gr.second += 1, found = true;
    if (!found) groups.emplace_back(what, 1);
  }
  std::string out;
  for (auto& gr : groups)
    out += "; " + std::to_string(gr.second) + " other thread(s) wait at " + gr.first;
  return out;
}

CUDASIM_INTERNAL inline bool mbar_wait(const Site& s, Space sp, Addr a, bool parity, uint64_t value, bool is_try) {
  SimScope scope;
  MBarrier& b = find_barrier(s, sp, a);
  settle(s, b);
  bool done;
  if (parity) {
    done = (b.phase & 1) != (value & 1);
  } else {
    if ((value & 0xFFFF'0000'0000'0000ull) != kTokenTag)
      fail_at(s, "the state operand " + hex(value) + " is not a state returned by mbarrier.arrive on this barrier");
    done = b.phase != (value & 0xFFFFFFFFFFFFull);
  }
  Thread& self = me(s);
  PollState& ps = polls.at(static_cast<size_t>(self.linear));
  if (tracing.block) {  // the phase waited for: a parity wait's is the current phase, or if done the one before it
    const long long phase = parity ? static_cast<long long>(b.phase) - done
                                   : static_cast<long long>(value & 0xFFFFFFFFFFFFull);
    trace::on_wait(b.off, phase, parity, done, s.file, s.line, s.stmt_line);
  }
  if (done) {
    ps.idle = 0;
    ps.waiting = false;
    touch(b);
    // the phase it saw complete: a parity wait's is the last one completed, a state's the one it names
    CUDASIM_EVENT(mbar_acquire(arena + b.off, parity ? static_cast<long long>(b.phase) - 1
                                                     : static_cast<long long>(value & 0xFFFFFFFFFFFFull)));
    return true;
  }
  (void)is_try;
  ps.waiting = true;
  ps.site = s;
  ps.bar = b.off;
  ps.want = value;
  ps.parity = parity;
  yield_thread();  // let the threads that arrive or copy run
  if (g.progress != ps.progress) {
    ps.progress = g.progress;
    ps.idle = 0;
  } else if (++ps.idle > kIdleRounds) {
    fail_at(s, "deadlock: this wait for " + waited_for(parity, value) + " to complete can never end: " + describe(b) +
            ", and no other thread of the block can move it on" + other_waits(self) + ". A wait on the wrong parity, "
            "an arrival or an expect_tx too few or too many, or a copy never issued each look like this");
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// cp.async (sm_80): the queue of __pipeline_memcpy_async (cuda_pipeline_primitives.h)
CUDASIM_INTERNAL inline void cp_async(const Site& s, bool cg, Addr dst, Addr src, uint32_t size, long long src_size,
                                      bool ignore_src) {
  SimScope scope;
  if (size != 4 && size != 8 && size != 16) fail_at(s, "cp-size must be 4, 8 or 16, got " + std::to_string(size));
  if (cg && size != 16) fail_at(s, "cp.async.cg copies 16 bytes, got " + std::to_string(size));
  long long n = ignore_src ? 0 : src_size < 0 ? size : src_size;
  if (n > size)
    fail_at(s, "src-size (" + std::to_string(n) + ") must be at most cp-size (" + std::to_string(size) + ")");
  PipelineState& p = my_pipeline(s.op, s.file, s.line);
  unsigned char* d = resolve(s, Space::Shared, dst, size, size, "destination");
  AsyncCopy c{d, {}, size, p.committed, s.file, s.line};
  if (n > 0) {
    const unsigned char* from = resolve(s, Space::Global, src, static_cast<uint64_t>(n), size, "source");
    note_read(from, static_cast<size_t>(n), s.file, s.line);
    std::memcpy(c.bytes, from, static_cast<size_t>(n));
  }
  std::memset(c.bytes + n, 0, size - static_cast<size_t>(n));  // the bytes past src-size are zeros
  check_async_readers(s, d, size, "this cp.async");
  std::memset(d, kPoison, size);  // not there until the thread's wait: that notes the write
  p.queued.push_back(c);
}

CUDASIM_INTERNAL inline void cp_async_commit(const Site& s) {
  SimScope scope;
  my_pipeline(s.op, s.file, s.line).committed += 1;
}

CUDASIM_INTERNAL inline void cp_async_land(PipelineState& p, unsigned long long below) {
  SimScope scope;
  size_t kept = 0;
  for (AsyncCopy& c : p.queued) {
    if (c.group < below) {
      note_write(c.dst, c.size, c.file, c.line);  // the copy lands now, as the waiting thread's write
      std::memcpy(c.dst, c.bytes, c.size);
    } else {
      p.queued[kept++] = c;
    }
  }
  p.queued.resize(kept);
}

CUDASIM_INTERNAL inline void cp_async_wait(const Site& s, uint32_t n) {
  SimScope scope;
  PipelineState& p = my_pipeline(s.op, s.file, s.line);
  cp_async_land(p, p.committed > n ? p.committed - n : 0);
}

CUDASIM_INTERNAL inline void cp_async_wait_all(const Site& s) {
  SimScope scope;
  PipelineState& p = my_pipeline(s.op, s.file, s.line);
  p.committed += 1;
  cp_async_land(p, p.committed);
}

// cp.async.mbarrier.arrive{.noinc}: the thread's cp.async copies so far complete on the barrier
// (they leave the thread's groups); .noinc makes their completion one of the phase's arrivals.
CUDASIM_INTERNAL inline void cp_async_mbarrier_arrive(const Site& s, Space sp, Addr a, bool noinc) {
  SimScope scope;
  PipelineState& p = my_pipeline(s.op, s.file, s.line);
  MBarrier& b = find_barrier(s, sp, a);
  Delivery d{arena, {}, 0, 1, s, true};  // an arrive-on carrying the copies
  d.issuer = me(s).linear;
  for (AsyncCopy& c : p.queued) {
    size_t at = d.data.size();
    d.data.resize(at + sizeof(unsigned char*) + 1 + c.size);
    std::memcpy(&d.data[at], &c.dst, sizeof(unsigned char*));
    d.data[at + sizeof(unsigned char*)] = static_cast<unsigned char>(c.size);
    std::memcpy(&d.data[at + sizeof(unsigned char*) + 1], c.bytes, c.size);
  }
  p.queued.clear();
  if (!noinc) {
    // without .noinc the arrive-on is added to the phase's count before it happens: no net arrival
    b.pending += 1;
  }
  release(b, d.issuer);  // the thread's accesses before it; its copies join the phase as they land
  b.inflight.push_back(std::move(d));
  stamp(b);
  moved_on();
}

// ---------------------------------------------------------------------------------------------
// Bulk copies and TMA.
// A copy lands: its bytes reach shared memory now (while a thread polls the barrier), as a write of the thread that
// issued it; for the race check it joins the barrier's open phase as that thread's arrival, so that the waiters of
// the phase read it in order.
CUDASIM_INTERNAL inline void land(const Site& s, const MBarrier& b, Delivery& d) {
  (void)s, (void)b;
  if (d.records) {
    size_t k = 0;
    while (k < d.data.size()) {
      unsigned char* dst;
      std::memcpy(&dst, &d.data[k], sizeof dst);
      size_t n = d.data[k + sizeof dst];
      note_write_for(dst, n, d.site.file, d.site.line, d.issuer);
      std::memcpy(dst, &d.data[k + sizeof dst + 1], n);
      k += sizeof dst + 1 + n;
    }
  } else {
    check_async_readers(d.site, d.dst, static_cast<uint32_t>(d.data.size()), "this copy, landing now,");
    note_write_for(d.dst, d.data.size(), d.site.file, d.site.line, d.issuer);
    std::memcpy(d.dst, d.data.data(), d.data.size());
  }
  CUDASIM_EVENT(mbar_release(arena + b.off, d.issuer));
}

// `tx`: the bytes counted against the barrier's transaction count, when not all of `data` (a narrow box's
// rows under a swizzle take more shared memory than they hold).
CUDASIM_INTERNAL inline void issue_copy(const Site& s, MBarrier& b, unsigned char* dst, std::vector<unsigned char>&& data,
                                        uint32_t tx = 0) {
  uint32_t n = static_cast<uint32_t>(data.size());
  check_async_readers(s, dst, n, "this copy");
  std::memset(dst, kPoison, n);  // not there until the barrier's phase completes
  if (tracing.block) trace::on_copy(b.off, static_cast<long long>(b.phase), tx ? tx : n, s.file, s.line, s.stmt_line);
  b.inflight.push_back(Delivery{dst, std::move(data), tx ? tx : n, 0, s, false, me(s).linear});
  stamp(b);
  moved_on();
}

// cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [dst], [src], size, [mbar]
CUDASIM_INTERNAL inline void bulk_load(const Site& s, Addr dst, Addr src, uint32_t size, Addr bar) {
  SimScope scope;
  if (size == 0 || size % 16) fail_at(s, "the size must be a non-zero multiple of 16 bytes, got " + std::to_string(size));
  unsigned char* d = resolve(s, Space::SharedCluster, dst, size, 16, "destination");
  const unsigned char* from = resolve(s, Space::Global, src, size, 16, "source");
  MBarrier& b = find_barrier(s, Space::SharedCluster, bar);
  note_read(from, size, s.file, s.line);
  issue_copy(s, b, d, std::vector<unsigned char>(from, from + size));
}

// Bulk stores, shared to global: cp.async.bulk.global.shared::cta.bulk_group and
// cp.async.bulk.tensor.Nd.global.shared::cta.tile.bulk_group. Asynchronous, as on the GPU. A store is
// pending in its thread's bulk async-groups (open until cp.async.bulk.commit_group puts it in the next
// group) and has two parts, retired by that thread's cp.async.bulk.wait_group N, which waits for every
// group but the N most recently committed:
//   - its reads of shared memory, retired by wait_group.read (or a plain wait_group). The store keeps the
//     bytes its source held when it was issued; until its reads are retired, writing those bytes is an
//     error naming both lines: at once for what the simulator writes on a thread's behalf (a PTX st,
//     stmatrix, cp.async, a TMA or bulk load: check_async_readers), at the learner's own store in the
//     race and bounds check (cudasim_instrument.h asks bulk_write_watch), and in a plain build at the
//     wait that retires the reads, which finds the bytes changed and names the store and the wait. A
//     wait that retires anything first lets the other threads run (what they do meanwhile happens while
//     the store is in flight). Only the source bytes that reach global memory count: a TMA store's
//     elements outside the tensor are not tracked.
//   - its writes of global memory, retired by a plain wait_group (not .read). From the issue until then
//     the destination holds poison (0xFF bytes, a NaN), so a thread that reads it before the wait (where
//     a GPU may give the old or the new data) computes with NaN; at the wait the stored bytes land.
// A block that ends with a store whose reads were never retired is an error (its shared memory goes while
// the store may still read it; CUTLASS waits with wait_group.read 0 before its threads exit); stores
// whose reads were retired land their global bytes then.
// A bulk reduction (cp.reduce.async.bulk.global.shared::cta.bulk_group.op.type) is such a store whose bytes
// combine with what global memory holds when they land, element by element, each element atomically (as on
// the GPU, where other blocks' reductions into the same elements may come before or after): its destination
// keeps its value until then (no poison: other threads may add into it meanwhile), and the race check takes
// its writes as atomics, so two blocks' reductions into one element are not a race and a plain access of
// another thread unordered with it is.
struct BulkGroups {
  unsigned long long committed = 0, open = 0;
};
CUDASIM_RT_STATE PerBlock<BulkGroups> bulk_groups;

// `n` bytes from shared-window offset `smem` to global `to`.
struct StoreRun {
  uint64_t smem;
  unsigned char* to;
  uint32_t n;
};

struct PendingStore {
  Site site;
  int thread = 0;
  unsigned long long group = ~0ull;  // ~0 until commit_group
  bool reading = true;               // its reads of shared memory not yet retired
  uint64_t lo = ~0ull, hi = 0;       // the bounds of its source in the window
  std::vector<StoreRun> runs;
  std::vector<unsigned char> data;   // the source bytes as issued, run after run
  // a reduction's operation on `n` bytes of elements (global memory, the source's bytes); nullptr: a store
  void (*combine)(unsigned char* to, const unsigned char* from, uint32_t n) = nullptr;
};

struct BulkStores {
  unsigned long long gen = ~0ull;
  std::vector<PendingStore> all;  // in issue order
  size_t reading = 0;             // how many still read shared memory
};
CUDASIM_RT_STATE BulkStores bulk_stores;

CUDASIM_INTERNAL inline std::vector<PendingStore>& stores_now() {
  if (bulk_stores.gen != g.block_gen) {
    bulk_stores.gen = g.block_gen;
    bulk_stores.all.clear();
    bulk_stores.reading = 0;
  }
  return bulk_stores.all;
}

CUDASIM_INTERNAL inline void add_run(PendingStore& st, uint64_t smem, unsigned char* to, uint32_t n) {
  if (!st.runs.empty()) {
    StoreRun& r = st.runs.back();
    if (r.smem + r.n == smem && r.to + r.n == to) {
      r.n += n;
      st.hi = std::max(st.hi, smem + n);
      return;
    }
  }
  st.runs.push_back(StoreRun{smem, to, n});
  st.lo = std::min(st.lo, smem);
  st.hi = std::max(st.hi, smem + n);
}

// The store's source bytes now; its destination holds poison until its writes are retired. For the race
// check and the profiler the global bytes are the issuing thread's writes, here.
CUDASIM_INTERNAL inline void issue_store(const Site& s, PendingStore&& st) {
  st.site = s;
  st.thread = me(s).linear;
  for (const StoreRun& r : st.runs) st.data.insert(st.data.end(), arena + r.smem, arena + r.smem + r.n);
  for (const StoreRun& r : st.runs) {
    if (st.combine) {
      note_atomic(r.to, r.n, s.file, s.line);
      continue;
    }
    note_write(r.to, r.n, s.file, s.line);
    std::memset(r.to, kPoison, r.n);
  }
  stores_now().push_back(std::move(st));
  bulk_stores.reading += 1;
  bulk_groups.at(static_cast<size_t>(me(s).linear)).open += 1;
}

CUDASIM_INTERNAL inline std::string group_of(const PendingStore& st) {
  return st.group == ~0ull ? std::string("not yet committed: cp.async.bulk.commit_group puts it in a group")
                           : "in its thread's bulk async-group " + std::to_string(st.group);
}

// The first byte of [lo, hi) of the window that a store still reading shared memory reads, or nullptr.
CUDASIM_INTERNAL inline const PendingStore* reader_of(uint64_t lo, uint64_t hi, uint64_t* at) {
  if (bulk_stores.gen != g.block_gen || !bulk_stores.reading) return nullptr;
  for (const PendingStore& st : bulk_stores.all) {
    if (!st.reading || hi <= st.lo || st.hi <= lo) continue;
    for (const StoreRun& r : st.runs)
      if (lo < r.smem + r.n && r.smem < hi) {
        *at = std::max(lo, r.smem);
        return &st;
      }
  }
  return nullptr;
}

CUDASIM_INTERNAL inline std::string still_reading(const PendingStore& st) {
  return "the bulk store " + std::string(st.site.op) + " at " + at_line(st.site) + " (" + group_of(st) +
         ") is still reading";
}

CUDASIM_INTERNAL inline const char* reuse_advice() {
  return "a bulk store reads its source at any time until a cp.async.bulk.wait_group.read of the thread that "
         "issued it retires its group. Write a staging buffer again only after that wait (and a barrier, when "
         "other threads write it)";
}

// A write on a thread's behalf (check_async_readers, wgmma.h): not into bytes a bulk store still reads.
CUDASIM_INTERNAL inline void check_bulk_readers(const Site& s, const unsigned char* p, uint64_t n, const char* what) {
  if (!in_arena(p)) return;
  uint64_t lo = window_offset(p), at = 0;
  if (const PendingStore* st = reader_of(lo, lo + n, &at))
    fail_at(s, std::string(what) + " writes shared memory [" + hex(lo) + ", " + hex(lo + n) + ") that " +
            still_reading(*st) + " (byte " + hex(at) + "), before cp.async.bulk.wait_group.read retired it: " +
            reuse_advice());
}

// The race and bounds check's question for a store of the learner's code into shared memory.
CUDASIM_INTERNAL inline std::string bulk_write_watch(const void* p, size_t n, std::string (*line)(const void*),
                                                     const void* where) {
  if (!in_arena(p)) return {};
  uint64_t lo = window_offset(p), at = 0;
  const PendingStore* st = reader_of(lo, lo + n, &at);
  if (!st) return {};
  return "shared memory that a bulk store at " + at_line(st->site) + " is still reading was overwritten at " +
         line(where) + " before cp.async.bulk.wait_group.read retired it: the store " + std::string(st->site.op) + " (" +
         group_of(*st) + ") reads byte " + hex(at) + "; " + reuse_advice();
}
#ifndef CUDASIM_PREBUILT_RUNTIME  // made by the runtime object where a build links it
inline const bool bulk_write_watch_registered = (shared_write_watch = &bulk_write_watch, true);
#endif

// The store's reads are retired: its source must still hold what it held at the issue.
CUDASIM_INTERNAL inline void retire_reads(const Site& s, PendingStore& st) {
  size_t k = 0;
  for (const StoreRun& r : st.runs) {
    for (uint32_t i = 0; i < r.n; ++i)
      if (arena[r.smem + i] != st.data[k + i]) {
        char buf[200];
        std::snprintf(buf, sizeof buf, " (byte %s held 0x%02x when the store was issued and holds 0x%02x now)",
                      hex(r.smem + i).c_str(), st.data[k + i], arena[r.smem + i]);
        fail_at(s, "shared memory that the bulk store " + std::string(st.site.op) + " at " + at_line(st.site) +
                " was still reading was overwritten before this wait retired it" + buf + ": " + reuse_advice() +
                ". The race and bounds check (kernels.check runs it on small cases) names the line that overwrote "
                "it");
      }
    k += r.n;
  }
  st.reading = false;
  bulk_stores.reading -= 1;
}

// The store's writes land: its bytes reach global memory now.
CUDASIM_INTERNAL inline void land_store(const PendingStore& st) {
  size_t k = 0;
  for (const StoreRun& r : st.runs) {
    if (st.combine) st.combine(r.to, &st.data[k], r.n);
    else std::memcpy(r.to, &st.data[k], r.n);
    k += r.n;
  }
}

// A bulk store (combine nullptr) or reduction of `size` bytes from shared memory to global memory.
CUDASIM_INTERNAL inline void bulk_to_global(const Site& s, Addr dst, Addr src, uint32_t size,
                                            void (*combine)(unsigned char*, const unsigned char*, uint32_t)) {
  SimScope scope;
  if (size == 0 || size % 16) fail_at(s, "the size must be a non-zero multiple of 16 bytes, got " + std::to_string(size));
  const unsigned char* from = resolve(s, Space::Shared, src, size, 16, "source");
  unsigned char* to = resolve(s, Space::Global, dst, size, 16, "destination");
  note_read(from, size, s.file, s.line);
  PendingStore st;
  st.combine = combine;
  add_run(st, window_offset(from), to, size);
  issue_store(s, std::move(st));
}

CUDASIM_INTERNAL inline void bulk_store(const Site& s, Addr dst, Addr src, uint32_t size) {
  bulk_to_global(s, dst, src, size, nullptr);
}

// The reductions' operations: PTX's (inc and dec as atomicInc and atomicDec: the source's element is the bound).
template <AtomOp Op, class T>
CUDASIM_INTERNAL inline void combine_elements(unsigned char* to, const unsigned char* from, uint32_t n) {
  for (uint32_t i = 0; i + sizeof(T) <= n; i += sizeof(T)) {
    T a, b;
    std::memcpy(&a, to + i, sizeof(T));
    std::memcpy(&b, from + i, sizeof(T));
    if constexpr (Op == AtomOp::Add && std::is_integral_v<T>)  // wrapping, as the GPU adds (no signed overflow here)
      a = static_cast<T>(static_cast<std::make_unsigned_t<T>>(a) + static_cast<std::make_unsigned_t<T>>(b));
    else if constexpr (Op == AtomOp::Add) a = a + b;
    else if constexpr (Op == AtomOp::Min) a = b < a ? b : a;
    else if constexpr (Op == AtomOp::Max) a = a < b ? b : a;
    else if constexpr (Op == AtomOp::And) a = a & b;
    else if constexpr (Op == AtomOp::Or) a = a | b;
    else if constexpr (Op == AtomOp::Xor) a = a ^ b;
    else if constexpr (Op == AtomOp::Inc) a = a >= b ? 0 : a + 1;
    else if constexpr (Op == AtomOp::Dec) a = a == 0 || a > b ? b : a - 1;
    else static_assert(Op == AtomOp::Add, "a bulk reduction is add, min, max, and, or, xor, inc or dec");
    std::memcpy(to + i, &a, sizeof(T));
  }
}

// cp.reduce.async.bulk.global.shared::cta.bulk_group.op.type [dst], [src], size
template <AtomOp Op, class T>
CUDASIM_INTERNAL inline void bulk_reduce(const Site& s, Addr dst, Addr src, uint32_t size) {
  bulk_to_global(s, dst, src, size, &combine_elements<Op, T>);
}
// 16-bit floats: .add.noftz.f16 and .add.noftz.bf16, each element's sum rounded to the nearest, subnormals kept (the
// sum of two 16-bit floats rounds the same through float32 as directly); .min and .max of .f16 and .bf16, one of the
// two elements as it is (a NaN loses to a number, two NaNs give the canonical NaN, -0 is below +0).
template <AtomOp Op, bool Bf16>
CUDASIM_INTERNAL inline void combine_halves(unsigned char* to, const unsigned char* from, uint32_t n) {
  static_assert(Op == AtomOp::Add || Op == AtomOp::Min || Op == AtomOp::Max, "a 16-bit float reduction is add, min or max");
  for (uint32_t i = 0; i + 2 <= n; i += 2) {
    unsigned short a, b;
    std::memcpy(&a, to + i, 2);
    std::memcpy(&b, from + i, 2);
    const float x = Bf16 ? bf16_bits_to_float(a) : half_bits_to_float(a);
    const float y = Bf16 ? bf16_bits_to_float(b) : half_bits_to_float(b);
    if constexpr (Op == AtomOp::Add) {
      a = Bf16 ? float_to_bf16_bits(x + y) : float_to_half_bits(x + y);
    } else if (std::isnan(x) && std::isnan(y)) {
      a = 0x7fff;  // the canonical NaN of both formats
    } else if (std::isnan(x) || std::isnan(y)) {
      a = std::isnan(x) ? b : a;
    } else if (x == y) {
      a = (Op == AtomOp::Min) == (std::signbit(y) && !std::signbit(x)) ? b : a;
    } else {
      a = (Op == AtomOp::Min) == (y < x) ? b : a;
    }
    std::memcpy(to + i, &a, 2);
  }
}
template <AtomOp Op, bool Bf16>
CUDASIM_INTERNAL inline void bulk_reduce_halves(const Site& s, Addr dst, Addr src, uint32_t size) {
  bulk_to_global(s, dst, src, size, &combine_halves<Op, Bf16>);
}

CUDASIM_INTERNAL inline void bulk_commit(const Site& s) {
  SimScope scope;
  const int self = me(s).linear;
  BulkGroups& bg = bulk_groups.at(static_cast<size_t>(self));
  for (PendingStore& st : stores_now())
    if (st.thread == self && st.group == ~0ull) st.group = bg.committed;
  bg.committed += 1;
  bg.open = 0;
}

// cp.async.bulk.wait_group{.read} N: every group of the thread but the N most recently committed.
CUDASIM_INTERNAL inline void bulk_wait(const Site& s, uint32_t n, bool read) {
  SimScope scope;
  const int self = me(s).linear;
  const unsigned long long committed = bulk_groups.at(static_cast<size_t>(self)).committed,
                           below = committed > n ? committed - n : 0;
  auto retired = [&](const PendingStore& st) { return st.thread == self && st.group < below; };
  bool any = false;
  for (const PendingStore& st : stores_now()) any |= retired(st) && (st.reading || !read);
  if (!any) return;
  yield_thread();  // the other threads run first: what they do meanwhile happens while the stores are in flight
  auto& all = stores_now();
  for (PendingStore& st : all)
    if (retired(st) && st.reading) retire_reads(s, st);
  if (read) return;
  size_t kept = 0;
  for (PendingStore& st : all) {
    if (retired(st)) {
      land_store(st);
      continue;
    }
    if (&all[kept] != &st) all[kept] = std::move(st);  // never onto itself: a vector moved onto itself comes out empty
    ++kept;
  }
  all.resize(kept);
}

// When a block ends, no store may still read its shared memory; the others' global bytes land.
CUDASIM_INTERNAL inline void bulk_block_end() {
  if (bulk_stores.gen != g.block_gen) return;
  for (const PendingStore& st : bulk_stores.all)
    if (st.reading) {
      const Site o = st.site;  // a copy: the state goes now
      const std::string group = group_of(st);
      bulk_stores.all.clear();
      bulk_stores.reading = 0;
      fail_at(o, "the block ended with this bulk store still reading shared memory (" + group + "): its thread "
              "never retired it with cp.async.bulk.wait_group.read (or wait_group), so on a GPU the block's "
              "shared memory may be freed and reused while the store still reads it. Wait for every bulk store "
              "(cp.async.bulk.wait_group.read 0) before the threads that issued them exit");
    }
  for (const PendingStore& st : bulk_stores.all) land_store(st);
  bulk_stores.all.clear();
}
#ifndef CUDASIM_PREBUILT_RUNTIME
inline const bool bulk_block_end_registered = (block_end_checks.push_back(&bulk_block_end), true);
#endif

// The swizzle of shared-memory addresses that TMA and wgmma share: bits [4, 4+b) of the address
// XOR bits [7, 7+b), b = 1, 2, 3 for the 32, 64 and 128-byte modes (a pattern that repeats every
// 256, 512, 1024 bytes).
CUDASIM_INTERNAL inline uint64_t swizzle(uint64_t a, int bits) {
  if (!bits) return a;
  uint64_t mask = (1u << bits) - 1;
  return a ^ (((a >> 7) & mask) << 4);
}
CUDASIM_INTERNAL inline int tma_swizzle_bits(int mode) { return mode; }  // NONE 0, 32B 1, 64B 2, 128B 3

CUDASIM_INTERNAL inline const tma::Map tensor_map(const Site& s, Addr a) {
  const void* p = reinterpret_cast<const void*>(a.v);
  if (in_arena(p)) fail_at(s, "the tensor map operand points into shared memory; pass the address of the CUtensorMap "
                               "(a __grid_constant__ kernel parameter, or global or constant memory)");
  if (!p || a.v % 64) fail_at(s, "the tensor map address " + hex(a.v) + " is not 64-byte aligned");
  tma::Map m;
  if (!tma::decode(*static_cast<const CUtensorMap*>(p), m))
    fail_at(s, "the tensor map operand does not point to a CUtensorMap made by cuTensorMapEncodeTiled");
  return m;
}

// The shared-memory bytes between the starts of two rows of a box (its dim-0 runs): the row's bytes, or
// with a swizzle the swizzle's span (32, 64, 128 bytes) when the row is narrower: the H100 places each row
// of a narrow box at a multiple of the span (a 64-byte row under the 128-byte swizzle takes 128 bytes).
CUDASIM_INTERNAL inline uint64_t row_pitch(const tma::Map& m) {
  const uint64_t row = m.n[0] * m.elem, span = m.swizzle ? 16ull << m.swizzle : 0;
  return row < span ? span : row;
}

// The shared-memory bytes a box takes (row_pitch per row; an interleaved box's lines lie back to back).
CUDASIM_INTERNAL inline uint64_t box_footprint(const tma::Map& m) {
  if (m.interleave) return m.box_bytes;
  return m.box_bytes / (m.n[0] * m.elem) * row_pitch(m);
}

// Walk a box: f(smem byte offset, global byte offset or -1 outside the tensor). Along dim 0 the tensor
// ends after `dim0_bytes` (its size; a store passes it rounded up to 16 bytes, see tma_store).
template <class F>
CUDASIM_INTERNAL inline void box_walk(const tma::Map& m, const int32_t* c, int dims, uint64_t dim0_bytes, F f) {
  uint32_t i[5] = {0, 0, 0, 0, 0};
  const uint64_t total = m.box_bytes / m.elem, pitch = row_pitch(m);
  uint64_t row = 0;
  for (uint64_t e = 0; e < total; ++e) {
    bool inside = true;
    uint64_t go = 0;
    for (int d = 0; d < dims; ++d) {
      long long coord = 1ll * c[d] + 1ll * i[d] * m.estride[d];
      long long end = d ? static_cast<long long>(m.dims[d]) : static_cast<long long>(dim0_bytes / m.elem);
      if (coord < 0 || coord >= end) inside = false;
      else go += static_cast<uint64_t>(coord) * m.strides[d];
    }
    f(row * pitch + i[0] * m.elem, inside ? static_cast<long long>(go) : -1ll);
    for (int d = 0; d < dims; ++d) {
      if (++i[d] < m.n[d]) break;
      i[d] = 0;
    }
    if (i[0] == 0) ++row;
  }
}

// Interleaved maps (CU_TENSOR_MAP_INTERLEAVE_16B / _32B), as the H100 copies them (its recorded answers:
// tests/ptx_vectors/ptx_tma_interleave.pt). Dimension 0 counts whole slices of 16 (32) bytes, whatever the
// data type: its coordinate, boxDim[0] and globalDim[0] are slices, and a line of the box is boxDim[0]
// slices back to back in global memory from byte coordinate * slice of the row (on into the next pixels when
// a pixel holds one slice, as in NC/8HWC8). Dimension rank - 2 is not walked: its coordinate places the box,
// its box size is not used (recorded with boxes of 4 to 8). The other dimensions are walked as in any tiled
// copy (recorded with element strides of 1); a line whose coordinate in one of them is outside the tensor is
// filled with zeros (a load) or skipped (a store), whole. In shared memory the lines lie back to back in the
// order of the walk, swizzled as any box.
// f(shared byte offset, global byte offset or -1 outside the tensor) for each 16 bytes.
template <class F>
CUDASIM_INTERNAL inline void interleaved_walk(const tma::Map& m, const int32_t* c, F f) {
  const int skip = tma::unwalked_dim(m);
  const uint64_t line = m.n[0] * m.slice, lines = m.box_bytes / line;
  uint32_t i[5] = {0, 0, 0, 0, 0};  // i[skip] stays 0
  for (uint64_t l = 0; l < lines; ++l) {
    bool inside = true;
    long long go = 1ll * c[0] * static_cast<long long>(m.slice);
    for (int d = 1; d < m.rank; ++d) {
      const long long coord = 1ll * c[d] + 1ll * i[d] * m.estride[d];
      if (coord < 0 || coord >= static_cast<long long>(m.dims[d])) inside = false;
      go += coord * static_cast<long long>(m.strides[d]);
    }
    for (uint64_t b = 0; b < line; b += 16) f(l * line + b, inside ? go + static_cast<long long>(b) : -1ll);
    for (int d = 1; d < m.rank; ++d) {
      if (d == skip) continue;
      if (++i[d] < m.n[d]) break;
      i[d] = 0;
    }
  }
}

// What the recorded answers leave open about an interleaved copy is not simulated: an error naming it.
CUDASIM_INTERNAL inline void check_interleaved(const Site& s, const tma::Map& m, const int32_t* c) {
  auto open = [&](const std::string& what) {
    fail_at(s, std::string("a TMA copy through an interleaved tensor map (CU_TENSOR_MAP_INTERLEAVE_") +
                   (m.slice == 16 ? "16B" : "32B") + ") with " + what + ": what the H100 does there is not recorded, "
                   "so the simulator does not run it");
  };
  const int skip = tma::unwalked_dim(m);
  if (m.rank > 4) open("rank 5 (which dimension the H100 leaves unwalked is recorded for ranks 3 and 4 only)");
  if (m.estride[0] != 1)
    open("elementStrides[0] = " + std::to_string(m.estride[0]) + " (the H100 steps that many slices, but how many "
         "slices a line then takes is not recorded)");
  for (int d = 1; d < m.rank; ++d)
    if (d != skip && m.estride[d] != 1)
      open("elementStrides[" + std::to_string(d) + "] = " + std::to_string(m.estride[d]) + " on a walked dimension");
  if (m.box[skip] > 8)
    open("boxDim[" + std::to_string(skip) + "] = " + std::to_string(m.box[skip]) + " (dimension " +
         std::to_string(skip) + " is left unwalked in the recorded answers for boxes of up to 8)");
  if (c[0] < 0 || 1ll * c[0] + m.box[0] > static_cast<long long>(m.dims[0]))
    open("slices " + std::to_string(c[0]) + " to " + std::to_string(1ll * c[0] + m.box[0] - 1) + " of dimension 0, "
         "not all inside its globalDim[0] = " + std::to_string(m.dims[0]) + " (counted in slices, as the H100 does)");
  const uint64_t line = m.n[0] * m.slice, span = m.swizzle ? 16ull << m.swizzle : 0;
  if (span && line % span)
    open("lines of " + std::to_string(line) + " bytes (boxDim[0] = " + std::to_string(m.n[0]) + " slices of " +
         std::to_string(m.slice) + " bytes) under the " +
         std::to_string(span) + "-byte swizzle, not a multiple of its span");
}

// Where the tensor that an interleaved map describes ends, globalDim[0] taken as elements of the data type:
// the H100 counts them as slices and so reads and writes past that end where a line reaches it.
CUDASIM_INTERNAL inline void check_line_inside(const Site& s, const tma::Map& m, long long go, const char* does) {
  uint64_t end = m.dims[0] * m.elem;
  for (int d = 1; d < m.rank; ++d) end += (m.dims[d] - 1) * m.strides[d];
  if (static_cast<uint64_t>(go) + 16 > end)
    fail_at(s, "a line of the interleaved box (" + std::to_string(m.n[0]) + " slices of " + std::to_string(m.slice) +
                   " bytes) reaches byte " + std::to_string(go + 16) + " of the tensor, past its end at byte " +
                   std::to_string(end) + " (globalDim[0] = " + std::to_string(m.dims[0]) + " elements of " +
                   std::to_string(m.elem) + " bytes, then the outer dimensions): the H100 " + does + " past the tensor "
                   "there, taking globalDim[0] as slices; the simulator does not");
}

// The shared memory an interleaved box takes, which a box in the shape of the elements would underestimate:
// a load whose lines reach past the block's shared memory stops the kernel on the H100 (an illegal memory
// access). A store there is refused too (the H100 ran one whose lines there were all outside the tensor).
CUDASIM_INTERNAL inline void check_interleaved_room(const Site& s, const tma::Map& m, Addr a, bool load) {
  if (a.v < kWindow && !shared_in_use(a.v, m.box_bytes)) {
    if (load) ::cudasim::g.fail_code = cudaErrorIllegalAddress;
    fail_at(s, "the interleaved box takes " + std::to_string(m.box_bytes) + " bytes of shared memory (" +
                   std::to_string(m.box_bytes / (m.n[0] * m.slice)) + " lines of boxDim[0] = " + std::to_string(m.n[0]) +
                   " slices of " + std::to_string(m.slice) + " bytes) from the " + (load ? "destination " : "source ") +
                   hex(a.v) + ", past the end of the block's shared memory" +
                   (load ? " (the H100 stops the kernel with an illegal memory access)" : "") + ": " + shared_layout());
  }
}

// What a tiled copy needs beyond its tensor map: the map's rank, and a first coordinate at a 16-byte
// boundary of the row (the H100 raises an illegal instruction for any other, inside the tensor or not;
// an interleaved map's coordinate counts slices, always on a boundary).
CUDASIM_INTERNAL inline void check_tma(const Site& s, const tma::Map& m, int dims, const int32_t* c) {
  if (dims != m.rank)
    fail_at(s, "a " + std::to_string(dims) + "d copy with a tensor map of rank " + std::to_string(m.rank));
  if (m.interleave) return check_interleaved(s, m, c);
  const long long at = 1ll * c[0] * static_cast<long long>(m.elem);
  if (at % 16)
    fail_at(s, "the box starts at element " + std::to_string(c[0]) + " of dimension 0, " + std::to_string(at) +
                   " bytes into the row, which is not a multiple of 16: a tiled TMA copy must start each row at a "
                   "16-byte boundary (the GPU stops the kernel with an illegal instruction)");
}

// A load through an interleaved map (interleaved_walk): its transaction count is the bytes of its lines.
CUDASIM_INTERNAL inline void tma_load_interleaved(const Site& s, const tma::Map& m, Addr dst, const int32_t* coords,
                                                  Addr bar) {
  check_interleaved_room(s, m, dst, true);
  unsigned char* d = resolve(s, Space::SharedCluster, dst, m.box_bytes, 128, "destination");
  const uint64_t base = window_offset(d);
  MBarrier& b = find_barrier(s, Space::SharedCluster, bar);
  std::vector<unsigned char> data(m.box_bytes, 0);  // a line outside the tensor: zeros
  const unsigned char* g0 = reinterpret_cast<const unsigned char*>(m.base);
  const int bits = tma_swizzle_bits(m.swizzle);
  interleaved_walk(m, coords, [&](uint64_t so, long long go) {
    if (go < 0) {
      if (m.oob == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA)
        fail_at(s, "a TMA load through an interleaved tensor map with the NaN out-of-bounds fill, whose box has lines "
                   "outside the tensor: the H100's fill of such lines is not recorded, so the simulator does not run it");
      return;
    }
    check_line_inside(s, m, go, "reads");
    note_read(g0 + go, 16, s.file, s.line);
    std::memcpy(&data[swizzle(base + so, bits) - base], g0 + go, 16);
  });
  issue_copy(s, b, d, std::move(data), static_cast<uint32_t>(m.box_bytes));
}

// cp.async.bulk.tensor.Nd.shared::cluster.global.tile.mbarrier::complete_tx::bytes [dst], [map, {c}], [mbar]
CUDASIM_INTERNAL inline void tma_load(const Site& s, int dims, Addr dst, Addr map, const int32_t* coords, Addr bar) {
  SimScope scope;
  const tma::Map m = tensor_map(s, map);
  check_tma(s, m, dims, coords);
  if (m.interleave) return tma_load_interleaved(s, m, dst, coords, bar);
  unsigned char* d = resolve(s, Space::SharedCluster, dst, box_footprint(m), 128, "destination");
  uint64_t base = window_offset(d);
  MBarrier& b = find_barrier(s, Space::SharedCluster, bar);
  // the gaps between a narrow box's rows keep what they held when the copy was issued (a write into them
  // while the copy is in flight is lost when it lands)
  std::vector<unsigned char> data(d, d + box_footprint(m));
  const unsigned char* g0 = reinterpret_cast<const unsigned char*>(m.base);
  uint64_t fill = 0;
  if (m.oob == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA)
    fill = 0x7FF77FF77FF77FF7ull;  // the H100's fill: 0x7ff7 in every 16 bits (a NaN in f16, bf16 and f32)
  int bits = tma_swizzle_bits(m.swizzle);
  box_walk(m, coords, dims, m.dims[0] * m.elem, [&](uint64_t so, long long go) {
    uint64_t at = swizzle(base + so, bits) - base;
    if (go >= 0) {
      note_read(g0 + go, m.elem, s.file, s.line);
      std::memcpy(&data[at], g0 + go, m.elem);
    } else {
      std::memcpy(&data[at], &fill, m.elem);
    }
  });
  issue_copy(s, b, d, std::move(data), static_cast<uint32_t>(m.box_bytes));
}

// A store through an interleaved map (interleaved_walk): lines outside the tensor are not written; where
// lines overlap in global memory (a line of several pixels), the later line's bytes stay, as on the H100.
CUDASIM_INTERNAL inline void tma_store_interleaved(const Site& s, const tma::Map& m, const int32_t* coords, Addr src) {
  check_interleaved_room(s, m, src, false);
  const unsigned char* from = resolve(s, Space::Shared, src, m.box_bytes, 128, "source");
  const uint64_t base = window_offset(from);
  unsigned char* g0 = reinterpret_cast<unsigned char*>(m.base);
  const int bits = tma_swizzle_bits(m.swizzle);
  note_read(from, m.box_bytes, s.file, s.line);
  PendingStore st;
  interleaved_walk(m, coords, [&](uint64_t so, long long go) {
    if (go < 0) return;
    check_line_inside(s, m, go, "writes");
    add_run(st, swizzle(base + so, bits), g0 + go, 16);
  });
  issue_store(s, std::move(st));
}

// cp.async.bulk.tensor.Nd.global.shared::cta.tile.bulk_group [map, {c}], [src]: elements outside
// the tensor are not written.
// The map of a TMA store or tensor reduction, checked, with its box's coordinates.
CUDASIM_INTERNAL inline tma::Map store_map(const Site& s, int dims, Addr map, const int32_t* coords) {
  const tma::Map m = tensor_map(s, map);
  check_tma(s, m, dims, coords);
  for (int d = 0; d < dims; ++d)
    if (coords[d] < 0)
      fail_at(s, "the box starts at coordinate " + std::to_string(coords[d]) + " of dimension " + std::to_string(d) +
                     ": a TMA store's coordinates (a tensor reduction's too) must not be negative (the GPU stops the "
                     "kernel with an illegal instruction; a load may start before the tensor and is filled there)");
  return m;
}

CUDASIM_INTERNAL inline void tma_store(const Site& s, int dims, Addr map, const int32_t* coords, Addr src) {
  SimScope scope;
  const tma::Map m = store_map(s, dims, map, coords);
  if (m.interleave) return tma_store_interleaved(s, m, coords, src);
  const unsigned char* from = resolve(s, Space::Shared, src, box_footprint(m), 128, "source");
  uint64_t base = window_offset(from);
  unsigned char* g0 = reinterpret_cast<unsigned char*>(m.base);
  int bits = tma_swizzle_bits(m.swizzle);
  note_read(from, box_footprint(m), s.file, s.line);
  // the H100 writes a row's last 16 bytes whole: elements past the tensor's end in the same 16 bytes
  // (the row's padding up to its stride) are written too. After the last row that is up to 15 bytes past
  // the tensor when no padding follows it, as on the GPU (and inside the allocation's 16-byte granule here).
  const uint64_t dim0_bytes = (m.dims[0] * m.elem + 15) / 16 * 16;
  PendingStore st;
  box_walk(m, coords, dims, dim0_bytes, [&](uint64_t so, long long go) {
    if (go >= 0) add_run(st, swizzle(base + so, bits), g0 + go, static_cast<uint32_t>(m.elem));
  });
  issue_store(s, std::move(st));
}

// cp.reduce.async.bulk.tensor.Nd.global.shared::cta.op.tile.bulk_group [map, {c}], [src]: the box's elements combine
// with the tensor's (the element type is the map's), each atomically, when the writes are retired, as the 1-D form's;
// elements outside the tensor are not touched (no row's padding either: a store writes it, a reduction does not).
// Types by operation (PTX's table): add u32 s32 u64 f32 f16 bf16 (the 16-bit sums rounded to the type), min and max
// u32 s32 u64 s64 f16 bf16, inc and dec u32, and or xor any 32- or 64-bit integer.
using Combine = void (*)(unsigned char*, const unsigned char*, uint32_t);
CUDASIM_INTERNAL inline Combine tensor_combine(const Site& s, AtomOp op, int dtype) {
  enum { U32 = 2, S32 = 3, U64 = 4, S64 = 5, F16 = 6, F32 = 7, BF16 = 9 };  // CUtensorMapDataType
  const bool bits = op == AtomOp::And || op == AtomOp::Or || op == AtomOp::Xor;
  Combine f = nullptr;
  auto ints = [&](auto tag) {  // the integer types' functions of op, for T = decltype(tag)
    using T = decltype(tag);
    switch (op) {
      case AtomOp::Add: return &combine_elements<AtomOp::Add, T>;
      case AtomOp::Min: return &combine_elements<AtomOp::Min, T>;
      case AtomOp::Max: return &combine_elements<AtomOp::Max, T>;
      case AtomOp::And: return &combine_elements<AtomOp::And, T>;
      case AtomOp::Or: return &combine_elements<AtomOp::Or, T>;
      case AtomOp::Xor: return &combine_elements<AtomOp::Xor, T>;
      case AtomOp::Inc: return &combine_elements<AtomOp::Inc, T>;
      case AtomOp::Dec: return &combine_elements<AtomOp::Dec, T>;
      default: return static_cast<Combine>(nullptr);
    }
  };
  if (dtype == U32 && op != AtomOp::Exch && op != AtomOp::Cas) f = ints(uint32_t{});
  else if (dtype == S32 && (bits || op == AtomOp::Add || op == AtomOp::Min || op == AtomOp::Max)) f = ints(int32_t{});
  else if (dtype == U64 && (bits || op == AtomOp::Add || op == AtomOp::Min || op == AtomOp::Max)) f = ints(uint64_t{});
  else if (dtype == S64 && (bits || op == AtomOp::Min || op == AtomOp::Max)) f = ints(int64_t{});
  else if (dtype == F32 && op == AtomOp::Add) f = &combine_elements<AtomOp::Add, float>;
  else if ((dtype == F16 || dtype == BF16) && (op == AtomOp::Add || op == AtomOp::Min || op == AtomOp::Max)) {
    const bool b = dtype == BF16;
    f = op == AtomOp::Add ? (b ? &combine_halves<AtomOp::Add, true> : &combine_halves<AtomOp::Add, false>)
      : op == AtomOp::Min ? (b ? &combine_halves<AtomOp::Min, true> : &combine_halves<AtomOp::Min, false>)
                          : (b ? &combine_halves<AtomOp::Max, true> : &combine_halves<AtomOp::Max, false>);
  }
  if (!f)
    fail_at(s, "a tensor reduction does not run this operation on the tensor map's type (data type " +
                   std::to_string(dtype) + "): add takes u32, s32, u64, f32, f16, bf16; min and max u32, s32, u64, "
                   "s64, f16, bf16; inc and dec u32; and, or, xor 32- and 64-bit integers");
  return f;
}

CUDASIM_INTERNAL inline void tma_reduce(const Site& s, int dims, Addr map, const int32_t* coords, Addr src, AtomOp op) {
  SimScope scope;
  const tma::Map m = store_map(s, dims, map, coords);
  if (m.interleave) fail_at(s, "a tensor reduction through an interleaved tensor map is not run by the simulator");
  const Combine combine = tensor_combine(s, op, m.dtype);
  const unsigned char* from = resolve(s, Space::Shared, src, box_footprint(m), 128, "source");
  const uint64_t base = window_offset(from);
  unsigned char* g0 = reinterpret_cast<unsigned char*>(m.base);
  const int bits = tma_swizzle_bits(m.swizzle);
  note_read(from, box_footprint(m), s.file, s.line);
  PendingStore st;
  st.combine = combine;
  box_walk(m, coords, dims, m.dims[0] * m.elem, [&](uint64_t so, long long go) {
    if (go >= 0) add_run(st, swizzle(base + so, bits), g0 + go, static_cast<uint32_t>(m.elem));
  });
  issue_store(s, std::move(st));
}

// ---------------------------------------------------------------------------------------------
// Multicast (.multicast::cluster): one load delivered to several blocks of the cluster, those whose bit is set in
// ctaMask, each at the same place in its own shared memory and completing on its own barrier at the barrier
// operand's place. Here each block's copy is a copy of its own.
template <class Copy>
CUDASIM_INTERNAL inline void to_each_rank(const Site& s, Addr dst, Addr bar, uint16_t mask, Copy copy) {
  if (mask == 0) fail_at(s, "ctaMask is 0: a multicast copy must name at least one block of the cluster");
  if (mask >> g.cluster_size)
    fail_at(s, "ctaMask " + hex(mask) + " names a block beyond the cluster's " + std::to_string(g.cluster_size) +
            " (bit r is the block of rank r)");
  for (unsigned r = 0; r < g.cluster_size; ++r)
    if (mask >> r & 1u) copy(Addr{at_rank(dst.v, r)}, Addr{at_rank(bar.v, r)});
}

CUDASIM_INTERNAL inline void tma_load_multicast(const Site& s, int dims, Addr dst, Addr map, const int32_t* coords,
                                                Addr bar, uint16_t mask) {
  to_each_rank(s, dst, bar, mask, [&](Addr d, Addr b) { tma_load(s, dims, d, map, coords, b); });
}

CUDASIM_INTERNAL inline void bulk_load_multicast(const Site& s, Addr dst, Addr src, uint32_t size, Addr bar,
                                                 uint16_t mask) {
  to_each_rank(s, dst, bar, mask, [&](Addr d, Addr b) { bulk_load(s, d, src, size, b); });
}

// barrier.cluster.arrive / .wait (cudasim.h runs them, as cooperative_groups' cluster.sync() does).
CUDASIM_INTERNAL inline void cluster_arrive(const Site& s) { ::cudasim::cluster_arrive(s.file, s.line); }
CUDASIM_INTERNAL inline void cluster_wait(const Site& s) { ::cudasim::cluster_wait(s.file, s.line); }

}  // namespace ptx
}  // namespace cudasim
