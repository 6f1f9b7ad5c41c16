"""What a build reads: a .cu file and the local headers it includes, scanned once (`SourceSet`).

    src = SourceSet.of(Path("kernels/reference/04_memory_bound.cu"))
    src.files                   # the file, then every local header it reaches, in a stable order
    src.system_includes         # the <...> headers they include in code
    src.op_namespace("name")    # the namespace whose ops an Extension shows

Both backends, the cache key, the compile check and the simulator's translator read the files through
one SourceSet per build: one include walk, one code mask per file (what is code, not a comment or a
string literal), one scan for TORCH_LIBRARY blocks and pybind11. Nothing here knows about a backend.
"""
from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..paths import INCLUDE

INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)
SYSTEM_INCLUDE_RE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*<([^>\n]+)>", re.M)
# What in code (not in comments or strings) needs pybind11 or Python's C API: PYBIND11_MODULE and
# the other macros, py:: and pybind11::, PyObject, PyInit_..., PyModule_..., THPVariable_...
PYTHON_USE_RE = re.compile(r"\b(?:PYBIND11_\w+|pybind11\b|py::|Py[A-Z_]\w*|THP\w+)")
# A TORCH_LIBRARY, or with `fragment` a TORCH_LIBRARY_FRAGMENT, block (_EXPAND forms too): the
# namespace is group 3, the module variable group 4, and the block's body starts at the match's end.
_BLOCK_RE = {fragment: re.compile(rf"\bTORCH_LIBRARY({'_FRAGMENT' if fragment else ''})(_EXPAND)?\s*\(\s*(\w+)"
                                  r"\s*,\s*(\w+)\s*\)\s*\{") for fragment in (False, True)}
# The headers of all of libtorch's C++ API (torch/extension.h adds pybind11 to it)
TORCH_API_HEADERS = ("torch/extension.h", "torch/all.h", "torch/python.h")


def code_mask(src: str) -> bytearray:
    """1 for characters that are code, 0 inside comments, string and character literals."""
    mask = bytearray(b"\x01" * len(src))
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c == "/" and src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
        elif c == "/" and src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif c == "R" and src.startswith('R"', i) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'R"([^()\\\s]{0,16})\(', src[i:])
            if not m:
                i += 1
                continue
            end = src.find(")" + m.group(1) + '"', i)
            j = n if end < 0 else end + len(m.group(1)) + 2
        elif c in "\"'":
            if c == "'" and _is_digit_separator(src, i):
                i += 1  # a digit separator such as 1'000'000
                continue
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            j = min(j + 1, n)
        else:
            i += 1
            continue
        for k in range(i, j):
            mask[k] = 0
        i = j
    return mask


def _is_digit_separator(src: str, i: int) -> bool:
    """Whether the quote at `i` sits inside a number (1'048'576, 0x'FF), not before a char literal."""
    j = i
    while j > 0 and (src[j - 1].isalnum() or src[j - 1] in "_.'"):
        j -= 1
    return j < i and (src[j].isdigit() or (src[j] == "." and j + 1 < i and src[j + 1].isdigit()))


def masked_text(src: str, mask: bytearray) -> str:
    """`src` with comments, strings and character literals replaced by blanks (newlines kept)."""
    return "".join(c if mask[i] or c == "\n" else " " for i, c in enumerate(src))


def line_of(src: str, pos: int) -> int:
    """The 1-based line of the character at `pos`."""
    return src.count("\n", 0, pos) + 1


def is_directive(src: str, mask: bytearray, m: re.Match) -> bool:
    """Whether a match of a directive regex (which starts at a line's first blank) is code, not a comment."""
    return bool(mask[m.start()] or src[m.start()].isspace())


@dataclass
class SourceText:
    """One file of a SourceSet: its text, its code mask and the local headers it includes (name -> path)."""

    path: Path
    text: str
    mask: bytearray
    includes: dict[str, Path]

    @functools.cached_property
    def code(self) -> str:
        """The text with comments and literals blanked."""
        return masked_text(self.text, self.mask)


def local_includes(path: Path, text: str, mask: bytearray, search: list[Path]) -> dict[str, Path]:
    """Quoted includes of the file that resolve to files (beside it, else in `search`), by the name written."""
    found = {}
    for m in INCLUDE_RE.finditer(text):
        if not is_directive(text, mask, m):
            continue
        name = m.group(1)
        for d in [path.parent, *search]:
            cand = d / name
            if cand.is_file():
                found[name] = cand.resolve()
                break
    return found


