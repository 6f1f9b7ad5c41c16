"""The instrumented twin of a file loaded for the simulator, and running its ops instead of the plain ones.

Every load and store of an instrumented build calls a hook (kernels/sim/include/cudasim_instrument.h),
which hands it to the access profiler (`kernels.profile`) or to the race and bounds check (the checker's
race pass, kernels/sim/racecheck.py) while one of them is on; otherwise the build runs as the plain one
does, a few times slower. The twin is a separate cached build of the same file (instrumented_flags); the
op namespaces the file names itself get a suffix, so that the twin loads beside the plain build.

    with redirected(around):      # `around(twin, call, ...)` runs `call()` with the profiler or the check on
        fn(*args)                 # ops of sim-loaded files run from their twins

Ops registered with TORCH_LIBRARY are redirected at the dispatcher (a TorchDispatchMode); functions of a
PYBIND11_MODULE file by swapping the loaded module's functions for the twin's while the block runs (a
function object taken from the module before the block is redirected when it is the `fn` itself; see
`twin_function`).
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import shutil
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Callable

from ..build import Extension, SourceSet, is_cached, load, loaded_extensions, namespace_suffix
from ..build.extension import fixed_namespaces
from ..build.toolchain import cxx
from .build import instrumented_flags


@functools.cache
def compiler_problem() -> str | None:
    """Why this machine cannot make an instrumented build (None when it can): the C++ compiler that
    builds use must accept -fsanitize=thread (gcc and clang do) and addr2line must be there."""
    compiler = cxx("sim")
    install = ("install g++ (Debian/Ubuntu: apt-get install g++ binutils; macOS: xcode-select --install) "
               "or clang++, and make sure $CXX (or c++) names it")
    if not shutil.which(compiler):
        return f"an instrumented build needs a C++ compiler, and {compiler} was not found: {install}"
    if not shutil.which("addr2line"):
        return ("instrumented builds map instructions to source lines with addr2line, which was not found: install "
                "binutils (apt-get install binutils) or LLVM's llvm-addr2line as addr2line")
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "probe.cpp"
        src.write_text("int probe(int* p) { return *p; }\n")
        run = subprocess.run([compiler, *instrumented_flags(), "-fPIC", "-O2", "-c", str(src), "-o", str(Path(d) / "p.o")],
                             capture_output=True, text=True)
    if run.returncode != 0:
        said = (run.stderr.strip().splitlines() or ["no message"])[0]
        return f"instrumented builds use -fsanitize=thread, which {compiler} refused ({said}): {install}"
    return None


class Twin:
    """A file's instrumented build, loaded: `lib` holds the C functions of cudasim_instrument.h and
    cudasim_profile.h, `loaded` the ops (an Extension) or the pybind11 module."""

    def __init__(self, loaded):
        loaded.instrumented = True  # a twin is never redirected itself
        self.loaded = loaded
        self.so = Path(getattr(loaded, "so", None) or loaded.__file__)
        self.lib = ctypes.CDLL(str(self.so))
        self.lib.cudasim_check_region.argtypes = [ctypes.c_ulonglong, ctypes.c_ulonglong, ctypes.c_ulonglong,
                                                  ctypes.c_char_p]
        self.lib.cudasim_check_start.restype = ctypes.c_int

    def op(self, func, plain):
        """The twin's overload of an overload (an OpOverload of torch.ops) of the plain library `plain`: in the
        namespace the file names itself with the twin's suffix, or in the twin's own TORCH_EXTENSION_NAME."""
        import torch

        if func.namespace == _build_name(plain):
            ns = _build_name(self.loaded)
        else:
            ns = func.namespace + namespace_suffix(instrumented_flags())
        return getattr(getattr(getattr(torch.ops, ns), func._opname), func._overloadname)


_twins: dict[str, Twin] = {}  # by the plain library's file and kind


def _key(plain) -> str:
    return (str(getattr(plain, "path", "")) + ("|module" if isinstance(plain, types.ModuleType) else "|ops")
            + "|" + " ".join(getattr(plain, "extra_cflags", [])) + "|" + repr(getattr(plain, "link_options", {})))


def build_beside(path: Path) -> subprocess.Popen | None:
    """Start building the twin of a .cu file in a child process, beside the plain build the caller makes next
    (two compilers on two cores: the check waits for the longer build, not for both). The child only fills
    the build cache; `prepare` later loads the twin from it (or waits for the child's build through the
    cache's lock). None where no twin can be built, or the child cannot start."""
    from ..build.toolchain import child_env

    if Path(path).suffix != ".cu" or compiler_problem() or is_cached(path, "sim", instrumented_flags()):
        return None
    code = ("import sys\nfrom kernels.build import load\nfrom kernels.sim.build import instrumented_flags\n"
            "load(sys.argv[1], 'sim', extra_cflags=instrumented_flags(), quiet=True)\n")
    try:
        return subprocess.Popen([sys.executable, "-c", code, str(path)], env=child_env(), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        return None


def prepare(plain, beside: subprocess.Popen | None = None) -> None:
    """Build and load the twin of a sim-loaded file now (its build is cached like any other), so that a check's
    first case does not wait for it. It builds on the calling thread: loading a library runs its static
    initialisers (op registrations), which must not race with the ops the calling thread runs. `beside`, a
    child started by build_beside, is waited for first (a build it failed is then made here and reported)."""
    if beside is not None:
        try:
            beside.wait(timeout=1800)
        except subprocess.TimeoutExpired:
            beside.kill()
    if getattr(plain, "backend", None) == "sim":
        try:
            twin_of(plain)
        except Exception:  # noqa: BLE001 - the case that uses the twin reports it
            pass


def prepare_for(fn: Callable) -> None:
    """`prepare` the twin of the file an op or a pybind11 function comes from (nothing for other callables:
    their twins are built when they first call an op)."""
    qualified = getattr(fn, "_qualified_op_name", None) or getattr(getattr(fn, "_schema", None), "name", None)
    if qualified:
        plain = _sim_library(qualified.split("::")[0])
        if plain is not None:
            prepare(plain)
        return
    for module in _sim_modules():
        if getattr(module, getattr(fn, "__name__", "") or "", None) is fn:
            prepare(module)


def twin_of(plain) -> Twin:
    """The twin of a file loaded for the simulator (an Extension or a pybind11 module), built and loaded once."""
    key = _key(plain)
    if key not in _twins:
        problem = compiler_problem()
        if problem:
            raise RuntimeError(problem)
        flags = [*getattr(plain, "extra_cflags", []), *instrumented_flags()]  # the plain build's own flags too
        _twins[key] = Twin(load(plain.path, "sim", extra_cflags=flags, quiet=True,
                                **getattr(plain, "link_options", {})))  # objects and libraries linked as the plain build
    return _twins[key]


def _build_name(loaded) -> str:
    """The name a library was built under (its TORCH_EXTENSION_NAME)."""
    return loaded.so.stem if isinstance(loaded, Extension) else loaded.__name__


def _sim_library(namespace: str):
    """The plain library loaded for the simulator that registers ops in this namespace (an Extension, or a
    pybind11 module whose file also has a TORCH_LIBRARY block), or None."""
    for lib in loaded_extensions():
        if getattr(lib, "backend", "") != "sim" or getattr(lib, "instrumented", False):
            continue
        if isinstance(lib, Extension) and lib.ns == namespace:
            return lib
        if isinstance(lib, types.ModuleType) and namespace in fixed_namespaces(SourceSet.of(lib.path), lib.__name__):
            return lib
    return None


def _sim_modules() -> list[types.ModuleType]:
    """The pybind11 modules of files loaded for the simulator."""
    return [m for m in loaded_extensions() if isinstance(m, types.ModuleType) and getattr(m, "backend", "") == "sim"
            and not getattr(m, "instrumented", False)]


def twin_function(fn: Callable, around) -> Callable | None:
    """A pybind11 function of a sim-loaded module (`ext.my_op`), or an op of a sim-loaded library with one
    overload, as its twin's, run through `around`; else None. An op taken directly, not only through the
    dispatcher: one that `m.def(schema, &function)` registers has a kernel for every dispatch key
    (CompositeImplicitAutograd), which runs below any TorchDispatchMode, so `redirected` never sees it."""
    for module in _sim_modules():
        name = getattr(fn, "__name__", None)
        if name and getattr(module, name, None) is fn:
            return _wrapped(module, name, around)
    overload = _single_overload(fn)
    if overload is None or not _below_dispatch_modes(overload):  # the others `redirected` sees (autograd kept)
        return None
    plain = _sim_library(overload.namespace)
    if plain is None:
        return None

    def call(*args, **kwargs):
        twin = twin_of(plain)
        return around(twin, lambda: twin.op(overload, plain)(*args, **kwargs), overload._opname, args, kwargs)
    return call


def _below_dispatch_modes(overload) -> bool:
    """Whether the op runs below a TorchDispatchMode: a kernel for every key (CompositeImplicitAutograd), none for
    the CPU."""
    import torch

    has = torch._C._dispatch_has_kernel_for_dispatch_key
    return has(overload.name(), "CompositeImplicitAutograd") and not has(overload.name(), "CPU")


def _single_overload(fn):
    """fn as an OpOverload: itself, or the only overload of an OpOverloadPacket; else None."""
    import torch

    if isinstance(fn, torch._ops.OpOverload):
        return fn
    if isinstance(fn, torch._ops.OpOverloadPacket) and fn.overloads() == ["default"]:
        return fn.default
    return None


def _wrapped(module, name: str, around) -> Callable:
    def call(*args, **kwargs):
        twin = twin_of(module)
        return around(twin, lambda: getattr(twin.loaded, name)(*args, **kwargs), name, args, kwargs)
    call.__name__ = name
    return call


@contextlib.contextmanager
def redirected(around: Callable):
    """Inside the block, the ops and pybind11 functions of files loaded for the simulator run from their
    twins, each call as `around(twin, call, name, args, kwargs)`: `call()` makes it, `name` names the op or
    function, `args` and `kwargs` are what it was given."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Redirect(TorchDispatchMode):
        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            # PyTorch wraps a mode's __torch_dispatch__ in dynamo's disable, whose first call imports torch._dynamo:
            # about 5 s in every process that runs a race check. Where dynamo is not loaded yet, nothing in the
            # process is being compiled, so the wrapper has nothing to keep out and is left off.
            return "torch._dynamo" in sys.modules

        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            plain = _sim_library(func.namespace)
            if plain is None:
                return func(*args, **(kwargs or {}))
            twin = twin_of(plain)
            return around(twin, lambda: twin.op(func, plain)(*args, **(kwargs or {})), func._opname, args, kwargs or {})

    swapped = []
    for module in _sim_modules():
        for name, value in list(vars(module).items()):
            if isinstance(value, types.BuiltinFunctionType) and not name.startswith("_"):
                swapped.append((module, name, value))
                setattr(module, name, _wrapped(module, name, around))
    try:
        with Redirect():
            yield
    finally:
        for module, name, value in swapped:
            setattr(module, name, value)
