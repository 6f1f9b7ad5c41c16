// cudasim_platform.h: what differs between the machines the simulator runs on (x86-64 and arm64,
// Linux and macOS), behind four small interfaces that cudasim.h's fibers and fault handler use:
//   - switch_stack(save_sp, load_sp): save the running fiber's callee-saved registers on its stack,
//     store its stack pointer in *save_sp, and continue the fiber whose stack pointer is load_sp;
//   - first_frame(top, entry): the stack pointer of a new fiber that starts in entry() when resumed;
//   - fault_pc/fault_sp/fault_resume: the faulting thread's registers in a signal handler's context,
//     and making the handler return into a function on another stack;
//   - image_segments(addr, f): the address ranges of the loaded library that holds addr.
// Elsewhere (another CPU) fibers fall back to ucontext (CUDASIM_UCONTEXT) and faults are not caught.
#pragma once

#include <cstddef>
#include <cstdint>
#include <dlfcn.h>
#include <signal.h>

#if defined(__APPLE__)
#include <mach-o/dyld.h>
#include <mach-o/loader.h>
#include <sys/ucontext.h>  // not <ucontext.h>, which macOS refuses without _XOPEN_SOURCE
#else
#include <link.h>
#endif

#ifndef CUDASIM_INTERNAL  // cudasim.h defines it: simulator code, never instrumented
#define CUDASIM_INTERNAL __attribute__((no_sanitize_thread))
#endif

#if !defined(__x86_64__) && !defined(__aarch64__)
#define CUDASIM_UCONTEXT 1  // ucontext is deprecated on macOS, which only runs the two CPUs above
#include <ucontext.h>
#endif

