"""The simulator (sim backend): every CUDA feature it supports, checked against PyTorch.

The kernels live in tests/sim_kernels/ (features.cu: TORCH_LIBRARY style; host_api.cu:
PYBIND11_MODULE style; public_styles.cu: CUDA written as published code writes it, run on the
default backend, so on a GPU too; undefined.cu: what a GPU leaves undefined, which the simulator
refuses). Translator tests at the top need no build. Tests marked `slow` take a few seconds each
(a spin detector, a failing build, a subprocess).
"""
from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
import textwrap
from contextlib import contextmanager, nullcontext
from pathlib import Path

import pytest
import torch

from kernels import BuildError, device, load, load_inline
from kernels.sim import knobs
from kernels.sim.translate import TranslateError, translate_source

HERE = Path(__file__).parent / "sim_kernels"
FEATURES = HERE / "features.cu"
PUBLIC = HERE / "public_styles.cu"
UNDEFINED = HERE / "undefined.cu"


def _line_of(marker: str, path: Path = FEATURES) -> int:
    """The 1-based line of the file that holds `marker`."""
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if marker in line:
            return i
    raise AssertionError(f"{marker} not in {path.name}")


# Backends the kernels run on here: the simulator, and the GPU when there is one. Tests of what
# a GPU defines take `feat` or `styles` and run on each; tests of what only the simulator defines
# (its errors, its knobs, undefined behaviour on a GPU) take `ext`, `host` or `undefined`, which
# load on sim alone, and carry the sim_only mark: they are never launched on cuda
# (undefined.cu's lock_never_freed would hang a GPU).
BACKENDS = ["sim"] + (["cuda"] if torch.cuda.is_available() else [])
sim_only = pytest.mark.sim_only


class _OnDevice:
    """An extension whose ops take CPU tensors, run them on the extension's device and return CPU tensors."""

    def __init__(self, ext):
        self.ext, self.device = ext, device(ext.backend)

    def __getattr__(self, op: str):
        fn = getattr(self.ext, op)

        def call(*args):
            out = fn(*[a.to(self.device) if isinstance(a, torch.Tensor) else a for a in args])
            if isinstance(out, (list, tuple)):
                return type(out)(o.cpu() if isinstance(o, torch.Tensor) else o for o in out)
            return out.cpu() if isinstance(out, torch.Tensor) else out
        return call


@pytest.fixture(scope="module", params=BACKENDS)
def feat(request):
    return _OnDevice(load(FEATURES, request.param))


@pytest.fixture(scope="module")
def ext():
    return load(FEATURES, "sim")


@pytest.fixture(scope="module")
def host():
    return load(HERE / "host_api.cu", "sim")


@pytest.fixture(scope="module", params=BACKENDS)
def styles(request):
    return load(PUBLIC, request.param)


@pytest.fixture(scope="module")
def dev(styles):
    """The device of the backend `styles` runs on."""
    return device(styles.backend)


@pytest.fixture(scope="module")
def undefined():
    return load(UNDEFINED, "sim")


# ---------------------------------------------------------------------------------------------
# translator (no build)
def _tr(src: str) -> str:
    return translate_source(src, "t.cu")


def test_launch_with_shift_in_config_is_rewritten_whole():
    out = _tr("void f(int n) { k<<<(n + 255) >> 8, 256>>>(x, n); }")
    assert "::cudasim::config((n + 255) >> 8, 256)" in out
    assert 'launch("k", __FILE__, __LINE__' in out and "}, x, n); }" in out and "<<<" not in out


def test_launch_keeps_template_and_namespace_in_the_name():
    out = _tr("void f() { a::b::k<float, 256><<<g, b, 0, s>>>(p); }")
    assert 'launch("a::b::k<float, 256>"' in out
    assert "{ a::b::k<float, 256>(cudasim_a...); }" in out
    assert "::cudasim::config(g, b, 0, s)" in out


def test_a_null_launch_argument_becomes_nullptr_so_that_its_stored_copy_still_converts_to_a_pointer():
    # the launch stores its arguments, and a stored NULL is a long: llm.c's classifier_fused.cu did not build
    out = _tr("void f() { k<<<g, b>>>(x, NULL, g(NULL, 1), NULL_OK, (float*)NULL,\n  NULL ); }")
    assert "}, x, nullptr, g(NULL, 1), NULL_OK, (float*)NULL,\n  nullptr ); }" in out


def test_multiline_launch_keeps_the_line_count():
    src = "void f() {\n  k<<<\n    g,\n    b>>>(x,\n      y);\n  int after;\n}\n"
    out = _tr(src)
    body = out.split("\n", 2)[2]  # after the #include and #line directives
    assert body.count("\n") == src.count("\n")
    assert body.splitlines()[5] == "  int after;"


def test_translation_starts_with_a_line_directive():
    assert _tr("int x;\n").splitlines()[1] == '#line 1 "t.cu"'


def test_launch_syntax_in_strings_and_comments_is_left_alone():
    src = 'const char* s = "k<<<1, 1>>>(x);"; // k<<<1, 1>>>(x);\n/* k<<<g, b>>>(y); */ char c = \'<\';\n'
    assert _tr(src).split("\n", 2)[2] == src


def test_launch_with_a_bad_config_is_an_error_with_the_line():
    with pytest.raises(TranslateError, match=r"t\.cu:2: a launch takes 2 to 4 values"):
        _tr("void f() {\n  k<<<1>>>(x);\n}\n")
    with pytest.raises(TranslateError, match=r"t\.cu:1: a '<<<' without its '>>>'"):
        _tr("void f() { k<<<1, 2(x); }")


def test_shared_declarations_become_per_block_slots():
    out = _tr("__global__ void k() {\n  __shared__ float tile[16][17];\n  __shared__ __align__(16) int v;\n}\n")
    assert "using cudasim_t_tile = float[16][17];" in out
    assert "shared_var<cudasim_t_tile, 0>(cudasim_slot_tile, \"tile\")" in out
    assert "shared_var<cudasim_t_v, 16>" in out
    assert out.count("\n") == 2 + 4


def test_extern_shared_becomes_the_dynamic_buffer():
    out = _tr("__global__ void k() { extern __shared__ float buf[]; }")
    assert "using cudasim_t_buf = float; cudasim_t_buf* buf = ::cudasim::dynamic_shared<cudasim_t_buf>()" in out


@pytest.mark.parametrize("decl", ["float buf[4]", "float rows[8][]", "float rows[][]"])
def test_extern_shared_whose_first_size_is_given_or_a_later_one_missing_is_refused(decl):
    with pytest.raises(TranslateError, match="extern __shared__ must be an array whose first size is left out"):
        _tr(f"__global__ void k() {{ extern __shared__ {decl}; }}")