@dataclass
class SourceSet:
    """A .cu file and every local header it reaches through quoted includes (beside each file, else in
    kernels/include), each read and masked once."""

    entry: Path
    texts: dict[Path, SourceText] = field(default_factory=dict)  # in walk order: the entry first

    @classmethod
    def of(cls, entry: Path, search: list[Path] | None = None) -> "SourceSet":
        """The include walk from `entry` (search: the folders after the file's own; default kernels/include)."""
        search = [INCLUDE] if search is None else search
        out = cls(Path(entry).resolve())
        todo = [out.entry]
        while todo:
            p = todo.pop()
            if p in out.texts:
                continue
            text = p.read_text()
            mask = code_mask(text)
            out.texts[p] = SourceText(p, text, mask, local_includes(p, text, mask, search))
            todo.extend(out.texts[p].includes.values())
        return out

    @property
    def files(self) -> list[Path]:
        """The entry and its local headers, in a stable order."""
        return list(self.texts)

    def digest(self) -> str:
        """A hash of the files' names and contents."""
        h = hashlib.sha256()
        for f, t in self.texts.items():
            h.update(f.name.encode())
            h.update(t.text.encode())
        return h.hexdigest()

    def uses(self, pattern: re.Pattern | str) -> bool:
        """Whether the regex matches code (not a comment or a string) in any of the files."""
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern
        return any(t.mask[m.start()] for t in self.texts.values() for m in regex.finditer(t.text))

    @functools.cached_property
    def needs_sm90a(self) -> bool:
        """Whether the files have a branch for sm_90a's own instructions (wgmma, setmaxnreg: code under
        __CUDA_ARCH_FEAT_SM90_ALL), which only a build for the target sm_90a compiles: on an H100 the loader builds
        such a file for sm_90a (toolchain.cuda_arch_flags), and the compile check at 9.0 for both."""
        return self.uses(r"\b__CUDA_ARCH_FEAT_SM90_ALL\b")

    @functools.cached_property
    def system_includes(self) -> frozenset[str]:
        """The <...> headers the files include in code."""
        return frozenset(m.group(1).strip() for t in self.texts.values() for m in SYSTEM_INCLUDE_RE.finditer(t.text)
                         if t.mask[m.start(1)])

    @functools.cached_property
    def uses_python(self) -> bool:
        """Whether the files use pybind11 or Python's C API in code."""
        return any(PYTHON_USE_RE.search(t.code) for t in self.texts.values())

    @functools.cached_property
    def is_pybind(self) -> bool:
        """Whether the entry file defines a Python module (PYBIND11_MODULE) in code."""
        t = self.texts[self.entry]
        return any(t.mask[m.start()] for m in re.finditer(r"\bPYBIND11_MODULE\b", t.text))

    def reaches_torch_api(self) -> bool:
        """Whether the files include torch/extension.h or another header of all of libtorch's C++ API."""
        return bool(self.system_includes & set(TORCH_API_HEADERS))

    def library_blocks(self, name: str, fragment: bool):
        """(namespace, module variable, file, body start) for each TORCH_LIBRARY block of the files (the FRAGMENT
        blocks with `fragment`) in code, not in a comment or a #define; TORCH_EXTENSION_NAME is `name`."""
        for t in self.texts.values():
            src = t.text
            for m in _BLOCK_RE[fragment].finditer(src):
                line = src[src.rfind("\n", 0, m.start()) + 1:m.start()]
                if t.mask[m.start()] and not line.lstrip().startswith("#"):  # a use, not a #define
                    # TORCH_LIBRARY quotes its argument before expanding it; the _EXPAND form expands it
                    ns = name if m.group(2) and m.group(3) == "TORCH_EXTENSION_NAME" else m.group(3)
                    yield ns, m.group(4), t, m.end()

    def fixed_namespaces(self, name: str) -> set[str]:
        """The op namespaces that TORCH_LIBRARY blocks register (TORCH_EXTENSION_NAME is `name`)."""
        return {ns for ns, *_ in self.library_blocks(name, fragment=False)}

    def op_namespace(self, name: str) -> str:
        """The namespace whose ops an Extension shows: the one namespace that the TORCH_LIBRARY and
        TORCH_LIBRARY_FRAGMENT blocks define ops in, else TORCH_EXTENSION_NAME (`name`)."""
        found = self.fixed_namespaces(name) | {ns for ns, *_ in self.library_blocks(name, fragment=True)}
        return found.pop() if len(found) == 1 else name

    def fragment_defs(self, name: str) -> list[tuple[str, str]]:
        """(namespace, op) for each op that a TORCH_LIBRARY_FRAGMENT block defines (m.def("op...")),
        fragments of TORCH_EXTENSION_NAME included (a namespace of `name`)."""
        found = []
        for ns, var, t, start in self.library_blocks(name, fragment=True):
            src, mask = t.text, t.mask
            depth, end = 1, start
            while end < len(src) and depth:  # the block's body: to the brace that closes it
                if mask[end]:
                    depth += {"{": 1, "}": -1}.get(src[end], 0)
                end += 1
            defs = re.finditer(rf"\b{var}\s*\.\s*def\s*\(\s*(R\"\(|\")\s*(\w+)", src[start:end])
            found += [(ns, d.group(2)) for d in defs]
        return found