namespace cudasim {
namespace platform {

// ---------------------------------------------------------------------------------------------
// The fiber switch. A suspended fiber's stack pointer points at its saved registers, stored by the
// switch and reloaded by the switch that resumes it; a new fiber's first frame (first_frame) holds
// zeros and, where the switch returns to, the fiber's entry function.
#if defined(__x86_64__)
// System V ABI (Linux and macOS): rbx, rbp, r12-r15 are callee-saved; the return address is on the
// stack. About 17 ns a switch on a 2-core x86-64 machine.
__attribute__((naked, noinline)) static void switch_stack(void** save_sp, void* load_sp) {
  asm volatile(
      "pushq %rbp\n\t"
      "pushq %rbx\n\t"
      "pushq %r12\n\t"
      "pushq %r13\n\t"
      "pushq %r14\n\t"
      "pushq %r15\n\t"
      "movq %rsp, (%rdi)\n\t"
      "movq %rsi, %rsp\n\t"
      "popq %r15\n\t"
      "popq %r14\n\t"
      "popq %r13\n\t"
      "popq %r12\n\t"
      "popq %rbx\n\t"
      "popq %rbp\n\t"
      "ret\n\t");
}

// Six registers, then entry as the return address, then a null return address for entry, so that
// entry starts with the ABI's alignment (rsp + 8 a multiple of 16).
CUDASIM_INTERNAL inline void* first_frame(char* top, void (*entry)()) {
  void** sp = reinterpret_cast<void**>(reinterpret_cast<uintptr_t>(top) & ~uintptr_t(15));
  *--sp = nullptr;                           // entry's return address
  *--sp = reinterpret_cast<void*>(entry);    // where `ret` goes
  for (int i = 0; i < 6; ++i) *--sp = nullptr;  // rbp rbx r12 r13 r14 r15
  return sp;
}
#elif defined(__aarch64__)
// AAPCS64 (Linux and Apple): x19-x28, the frame pointer x29, the link register x30 and the low
// halves of v8-v15 (d8-d15) are callee-saved; x18 (Apple's platform register) is left alone.
// A 160-byte frame, sp stays 16-byte aligned: x19..x28 at 0..72, x29 at 80, x30 at 88, d8..d15 at
// 96..152. The same instructions serve clang (a naked function) and GCC, which ignores `naked` on
// AArch64 (a function of this file's own, defined in assembly and local to the object file).
#define CUDASIM_A64_SWITCH                   \
  "sub sp, sp, #160\n\t"                     \
  "stp x19, x20, [sp, #0]\n\t"               \
  "stp x21, x22, [sp, #16]\n\t"              \
  "stp x23, x24, [sp, #32]\n\t"              \
  "stp x25, x26, [sp, #48]\n\t"              \
  "stp x27, x28, [sp, #64]\n\t"              \
  "stp x29, x30, [sp, #80]\n\t"              \
  "stp d8, d9, [sp, #96]\n\t"                \
  "stp d10, d11, [sp, #112]\n\t"             \
  "stp d12, d13, [sp, #128]\n\t"             \
  "stp d14, d15, [sp, #144]\n\t"             \
  "mov x9, sp\n\t"                           \
  "str x9, [x0]\n\t"                         \
  "mov sp, x1\n\t"                           \
  "ldp x19, x20, [sp, #0]\n\t"               \
  "ldp x21, x22, [sp, #16]\n\t"              \
  "ldp x23, x24, [sp, #32]\n\t"              \
  "ldp x25, x26, [sp, #48]\n\t"              \
  "ldp x27, x28, [sp, #64]\n\t"              \
  "ldp x29, x30, [sp, #80]\n\t"              \
  "ldp d8, d9, [sp, #96]\n\t"                \
  "ldp d10, d11, [sp, #112]\n\t"             \
  "ldp d12, d13, [sp, #128]\n\t"             \
  "ldp d14, d15, [sp, #144]\n\t"             \
  "add sp, sp, #160\n\t"                     \
  "ret\n\t"
#if defined(__clang__)
__attribute__((naked, noinline)) static void switch_stack(void** save_sp, void* load_sp) {
  asm volatile(CUDASIM_A64_SWITCH);
}
#else
asm(".pushsection .text\n\t"
    ".p2align 4\n\t"
    ".type cudasim_switch_stack_a64, %function\n"
    "cudasim_switch_stack_a64:\n\t" CUDASIM_A64_SWITCH
    ".size cudasim_switch_stack_a64, .-cudasim_switch_stack_a64\n\t"
    ".popsection\n");
extern "C" __attribute__((visibility("hidden"))) void cudasim_switch_stack_a64(void** save_sp, void* load_sp);
CUDASIM_INTERNAL inline void switch_stack(void** save_sp, void* load_sp) { cudasim_switch_stack_a64(save_sp, load_sp); }
#endif
#undef CUDASIM_A64_SWITCH

// The frame the switch pops: zeros (x29 = 0 ends the frame chain), x30 = entry, where `ret` goes.
CUDASIM_INTERNAL inline void* first_frame(char* top, void (*entry)()) {
  void** sp = reinterpret_cast<void**>(reinterpret_cast<uintptr_t>(top) & ~uintptr_t(15)) - 20;
  for (int i = 0; i < 20; ++i) sp[i] = nullptr;
  sp[11] = reinterpret_cast<void*>(entry);  // x30, at byte 88
  return sp;
}
#endif

// ---------------------------------------------------------------------------------------------
// A faulting thread's registers, from the context a SA_SIGINFO handler receives. fault_resume makes
// the handler, when it returns, continue in fn() on the stack that ends at top (16-byte aligned),
// as if fn had been called there; returning through sigreturn lets the kernel restore the signal
// mask and, on macOS, mark the alternate signal stack free again.
#if !defined(CUDASIM_UCONTEXT)
#define CUDASIM_FAULT_REGS 1
#if defined(__APPLE__) && defined(__x86_64__)
CUDASIM_INTERNAL inline uintptr_t fault_pc(void* uc) { return static_cast<ucontext_t*>(uc)->uc_mcontext->__ss.__rip; }
CUDASIM_INTERNAL inline uintptr_t fault_sp(void* uc) { return static_cast<ucontext_t*>(uc)->uc_mcontext->__ss.__rsp; }
CUDASIM_INTERNAL inline void fault_resume(void* uc, void (*fn)(), char* top) {
  auto& ss = static_cast<ucontext_t*>(uc)->uc_mcontext->__ss;
  ss.__rip = reinterpret_cast<uintptr_t>(fn);
  ss.__rsp = reinterpret_cast<uintptr_t>(top) - 8;  // as after a call: a return address's room
  ss.__rbp = 0;
}
#elif defined(__APPLE__)  // arm64: the SDK's accessors, which also hold on arm64e
#if defined(__darwin_arm_thread_state64_get_pc)
CUDASIM_INTERNAL inline uintptr_t fault_pc(void* uc) {
  return __darwin_arm_thread_state64_get_pc(static_cast<ucontext_t*>(uc)->uc_mcontext->__ss);
}
CUDASIM_INTERNAL inline uintptr_t fault_sp(void* uc) {
  return __darwin_arm_thread_state64_get_sp(static_cast<ucontext_t*>(uc)->uc_mcontext->__ss);
}
CUDASIM_INTERNAL inline void fault_resume(void* uc, void (*fn)(), char* top) {
  auto& ss = static_cast<ucontext_t*>(uc)->uc_mcontext->__ss;
  __darwin_arm_thread_state64_set_pc_fptr(ss, reinterpret_cast<void*>(fn));
  __darwin_arm_thread_state64_set_lr_fptr(ss, nullptr);
  __darwin_arm_thread_state64_set_sp(ss, top);
  __darwin_arm_thread_state64_set_fp(ss, nullptr);
}
#else
CUDASIM_INTERNAL inline uintptr_t fault_pc(void* uc) { return static_cast<ucontext_t*>(uc)->uc_mcontext->__ss.__pc; }
CUDASIM_INTERNAL inline uintptr_t fault_sp(void* uc) { return static_cast<ucontext_t*>(uc)->uc_mcontext->__ss.__sp; }
CUDASIM_INTERNAL inline void fault_resume(void* uc, void (*fn)(), char* top) {
  auto& ss = static_cast<ucontext_t*>(uc)->uc_mcontext->__ss;
  ss.__pc = reinterpret_cast<uintptr_t>(fn);
  ss.__lr = 0;
  ss.__sp = reinterpret_cast<uintptr_t>(top);
  ss.__fp = 0;
}
#endif
#elif defined(__x86_64__)  // Linux
CUDASIM_INTERNAL inline uintptr_t fault_pc(void* uc) { return static_cast<ucontext_t*>(uc)->uc_mcontext.gregs[REG_RIP]; }
CUDASIM_INTERNAL inline uintptr_t fault_sp(void* uc) { return static_cast<ucontext_t*>(uc)->uc_mcontext.gregs[REG_RSP]; }
CUDASIM_INTERNAL inline void fault_resume(void* uc, void (*fn)(), char* top) {
  auto& r = static_cast<ucontext_t*>(uc)->uc_mcontext.gregs;
  r[REG_RIP] = reinterpret_cast<greg_t>(fn);
  r[REG_RSP] = reinterpret_cast<greg_t>(top) - 8;  // as after a call: a return address's room
  r[REG_RBP] = 0;
}
#else  // Linux, AArch64
CUDASIM_INTERNAL inline uintptr_t fault_pc(void* uc) { return static_cast<ucontext_t*>(uc)->uc_mcontext.pc; }
CUDASIM_INTERNAL inline uintptr_t fault_sp(void* uc) { return static_cast<ucontext_t*>(uc)->uc_mcontext.sp; }
CUDASIM_INTERNAL inline void fault_resume(void* uc, void (*fn)(), char* top) {
  auto& m = static_cast<ucontext_t*>(uc)->uc_mcontext;
  m.pc = reinterpret_cast<uintptr_t>(fn);
  m.regs[30] = 0;  // lr
  m.sp = reinterpret_cast<uintptr_t>(top);
  m.regs[29] = 0;  // fp
}
#endif
#endif

// ---------------------------------------------------------------------------------------------
// The segments of the loaded library (or program) that holds `addr`: f(lo, hi, executable, writable)
// for each, with load addresses. ELF: its PT_LOAD program headers (dl_iterate_phdr). Mach-O: its
// LC_SEGMENT_64 load commands, read from the image's header in memory (dladdr finds it), shifted by
// the image's slide (where __TEXT, which starts with the header, was loaded against its vmaddr).
// Returns whether the image was found.
using SegmentFn = void (*)(uintptr_t lo, uintptr_t hi, bool executable, bool writable);

#if defined(__APPLE__)
CUDASIM_INTERNAL inline bool macho_segments(const mach_header_64* h, SegmentFn f) {
  if (h->magic != MH_MAGIC_64) return false;
  intptr_t slide = 0;
  bool have_text = false;
  const char* cmd = reinterpret_cast<const char*>(h + 1);
  for (uint32_t i = 0; i < h->ncmds; ++i) {  // the slide first: __PAGEZERO may come before __TEXT
    const auto* lc = reinterpret_cast<const load_command*>(cmd);
    const auto* seg = reinterpret_cast<const segment_command_64*>(lc);
    if (lc->cmd == LC_SEGMENT_64 && seg->fileoff == 0 && seg->filesize != 0) {
      slide = reinterpret_cast<intptr_t>(h) - static_cast<intptr_t>(seg->vmaddr);
      have_text = true;
    }
    cmd += lc->cmdsize;
  }
  if (!have_text) return false;
  cmd = reinterpret_cast<const char*>(h + 1);
  for (uint32_t i = 0; i < h->ncmds; ++i) {
    const auto* lc = reinterpret_cast<const load_command*>(cmd);
    const auto* seg = reinterpret_cast<const segment_command_64*>(lc);
    if (lc->cmd == LC_SEGMENT_64 && seg->vmsize != 0 && seg->initprot != 0) {  // not __PAGEZERO
      uintptr_t lo = static_cast<uintptr_t>(seg->vmaddr + slide);
      f(lo, lo + seg->vmsize, (seg->initprot & VM_PROT_EXECUTE) != 0,
        (seg->initprot & VM_PROT_WRITE) != 0 && !(seg->flags & SG_READ_ONLY));
    }
    cmd += lc->cmdsize;
  }
  return true;
}

CUDASIM_INTERNAL inline bool image_segments(const void* addr, SegmentFn f) {
  Dl_info info{};
  if (!dladdr(addr, &info) || !info.dli_fbase) return false;
  return macho_segments(static_cast<const mach_header_64*>(info.dli_fbase), f);
}
#else
struct ImageWanted {
  uintptr_t base;  // where dladdr says the image starts: its load bias for a library linked at 0
  SegmentFn f;
};

CUDASIM_INTERNAL inline int visit_image(dl_phdr_info* img, size_t, void* data) {
  const ImageWanted& want = *static_cast<const ImageWanted*>(data);
  if (img->dlpi_addr != want.base) return 0;
  for (int i = 0; i < img->dlpi_phnum; ++i) {
    const auto& ph = img->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    uintptr_t lo = img->dlpi_addr + ph.p_vaddr;
    want.f(lo, lo + ph.p_memsz, (ph.p_flags & PF_X) != 0, (ph.p_flags & PF_W) != 0);
  }
  return 1;
}

CUDASIM_INTERNAL inline bool image_segments(const void* addr, SegmentFn f) {
  Dl_info info{};
  if (!dladdr(addr, &info) || !info.dli_fbase) return false;
  ImageWanted want{reinterpret_cast<uintptr_t>(info.dli_fbase), f};
  return dl_iterate_phdr(visit_image, &want) != 0;
}
#endif

}  // namespace platform
}  // namespace cudasim