def test_extern_shared_object_is_the_dynamic_buffer_seen_as_that_object():
    # nvcc accepts it, and Hopper kernels use it for a struct of tiles (fast.cu's SMem)
    out = _tr("__global__ void k() { extern __shared__ Tiles<64, 32> s; }")
    assert "using cudasim_t_s = Tiles<64, 32>; cudasim_t_s& s = *::cudasim::dynamic_shared<cudasim_t_s>()" in out


def test_extern_shared_rows_of_a_fixed_size_are_a_pointer_to_rows():
    out = _tr("__global__ void k() { extern __shared__ half shmem[][CHUNK * 16 + SKEW]; }")
    assert ("using cudasim_t_shmem = half[CHUNK*16+SKEW]; "
            "cudasim_t_shmem* shmem = ::cudasim::dynamic_shared<cudasim_t_shmem>()") in out
    out = _tr("extern __shared__ int grid[][4][2];\n")
    assert "using cudasim_t_grid = int[4][2]; static cudasim_t_grid* const grid = " \
           "::cudasim::file_dynamic_shared<cudasim_t_grid>();" in out


def test_file_scope_extern_shared_is_the_dynamic_buffer_at_load_time():
    out = _tr("extern __shared__ float sdata[];\n__global__ void k() { sdata[0] = 1; }\n")
    assert "static cudasim_t_sdata* const sdata = ::cudasim::file_dynamic_shared<cudasim_t_sdata>();" in out
    assert "__global__ void k() { sdata[0] = 1; }" in out


@pytest.mark.parametrize("src, name, typ", [
    ("__shared__ float tile[32][33];", "tile", "float[32][33]"),
    ("static __shared__ int count;", "count", "int"),
    ("namespace a { namespace b {\n__shared__ double v[4];\n} }", "v", "double[4]"),
    ('extern "C" {\n__shared__ int w;\n}', "w", "int"),
])
def test_file_scope_static_shared_gets_a_fixed_slot(src, name, typ):
    out = _tr(src)
    assert f"using cudasim_t_{name} = {typ}; static cudasim_t_{name}& {name} = " \
           f"::cudasim::file_shared<cudasim_t_{name}, 0>(\"{name}\")" in out
    assert "shared_var" not in out


def test_shared_inside_a_function_in_a_namespace_stays_per_block():
    out = _tr("namespace a {\n__global__ void k() {\n  __shared__ int v;\n}\n}\n")
    assert "shared_var<cudasim_t_v, 0>" in out and "file_shared" not in out


@pytest.mark.parametrize("src, expect", [
    ("__global__ void k() { __shared__ float /* a; b; */ tile[16]; }", "using cudasim_t_tile = float[16];"),
    ("__global__ void k() { __shared__ float // the tile;\n tile[16]; }", "using cudasim_t_tile = float[16];"),
    ("__global__ void k() { __shared__ Pair<float, int> best[32]; }", "using cudasim_t_best = Pair<float, int>[32];"),
    ("__global__ void k() { __shared__ std::pair<float, std::tuple<int, int>> p; }",
     "using cudasim_t_p = std::pair<float, std::tuple<int, int>>;"),
    ("__global__ void k() { __shared__ float t[N<2, 3>::v]; }", "using cudasim_t_t = float[N<2,3>::v];"),
])
def test_shared_declarations_are_read_without_comments_and_with_template_commas(src, expect):
    assert expect in _tr(src)


def test_a_shared_statement_of_several_variables_declares_each_with_its_own_stars_and_sizes():
    out = _tr("__global__ void k() {\n  __shared__ Pair<int, int> a, *b, c[4][2];\n  a.x = 1;\n}\n")
    for want in ("using cudasim_t_a = Pair<int, int>;", "using cudasim_t_b = Pair<int, int> *;",
                 "using cudasim_t_c = Pair<int, int>[4][2];"):
        assert want in out
    lines = [line.strip() for line in out.splitlines()]
    assert lines.index("a.x = 1;") == next(i for i, x in enumerate(lines) if "cudasim_slot_c" in x) + 1  # one line


@sim_only
def test_two_shared_arrays_declared_in_one_statement_are_two_arrays():
    # LeetCUDA's and many tutorials' matmuls: `__shared__ float s_a[BM][BK], s_b[BK][BN];`
    ext = load_inline("two_shared", """
#include "helpers.cuh"
#include <ATen/ops/empty.h>

__global__ void two_shared_kernel(float* out) {
  __shared__ float a[32], b[2][32];
  const int t = threadIdx.x;
  a[t] = t;
  b[1][t] = 100.0f + t;
  __syncthreads();
  out[t] = a[31 - t] + b[1][t];
}
at::Tensor two_shared(const at::Tensor& like) {
  auto out = at::empty({32}, like.options());
  two_shared_kernel<<<1, 32>>>(out.data_ptr<float>());
  CHECK_LAUNCH();
  return out;
}
TORCH_LIBRARY_FRAGMENT(sim_two_shared, m) { m.def("two_shared(Tensor like) -> Tensor"); }
TORCH_LIBRARY_IMPL(sim_two_shared, CUDA, m) { m.impl("two_shared", &two_shared); }
""", "sim")
    out = ext.two_shared(torch.empty(1))
    assert out.tolist() == [131.0] * 32


@pytest.mark.parametrize("src, message", [
    ("__shared__ float total = 0.0f;", "a __shared__ variable cannot have an initializer (nvcc refuses it too)"),
    ("__shared__ int n{0};", "a __shared__ variable cannot have an initializer"),
])
def test_refused_shared_declarations_say_exactly_why(src, message):
    with pytest.raises(TranslateError, match=re.escape(f"t.cu:2: ") + ".*" + re.escape(message)):
        _tr("__global__ void k() {\n  " + src + "\n}\n")


@pytest.mark.parametrize("literal", ["1'048'576", "0x'FF'FF", "0b1010'1010", "1'000.5'0f", "10'0ull"])
def test_digit_separators_leave_the_rest_of_the_line_visible(literal):
    out = _tr(f"void f() {{ auto n = {literal}; k<<<1, 2>>>(n); // k<<<3, 4>>>(n);\n}}\n")
    assert "::cudasim::config(1, 2)" in out and "k<<<3, 4>>>" in out and out.count("<<<") == 1


def test_character_literals_still_hide_their_contents():
    src = "char a = 'x'; char b = u8';'; wchar_t c = L'<'; char d = '\\''; const char* s = \"k<<<1, 1>>>(x)\";\n"
    assert _tr(src).split("\n", 2)[2] == src


