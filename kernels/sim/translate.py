"""Translate CUDA C++ into C++ for the simulator: launches, __shared__, #pragma unroll, dispatch keys.

Only four things change; everything else is the learner's code, and `#line` directives plus
newline-preserving rewrites keep compiler errors pointing at the learner's own file and line.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

TRANSLATOR_VERSION = "1"


class TranslateError(ValueError):
    """A construct the simulator cannot translate, with the file and line."""


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
            if c == "'" and i > 0 and (src[i - 1].isalnum()) and src[i - 1] not in "uUL8":
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


def line_of(src: str, pos: int) -> int:
    return src.count("\n", 0, pos) + 1


_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = {")", "]", "}"}


def _match_forward(src: str, mask: bytearray, start: int, closer: str) -> int:
    """Index of `closer` (a string such as ')' or '>>>') at bracket depth 0 from `start`, or -1."""
    depth = 0
    i = start
    while i < len(src):
        if mask[i]:
            c = src[i]
            if depth == 0 and src.startswith(closer, i):
                return i
            if c in _OPEN:
                depth += 1
            elif c in _CLOSE:
                depth -= 1
                if depth < 0:
                    return -1
        i += 1
    return -1


def _kernel_name_start(src: str, mask: bytearray, end: int) -> int:
    """Scan back from `end` over `ns::name<template, args>` and return where the name starts."""
    i = end
    while i > 0 and src[i - 1].isspace():
        i -= 1
    while True:
        if i > 0 and src[i - 1] == ">":  # a template argument list: find its '<'
            depth, j = 0, i - 1
            while j >= 0:
                if mask[j]:
                    if src[j] in ">)]":
                        depth += 1
                    elif src[j] in "<([":
                        depth -= 1
                        if depth == 0:
                            break
                j -= 1
            if j < 0:
                return -1
            i = j
            while i > 0 and src[i - 1].isspace():
                i -= 1
        j = i
        while j > 0 and (src[j - 1].isalnum() or src[j - 1] == "_"):
            j -= 1
        if j == i:
            return -1
        i = j
        if src[max(0, i - 2):i] == "::":
            i -= 2
            continue
        return i


def _split_top(text: str) -> list[str]:
    """Split a launch configuration at commas of bracket depth 0."""
    mask = code_mask(text)
    parts, depth, last = [], 0, 0
    for i, c in enumerate(text):
        if not mask[i]:
            continue
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[last:i])
            last = i + 1
    parts.append(text[last:])
    return parts


@dataclass
class _Edit:
    start: int
    end: int
    text: str


def _keep_newlines(old: str, new: str) -> str:
    return new + "\n" * (old.count("\n") - new.count("\n"))


def _launch_edits(src: str, mask: bytearray, path: str) -> list[_Edit]:
    edits = []
    pos = 0
    while True:
        k = src.find("<<<", pos)
        if k < 0:
            break
        pos = k + 3
        if not mask[k]:
            continue
        close = _match_forward(src, mask, k + 3, ">>>")
        if close < 0:
            raise TranslateError(f"{path}:{line_of(src, k)}: a '<<<' without its '>>>'")
        j = close + 3
        while j < len(src) and src[j].isspace():
            j += 1
        if j >= len(src) or src[j] != "(":
            raise TranslateError(f"{path}:{line_of(src, k)}: expected '(' and the kernel's arguments after '>>>'")
        rparen = _match_forward(src, mask, j + 1, ")")
        if rparen < 0:
            raise TranslateError(f"{path}:{line_of(src, k)}: the kernel's argument list is not closed")
        start = _kernel_name_start(src, mask, k)
        if start < 0:
            raise TranslateError(f"{path}:{line_of(src, k)}: cannot find the kernel's name before '<<<'")
        name = src[start:k].strip()
        cfg = src[k + 3:close]
        args = src[j + 1:rparen]
        n_cfg = len(_split_top(cfg))
        if not 2 <= n_cfg <= 4:
            raise TranslateError(f"{path}:{line_of(src, k)}: a launch takes 2 to 4 values between <<< and >>>, got {n_cfg}")
        flat_name = " ".join(name.split())
        call = (f'::cudasim::launch("{flat_name}", __FILE__, __LINE__, ::cudasim::config({cfg}), '
                f"[&](auto&... cudasim_a) {{ {flat_name}(cudasim_a...); }}"
                + (f", {args})" if args.strip() else ")"))
        edits.append(_Edit(start, rparen + 1, _keep_newlines(src[start:rparen + 1], call)))
        pos = rparen + 1
    return edits


_SHARED_RE = re.compile(r"\b__shared__\b")
_ALIGN_RE = re.compile(r"\b(?:__align__|alignas)\s*\(\s*([^)]*)\)")
_DECL_RE = re.compile(r"^(?P<type>.*?[\w>*&\s])\s*\b(?P<name>[A-Za-z_]\w*)\s*(?P<dims>(?:\[[^\]]*\]\s*)*)$", re.S)


def _shared_edits(src: str, mask: bytearray, path: str) -> list[_Edit]:
    edits = []
    for m in _SHARED_RE.finditer(src):
        if not mask[m.start()]:
            continue
        # the declaration runs from the previous ';', '{', '}' or line start of a directive to ';'
        s = m.start()
        while s > 0 and not (mask[s - 1] and src[s - 1] in ";{}"):
            s -= 1
        while s < m.start():  # skip blanks, comments and directive lines such as #pragma unroll
            if src[s].isspace() or not mask[s]:
                s += 1
            elif src[s] == "#":
                s = src.find("\n", s) + 1
            else:
                break
        e = src.find(";", m.end())
        while e >= 0 and not mask[e]:
            e = src.find(";", e + 1)
        if e < 0:
            raise TranslateError(f"{path}:{line_of(src, m.start())}: a __shared__ declaration without ';'")
        decl = src[s:e]
        line = line_of(src, m.start())
        text = " ".join(_SHARED_RE.sub(" ", decl).split())
        align = "0"
        am = _ALIGN_RE.search(text)
        if am:
            align = am.group(1)
            text = _ALIGN_RE.sub(" ", text)
        words = text.split()
        extern = "extern" in words
        words = [w for w in words if w not in ("extern", "static")]
        text = " ".join(words)
        if "," in text.split("[")[0] or "=" in text:
            raise TranslateError(f"{path}:{line}: declare one __shared__ variable per statement, without an initializer")
        dm = _DECL_RE.match(text)
        if not dm:
            raise TranslateError(f"{path}:{line}: cannot read this __shared__ declaration: {decl.strip()!r}")
        typ, name, dims = dm.group("type").strip(), dm.group("name"), "".join(dm.group("dims").split())
        if extern:
            if dims != "[]":
                raise TranslateError(f"{path}:{line}: extern __shared__ must be an array of unknown size, such as `extern __shared__ float buf[];`")
            new = f"{typ}* {name} = ::cudasim::dynamic_shared<{typ}>()"
        else:
            new = (f"static ::cudasim::SharedSlot cudasim_slot_{name}; using cudasim_t_{name} = {typ}{dims}; "
                   f"cudasim_t_{name}& {name} = ::cudasim::shared_var<cudasim_t_{name}, {align}>(cudasim_slot_{name}, \"{name}\")")
        edits.append(_Edit(s, e, _keep_newlines(decl, new)))
    return edits


_PRAGMA_RE = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+unroll\b[^\n]*", re.M)
_IMPL_RE = re.compile(r"\b(TORCH_LIBRARY_IMPL\w*\s*\(\s*[^,()]+,\s*)CUDA(\s*,)")
_INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)


def _simple_edits(src: str, mask: bytearray, regex: re.Pattern, repl) -> list[_Edit]:
    out = []
    for m in regex.finditer(src):
        if mask[m.start()] or src[m.start()].isspace():
            out.append(_Edit(m.start(), m.end(), repl(m)))
    return out


# Host code written for CUDA tensors, and what it means on the simulator, where "the CUDA device"
# is the CPU: the tensor checks, devices, dispatch keys and copies of the ATen API.
_DEVICE_RE = re.compile(r"\b(?P<key>(?:DeviceType|DispatchKey)\s*::\s*)CUDA\b|\bkCUDA\b"
                        r"|(?P<dot>\.\s*|->\s*)(?P<call>is_cuda|cuda)(?P<args>\s*\(\s*\))")


def _cuda_device_as_cpu(src: str) -> str:
    """Make host code that names the CUDA device name the CPU: kCUDA, DeviceType::CUDA,
    DispatchKey::CUDA, .is_cuda() and .cuda(). Only code changes (not strings or comments), and
    every line keeps its number."""
    mask = code_mask(src)

    def repl(m: re.Match) -> str:
        if m.group("key"):
            return m.group("key") + "CPU"
        if m.group("call"):
            return m.group("dot") + ("is_cpu" if m.group("call") == "is_cuda" else "cpu") + m.group("args")
        return "kCPU"

    out, last = [], 0
    for m in _DEVICE_RE.finditer(src):
        if mask[m.start()]:
            out += [src[last:m.start()], repl(m)]
            last = m.end()
    return "".join(out) + src[last:]


def translate_source(src: str, path: str, include_map: dict[str, str] | None = None) -> str:
    """Translate one file's text; `include_map` maps quoted include names to translated files."""
    src = _cuda_device_as_cpu(src)
    mask = code_mask(src)
    edits = _launch_edits(src, mask, path) + _shared_edits(src, mask, path)
    edits += _simple_edits(src, mask, _PRAGMA_RE, lambda m: "")
    edits += _simple_edits(src, mask, _IMPL_RE, lambda m: m.group(1) + "CPU" + m.group(2))
    if include_map:
        edits += _simple_edits(src, mask, _INCLUDE_RE,
                               lambda m: f'#include "{include_map[m.group(1)]}"' if m.group(1) in include_map else m.group(0))
    edits.sort(key=lambda e: e.start)
    out, last = [], 0
    for e in edits:
        if e.start < last:
            raise TranslateError(f"{path}:{line_of(src, e.start)}: overlapping constructs the simulator cannot translate")
        out.append(src[last:e.start])
        out.append(e.text)
        last = e.end
    out.append(src[last:])
    return f'#include <cudasim.h>\n#line 1 "{path}"\n' + "".join(out)


