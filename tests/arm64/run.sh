#!/usr/bin/env bash
# The simulator on arm64 Linux, emulated on an x86-64 Linux machine (`make test-arm64`).
#
# An arm64 Python runs under qemu-user: Debian bookworm's python3.11 (unpacked with debootstrap's first
# stage, no chroot and no binfmt needed) with PyPI's aarch64 torch wheel, a CPU build. The sim builds
# run natively: cpp_extension calls Debian's cross compiler (g++-aarch64-linux-gnu), so only Python
# and the kernels themselves are emulated. Then lesson 04's check and the simulator's tests run there.
#
#   tests/arm64/run.sh          lesson 04's check, then the quick part of tests/test_sim.py (warps
#                               across exited lanes, faults): 7-9 minutes on a busy 2-core machine
#   tests/arm64/run.sh full     lesson 04's check, then all of tests/test_sim.py: about 16 minutes
#   tests/arm64/run.sh setup    only the set-up
#   tests/arm64/run.sh macos    only the macOS compile check (every mode starts with it): the simulator's
#                               headers, plain and instrumented, compiled for arm64 and x86-64 macOS by
#                               clang with libc++ and macOS's own C headers (PyPI's ziglang bundles both)
#
# Set-up, once: apt-get installs g++-aarch64-linux-gnu, qemu-user-static and debootstrap where missing
# (as root), and $ARM64_HOME (default ~/.cache/kernels-arm64) gets the arm64 root with Python and
# torch (1.1 GB, about 4 minutes) and ziglang (0.4 GB). Builds are cached in $ARM64_HOME/build-ext, apart from the x86-64 ones.
# PY is the host Python whose pip downloads the wheels (default: python3).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
A=${ARM64_HOME:-$HOME/.cache/kernels-arm64}
R=$A/root
PY=${PY:-python3}
TORCH=torch==2.9.1  # the last release whose aarch64 wheel on PyPI is a CPU build with no CUDA packages
WHEELS="filelock typing-extensions sympy networkx jinja2 fsspec setuptools pytest"
QEMU=$(command -v qemu-aarch64-static || command -v qemu-aarch64 || true)
# The quick part: the tests on undefined.cu (one build): warp operations across exited lanes, a spin,
# and a stack overflow and wild writes (SIGSEGV, SIGBUS) that the fault handler turns into errors.
QUICK="exited_lane or beyond_a_partial_warp or lanes_that_all_stay or have_not_exited or never_frees \
or stack_overflow or unmapped_memory or sigbus or failed_midway"
MODE=${1:-quick}
case $MODE in quick|full|setup|macos) ;; *) echo "usage: $0 [quick|full|setup|macos]" >&2; exit 2 ;; esac

step() { printf '%s %s\n' "--" "$*"; }
started=$SECONDS
since() { echo "$((SECONDS - $1)) s"; }

# 1. Tools.
need=()
command -v aarch64-linux-gnu-g++ >/dev/null || need+=(g++-aarch64-linux-gnu)
[ -n "$QEMU" ] || need+=(qemu-user-static)
command -v debootstrap >/dev/null || [ -x "$R/usr/bin/python3.11" ] || need+=(debootstrap)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "needs ${need[*]}: run 'sudo apt-get install ${need[*]}' (Debian or Ubuntu), then this again" >&2
    exit 1
  fi
  step "installing ${need[*]}"
  apt-get update -q >/dev/null && apt-get install -y -q "${need[@]}" >/dev/null
  QEMU=$(command -v qemu-aarch64-static || command -v qemu-aarch64)
fi