def test_return_in_a_kernel_notes_where_the_thread_left():
    src = ("__device__ int f(int v) { return v; }\n"
           "__global__ void k(int n) {\n  if (n) return;\n  auto g = [](int v) { return v; };\n}\n"
           "__global__ void declared_only(int);\nvoid host() { return; }\n")
    out = _tr(src).split("\n", 2)[2]
    assert out.splitlines()[2] == "  if (n) { ::cudasim::exiting(__FILE__, __LINE__); return; }"
    assert out.count("exiting") == 1  # not in device or host functions, nor a lambda's `return v;`
    assert out.count("\n") == src.count("\n")


def test_noinline_becomes_the_compilers_attribute_only_where_it_stands_as_cudas_qualifier():
    src = ('#define NOINLINE __noinline__\n#ifdef __noinline__\n#endif\n'
           '__device__ __noinline__ float f(float v) { return v; }\n'
           '__attribute__((cold, __noinline__)) void g();\n__attribute__((__noinline__)) void h();\n'
           '[[gnu::__noinline__]] void k();\nconst char* s = "__noinline__";  // __noinline__\n')
    out = translate_source(src, "x.cu").splitlines()[2:]  # after the #include and the #line
    assert out[0] == "#define NOINLINE __attribute__((noinline))"
    assert out[1] == "#ifdef __noinline__"
    assert out[3] == "__device__ __attribute__((noinline)) float f(float v) { return v; }"
    assert out[4:] == src.splitlines()[4:]  # attribute lists, gnu::, a string and a comment are left alone


def test_pragma_unroll_is_dropped_and_the_dispatch_key_is_left_to_the_simulators_torch_library_h():
    out = _tr("#pragma unroll 4\nfor(;;){}\nTORCH_LIBRARY_IMPL(ns, CUDA, m) {}\n")
    assert "pragma" not in out
    assert "TORCH_LIBRARY_IMPL(ns, CUDA, m)" in out  # include/torch/library.h maps the key, however it arrives


# ---------------------------------------------------------------------------------------------
# qualifiers, indices, launches
def test_qualifiers_templates_and_device_calls(feat):
    x = torch.randn(1001)
    out = feat.qualifiers(x)
    torch.testing.assert_close(out[:-1], 2 * (x * x + 1))
    assert out[-1].item() == 10.0  # the __host__ __device__ function called on the host


@pytest.mark.parametrize("grid, block", [((3, 1, 1), (70, 1, 1)), ((2, 3, 1), (16, 4, 1)), ((2, 3, 4), (4, 2, 3))])
def test_builtin_indices_in_1d_2d_3d(feat, grid, block):
    out = feat.indices(list(grid), list(block))
    gz, gy, gx, bz, by, bx = torch.meshgrid(*[torch.arange(n) for n in (*grid[::-1], *block[::-1])], indexing="ij")
    expect = torch.stack([bx, by, bz, gx, gy, gz], -1).reshape(-1, 6)
    assert torch.equal(out[:, :6], expect.int())
    assert torch.equal(out[:, 6:9], torch.tensor(block, dtype=torch.int).expand(len(out), 3))
    assert torch.equal(out[:, 9:12], torch.tensor(grid, dtype=torch.int).expand(len(out), 3))
    assert (out[:, 12] == 32).all()  # warpSize


def test_2d_grid_over_a_ragged_matrix(feat):
    x = torch.randn(37, 53)
    r, c = torch.meshgrid(torch.arange(37), torch.arange(53), indexing="ij")
    torch.testing.assert_close(feat.matrix_2d(x), x + r - c)


def test_every_launch_spelling_runs_its_kernel(feat):
    x = torch.randn(1000)
    out = feat.launch_forms(x)
    for j in range(out.shape[0]):
        torch.testing.assert_close(out[j], x * (j + 1), msg=f"launch form {j}")


def test_launch_text_in_strings_stays(feat):
    assert feat.launch_text() == "k<<<1, 1>>>(x);<"


def test_lines_after_a_multiline_launch_keep_their_numbers(feat):
    assert feat.line_after_launch(torch.randn(10)) == _line_of("LINE-AFTER-LAUNCH")


# ---------------------------------------------------------------------------------------------
# shared memory
def test_static_shared_1d(feat):
    x = torch.randn(1000)  # three full blocks and a ragged one
    expect = torch.cat([c.flip(0) for c in x.split(256)])
    torch.testing.assert_close(feat.smem_reverse(x), expect)


def test_static_shared_2d_transpose(feat):
    x = torch.randn(45, 70)
    torch.testing.assert_close(feat.transpose(x), x.t().contiguous())


def test_dynamic_shared_is_sized_by_the_launch_and_16_byte_aligned(feat):
    threads = 64
    x = torch.randn(4 * threads * 3)
    out, misaligned = feat.dyn_float4(x, threads)
    sums = x.view(-1, 4).sum(1).view(3, threads).flip(1).reshape(-1)
    torch.testing.assert_close(out, sums)
    assert misaligned.item() == 0


def test_static_shared_arrays_are_aligned(feat):
    assert feat.static_align().tolist() == [0, 0, 1]


def test_exactly_48kb_static_shared_is_allowed(feat):
    x = torch.randn(12288)
    torch.testing.assert_close(feat.smem_48k(x), x.flip(0))


@sim_only
def test_static_shared_over_48kb_is_refused(ext):
    with pytest.raises(RuntimeError, match=r"static __shared__ memory exceeds the limit: 'too_big' needs 49156 bytes"):
        ext.smem_static_too_big()


def test_dynamic_shared_over_48kb_needs_the_opt_in(feat):
    with pytest.raises(RuntimeError, match="CUDA error: invalid argument"):
        feat.big_dynamic_smem(64 * 1024, False)
    assert feat.big_dynamic_smem(64 * 1024, True) == 64 * 1024 / 4 - 1
    with pytest.raises(RuntimeError, match="CUDA error: invalid argument"):  # beyond the H100's 227 KB
        feat.big_dynamic_smem(228 * 1024, True)


def test_dynamic_shared_at_48kb_needs_no_opt_in(feat):
    assert feat.big_dynamic_smem(48 * 1024, False) == 48 * 1024 / 4 - 1


@sim_only
def test_writing_past_dynamic_shared_is_caught(ext):
    with pytest.raises(RuntimeError, match=r"a write past the end of dynamic shared memory \(256 bytes"):
        ext.dyn_overrun()