def local_includes(path: Path, search: list[Path]) -> dict[str, Path]:
    """Quoted includes of `path` that resolve to files, by the name written in the directive."""
    src = path.read_text()
    mask = code_mask(src)
    found = {}
    for m in _INCLUDE_RE.finditer(src):
        if not (mask[m.start()] or src[m.start()].isspace()):
            continue
        name = m.group(1)
        for d in [path.parent, *search]:
            cand = d / name
            if cand.is_file():
                found[name] = cand.resolve()
                break
    return found


def translate_tree(entry: Path, out_dir: Path, search: list[Path], display=lambda p: str(p)) -> tuple[Path, list[Path]]:
    """Translate `entry` and every local header it includes into `out_dir`.

    Returns the translated entry file and the list of original files read (for the cache key).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    done: dict[Path, Path] = {}

    def visit(p: Path) -> Path:
        if p in done:
            return done[p]
        target = out_dir / (f"sim_{len(done)}_{p.stem}" + (".cpp" if p == entry.resolve() else p.suffix or ".h"))
        done[p] = target
        incs = local_includes(p, search)
        include_map = {name: str(visit(q)) for name, q in incs.items()}
        text = translate_source(p.read_text(), display(p), include_map)
        if not target.exists() or target.read_text() != text:
            target.write_text(text)
        return target

    main = visit(entry.resolve())
    return main, list(done)
