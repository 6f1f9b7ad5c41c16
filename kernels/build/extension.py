"""A loaded file: its ops (an `Extension` over torch.ops.<namespace>) or its pybind11 module, and the op
namespaces this process has registered, so that a second registration is refused with an explanation
instead of aborting the process."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from .errors import BuildError, display_path
from .sources import SourceSet

_namespaces: dict[str, Path] = {}  # op namespace -> the file whose library registered it in this process


class Extension:
    """A loaded file whose ops are registered with TORCH_LIBRARY: `ext.op(x)` calls `torch.ops.<ns>.op`."""

    def __init__(self, ns: str, path: Path, backend: str, so: Path):
        self.ns, self.path, self.backend, self.so = ns, path, backend, so

    def __getattr__(self, op: str):
        import torch

        if op.startswith("__"):
            raise AttributeError(op)
        try:
            return getattr(getattr(torch.ops, self.ns), op)
        except (AttributeError, RuntimeError):
            raise AttributeError(f"{self.path.name} defines no op {op!r}; it defines: {', '.join(self.ops()) or 'none'}") from None

    def ops(self) -> list[str]:
        """The names of the ops the file registers."""
        import torch

        prefix = self.ns + "::"
        return sorted({n[len(prefix):].split(".")[0] for n in torch._C._dispatch_get_all_op_names() if n.startswith(prefix)})

    def __dir__(self):
        return [*super().__dir__(), *self.ops()]

    def __repr__(self):
        return f"<kernels from {self.path.name} on {self.backend}: {', '.join(self.ops())}>"


def import_library(name: str, so: Path, pybind: bool, sources: SourceSet, backend: str):
    """Load a built library: a pybind11 module (its `backend` and `path` set), or the ops of a TORCH_LIBRARY file."""
    import torch

    if pybind:
        spec = importlib.util.spec_from_file_location(name, so)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.backend, module.path = backend, sources.entry
        return module
    torch.ops.load_library(str(so))
    return Extension(sources.op_namespace(name), sources.entry, backend, so)


def remember_namespaces(sources: SourceSet, name: str) -> None:
    """Note which file registered the TORCH_LIBRARY namespaces of a loaded library (for clash messages)."""
    for ns in sources.fixed_namespaces(name):
        _namespaces.setdefault(ns, sources.entry)


def namespace_taken(ns: str) -> bool:
    """Whether a TORCH_LIBRARY for `ns` exists in this process, with ops or without: asks the dispatcher
    for a library of that namespace (refused when one exists) and releases it at once."""
    import torch

    try:
        probe = torch._C._dispatch_library("DEF", ns, "", "kernels.build", 0)
    except RuntimeError:
        return True
    probe.reset()
    return False


def namespace_clash(sources: SourceSet, name: str, backend: str) -> BuildError | None:
    """An error when the file registers an op namespace this process already has (even one without
    ops): loading a second TORCH_LIBRARY for a namespace aborts the process (a C++ exception during
    dlopen), so it is refused."""
    entry = sources.entry
    for ns in sorted(sources.fixed_namespaces(name)):
        if not namespace_taken(ns):
            continue
        by = _namespaces.get(ns)
        where = f"by {display_path(by)}" if by else "by another library or torch.library"
        return BuildError(
            f"the op namespace {ns!r} is already registered in this process ({where}); {display_path(entry)} "
            f"registers it again with TORCH_LIBRARY, and PyTorch allows one TORCH_LIBRARY per namespace per "
            f"process. Restart the Python process (in Jupyter: Kernel > Restart) before loading it for {backend}, "
            "or give the file a namespace of its own (TORCH_EXTENSION_NAME).")
    import torch

    have = set(torch._C._dispatch_get_all_op_names())
    for ns, op in sources.fragment_defs(name):
        if f"{ns}::{op}" in have:
            return BuildError(
                f"the op {ns}::{op} is already defined in this process; {display_path(entry)} defines it again "
                f"in a TORCH_LIBRARY_FRAGMENT, and PyTorch allows one definition of an op per process (an edited "
                f"copy of a source loaded before defines it a second time). Restart the Python process (in "
                f"Jupyter: Kernel > Restart) before loading it for {backend}, or give the file a namespace of its "
                "own (TORCH_LIBRARY_FRAGMENT_EXPAND(TORCH_EXTENSION_NAME, m): each build gets its own).")
    return None
