// cudasim_ptx/core.h: what every PTX instruction of the simulator uses: the operands of a
// translated asm statement (registers, immediates, addresses), the shared-memory window, errors
// that name the learner's line, and the special registers (%laneid, %tid.x, ...).
//
// kernels/sim/ptx.py translates an asm statement into C++ that holds each asm operand in a
// register of the constraint's size (uint16_t for "h", uint32_t "r", uint64_t "l", float "f",
// double "d"; an immediate for "n"), runs the instructions on those registers, then writes the
// outputs back. Instructions read a register as the type the instruction names (as<T>) and
// write it back (put<T>): a register must have the instruction's size, as ptxas requires.
#pragma once
#include "../cudasim.h"

#include <execinfo.h>

#include <string>

namespace cudasim {
namespace ptx {

// Where an instruction is: the learner's file and line, the instruction's name, and the line where
// its asm statement starts (the simulator's code for the statement is on that line).
struct Site {
  const char* file;
  int line;
  const char* op;
  int stmt_line = 0;
};

// The learner's lines that led to the failing instruction (helpers that wrap asm statements are the
// rule): the inline chains of the return addresses on the thread's stack, through addr2line.
CUDASIM_INTERNAL inline std::string called_from(const Site& s) {
  void* pcs[32];
  int n = backtrace(pcs, 32);
  Dl_info self{};
  if (n <= 0 || !dladdr(reinterpret_cast<void*>(&called_from), &self) || !self.dli_fname) return "";
  std::string cmd = "addr2line -i -e '" + std::string(self.dli_fname) + "'";
  int used = 0;
  for (int i = 1; i < n; ++i) {
    Dl_info info{};
    if (!dladdr(pcs[i], &info) || info.dli_fbase != self.dli_fbase) continue;
    char hexpc[32];
    std::snprintf(hexpc, sizeof hexpc, " 0x%zx", static_cast<size_t>(reinterpret_cast<uintptr_t>(pcs[i]) -
                                                                      reinterpret_cast<uintptr_t>(self.dli_fbase) - 1));
    cmd += hexpc;
    used += 1;
  }
  if (!used) return "";
  FILE* out = popen((cmd + " 2>/dev/null").c_str(), "r");
  if (!out) return "";
  std::vector<std::string> lines;
  const std::string file = base_name(s.file), here = file + ":" + std::to_string(s.line),
                    stmt = file + ":" + std::to_string(s.stmt_line),
                    launch = base_name(g.launch_file) + ":" + std::to_string(g.launch_line);
  char buf[1024];
  while (std::fgets(buf, sizeof buf, out)) {
    std::string l = buf;
    while (!l.empty() && (l.back() == '\n' || l.back() == ' ')) l.pop_back();
    size_t disc = l.find(" (discriminator");
    if (disc != std::string::npos) l.erase(disc);
    bool ours = l.rfind("??", 0) != 0 && l.find("/sim/include/") == std::string::npos && l.rfind("/usr/", 0) != 0 &&
                l.find("/site-packages/") == std::string::npos && l.size() > 2 && l.compare(l.size() - 2, 2, ":0") != 0;
    if (!ours) continue;
    l = base_name(l.c_str());
    bool translated = l.rfind("sim_", 0) == 0;  // the translator's own lines, outside the learner's
    if (l == launch) break;                       // past the kernel, into the launch
    if (!translated && l != here && l != stmt && std::find(lines.begin(), lines.end(), l) == lines.end())
      lines.push_back(l);
  }
  pclose(out);
  std::string text;
  for (size_t i = 0; i < lines.size() && i < 3; ++i) text += (i ? ", " : " (called from ") + lines[i];
  return text.empty() ? text : text + ")";
}

[[noreturn]] CUDASIM_INTERNAL inline void fail_at(const Site& s, const std::string& what) {
  SimScope scope;
  fail(std::string(s.op) + " at " + base_name(s.file) + ":" + std::to_string(s.line) + called_from(s) + ": " + what);
}

// Immediates: an integer literal, a float literal written as bits (0f3F800000, 0d...), a decimal one.
struct Imm { long long v; };
struct Bits32 { uint32_t v; };
struct Bits64 { uint64_t v; };
struct FImm { double v; };

template <class T>
constexpr bool is_imm = std::is_same_v<T, Imm> || std::is_same_v<T, Bits32> || std::is_same_v<T, Bits64> ||
                        std::is_same_v<T, FImm>;

// A register the asm never wrote (an output it left alone, a .reg read before it is set): all ones,
// a NaN as a float, so that a missing write shows.
template <class T>
CUDASIM_INTERNAL inline T poison() {
  T t;
  std::memset(&t, 0xFF, sizeof t);
  return t;
}

// asm operands: nvcc's rules (reg_t, operand_ok and CUDASIM_PTX_OPERAND_CHECK are in cudasim.h, which an asm
// without an instruction needs alone).
template <char C, class X>
CUDASIM_INTERNAL inline reg_t<C> reg_in(const X& x) {
  using D = std::remove_cv_t<X>;
  CUDASIM_PTX_OPERAND_CHECK(C, D);
  if constexpr (std::is_pointer_v<D>) return reinterpret_cast<uint64_t>(x);
  else return static_cast<reg_t<C>>(x);
}

template <char C, class X>
CUDASIM_INTERNAL inline reg_t<C> reg_fresh(const X&) {
  CUDASIM_PTX_OPERAND_CHECK(C, std::remove_cv_t<X>);
  return poison<reg_t<C>>();
}

template <char C, class X>
CUDASIM_INTERNAL inline void reg_out(X& x, reg_t<C> v) {
  CUDASIM_PTX_OPERAND_CHECK(C, X);
  if constexpr (std::is_pointer_v<X>) x = reinterpret_cast<X>(v);
  else x = static_cast<X>(v);
}

// ---------------------------------------------------------------------------------------------
// Reading and writing registers as an instruction's type.
template <class T, class X>
CUDASIM_INTERNAL inline T as(const X& x) {
  if constexpr (std::is_same_v<X, Imm>) {
    return static_cast<T>(x.v);
  } else if constexpr (std::is_same_v<X, FImm>) {
    return static_cast<T>(x.v);
  } else if constexpr (std::is_same_v<X, Bits32> || std::is_same_v<X, Bits64>) {
    static_assert(sizeof(T) == sizeof(x.v), "a float literal (0f... is 32 bits, 0d... 64) used where the "
                  "instruction's type has another size");
    T t;
    std::memcpy(&t, &x.v, sizeof t);
    return t;
  } else if constexpr (std::is_same_v<X, bool> || std::is_same_v<T, bool>) {
    static_assert(std::is_same_v<X, T>, "a predicate register (.pred) where the instruction wants a value, or the "
                  "other way round");
    return x;
  } else {
    static_assert(sizeof(X) == sizeof(T), "a register whose size is not the instruction's type's size (for example "
                  "an \"l\" (64-bit) operand in a .b32 instruction): ptxas refuses it too");
    T t;
    std::memcpy(&t, &x, sizeof t);
    return t;
  }
}

template <class T, class D>
CUDASIM_INTERNAL inline void put(D& d, T v) {
  if constexpr (std::is_same_v<D, bool> || std::is_same_v<T, bool>) {
    static_assert(std::is_same_v<D, T>, "a predicate (.pred) written into a value register, or the other way round");
    d = v;
  } else {
    static_assert(sizeof(D) == sizeof(T), "a destination register whose size is not the instruction's type's size "
                  "(ptxas refuses it too)");
    std::memcpy(&d, &v, sizeof d);
  }
}

// cvt and ld may write a value narrower than the register (a .u16 result in a 32-bit register):
// zero- or sign-extended as the value's type says.
template <class T, class D>
CUDASIM_INTERNAL inline void put_wide(D& d, T v) {
  static_assert(sizeof(D) >= sizeof(T) && !std::is_same_v<D, bool>, "a destination register narrower than the value");
  if constexpr (sizeof(D) == sizeof(T)) {
    put<T>(d, v);
  } else {
    using U = std::conditional_t<sizeof(D) == 2, uint16_t, std::conditional_t<sizeof(D) == 4, uint32_t, uint64_t>>;
    U w = std::is_signed_v<T> ? static_cast<U>(static_cast<std::make_signed_t<U>>(v)) : static_cast<U>(v);
    std::memcpy(&d, &w, sizeof d);
  }
}

// A source that may be wider than the value it holds (the low bits are the value).
template <class T, class X>
CUDASIM_INTERNAL inline T as_narrow(const X& x) {
  if constexpr (is_imm<X> || sizeof(X) == sizeof(T)) {
    return as<T>(x);
  } else {
    static_assert(sizeof(X) > sizeof(T) && std::is_integral_v<X>, "a source register narrower than its type");
    T t;
    std::memcpy(&t, &x, sizeof t);  // little endian: the low bytes
    return t;
  }
}

template <class X>
CUDASIM_INTERNAL inline bool pred(const X& x) {
  if constexpr (std::is_same_v<X, bool>) return x;
  else if constexpr (std::is_same_v<X, Imm>) return x.v != 0;
  else {
    static_assert(std::is_same_v<X, bool>, "a guard or predicate operand must be a .pred register");
    return false;
  }
}

// mov.b32 r, {lo, hi} and mov.b32 {lo, hi}, r: the first register is the low part.
template <class T, class... X>
CUDASIM_INTERNAL inline T pack(const X&... parts) {
  constexpr size_t n = sizeof...(X), each = sizeof(T) / n;
  static_assert(((sizeof(X) == each || is_imm<X>) && ...), "the registers packed must each be 1/2 or 1/4 of the result");
  using P = std::conditional_t<each == 1, uint8_t, std::conditional_t<each == 2, uint16_t, uint32_t>>;
  const P ps[] = {as_narrow<P>(parts)...};
  T out;
  std::memcpy(&out, ps, sizeof out);
  return out;
}
template <class T, class X, class... D>
CUDASIM_INTERNAL inline void unpack(const X& x, D&... outs) {
  static_assert(sizeof(X) == sizeof(T), "mov unpacks a register of the instruction's size");
  constexpr size_t n = sizeof...(D), each = sizeof(T) / n;
  static_assert(((sizeof(D) == each) && ...), "the registers unpacked into must each be 1/2 or 1/4 of the source");
  const unsigned char* p = reinterpret_cast<const unsigned char*>(&x);
  size_t k = 0;
  ((std::memcpy(&outs, p + each * k++, each)), ...);
}

// ---------------------------------------------------------------------------------------------
// Addresses and state spaces. A shared-memory address (the .shared state space, what cvta.to.shared
// and __cvta_generic_to_shared give) is an offset into the block's shared memory window; the
// simulator's window is its shared-memory arena, so offset = generic pointer - arena. Generic
// addresses are ordinary pointers (a generic address of shared memory points into the arena).
struct Addr { uint64_t v; };

template <class B>
CUDASIM_INTERNAL inline Addr addr(const B& base, long long off) {
  if constexpr (std::is_same_v<B, Imm>) return Addr{static_cast<uint64_t>(base.v + off)};
  else {
    static_assert(std::is_same_v<B, uint32_t> || std::is_same_v<B, uint64_t>, "an address register must be 32 or 64 bits");
    return Addr{static_cast<uint64_t>(base) + static_cast<uint64_t>(off)};
  }
}

enum class Space : unsigned char { Generic, Shared, SharedCluster, Global, Local, Const, Param };

constexpr uint64_t kWindow = sizeof(arena);

CUDASIM_INTERNAL inline uint64_t window_offset(const void* p) {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(arena));
}

// The parts of the window a block may use: its dynamic shared memory, the static __shared__
// variables declared so far, the file-scope ones; in a cluster, those of each block of the cluster, each block's
// at its own kCtaStride (distributed shared memory: an address says which block's memory it is).
CUDASIM_INTERNAL inline bool shared_in_use(uint64_t off, uint64_t n) {
  const uint64_t rank = off / kCtaStride;
  if (rank >= g.cluster_size) return false;
  off -= rank * kCtaStride;
  auto within = [&](uint64_t lo, uint64_t hi) { return off >= lo && off + n <= hi; };
  return within(0, g.dyn_bytes) || within(g.static_base, g.static_base + g.static_used) ||
         within(kFileBase, kFileBase + g.file_static_used);
}

CUDASIM_INTERNAL inline std::string hex(uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

CUDASIM_INTERNAL inline std::string shared_layout() {
  char b[300];
  const size_t base = g.cur && g.cluster_size > 1 ? g.cur->cta * kCtaStride : 0;
  std::snprintf(b, sizeof b, "the block's shared memory is [0x%zx, 0x%zx) dynamic and [0x%zx, 0x%zx) static", base,
                base + g.dyn_bytes, base + g.static_base, base + g.static_base + g.static_used);
  std::string out = b;
  if (g.cluster_size > 1)
    out += " (the block of rank " + std::to_string(g.cur ? g.cur->cta : 0) + " in a cluster of " +
           std::to_string(g.cluster_size) + "; the block of rank r has the same layout " + std::to_string(kCtaStride) +
           " * r bytes further)";
  return out;
}

// A shared-window address of n bytes: checked and turned into a pointer.
CUDASIM_INTERNAL inline unsigned char* shared_at(const Site& s, uint64_t a, uint64_t n, uint64_t align,
                                                 const char* what) {
  if (in_arena(reinterpret_cast<const void*>(a)))
    fail_at(s, std::string("the ") + what + " " + hex(a) + " is a generic address of shared memory, where this "
            "instruction takes a shared-memory (.shared) address: convert it with __cvta_generic_to_shared(p) or "
            "cvta.to.shared, or drop .shared from the instruction");
  if (a >= kWindow || !shared_in_use(a, n))
    fail_at(s, std::string("the ") + what + " " + hex(a) + " (" + std::to_string(n) + " bytes) is outside the block's "
            "shared memory: " + shared_layout());
  if (align > 1 && a % align)
    fail_at(s, std::string("the ") + what + " " + hex(a) + " is not " + std::to_string(align) + "-byte aligned");
  const uint64_t rank = a / kCtaStride;
  if (g.cluster_size > 1 && g.cta_done[rank] == g.cta_threads)
    fail_at(s, std::string("the ") + what + " " + hex(a) + " is in the shared memory of the cluster's block of rank " +
            std::to_string(rank) + ", whose threads have all exited: a block's shared memory goes with it, so the "
            "cluster must synchronise (barrier.cluster, cluster.sync()) before a block that others read, write or "
            "arrive on exits");
  if (g.cluster_size > 1 && !g.cta_started[rank])
    fail_at(s, std::string("the ") + what + " " + hex(a) + " is in the shared memory of the cluster's block of rank " +
            std::to_string(rank) + ", which has not started yet (the block of rank " + std::to_string(g.lead) +
            " ran ahead of the others): a block of a cluster may start later than the others, so the cluster must "
            "synchronise (barrier.cluster, cluster.sync()) after its blocks initialise their mbarriers and shared "
            "memory, before a block reaches another's");
  return arena + a;
}

CUDASIM_INTERNAL inline bool in_own_stack(const void* p) {
  const Thread* t = g.cur;
  if (!t || !t->stack) return false;
  auto a = reinterpret_cast<uintptr_t>(p), lo = reinterpret_cast<uintptr_t>(t->stack);
  return a >= lo && a < lo + kGuardBytes + t->stack_size;
}

// An address in a state space: a pointer to n bytes there, after the checks the hardware makes
// (alignment) and those that catch a wrong space.
CUDASIM_INTERNAL inline unsigned char* resolve(const Site& s, Space sp, Addr a, uint64_t n, uint64_t align,
                                               const char* what = "address") {
  const void* p = reinterpret_cast<const void*>(a.v);
  switch (sp) {
    case Space::Shared:  // .shared, .shared::cta: the running block's own memory only
      if (g.cluster_size > 1 && g.cur && a.v < kWindow && a.v / kCtaStride != static_cast<uint64_t>(g.cur->cta))
        fail_at(s, std::string("the ") + what + " " + hex(a.v) + " is in the shared memory of the cluster's block of "
                "rank " + std::to_string(a.v / kCtaStride) + " (an address from mapa), where this instruction's "
                ".shared::cta space reaches only the running block's own memory (rank " + std::to_string(g.cur->cta) +
                "): use the .shared::cluster form");
      return shared_at(s, a.v, n, align, what);
    case Space::SharedCluster:
      return shared_at(s, a.v, n, align, what);
    case Space::Global:
      if (in_arena(p))
        fail_at(s, std::string("the ") + what + " " + hex(a.v) + " is shared memory, where this instruction takes a "
                "global address");
      if (in_own_stack(p))
        fail_at(s, std::string("the ") + what + " " + hex(a.v) + " is the thread's local memory (a local variable), "
                "where this instruction takes a global address");
      break;
    default:  // generic: shared memory through its generic address, or anything else
      if (in_arena(p)) return shared_at(s, window_offset(p), n, align, what);
      break;
  }
  if (a.v == 0) fail_at(s, std::string("the ") + what + " is a null pointer");
  if (align > 1 && a.v % align)
    fail_at(s, std::string("the ") + what + " " + hex(a.v) + " is not " + std::to_string(align) + "-byte aligned");
  return reinterpret_cast<unsigned char*>(a.v);
}

// cvta: generic <-> shared window, generic <-> global (the same value).
template <class T, class X>
CUDASIM_INTERNAL inline T cvta_to_shared(const Site& s, const X& x) {
  uint64_t v = as<std::conditional_t<sizeof(X) == 4, uint32_t, uint64_t>>(x);
  if (!in_arena(reinterpret_cast<const void*>(v)))
    fail_at(s, "the generic address " + hex(v) + " is not shared memory");
  return static_cast<T>(window_offset(reinterpret_cast<const void*>(v)));
}
template <class T, class X>
CUDASIM_INTERNAL inline T cvta_from_shared(const Site& s, const X& x) {
  uint64_t v = as<std::conditional_t<sizeof(X) == 4, uint32_t, uint64_t>>(x);
  if (v >= kWindow) fail_at(s, "the shared-memory address " + hex(v) + " is outside the shared-memory window");
  if constexpr (sizeof(T) == 4) fail_at(s, "a generic address needs 64 bits (cvta.shared.u64)");
  return static_cast<T>(reinterpret_cast<uintptr_t>(arena + v));
}
// mapa: the address of the same byte of shared memory in the cluster's block of rank `r` (a shared-memory
// address, or with `generic` a generic one).
template <class T, class X, class R>
CUDASIM_INTERNAL inline T mapa(const Site& s, bool generic, const X& x, const R& r) {
  uint64_t v = as<std::conditional_t<sizeof(X) == 4, uint32_t, uint64_t>>(x);
  const uint32_t rank = as<uint32_t>(r);
  if (rank >= g.cluster_size)
    fail_at(s, "mapa to the block of rank " + std::to_string(rank) + ", but the cluster has " +
            std::to_string(g.cluster_size) + " block(s)" + (g.cluster_size == 1 ? " (the launch has no cluster: "
            "__cluster_dims__ or cudaLaunchKernelEx's cluster attribute makes one)" : ""));
  if (generic) {
    if (!in_arena(reinterpret_cast<const void*>(v))) fail_at(s, "the generic address " + hex(v) + " is not shared memory");
    v = window_offset(reinterpret_cast<const void*>(v));
  } else if (v >= kWindow || in_arena(reinterpret_cast<const void*>(v))) {
    fail_at(s, "the operand " + hex(v) + " is not a shared-memory address (mapa.shared::cluster takes one; plain "
            "mapa takes a generic address)");
  }
  const uint64_t out = at_rank(v, rank);
  if constexpr (sizeof(T) == 4) {
    if (generic) fail_at(s, "a generic address needs 64 bits (mapa.u64)");
    return static_cast<T>(out);
  } else {
    return static_cast<T>(generic ? reinterpret_cast<uintptr_t>(arena + out) : out);
  }
}

template <class T, class X>
CUDASIM_INTERNAL inline T cvta_to_global(const Site&, const X& x) { return as<T>(x); }
template <class T, class X>
CUDASIM_INTERNAL inline T cvta_from_global(const Site&, const X& x) { return as<T>(x); }

// ---------------------------------------------------------------------------------------------
// The running thread, for instructions that act per thread.
CUDASIM_INTERNAL inline Thread& me(const Site& s) {
  if (!g.cur) fail_at(s, "called outside a kernel");
  return *g.cur;
}

// Per-block state of the PTX instructions (poll counters, bulk groups, named barriers): one item per
// thread of the block (or per barrier id), cleared when a new block starts. The vector is sized
// once per block, so a reference to an item stays valid while its thread yields.
template <class T>
struct PerBlock {
  unsigned long long gen = ~0ull;
  std::vector<T> items;
  CUDASIM_INTERNAL T& at(size_t i) {
    if (gen != g.block_gen) {
      gen = g.block_gen;
      items.assign(std::max<size_t>(static_cast<size_t>(g.nthreads), 32), T{});
    }
    return items.at(i);
  }
};

// Let the other threads run; used by waits that poll (mbarrier.try_wait, a named barrier). A wait
// that sees nothing in the block move on for kIdleRounds polls can never end: `why` says why.
template <class Done, class Why>
CUDASIM_INTERNAL inline void wait_until(const Site& s, Done done, Why why) {
  SimScope scope;
  unsigned long long seen = g.progress;
  int idle = 0;
  while (!done()) {
    yield_thread();
    if (g.progress != seen) {
      seen = g.progress;
      idle = 0;
    } else if (++idle > kIdleRounds) {
      fail_at(s, why());
    }
  }
}

// Something a waiting thread may be waiting for has happened.
CUDASIM_INTERNAL inline void moved_on() {
  g.progress += 1;
  g.idle_yields = 0;
}

// ---------------------------------------------------------------------------------------------
// Special registers.
CUDASIM_INTERNAL inline uint32_t lane_of_cur() { return static_cast<uint32_t>(g.cur ? g.cur->linear & 31 : 0); }
inline uint32_t sr_laneid() { return lane_of_cur(); }
inline uint32_t sr_warpid() { return static_cast<uint32_t>(g.cur ? g.cur->local / 32 : 0); }
inline uint32_t sr_nwarpid() { return 64; }
inline uint32_t sr_smid() { return (g.block_idx.x + g.grid_dim.x * (g.block_idx.y + g.grid_dim.y * g.block_idx.z)) % 132; }
inline uint32_t sr_nsmid() { return 132; }
inline uint64_t sr_gridid() { return 1; }
inline uint32_t sr_tid_x() { return g.thread_idx.x; }
inline uint32_t sr_tid_y() { return g.thread_idx.y; }
inline uint32_t sr_tid_z() { return g.thread_idx.z; }
inline uint32_t sr_ntid_x() { return g.block_dim.x; }
inline uint32_t sr_ntid_y() { return g.block_dim.y; }
inline uint32_t sr_ntid_z() { return g.block_dim.z; }
inline uint32_t sr_ctaid_x() { return g.block_idx.x; }
inline uint32_t sr_ctaid_y() { return g.block_idx.y; }
inline uint32_t sr_ctaid_z() { return g.block_idx.z; }
inline uint32_t sr_nctaid_x() { return g.grid_dim.x; }
inline uint32_t sr_nctaid_y() { return g.grid_dim.y; }
inline uint32_t sr_nctaid_z() { return g.grid_dim.z; }
// Clusters (a block without one is a cluster of one). A block's rank orders its place in the cluster x first.
CUDASIM_INTERNAL inline uint32_t my_rank() { return static_cast<uint32_t>(g.cur ? g.cur->cta : 0); }
inline uint32_t sr_cluster_ctarank() { return my_rank(); }
inline uint32_t sr_cluster_nctarank() { return g.cluster_size; }
inline bool sr_is_explicit_cluster() { return g.cluster_size > 1; }  // a predicate register
inline uint32_t sr_clusterid_x() { return g.block_idx.x / g.cluster_dim.x; }
inline uint32_t sr_clusterid_y() { return g.block_idx.y / g.cluster_dim.y; }
inline uint32_t sr_clusterid_z() { return g.block_idx.z / g.cluster_dim.z; }
inline uint32_t sr_nclusterid_x() { return g.grid_dim.x / g.cluster_dim.x; }
inline uint32_t sr_nclusterid_y() { return g.grid_dim.y / g.cluster_dim.y; }
inline uint32_t sr_nclusterid_z() { return g.grid_dim.z / g.cluster_dim.z; }
inline uint32_t sr_cluster_ctaid_x() { return g.block_idx.x % g.cluster_dim.x; }
inline uint32_t sr_cluster_ctaid_y() { return g.block_idx.y % g.cluster_dim.y; }
inline uint32_t sr_cluster_ctaid_z() { return g.block_idx.z % g.cluster_dim.z; }
inline uint32_t sr_cluster_nctaid_x() { return g.cluster_dim.x; }
inline uint32_t sr_cluster_nctaid_y() { return g.cluster_dim.y; }
inline uint32_t sr_cluster_nctaid_z() { return g.cluster_dim.z; }
inline uint32_t sr_lanemask_eq() { return 1u << lane_of_cur(); }
inline uint32_t sr_lanemask_lt() { return (1u << lane_of_cur()) - 1u; }
inline uint32_t sr_lanemask_le() { return (2u << lane_of_cur()) - 1u; }
inline uint32_t sr_lanemask_gt() { return ~sr_lanemask_le(); }
inline uint32_t sr_lanemask_ge() { return ~sr_lanemask_lt(); }
inline uint32_t sr_dynamic_smem_size() { return static_cast<uint32_t>(g.dyn_bytes); }
inline uint32_t sr_total_smem_size() { return static_cast<uint32_t>(g.dyn_bytes + g.static_used + g.file_static_used); }
// Timing means nothing here; clocks only count reads, as clock64() does.
inline uint64_t sr_clock64() { return static_cast<uint64_t>(clock64()); }
inline uint32_t sr_clock() { return static_cast<uint32_t>(clock64()); }
inline uint32_t sr_clock_hi() { return 0; }
inline uint64_t sr_globaltimer() { return static_cast<uint64_t>(clock64()) * 32; }
inline uint32_t sr_globaltimer_lo() { return static_cast<uint32_t>(sr_globaltimer()); }
inline uint32_t sr_globaltimer_hi() { return static_cast<uint32_t>(sr_globaltimer() >> 32); }

[[noreturn]] CUDASIM_INTERNAL inline void trap(const Site& s) {
  fail_at(s, "the kernel executed trap (on a GPU the launch fails with \"unspecified launch failure\")");
}

}  // namespace ptx
}  // namespace cudasim

