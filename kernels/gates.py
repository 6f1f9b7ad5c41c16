"""Compute-capability gates: what a GPU smaller than the one a kernel needs runs on the simulator instead.

The lessons run on NVIDIA GPUs of compute capability 7.5 (Turing: Colab's T4) and up: 8.0 (A100), 8.9 (L4,
Ada) and 9.0 (H100). A variant or an exercise that needs more than 7.5 (bf16 or TF32 tensor cores, cp.async
with more shared memory than a T4 has) says so once, in its lesson's declaration (kernels/lessons/lessonNN.py:
`Variant(..., needs=Needs((8, 0), "TF32 tensor cores"))`, the same on an Exercise). Its .cu file still builds
for every target: the device code a target lacks sits under `#if __CUDA_ARCH__ >= 800` with a body that traps,
and its launcher refuses a GPU below the gate (CHECK_CAPABILITY in helpers.cuh), so that one reference file
is one extension on a T4 too (`make compile-check TARGETS=all` proves it for every target). On a GPU below
a gate, after one line that says so:

    load() of a reference file   an op called in a dtype its gate covers runs on the simulator's build of the
                                 same file (the tensors copied to the CPU, the ones it writes copied back);
    an exercise's file           is built and checked on the simulator (load, make check, a notebook's check);
    make bench, make profile KERNEL=   leave it out (the simulator's timings say nothing about a GPU).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from . import backend as _backend

Capability = tuple[int, int]
FLOOR: Capability = (7, 5)  # the smallest GPU the lessons run on (Turing, a T4): what needs no gate
# The GPUs the lessons are built for, one per architecture learners have (T4, A100, L4, H100): the targets of
# `make compile-check TARGETS=all`.
TARGETS: tuple[Capability, ...] = ((7, 5), (8, 0), (8, 9), (9, 0))


def shown(capability: Capability) -> str:
    """(8, 0) as "8.0"."""
    return f"{capability[0]}.{capability[1]}"


def parse(text: str) -> Capability:
    """"8.0" (or "80") as (8, 0); a ValueError that says what was expected otherwise."""
    major, dot, minor = text.strip().partition(".")
    if not dot and len(major) >= 2:
        major, minor = major[:-1], major[-1]
    if not (major.isdigit() and minor.isdigit() and len(minor) == 1):
        raise ValueError(f"expected a compute capability such as 7.5 or 9.0, got {text!r}")
    return int(major), int(minor)


@dataclass(frozen=True)
class Needs:
    """What a variant or an exercise needs beyond the floor (7.5): a compute capability, for what (said to the
    learner), and the dtypes it needs it in (() for every dtype it takes). `only_major`: the code is built for an
    architecture-specific target (sm_90a: wgmma, setmaxnreg), whose binary runs on GPUs of that major version
    alone, so a later GPU (a 10.x or 12.x) lacks it as an earlier one does."""

    capability: Capability
    what: str
    dtypes: tuple = ()  # torch dtypes
    only_major: bool = False

    def __post_init__(self):
        if not (isinstance(self.capability, tuple) and len(self.capability) == 2 and self.capability > FLOOR):
            raise ValueError(f"Needs takes a compute capability above {shown(FLOOR)} (the floor every kernel runs "
                             f"on) such as (8, 0), got {self.capability!r}")

    def covers(self, dtype=None) -> bool:
        """Whether the gate holds for a call in `dtype` (None: the dtype is not known, so any)."""
        return not self.dtypes or dtype is None or dtype in self.dtypes

    def met_by(self, capability: Capability, dtype=None) -> bool:
        """Whether a GPU of this capability runs it (in `dtype`)."""
        if not self.covers(dtype):
            return True
        return capability >= self.capability and (not self.only_major or capability[0] == self.capability[0])


def described(name: str, needs: Needs, dtype=None, capability: Capability | None = None) -> str:
    """'`matmul11` needs compute capability 8.0 for TF32 tensor cores' (with the dtype where the gate holds in some);
    '... 9.x ...' for a GPU past an architecture-specific gate (`capability`, the GPU's)."""
    import torch

    which = f" in {str(dtype).replace('torch.', '')}" if needs.dtypes and isinstance(dtype, torch.dtype) else ""
    past = needs.only_major and capability is not None and capability[0] > needs.capability[0]
    wanted = f"{needs.capability[0]}.x" if past else shown(needs.capability)
    return f"`{name}`{which} needs compute capability {wanted} for {needs.what}"


def shortfall(name: str, needs: Needs | None, dtype=None, capability: Capability | None = None) -> str | None:
    """'`matmul11` needs compute capability 8.0 for TF32 tensor cores (this GPU has 7.5)' when the GPU (of
    `capability`, default the one the cuda backend runs on) lacks what `needs` asks for in `dtype`; else None
    (no gate, a dtype it does not cover, or no GPU). Past an architecture-specific gate: '... needs compute
    capability 9.x for ... (this GPU has 10.0)'."""
    have = capability or _backend.gpu_capability()
    if needs is None or have is None or needs.met_by(have, dtype):
        return None
    return f"{described(name, needs, dtype, have)} (this GPU has {shown(have)})"


_said: set[str] = set()


def say(line: str) -> None:
    """Print a gate's line, once per process (a check calls an op for every case)."""
    if line not in _said:
        _said.add(line)
        print(line, flush=True)


ON_SIMULATOR = ": it runs on the simulator instead"
NOT_TIMED = ": left out (timings on the simulator say nothing about a GPU)"


def runnable(names: list[str], needs: Callable[[str], Needs | None], dtype=None) -> list[str]:
    """The names whose gate this GPU meets in `dtype`, saying for each other one that it is left out (the
    benchmarks and Nsight Compute: they time or measure the GPU, so the simulator is no stand-in)."""
    out = []
    for name in names:
        line = shortfall(name, needs(name), dtype)
        if line:
            say(line + NOT_TIMED)
        else:
            out.append(name)
    return out


# ---------------------------------------------------------------------------------------------
# An op on the simulator in place of the GPU.

def _first_dtype(args: tuple, kwargs: dict):
    import torch

    return next((a.dtype for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)


def _written(op, n_args: int, kwargs: dict) -> tuple[set[int], set[str]]:
    """The positions and names of the arguments the op writes (`Tensor(a!)` in its schema)."""
    schema = getattr(getattr(op, "default", None), "_schema", None) or getattr(op, "_schema", None)
    if schema is None:
        return set(range(n_args)), set(kwargs)  # no schema: copy every tensor back
    written = [i for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write]
    names = {schema.arguments[i].name for i in written}
    return {i for i in written if i < n_args}, {k for k in kwargs if k in names}


def run_on_simulator(sim_op, args: tuple, kwargs: dict):
    """sim_op (an op of the simulator's build) on CPU copies of the tensors among args; the arguments it
    writes are copied back into the caller's tensors, and what it returns goes to the first tensor's device."""
    import torch

    def to_cpu(a):
        return a.detach().cpu() if isinstance(a, torch.Tensor) else a

    cpu_args, cpu_kwargs = [to_cpu(a) for a in args], {k: to_cpu(v) for k, v in kwargs.items()}
    result = sim_op(*cpu_args, **cpu_kwargs)
    positions, names = _written(sim_op, len(args), kwargs)
    for i in positions:
        if isinstance(args[i], torch.Tensor) and args[i] is not cpu_args[i]:
            args[i].copy_(cpu_args[i])
    for k in names:
        if isinstance(kwargs[k], torch.Tensor) and kwargs[k] is not cpu_kwargs[k]:
            kwargs[k].copy_(cpu_kwargs[k])
    device = next((a.device for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
    if device is None or device.type == "cpu":
        return result
    if isinstance(result, torch.Tensor):
        return result.to(device)
    if isinstance(result, (tuple, list)):
        return type(result)(r.to(device) if isinstance(r, torch.Tensor) else r for r in result)
    return result


class GatedOp:
    """An op of a file built for this GPU, called where the GPU may lack what the op needs (`needs`): in a
    dtype the gate covers it runs on the simulator's build of the same file instead, after a line that says so;
    otherwise it is the op itself. Everything else (its name, schema, overloads) is the op's."""

    def __init__(self, op, name: str, needs: Needs, simulated: Callable[[], object]):
        self._op, self._name, self._needs, self._simulated = op, name, needs, simulated

    def __getattr__(self, attr: str):
        return getattr(self._op, attr)

    def __call__(self, *args, **kwargs):
        line = shortfall(self._name, self._needs, _first_dtype(args, kwargs))
        if line is None:
            return self._op(*args, **kwargs)
        say(line + ON_SIMULATOR)
        return run_on_simulator(getattr(self._simulated(), self._name), args, kwargs)

    def __repr__(self):
        return f"<{self._name}, on the simulator where the GPU lacks compute capability {shown(self._needs.capability)}>"


def simulated_file(path: Path) -> Callable[[], object]:
    """A function that loads `path` for the simulator (built once, then from load's cache)."""
    def get():
        from .build import load

        return load(path, "sim")
    return get


class GatedExtension:
    """A loaded file whose ops `gated(name)` names (with their Needs) are GatedOps; anything else is the file's own
    (kernels.build.load returns it on a GPU below a gate that the file's lesson declares)."""

    def __init__(self, ext, gated: Callable[[str], Needs | None], simulated: Callable[[], object]):
        self._ext, self._gated, self._simulated = ext, gated, simulated

    def __getattr__(self, name: str):
        found = getattr(self._ext, name)
        needs = None if name.startswith("_") or not callable(found) else self._gated(name)
        return GatedOp(found, name, needs, self._simulated) if needs else found

    def __dir__(self):
        return dir(self._ext)

    def __repr__(self):
        return repr(self._ext)


def guarded(path: Path, build: Callable[[str], object]):
    """build(backend) of `path` with the gates its lesson declares (kernels.lessons: file_gate, op_gates) for this
    GPU: an exercise's file the GPU lacks what it needs for is built for the simulator (after a line that says so),
    its ops taking tensors on either device; a reference file is built for the GPU, the ops whose gate the GPU falls
    short of GatedOps. Anything else is build("cuda") as it is."""
    from . import lessons

    whole = lessons.file_gate(path)
    line = shortfall(*whole) if whole else None
    if line:
        say(line + ON_SIMULATOR)
        sim, every_dtype = build("sim"), replace(whole[1], dtypes=())  # no build of the file for this GPU
        return GatedExtension(sim, lambda name: every_dtype, lambda: sim)
    ext = build("cuda")
    gates = {op: needs for op, needs in lessons.op_gates(path).items() if shortfall(op, needs)}
    return GatedExtension(ext, gates.get, simulated_file(path)) if gates else ext
