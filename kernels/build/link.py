"""A build's compile and link inputs beyond the file, named as PyTorch's cpp_extension.load names them:
extra_cuda_cflags, extra_ldflags, extra_include_paths and extra_objects; checked once (a bad flag or path
is a clear error before any compiler runs) and made part of the build cache's key."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


def _strings(name: str, value) -> list[str]:
    """A list of strings (or paths) given for option `name`; anything else is a ValueError."""
    if value is None:
        return []
    if isinstance(value, (str, os.PathLike)) or not isinstance(value, (list, tuple)):
        raise ValueError(f"{name} must be a list of strings, got {value!r:.80}")
    out = []
    for v in value:
        if not isinstance(v, (str, os.PathLike)) or not str(v).strip():
            raise ValueError(f"{name} must be a list of non-empty strings, got {v!r:.80} in it")
        out.append(os.fspath(v))
    return out


def _existing(name: str, what: str, path: str, folder: bool) -> str:
    """`path` resolved, when it is an existing folder (`folder`) or file; else a FileNotFoundError."""
    p = Path(path).expanduser()
    if not (p.is_dir() if folder else p.is_file()):
        raise FileNotFoundError(f"{name}: no such {what}: {path} (looked from {Path.cwd()})")
    return str(p.resolve())


@dataclass
class LinkOptions:
    cuda_cflags: list[str] = field(default_factory=list)
    ldflags: list[str] = field(default_factory=list)
    include_paths: list[str] = field(default_factory=list)   # resolved folders
    objects: list[str] = field(default_factory=list)         # resolved object and library files

    @classmethod
    def of(cls, extra_cuda_cflags=None, extra_ldflags=None, extra_include_paths=None, extra_objects=None):
        """The options as load() was given them, checked: include folders and objects must exist; a linker
        flag is an option (-l, -L, -Wl, ...) or an existing library file, and -L's folder must exist."""
        ldflags = []
        for f in _strings("extra_ldflags", extra_ldflags):
            if f.startswith("-L") and len(f) > 2:
                ldflags.append("-L" + _existing("extra_ldflags", "library folder", f[2:], folder=True))
            elif f.startswith("-"):
                ldflags.append(f)
            elif Path(f).is_file():
                ldflags.append(str(Path(f).resolve()))
            else:
                raise FileNotFoundError(f"extra_ldflags: {f!r} is neither an option (-lname, -Lfolder, -Wl,...) nor "
                                        f"an existing library file")
        return cls(cuda_cflags=_strings("extra_cuda_cflags", extra_cuda_cflags), ldflags=ldflags,
                   include_paths=[_existing("extra_include_paths", "folder", p, folder=True)
                                  for p in _strings("extra_include_paths", extra_include_paths)],
                   objects=[_existing("extra_objects", "object or library file", p, folder=False)
                            for p in _strings("extra_objects", extra_objects)])

    def as_load_options(self) -> dict[str, list[str]]:
        """These options as load()'s keyword arguments (the ones given), to build the same file again with them."""
        given = {"extra_cuda_cflags": self.cuda_cflags, "extra_ldflags": self.ldflags,
                 "extra_include_paths": self.include_paths, "extra_objects": self.objects}
        return {k: list(v) for k, v in given.items() if v}

    @property
    def empty(self) -> bool:
        return not (self.cuda_cflags or self.ldflags or self.include_paths or self.objects)

    def search(self) -> list[Path]:
        """Where the file's quoted includes are looked for after its own folder: these folders, then kernels/include."""
        from ..paths import INCLUDE

        return [*map(Path, self.include_paths), INCLUDE]

    def key_parts(self) -> list[str]:
        """What of these options goes into the cache key beside the flags (file contents: linked_files)."""
        return ["|cuda_cflags", *self.cuda_cflags, "|ldflags", *self.ldflags, "|include", *self.include_paths,
                "|objects", *self.objects]

    def angle_included_files(self, sources) -> list[Path]:
        """The files that `#include <...>` lines of the sources (and of what they reach) find in these include
        folders: the cache key covers them, as it covers the quoted includes the SourceSet walks."""
        from .sources import SourceSet

        found: dict[Path, None] = {}
        todo = [sources]
        while todo:
            for name in sorted(todo.pop().system_includes):
                for folder in map(Path, self.include_paths):
                    path = (folder / name).resolve()
                    if path.is_file():
                        if path not in found:
                            found[path] = None
                            reached = SourceSet.of(path, self.search())
                            found.update(dict.fromkeys(f.resolve() for f in reached.files))
                            todo.append(reached)
                        break
        return list(found)

    def linked_files(self) -> list[Path]:
        """The files linked whose contents the cache key covers: the objects, the library files named, and
        lib<name>.a/.so in the -L folders for each -l<name>."""
        files = [Path(o) for o in self.objects] + [Path(f) for f in self.ldflags if not f.startswith("-")]
        folders = [Path(f[2:]) for f in self.ldflags if f.startswith("-L")]
        for f in self.ldflags:
            if f.startswith("-l"):
                files += [d / f"lib{f[2:]}{ext}" for d in folders for ext in (".a", ".so")
                          if (d / f"lib{f[2:]}{ext}").is_file()]
        return files