// The conversions CUDA offers in C++ for the same addresses (sm_20_intrinsics.h); an address that
// is not shared memory is an error naming the line, where a GPU would give a meaningless value.
CUDASIM_INTERNAL inline size_t __cvta_generic_to_shared(const void* p, const char* file = __builtin_FILE(),
                                                        int line = __builtin_LINE()) {
  if (!::cudasim::in_arena(p))
    ::cudasim::ptx::fail_at(::cudasim::ptx::Site{file, line, "__cvta_generic_to_shared"},
                            "the pointer " + ::cudasim::ptx::hex(reinterpret_cast<uintptr_t>(p)) +
                                " is not shared memory (a __shared__ variable or extern __shared__ array)");
  return static_cast<size_t>(::cudasim::ptx::window_offset(p));
}
CUDASIM_INTERNAL inline void* __cvta_shared_to_generic(size_t a) { return ::cudasim::arena + a; }
CUDASIM_INTERNAL inline size_t __cvta_generic_to_global(const void* p) { return reinterpret_cast<size_t>(p); }
CUDASIM_INTERNAL inline void* __cvta_global_to_generic(size_t a) { return reinterpret_cast<void*>(a); }
CUDASIM_INTERNAL inline unsigned __isShared(const void* p) { return ::cudasim::in_arena(p); }
CUDASIM_INTERNAL inline unsigned __isGlobal(const void* p) { return !::cudasim::in_arena(p); }

namespace cudasim {
namespace ptx {
// A write into shared memory by the simulator on a thread's behalf (a copy landing, stmatrix): it
// must not touch bytes that an asynchronous operation still in flight reads (cudasim_ptx/wgmma.h).
CUDASIM_INTERNAL inline void check_async_readers(const Site& s, const unsigned char* p, uint64_t n, const char* what);
}  // namespace ptx
}  // namespace cudasim