# 2. An arm64 Debian with Python 3.11 and its headers: debootstrap's first stage fetches and unpacks
# the base; the packages it leaves for the second stage (which would need a chroot) are unpacked here.
if [ ! -x "$R/usr/bin/python3.11" ]; then
  t=$SECONDS
  step "unpacking an arm64 Debian with Python 3.11 into $R"
  mkdir -p "$A"
  debootstrap --arch=arm64 --foreign --variant=minbase --include=python3.11,libpython3.11-dev bookworm "$R" \
    http://deb.debian.org/debian >"$A/debootstrap.log" 2>&1 || { tail -5 "$A/debootstrap.log"; exit 1; }
  for deb in "$R"/var/cache/apt/archives/*.deb; do dpkg-deb -x "$deb" "$R"; done
  step "done in $(since $t)"
fi

# 3. PyPI's aarch64 wheels, installed where the arm64 Python looks. Markers are evaluated for this
# machine by pip, so torch comes without its dependencies (its CUDA ones are x86-64 only anyway).
SITE=$R/usr/local/lib/python3.11/dist-packages
if [ ! -d "$SITE/torch" ]; then
  t=$SECONDS
  step "downloading $TORCH for aarch64 and what the tests need"
  plat=(--platform manylinux_2_28_aarch64 --platform manylinux2014_aarch64 --python-version 3.11
        --implementation cp --only-binary=:all:)
  rm -rf "$A/wheels"
  "$PY" -m pip download -q --no-deps "${plat[@]}" -d "$A/wheels" "$TORCH"
  # shellcheck disable=SC2086
  "$PY" -m pip download -q "${plat[@]}" -d "$A/wheels" $WHEELS
  "$PY" -m pip install -q --no-index --no-deps "${plat[@]}" --target "$SITE" "$A"/wheels/*.whl
  step "done in $(since $t)"
fi

# 4. Wrappers. python3-qemu sits beside the real interpreter, so that Python finds its library from it
# and sys.executable (qemu's -0) names it: a test that runs sys.executable runs arm64 Python again.
# Processes the emulated Python starts (the compiler, ninja, addr2line, sh) are the host's, natively.
cat >"$R/usr/bin/python3-qemu" <<EOF
#!/bin/sh
exec "$QEMU" -L "$R" -0 "$R/usr/bin/python3-qemu" "$R/usr/bin/python3.11" "\$@"
EOF
mkdir -p "$A/bin"
cat >"$A/bin/aarch64-g++" <<EOF
#!/bin/sh
# the cross compiler, with the arm64 root's headers (Python's pyconfig.h) searched after its own
exec aarch64-linux-gnu-g++ -idirafter "$R/usr/include" "\$@"
EOF
chmod +x "$R/usr/bin/python3-qemu" "$A/bin/aarch64-g++"
ln -sf "$(command -v aarch64-linux-gnu-addr2line)" "$A/bin/addr2line"  # the host's reads no arm64 ELF
NINJA=$(command -v ninja || true)
[ -n "$NINJA" ] || NINJA=$("$PY" -c "import ninja, os; print(os.path.join(ninja.BIN_DIR, 'ninja'))")
ln -sf "$NINJA" "$A/bin/ninja"
if [ ! -x "$A/zig/ziglang/zig" ]; then
  step "installing ziglang (clang and macOS's headers) into $A/zig"
  "$PY" -m pip install -q --target "$A/zig" ziglang
fi
[ "$MODE" = setup ] && { step "set up in $(since $started)"; exit 0; }

# 5. macOS cannot run here; what can be checked is that its compiler takes the headers.
t=$SECONDS
step "the simulator's headers for macOS (arm64, x86-64), plain and instrumented"
printf '#include "cudasim.h"\n' >"$A/macos_check.cpp"
for target in aarch64-macos x86_64-macos; do
  for defs in "" "-DCUDASIM_INSTRUMENTED"; do
    "$A/zig/ziglang/zig" c++ -target "$target" -std=c++20 -c -o "$A/macos_check.o" -Werror $defs \
      -I "$REPO/kernels/sim/include" -I "$SITE/torch/include" "$A/macos_check.cpp"
  done
done
step "done in $(since $t)"
[ "$MODE" = macos ] && exit 0

# 6. Run.
export PATH="$A/bin:$PATH" CXX="$A/bin/aarch64-g++" KERNELS_BUILD_DIR="$A/build-ext" PYTHONPATH="$REPO"
export TORCH_DONT_CHECK_COMPILER_ABI=1  # cpp_extension would ask the cross compiler's name for "g++"
cd "$REPO"
arm64() { "$R/usr/bin/python3-qemu" "$@"; }
t=$SECONDS
step "lesson 04's check on the simulator"
arm64 -m kernels.exercises 04 --solution --backend sim
step "done in $(since $t)"
t=$SECONDS
if [ "$MODE" = full ]; then
  step "tests/test_sim.py"
  arm64 -m pytest -q -p no:cacheprovider tests/test_sim.py
else
  step "tests/test_sim.py, the quick part"
  arm64 -m pytest -q -p no:cacheprovider tests/test_sim.py -k "$QUICK"
fi
step "done in $(since $t); all in $(since $started)"