# ---------------------------------------------------------------------------------------------
# barriers
def test_early_return_before_a_barrier_does_not_deadlock(feat):
    x = torch.randn(50)
    out, left = feat.early_exit(x)
    torch.testing.assert_close(out, x.flip(0))
    assert left.tolist() == [0] * 50 + [1] * 78  # the side effect before `return` happened


@sim_only
def test_divergent_barrier_raises_with_both_lines(ext):
    a, b = _line_of("DIVERGENT-A"), _line_of("DIVERGENT-B")
    with pytest.raises(RuntimeError, match=rf"divergent __syncthreads: .* features\.cu:{a} .* features\.cu:{b}.*kernel divergent_kernel"):
        ext.divergent_barrier()


@sim_only
def test_warp_waiting_for_a_lane_at_a_barrier_is_a_deadlock(ext):
    line = _line_of("DEADLOCK-SHUFFLE")
    with pytest.raises(RuntimeError, match=rf"deadlock: a warp operation at features\.cu:{line} .*lane 0 \(waiting at __syncthreads\)"):
        ext.warp_deadlock()


@sim_only
@pytest.mark.slow
def test_spinning_on_another_block_raises_instead_of_hanging(ext):
    with pytest.raises(RuntimeError, match="seems to spin forever.*blocks run one at a time"):
        ext.inter_block_spin()


def test_syncthreads_count_and_or(feat):
    x = torch.randn(96)
    count = int((x > 0).sum())
    assert feat.barrier_votes(x).tolist() == [count, int(count == 96), int(count > 0)]


def _race_expect(x: torch.Tensor, mirror: bool) -> torch.Tensor:
    t = x.view(-1, 256)
    return (t.flip(1) if mirror else torch.cat([t[:, :1], t[:, :-1]], 1)).reshape(-1)


@sim_only
def test_missing_barrier_is_caught_by_poison_in_every_order(ext):
    x = torch.randn(512)
    for order in ("forward", "reverse", "random"):
        with knobs.set(order=order):
            assert not torch.equal(ext.race(x, True), _race_expect(x, True)), order


@sim_only
def test_missing_barrier_that_forward_order_hides_is_caught_in_reverse_and_random(ext):
    x = torch.randn(512)
    with knobs.set(order="forward"):
        assert torch.equal(ext.race(x, False), _race_expect(x, False))  # a lucky pass
    for order in ("reverse", "random"):
        with knobs.set(order=order, seed=3):
            assert not torch.equal(ext.race(x, False), _race_expect(x, False)), order


@sim_only
def test_correct_kernels_pass_in_every_order_and_block_shuffle(ext):
    x = torch.randn(1000)
    for order in ("forward", "reverse", "random"):
        with knobs.set(order=order, shuffle_blocks=True, seed=11):
            torch.testing.assert_close(ext.smem_reverse(x), torch.cat([c.flip(0) for c in x.split(256)]))
            torch.testing.assert_close(ext.legacy_reduce(x[:960], True), x[:960].view(-1, 64).sum(1))


# ---------------------------------------------------------------------------------------------
# warps
def _ballot(bits: torch.Tensor) -> int:
    return sum(1 << i for i, b in enumerate(bits.tolist()) if b)


def test_shuffles_votes_and_syncwarp(feat):
    x = torch.randn(64)
    f, votes = feat.shuffles(x)
    w = x.view(2, 32)
    lane = torch.arange(32)

    def per_warp(src):  # value of lane src[l] in each warp
        return w[:, src].reshape(-1)

    torch.testing.assert_close(f[0], per_warp((lane + 3) % 32))
    torch.testing.assert_close(f[1], per_warp(torch.where(lane >= 1, lane - 1, lane)))
    torch.testing.assert_close(f[2], per_warp(torch.where(lane + 2 < 32, lane + 2, lane)))
    torch.testing.assert_close(f[3], per_warp(lane ^ 5))
    torch.testing.assert_close(f[4], per_warp(lane // 8 * 8 + 3))
    torch.testing.assert_close(f[5], per_warp(torch.where(lane % 16 + 4 < 16, lane + 4, lane)))
    torch.testing.assert_close(f[6], per_warp(torch.where(lane % 8 >= 2, lane - 2, lane)))
    torch.testing.assert_close(f[7], per_warp(lane ^ 1))
    torch.testing.assert_close(f[8].view(2, 32)[:, 0], w.sum(1))
    torch.testing.assert_close(f[9], per_warp(torch.zeros(32, dtype=torch.long)))
    for k in range(2):
        v = votes[:, 32 * k:32 * (k + 1)]
        assert (v[0] == _ballot(w[k] > 0)).all()
        assert (v[1] == int(bool((w[k] > 2).any()))).all()
        assert (v[2] == int(bool((w[k] > -2).all()))).all()
        assert (v[3] == 0xFFFFFFFF).all()
        assert (v[4, :8] == _ballot(w[k, :8] > 0)).all() and (v[4, 8:] == -1).all()
        torch.testing.assert_close(f[10, 32 * k:32 * k + 8], w[k, :8].view(4, 2).flip(1).reshape(-1))
        assert (f[10, 32 * k + 8:32 * (k + 1)] == -1).all()


def test_shuffles_in_one_warp_only(feat):
    x = torch.randn(128)
    out = feat.one_warp(x)
    expect = x.clone()
    expect[64:96] = x[64:96].sum()
    torch.testing.assert_close(out, expect)


@pytest.mark.parametrize("n", [40, 33, 95])
@sim_only
def test_partial_last_warp(ext, n):
    x = torch.randn(n)
    out, masks = ext.partial_warp(x)
    for w0 in range(0, n, 32):
        lanes = min(32, n - w0)
        seg = slice(w0, w0 + lanes)
        assert (masks[seg, 0] == (1 << lanes) - 1).all()  # __activemask: the lanes that exist
        assert (masks[seg, 1] == _ballot(x[seg] > 0)).all()
        torch.testing.assert_close(out[seg], x[seg].sum().expand(lanes))


@sim_only
def test_legacy_volatile_warp_reduction_is_wrong_without_syncwarp(ext):
    """Lanes are not in lockstep (on Volta and later GPUs, and always here): the old idiom reads
    values its neighbours have not written yet. It may still pass on a real GPU by luck."""
    x = torch.rand(64 * 8) + 0.5
    expect = x.view(-1, 64).sum(1)
    assert not torch.allclose(ext.legacy_reduce(x, False), expect)
    torch.testing.assert_close(ext.legacy_reduce(x, True), expect)


# ---------------------------------------------------------------------------------------------
# atomics
def test_atomics_on_every_type(feat):
    n = 1000
    v = torch.randint(-1000, 1000, (n,), dtype=torch.int32)
    f = torch.randn(n)
    i32, u32, u64, f32, f64, tickets, fmax = feat.atomics(v, f)
    vl = v.long()
    u = vl & 0xFFFFFFFF

    def as_u32(t):
        return t.long() & 0xFFFFFFFF

    assert i32[0] == vl.sum() and i32[1] == -vl.sum()
    assert i32[2] == vl.max() and i32[3] == vl.min()
    assert i32[4] == n and sorted(tickets.tolist()) == list(range(n))
    assert i32[5].item() in set(v.tolist())  # atomicExch: the last writer's value
    assert 0 <= i32[6].item() < n  # atomicCAS: exactly one thread swapped in its index
    assert as_u32(u32[0]) == u.sum() & 0xFFFFFFFF
    assert as_u32(u32[1]) == u.max() and as_u32(u32[2]) == u.min()
    and_, or_, xor_ = 0xFFFFFFFF, 0, 0
    for b in u.tolist():
        and_, or_, xor_ = and_ & b, or_ | b, xor_ ^ b
    assert [as_u32(u32[k]).item() for k in (3, 4, 5)] == [and_, or_, xor_]
    assert [as_u32(i32[k]).item() for k in (7, 8, 9)] == [and_, or_, xor_]
    wrapped = (int(u.sum()) << 33) % 2**64  # unsigned long long wraps; the tensor holds it as int64
    assert u64[0].item() == (wrapped - 2**64 if wrapped >= 2**63 else wrapped)
    assert u64[1].item() == 7
    torch.testing.assert_close(f32[0], f.sum(), rtol=1e-4, atol=1e-3)
    assert f32[1].item() == 2.5
    torch.testing.assert_close(f64[0], f.double().sum())
    assert fmax.item() == f.max().item()  # the atomicCAS loop


def test_vector_atomic_adds_add_every_element(feat):
    if feat.device.type == "cuda" and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("float2 and float4 atomicAdd need compute capability 9.0")
    n = 1000
    f = torch.randn(n)
    out = feat.vector_atomics(f)
    s = f.sum()
    torch.testing.assert_close(out[:8], torch.stack([s, 2 * s, s.new_zeros(()), s.new_zeros(()), s, -s,
                                                     s.new_tensor(n), s.new_tensor(n / 2)]), rtol=1e-4, atol=1e-3)
    assert out[8:10].tolist() == [n, n] and out[10:12].tolist() == [0, 0] and out[12:].tolist() == [n] * 4


@sim_only
def test_a_thread_polling_a_volatile_load_for_another_blocks_store_fails_as_a_spin_instead_of_hanging(ext):
    # the simulator switches threads only where one waits, and runs blocks one at a time: this poll never ends
    # here (on a GPU both blocks are resident). It used to hang the process; the watchdog stops it
    import time

    with knobs.set(spin_seconds=1):
        start = time.monotonic()
        with pytest.raises(RuntimeError, match=r"the kernel seems to spin forever at features\.cu:\d+: this thread ran 1 "
                                               r"seconds without reaching a barrier, a warp operation or an atomic.*"
                                               r"\[kernel volatile_handoff_kernel, block \(0,0,0\), thread \(0,0,0\)"):
            ext.volatile_handoff(torch.zeros(1))
        assert time.monotonic() - start < 15
    x = torch.randn(100)
    torch.testing.assert_close(ext.float_math(x)[0], torch.exp(x))  # the process and the module go on


@sim_only
def test_a_failed_assert_in_a_kernel_fails_the_launch_naming_it_instead_of_aborting_the_process(ext):
    # glibc's assert aborted the process (a Jupyter kernel with it); on a GPU the launch fails with cudaErrorAssert
    assert ext.device_assert(torch.zeros(1), 64).tolist() == list(range(64))
    with pytest.raises(RuntimeError, match=r"device-side assert triggered: the assertion `i < n' failed at "
                                           r"features\.cu:\d+ .*\[kernel device_assert_kernel, block \(0,0,0\), "
                                           r"thread \(32,0,0\)"):
        ext.device_assert(torch.zeros(1), 32)
    assert ext.device_assert(torch.zeros(1), 64)[63] == 63  # the module goes on


@pytest.mark.slow
def test_atomic_max_on_float_does_not_compile_as_on_nvcc(tmp_path):
    src = tmp_path / "bad_atomic.cu"
    src.write_text('#include "helpers.cuh"\n__global__ void k(float* m, float v) { atomicMax(m, v); }\n')
    with pytest.raises(BuildError) as e:
        load(src, "sim")
    assert "atomicMax takes int, unsigned int, long long or unsigned long long" in str(e.value)


# ---------------------------------------------------------------------------------------------
# math and types
def test_float_math(feat):
    x = torch.randn(1000) * 3
    out = feat.float_math(x)
    a = x.abs() + 1
    expect = [x.exp(), x.exp(), a.log(), x / 3, a.rsqrt(), x * 2 + 1, x.clamp(min=0.5), x.clamp(max=-0.5), x.tanh(),
              x.clamp(0, 1)]
    for k, e in enumerate(expect):
        torch.testing.assert_close(out[k], e, rtol=2e-6, atol=1e-6, msg=f"row {k}")


def test_integer_intrinsics_and_min_max_overloads(feat):
    vals = [0, 1, -1, 2, 7, 255, 256, -256, 2**31 - 1, -2**31, 123456, -98765]
    x = torch.tensor(vals + torch.randint(-2**31, 2**31 - 1, (200,)).tolist(), dtype=torch.int32)
    out = feat.int_math(x)
    for i, v in enumerate(x.tolist()):
        u = v & 0xFFFFFFFF
        ffs = (u & -u).bit_length()
        expect = [bin(u).count("1"), 32 - u.bit_length(), ffs, min(v, 1000), max(v, -1000), min(u, 5000),
                  256, min(v & 0xFF, 256), max(v * 3, -5), bin((v << 7) & (2**64 - 1)).count("1")]
        assert out[:, i].tolist() == expect, v


def test_vector_types(feat):
    x = torch.randn(4 * 301)
    torch.testing.assert_close(feat.vectors(x), x * 2 + 1)


def _special_floats() -> torch.Tensor:
    bits = [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x00000001, 0x807FFFFF, 0x33800000,
            0x33000000, 0x33000001, 0x387FC000, 0x38800000, 0x477FE000, 0x477FF000, 0x477FEFFF, 0x47800000,
            0x3F801000, 0x3F803000, 0x3F808000, 0x3F818000, 0x7F7FFFFF, 0x7F7F8000, 0x3F800001]
    special = torch.tensor([struct.unpack("<f", struct.pack("<I", b))[0] for b in bits])
    g = torch.Generator().manual_seed(torch.seed() % 2**31)
    rand_bits = torch.randint(0, 2**32, (20000,), generator=g, dtype=torch.int64)
    rand_bits = torch.where(rand_bits >= 2**31, rand_bits - 2**32, rand_bits).int()
    return torch.cat([special, rand_bits.view(torch.float32), torch.randn(5000) * 1e-6, torch.randn(5000) * 7e4])


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> None:
    nan = a.isnan()
    assert torch.equal(nan, b.isnan())
    ai, bi = a.view(torch.int16), b.view(torch.int16)
    bad = (ai != bi) & ~nan
    assert not bad.any(), f"first differences at {bad.nonzero()[:5].flatten().tolist()}"


def test_half_and_bfloat16_round_exactly_as_torch(feat):
    x = _special_floats()
    h, b = feat.to_half(x)
    _same_bits(h, x.half())
    _same_bits(b, x.bfloat16())


def test_half_and_bfloat16_widen_exactly(feat):
    h = torch.arange(-2**15, 2**15, dtype=torch.int32).short().view(torch.float16)
    b = torch.arange(-2**15, 2**15, dtype=torch.int32).short().view(torch.bfloat16)
    fh, fb = feat.from_half(h, b)
    for got, want in ((fh, h.float()), (fb, b.float())):
        nan = want.isnan()
        assert torch.equal(got.isnan(), nan)
        assert torch.equal(got[~nan].view(torch.int32), want[~nan].view(torch.int32))


def test_half_intrinsics(feat):
    a, b = torch.randn(1000).half(), torch.randn(1000).half()
    expect = (a.float() * b.float() + (a.float() + b.float()).half().float()).half()
    torch.testing.assert_close(feat.half_math(a, b), expect, rtol=1e-3, atol=1e-3)


@sim_only
def test_printf_from_a_kernel(ext, capfd):
    x = torch.tensor([0.5, 1.25, 2.0, 3.5])
    ext.kernel_printf(x)
    out = capfd.readouterr().out
    lines = [l for l in out.splitlines() if l.startswith("block")]
    assert lines == ["block 0 thread 0 value 0.50", "block 0 thread 1 value 1.25",
                     "block 1 thread 0 value 2.00", "block 1 thread 1 value 3.50"]


# ---------------------------------------------------------------------------------------------
# host side
@pytest.mark.parametrize("grid, block, smem", [
    ((0, 1, 1), (32, 1, 1), 0),      # no blocks
    ((1, 1, 1), (1025, 1, 1), 0),    # too many threads
    ((1, 1, 1), (0, 1, 1), 0),       # no threads
    ((1, 1, 1), (1, 1, 65), 0),      # block z above 64
    ((1, 65536, 1), (32, 1, 1), 0),  # grid y above 65535
    ((1, 1, 1), (32, 1, 1), 49 * 1024),  # too much dynamic shared memory
])
def test_invalid_launches_report_what_cuda_reports(feat, grid, block, smem):
    # measured on an H100 with CUDA 13: every one of these is cudaErrorInvalidValue
    with pytest.raises(RuntimeError, match="CUDA error: invalid argument"):
        feat.launch_config(list(grid), list(block), smem)


def test_largest_valid_launch_is_accepted(feat):
    feat.launch_config([3, 2, 1], [32, 32, 1], 48 * 1024)


def test_errors_stay_until_read_as_in_cuda(feat):
    # [after a bad launch, read again, after bad-then-good, cudaDeviceSynchronize]
    assert feat.error_api() == [1, 0, 1, 0]
    assert feat.error_string(1) == "cudaErrorInvalidValue: invalid argument"
    assert feat.error_string(9) == "cudaErrorInvalidConfiguration: invalid configuration argument"


@sim_only
@pytest.mark.toolkit  # host_api.cu: public extensions' host code (make test-toolkit)
def test_pybind_style_with_streams_and_guards(host):
    x = torch.randn(1000)
    torch.testing.assert_close(host.axpb(x, 2.0, 0.5), 2 * x + 0.5)
    torch.testing.assert_close(host.axpb_checked(x, -1.0, 3.0), 3 - x)
    assert host.axpb(torch.empty(0), 1.0, 1.0).numel() == 0


@sim_only
@pytest.mark.toolkit  # host_api.cu: public extensions' host code (make test-toolkit)
def test_device_properties_look_like_a_gpu(host):
    assert host.properties() == [32, 1, 1024, 48 * 1024, 0]


@sim_only
@pytest.mark.toolkit  # host_api.cu: public extensions' host code (make test-toolkit)
def test_plain_torch_library_impl_for_cuda_serves_cpu_tensors(host):
    x = torch.randn(10)
    torch.testing.assert_close(torch.ops.sim_host_api_test.twice(x), 2 * x)


@sim_only
@pytest.mark.toolkit  # host_api.cu: public extensions' host code (make test-toolkit)
def test_check_cuda_accepts_cpu_tensors_and_rejects_others(host):
    with pytest.raises(RuntimeError, match="x must be a CPU tensor \\(the simulator runs CUDA kernels on CPU tensors\\), got a tensor on meta"):
        host.axpb(torch.empty(4, device="meta"), 1.0, 0.0)


@pytest.mark.slow
def test_compiler_errors_point_at_the_learners_line():
    with pytest.raises(BuildError) as e:
        load(HERE / "syntax_error.cu", "sim")
    line = _line_of("SYNTAX-ERROR-LINE", HERE / "syntax_error.cu")
    assert re.search(rf"syntax_error\.cu:{line}:\d+: error", str(e.value)), str(e.value)


# ---------------------------------------------------------------------------------------------
# published styles (public_styles.cu), on the default backend: the same results on a GPU
def test_file_scope_extern_shared_is_each_launchs_dynamic_memory(styles, dev):
    x = torch.randn(1000, device=dev)
    out = styles.samples_reduce(x)
    torch.testing.assert_close(out[:-1], torch.nn.functional.pad(x, (0, 24)).view(-1, 256).sum(1))
    torch.testing.assert_close(out[-1], x.sum(), rtol=1e-5, atol=1e-4)


def test_file_scope_static_shared_is_per_block(styles, dev):
    x = torch.randn(45, 70, device=dev)
    x[x.abs() < 0.5] = 0
    out, counts = styles.samples_transpose(x)
    torch.testing.assert_close(out, x.t().contiguous())
    tiles = torch.nn.functional.pad(x != 0, (0, 26, 0, 19)).view(2, 32, 3, 32)
    assert torch.equal(counts.cpu(), tiles.sum((1, 3)).int().cpu())


@pytest.mark.parametrize("backend", BACKENDS)
def test_ptx_atom_red_and_strong_loads_and_stores_give_what_the_ptx_isa_says(backend):
    ext = load(HERE / "ptx_atomics.cu", backend)
    orders = knobs.ORDERS if backend == "sim" else ("forward",)
    for order in orders:
        with knobs.set(order=order) if backend == "sim" else nullcontext():
            out = ext.atomics().cpu()
            w = out[:6].numpy().view("<u4").tolist()  # the first 48 bytes as 32-bit words
            assert w[:11] == [sum(range(1, 65)), 2**32 - 20, 189, 0xFFFFFFFF, 0xFFFF0000, 0, 128,
                              64 % 10,    # inc wraps to 0 past 9: 64 increments from 0
                              42,         # dec from 5: 5 steps to 0, then 100, then 58 more
                              128, 0x42000000], (order, w)  # red.add 64 x 2; atom.add.f32 64 x 0.5 = 32.0
            assert 1000 <= w[11] <= 1063  # exch: some thread's value was the last
            assert out[6:].tolist() == [-sum(range(64)), 64]  # atom.add.u64 of negatives; atom.shared.add
            # a flag set by st.release.gpu, polled by ld.acquire.gpu (or ld.relaxed.gpu and a fence): the poll lets
            # the writing warp run, and the value written before the flag is read after it
            assert ext.handoff(0).item() == 42.5 and ext.handoff(1).item() == 42.5


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_float_atomic_add_in_global_memory_flushes_subnormals_and_one_in_shared_memory_keeps_them(backend):
    """Measured on an H200: RED/ATOM .ADD.F32.FTZ in global memory; in shared memory a compare-and-swap loop around
    an ordinary add; a double atomicAdd keeps its subnormals."""
    ext = load(HERE / "ptx_atomics.cu", backend)
    dev = "cuda" if backend == "cuda" else "cpu"
    # a subnormal operand, a subnormal value in memory, a subnormal sum of two normals, negative subnormals, a normal
    a = torch.tensor([0.0, 1e-40, 2e-38, -1e-40, -1e-40, 1.0, 3e-39])
    b = torch.tensor([1e-40, 0.0, -1.5e-38, 0.0, -1e-40, 1e-40, 3e-39])
    floats, doubles = ext.float_adds(a.to(dev), b.to(dev))
    plain, atomic, red, generic_shared, shared, explicit_shared, old = floats.cpu()
    bits = lambda t: t.view(torch.int32).tolist()  # noqa: E731  (tells -0.0 from 0.0)
    exact = a + b  # on the CPU: subnormals kept
    for kept in (plain, generic_shared, shared, explicit_shared):
        assert bits(kept) == bits(exact)
    flushed = torch.tensor([0.0, 0.0, 0.0, 0.0, -0.0, 1.0, 0.0])  # -0 + 0 is +0; -0 + -0 stays -0
    assert bits(atomic) == bits(flushed) and bits(red) == bits(flushed)
    assert bits(old) == bits(a)  # the old value comes back as memory held it
    assert doubles.cpu().tolist() == [2e-310] * len(a)


def test_host_code_may_name_its_launch_shapes_gridDim_and_blockDim(styles, dev):
    a, b = torch.randn(70, 50, device=dev), torch.randn(50, 33, device=dev)
    torch.testing.assert_close(styles.sgemm_runner(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_shared_array_of_a_template_type_declared_with_a_comment(styles, dev):
    x = torch.randn(5000, device=dev)
    out = styles.argmax(x).cpu()
    assert out[0].item() == x.max().item()
    assert out[1:].view(torch.int32).item() == x.argmax().item()


def test_reduce_min_max_compare_unsigned_values_as_unsigned(styles, dev):
    if dev.type == "cuda" and torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("__reduce_min_sync and __reduce_max_sync need compute capability 8.0")
    v = torch.randint(-2**31, 2**31 - 1, (64,), dtype=torch.int32)
    v[3], v[40] = -1, 0  # 0xFFFFFFFF: the largest unsigned value, the smallest int
    out = styles.reduce_unsigned(v.to(dev)).cpu().long()
    u = v.long() & 0xFFFFFFFF
    for w in range(2):
        seg, useg = v[32 * w:32 * (w + 1)].long(), u[32 * w:32 * (w + 1)]
        assert (out[w, :2] & 0xFFFFFFFF).tolist() == [useg.min().item(), useg.max().item()]
        assert out[w, 2:].tolist() == [seg.min().item(), seg.max().item()]


def test_an_atomic_that_changes_nothing_is_work_not_a_spin(styles, dev):
    # 256 threads each add 0.0f to one address 100,000 times, then 1.0f once
    assert styles.zero_adds(torch.empty(0, device=dev), 256, 100_000).item() == 256.0


def test_a_lock_between_threads_of_one_block_works_in_every_order(styles, dev):
    for order in ("forward", "reverse", "random"):
        with knobs.set(order=order, seed=5):
            assert styles.block_lock(torch.empty(0, device=dev), 64, 10).tolist() == [0, 640], order


# ---------------------------------------------------------------------------------------------
# what a GPU leaves undefined (undefined.cu), refused here
@sim_only
def test_shuffle_naming_an_exited_lane_raises_with_the_exit_and_the_shuffle(undefined):
    x = torch.randn(32)
    exit_line, shfl_line = _line_of("EXIT-LINE", UNDEFINED), _line_of("SHFL-LINE", UNDEFINED)
    for order in ("forward", "reverse"):
        with knobs.set(order=order):
            with pytest.raises(RuntimeError, match=re.escape(
                    f"__shfl_xor_sync at undefined.cu:{shfl_line} with mask 0xffffffff: lane 4 reads lane 20 "
                    f"(thread (20,0,0)), which has exited (returned at undefined.cu:{exit_line})") + ".*undefined on a GPU.*"
                    r"kernel exited_lane_max_kernel"):
                undefined.exited_lane_max(x, 20)


@sim_only
def test_shuffle_over_lanes_that_all_stay_still_works(undefined):
    x = torch.randn(32)
    assert undefined.exited_lane_max(x, 32).item() == x.max().item()


@sim_only
def test_shuffle_reading_a_lane_beyond_a_partial_warp_raises(undefined):
    line = _line_of("MISSING-LINE", UNDEFINED)
    with pytest.raises(RuntimeError, match=re.escape(
            f"__shfl_down_sync at undefined.cu:{line}: lane 0 reads lane 16 of warp 1, which does not exist: the "
            "block has 40 threads, so its last warp has 8 lanes")):
        undefined.missing_lane_sum(torch.randn(40))


@sim_only
def test_votes_and_syncwarp_count_only_the_lanes_that_have_not_exited(undefined):
    x = torch.randn(32)
    out = undefined.exited_lane_vote(x, 20)
    assert (out.long() & 0xFFFFFFFF).tolist() == [_ballot(x[:20] > 0)] * 20


@sim_only
def test_a_spin_on_a_lock_that_another_block_never_frees_is_reported(undefined):
    with pytest.raises(RuntimeError, match=r"seems to spin forever: this thread repeated an atomic on the same "
                       r"address a million times.*blocks run one at a time.*kernel lock_never_freed_kernel, block \(1,0,0\)"):
        undefined.lock_never_freed(torch.empty(0))


_OVERFLOW_SCRIPT = textwrap.dedent("""
    import os, sys, torch
    from kernels import load
    ext = load(sys.argv[1], "sim", quiet=True)
    x = torch.arange(300, dtype=torch.float32)
    try:
        ext.deep_recursion(x, 100)
        print("NO ERROR")
    except RuntimeError as e:
        print("ERROR", e)
    os.environ["CUDASIM_STACK_KB"] = "2048"
    print("SUM", ext.deep_recursion(x, 100).tolist())
    os.environ["CUDASIM_STACK_KB"] = "lots"
    try:
        ext.deep_recursion(x, 1)
    except RuntimeError as e:
        print("BAD KNOB", e)
""")


@sim_only
@pytest.mark.slow
def test_stack_overflow_in_a_thread_raises_and_the_stack_size_is_a_knob(undefined):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    env.pop("CUDASIM_STACK_KB", None)
    run = subprocess.run([sys.executable, "-c", _OVERFLOW_SCRIPT, str(UNDEFINED)], capture_output=True, text=True,
                         env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = {l.split(" ", 1)[0]: l for l in run.stdout.splitlines()}
    m = re.search(r"^ERROR cudasim: stack overflow at undefined.cu:(\d+): the thread used more than its 256 KB "
                  r"stack .*CUDASIM_STACK_KB.*kernel deep_recursion_kernel, block \(0,0,0\), thread \(\d,0,0\)",
                  lines["ERROR"])
    assert m, run.stdout
    first, last = _line_of("__device__ float recurse(", UNDEFINED), _line_of("return depth == 0", UNDEFINED)
    assert first <= int(m.group(1)) <= last + 1, f"line {m.group(1)} is not in recurse() ({first}-{last + 1})"
    expect = float(sum(2 * d % 300 for d in range(101)))  # x[i] = i; call d reads x[2d mod 300]
    assert lines["SUM"] == f"SUM {[expect, expect]}"
    assert "CUDASIM_STACK_KB must be a number of KB from 16 to 1048576, got 'lots'" in lines["BAD"]


@contextmanager
def _floats_before_unmapped_memory(n: int):
    """A float32 tensor of n elements whose last byte is the last byte of a page, and the page after it
    unreadable (as the end of a large allocation can be); the page is readable again afterwards."""
    import ctypes
    import mmap

    page = mmap.PAGESIZE
    buf = mmap.mmap(-1, 2 * page)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    assert libc.mprotect(addr + page, page, 0) == 0  # PROT_NONE, ctypes.get_errno()
    try:
        yield torch.frombuffer(buf, dtype=torch.float32, count=n, offset=page - 4 * n)
    finally:
        libc.mprotect(addr + page, page, mmap.PROT_READ | mmap.PROT_WRITE)


@sim_only
def test_a_write_past_the_end_into_unmapped_memory_is_an_error_naming_thread_line_and_address(undefined):
    line = _line_of("OOB-LINE", UNDEFINED)
    with _floats_before_unmapped_memory(1000) as out:
        end = out.data_ptr() + 4 * 1000
        with pytest.raises(RuntimeError) as err:
            undefined.write_one_past_end(out)
        assert out.tolist() == [1.0] * 1000  # every thread before thread 1000 wrote its element
    said = str(err.value)
    assert re.search(rf"cudasim: illegal memory access at undefined.cu:{line}: the thread read or wrote address "
                     rf"0x{end:x}, which is not mapped .*kernel write_one_past_end_kernel, block \(7,0,0\), "
                     r"thread \(104,0,0\)", said), said
    # the process goes on: the next launch of the same kernel into a tensor with room works
    room = torch.zeros(1001)
    undefined.write_one_past_end(room[:1000])
    assert room.tolist() == [1.0] * 1001


@contextmanager
def _floats_before_a_page_past_the_end_of_a_file(n: int, tmp_path: Path):
    """A float32 tensor of n elements ending at a page of a file mapping that lies past the file's end:
    an access there raises SIGBUS (Linux), the signal macOS raises for a page with no access."""
    import ctypes
    import mmap

    page = mmap.PAGESIZE
    backing = tmp_path / "one_page"
    backing.write_bytes(b"\0" * page)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    with open(backing, "r+b") as f:
        addr = libc.mmap(None, 2 * page, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, f.fileno(), 0)
    assert addr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
    try:
        yield torch.frombuffer((ctypes.c_float * n).from_address(addr + page - 4 * n), dtype=torch.float32)
    finally:
        libc.munmap(addr, 2 * page)


@sim_only
def test_a_write_that_raises_sigbus_is_an_error_naming_the_line_as_for_unmapped_memory(undefined, tmp_path):
    line = _line_of("OOB-LINE", UNDEFINED)
    with _floats_before_a_page_past_the_end_of_a_file(100, tmp_path) as out:
        with pytest.raises(RuntimeError) as err:
            undefined.write_one_past_end(out)
        assert out.tolist() == [1.0] * 100
    assert re.search(rf"cudasim: illegal memory access at undefined.cu:{line}: .*kernel write_one_past_end_kernel, "
                     r"block \(0,0,0\), thread \(100,0,0\)", str(err.value)), str(err.value)


@sim_only
def test_a_launch_that_failed_midway_leaves_nothing_behind_for_a_smaller_block(undefined):
    with pytest.raises(RuntimeError, match="which does not exist"):
        undefined.missing_lane_sum(torch.randn(40))  # 40 threads, abandoned in a shuffle
    x = torch.randn(32)
    assert (undefined.exited_lane_vote(x, 20).long() & 0xFFFFFFFF).tolist() == [_ballot(x[:20] > 0)] * 20
