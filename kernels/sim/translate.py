"""Translate CUDA C++ into C++ for the simulator: launches, __shared__, #pragma unroll, the CUDA device.

Only six things change (the fifth: a `return;` in a kernel first notes its line; the sixth: an
`asm` statement becomes calls of the simulator's PTX, see ptx.py); everything else is the
learner's code, and `#line` directives plus newline-preserving rewrites keep compiler errors
pointing at the learner's own file and line.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..build.sources import INCLUDE_RE as _INCLUDE_RE
from ..build.sources import SYSTEM_INCLUDE_RE, SourceSet, code_mask, line_of, masked_text


class TranslateError(ValueError):
    """A construct the simulator cannot translate, with the file and line."""


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


def _skip_space_back(src: str, i: int) -> int:
    """Where the blanks before `i` start, line continuations included (a launch split over a macro's lines)."""
    while i > 0 and (src[i - 1].isspace() or (src[i - 1] == "\\" and i < len(src) and src[i] in "\r\n")):
        i -= 1
    return i


def _kernel_name_start(src: str, mask: bytearray, end: int) -> int:
    """Scan back from `end` over `ns::name<template, args>` and return where the name starts."""
    i = _skip_space_back(src, end)
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
            i = _skip_space_back(src, j)
        j = i
        while j > 0 and (src[j - 1].isalnum() or src[j - 1] == "_"):
            j -= 1
        if j == i:
            return -1
        i = j
        paste = _skip_space_back(src, i)
        if src[max(0, paste - 2):paste] == "##":  # a name pasted in a macro: elu_##type##_kernel
            i = _skip_space_back(src, paste - 2)
            continue
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
    """`new` followed by the line breaks of `old` that it lacks; inside a macro they stay continuations."""
    breaks = [m.group(1) for m in re.finditer(r"(\\?)\r?\n", old)][new.count("\n"):]
    return new + "".join(" \\\n" if b else "\n" for b in breaks)


def _null_arguments(args: str) -> str:
    """A launch's arguments with each one written as NULL made nullptr. The arguments reach the kernel through the
    launch's stored copies, and a copy of NULL is a plain integer (`long`), which no pointer parameter takes, where
    nvcc passes the literal itself (llm.c's `fused_classifier_kernel2<<<...>>>(dlogits, losses, NULL, ...)`)."""
    parts = _split_top(args)
    return ",".join(re.sub(r"^(\s*)NULL(\s*)$", r"\1nullptr\2", part) for part in parts)


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
        name = re.sub(r"\\\r?\n", " ", src[start:k])  # a macro's line continuations are blanks
        cfg = src[k + 3:close]
        args = _null_arguments(src[j + 1:rparen])
        n_cfg = len(_split_top(cfg))
        if not 2 <= n_cfg <= 4:
            raise TranslateError(f"{path}:{line_of(src, k)}: a launch takes 2 to 4 values between <<< and >>>, got {n_cfg}")
        flat_name = " ".join(name.split())
        # a name pasted together in a macro is known once the macro expands: stringify it then
        quoted = f"CUDASIM_STRINGIFY({flat_name})" if "##" in flat_name else f'"{flat_name}"'
        call = (f'::cudasim::launch({quoted}, __FILE__, __LINE__, ::cudasim::config({cfg}), '
                f"[&](auto&... cudasim_a) {{ {flat_name}(cudasim_a...); }}"
                + (f", {args})" if args.strip() else ")"))
        edits.append(_Edit(start, rparen + 1, _keep_newlines(src[start:rparen + 1], call)))
        pos = rparen + 1
    return edits


_SHARED_RE = re.compile(r"\b__shared__\b")
_NAMESPACE_OPEN_RE = re.compile(r'(?:\binline\s+)?\bnamespace\b[\w:\s]*$|\bextern\s*"C(?:\+\+)?"\s*$')


def _code_brace_depths(src: str, mask: bytearray) -> list[int]:
    """For each character, how many braces other than namespace and extern "C" braces enclose it."""
    depths = [0] * (len(src) + 1)
    stack: list[bool] = []  # True for a brace that opens code (a function, class or block)
    depth, stmt_start = 0, 0
    for i, c in enumerate(src):
        depths[i] = depth
        if not mask[i]:
            continue
        if c == "{":
            head = src[stmt_start:i]
            is_code = not _NAMESPACE_OPEN_RE.search(head)
            stack.append(is_code)
            depth += is_code
            stmt_start = i + 1
        elif c == "}":
            if stack and stack.pop():
                depth -= 1
            stmt_start = i + 1
        elif c == ";":
            stmt_start = i + 1
        elif c == "\n" and src[stmt_start:i].lstrip().startswith("#"):
            stmt_start = i + 1  # a directive line ends there
    depths[len(src)] = depth
    return depths


def _top_level(text: str, chars: str) -> list[int]:
    """Positions of any of `chars` outside (), [], {} and template <> brackets."""
    found, depth = [], 0
    for i, c in enumerate(text):
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        elif c in chars and depth == 0:
            found.append(i)
    return found


_ALIGN_RE = re.compile(r"\b(?:__align__|alignas)\s*\(\s*([^)]*)\)")
_DECL_RE = re.compile(r"^(?P<type>.*?[\w>*&\s])\s*\b(?P<name>[A-Za-z_]\w*)\s*(?P<dims>(?:\[[^\]]*\]\s*)*)$", re.S)


def _shared_edits(src: str, mask: bytearray, path: str) -> list[_Edit]:
    edits = []
    depths = None
    code = masked_text(src, mask)
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
        if depths is None:
            depths = _code_brace_depths(src, mask)
        file_scope = depths[m.start()] == 0
        text = " ".join(_SHARED_RE.sub(" ", code[s:e]).split())  # comments are blanks here
        align = "0"
        am = _ALIGN_RE.search(text)
        if am:
            align = am.group(1)
            text = _ALIGN_RE.sub(" ", text)
        words = text.split()
        extern = "extern" in words
        words = [w for w in words if w not in ("extern", "static")]
        text = " ".join(words)
        if _top_level(text, "=") or re.search(r"[\w\]]\s*\{", text):
            raise TranslateError(f"{path}:{line}: a __shared__ variable cannot have an initializer "
                                 "(nvcc refuses it too); assign it in the kernel, then __syncthreads()")
        # `__shared__ float a[8][8], b[8];` declares each name as its own statement would (the type before the first
        # name, each declarator's own stars and sizes)
        parts = [text]
        commas = _top_level(text, ",")
        if commas:
            bounds = [0, *[c + 1 for c in commas], len(text) + 1]
            parts = [text[a:b - 1].strip() for a, b in zip(bounds, bounds[1:])]
        dm = _DECL_RE.match(parts[0])
        if not dm:
            raise TranslateError(f"{path}:{line}: cannot read this __shared__ declaration: {decl.strip()!r}")
        typ = dm.group("type").strip()
        declared = [(typ, dm.group("name"), "".join(dm.group("dims").split()))]
        base = typ.rstrip("*& ")
        for part in parts[1:]:
            pm = re.match(r"^(?P<stars>[*\s]*)(?P<name>[A-Za-z_]\w*)\s*(?P<dims>(?:\[[^\]]*\]\s*)*)$", part)
            if not pm:
                raise TranslateError(f"{path}:{line}: cannot read the declarator {part!r} of this __shared__ "
                                     f"declaration: {decl.strip()!r}")
            stars = "".join(pm.group("stars").split())
            declared.append((base + (" " + stars if stars else ""), pm.group("name"), "".join(pm.group("dims").split())))
        new = "; ".join(_shared_declaration(typ, name, dims, extern, file_scope, align, path, line)
                        for typ, name, dims in declared)
        edits.append(_Edit(s, e, _keep_newlines(decl, new)))
    return edits


def _shared_declaration(typ: str, name: str, dims: str, extern: bool, file_scope: bool, align: str, path: str,
                        line: int) -> str:
    """What one __shared__ variable becomes: a per-block slot, a file-scope one, or a view of the dynamic buffer."""
    if extern and not dims:  # extern __shared__ Tile s; (dynamic shared memory seen as one object)
        return (f"using cudasim_t_{name} = {typ}; "
                + ("static " if file_scope else "")
                + f"cudasim_t_{name}& {name} = *::cudasim::{'file_' if file_scope else ''}dynamic_shared<cudasim_t_{name}>()")
    if extern:
        if not dims.startswith("[]") or "[]" in dims[2:]:
            raise TranslateError(
                f"{path}:{line}: extern __shared__ must be an array whose first size is left out, such as "
                "`extern __shared__ float buf[];` or `extern __shared__ half rows[][64];`, or one object "
                "(`extern __shared__ Tiles s;`)")
        # buf[] is a T*; rows[][64] (the CUDA samples' idiom) a pointer to rows of 64
        elem = f"cudasim_t_{name}"
        new = f"using {elem} = {typ}{dims[2:]}; "
        if file_scope:
            return new + f"static {elem}* const {name} = ::cudasim::file_dynamic_shared<{elem}>()"
        return new + f"{elem}* {name} = ::cudasim::dynamic_shared<{elem}>()"
    if file_scope:
        return (f"using cudasim_t_{name} = {typ}{dims}; "
                f"static cudasim_t_{name}& {name} = ::cudasim::file_shared<cudasim_t_{name}, {align}>(\"{name}\")")
    return (f"static ::cudasim::SharedSlot cudasim_slot_{name}; using cudasim_t_{name} = {typ}{dims}; "
            f"cudasim_t_{name}& {name} = ::cudasim::shared_var<cudasim_t_{name}, {align}>(cudasim_slot_{name}, \"{name}\")")


_GLOBAL_RE = re.compile(r"\b__global__\b")
_RETURN_RE = re.compile(r"\breturn\s*;")


def _kernel_return_edits(src: str, mask: bytearray) -> list[_Edit]:
    """`return;` in a __global__ function's body also notes where the thread left the kernel."""
    edits = []
    end = 0
    for m in _GLOBAL_RE.finditer(src):
        if not mask[m.start()] or m.start() < end:
            continue
        # the body is the first '{' outside parentheses; a ';' first means a declaration
        i, depth = m.end(), 0
        while i < len(src):
            if mask[i]:
                c = src[i]
                if c == "(":
                    depth += 1
                elif c == ")":
                    depth -= 1
                elif depth == 0 and c in "{;":
                    break
            i += 1
        if i >= len(src) or src[i] == ";":
            continue
        close = _match_forward(src, mask, i + 1, "}")
        if close < 0:
            continue
        end = close
        for r in _RETURN_RE.finditer(src, i, close):
            if mask[r.start()]:
                edits.append(_Edit(r.start(), r.end(), _keep_newlines(
                    r.group(0), "{ ::cudasim::exiting(__FILE__, __LINE__); return; }")))
    return edits


_PRAGMA_RE = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+unroll\b[^\n]*", re.M)
# CUDA's __noinline__ qualifier. Not a macro of cudasim.h: the C++ library's own headers spell the attribute
# __attribute__((__noinline__)), which such a macro would break; so only the learner's files are rewritten, and only
# where it stands as a qualifier (not inside an attribute list, after `gnu::`, or in an #if / #ifdef line).
_NOINLINE_RE = re.compile(r"\b__noinline__\b")


def _noinline_edits(src: str, mask: bytearray) -> list[_Edit]:
    out = []
    for m in _NOINLINE_RE.finditer(src):
        before = src[:m.start()].rstrip()
        line = src[src.rfind("\n", 0, m.start()) + 1:m.start()].lstrip()
        conditional = _in_directive(src, m.start()) and re.match(r"#\s*(?:if|ifdef|ifndef|elif)\b", line)
        if not mask[m.start()] or conditional or before.endswith(("(", ",", "::")):
            continue
        out.append(_Edit(m.start(), m.end(), "__attribute__((noinline))"))
    return out


_CLUSTER_DIMS_RE = re.compile(r"\b__cluster_dims__\s*\(")
_KERNEL_NAME_RE = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_NOT_A_NAME = {"__launch_bounds__", "__maxnreg__", "__cluster_dims__", "__attribute__", "__declspec", "alignas"}


def _cluster_dims_edits(src: str, mask: bytearray, path: str) -> tuple[list[_Edit], str]:
    """`__cluster_dims__(x, y, z)` on a kernel: the attribute goes (blanks, so lines stay) and the kernel's
    cluster shape is registered by its name when the library loads (the text returned, for the file's end)."""
    edits, regs = [], []
    for m in _CLUSTER_DIMS_RE.finditer(src):
        if not mask[m.start()] or _in_directive(src, m.start()):
            continue
        depth, i = 1, m.end()
        while i < len(src) and depth:
            depth += {"(": 1, ")": -1}.get(src[i], 0) if mask[i] else 0
            i += 1
        if depth:
            raise TranslateError(f"{path}:{line_of(src, m.start())}: __cluster_dims__( without its ')'")
        dims = [d.strip() for d in src[m.end():i - 1].split(",") if d.strip()]
        if not 1 <= len(dims) <= 3:
            raise TranslateError(f"{path}:{line_of(src, m.start())}: __cluster_dims__ takes 1 to 3 sizes, got {len(dims)}")
        name = None
        for k in _KERNEL_NAME_RE.finditer(src, i):
            if not mask[k.start()]:
                continue
            if k.group(1) not in _NOT_A_NAME:
                name = k.group(1)
                break
            j, d = k.end(), 1  # skip the attribute's arguments
            while j < len(src) and d:
                d += {"(": 1, ")": -1}.get(src[j], 0)
                j += 1
        if name is None:
            raise TranslateError(f"{path}:{line_of(src, m.start())}: cannot find the kernel that __cluster_dims__ is on")
        edits.append(_Edit(m.start(), i, _keep_newlines(src[m.start():i], "")))
        dims += ["1"] * (3 - len(dims))
        regs.append(f"static const bool cudasim_cluster_dims_{len(regs)} = "
                    f"::cudasim::register_cluster_dims(\"{name}\", {', '.join(dims)});\n")
    return edits, "".join(regs)


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


def _in_directive(src: str, pos: int) -> bool:
    """Whether `pos` is inside a preprocessor directive (a #define continued over lines with backslashes too)."""
    start = src.rfind("\n", 0, pos) + 1
    while start > 1 and src[start - 2] == "\\":  # the line before ends with a backslash: same directive
        start = src.rfind("\n", 0, start - 1) + 1
    return src[start:pos].lstrip().startswith("#")


def _renamed_namespaces(src: str, suffix: str) -> str:
    """The op namespaces the file names itself in its TORCH_LIBRARY blocks, with `suffix` appended (code only)."""
    mask = code_mask(src)
    out, last = [], 0
    for m in _NAMED_LIBRARY_RE.finditer(src):
        if mask[m.start()] and not _in_directive(src, m.start()):  # a use, not a #define (helpers.cuh's _EXPAND)
            out += [src[last:m.end()], suffix]
            last = m.end()
    return "".join(out) + src[last:]


_DEFINE_RE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+\w+\(([^)]*)\)", re.M)


def _asm_macro_params_renamed(src: str) -> str:
    """The parameters of each function-like #define whose body holds an asm statement, renamed cudasim_arg_<name>
    in its parameter list and body (code only, not strings): the simulator's translation of the asm puts its own
    names into that body (::cudasim::ptx::addr, acc, put, ...), which the preprocessor would replace with the
    arguments of a parameter of the same name (LeetCUDA's LDMATRIX_X4(R0, R1, R2, R3, addr)). Lines keep their
    numbers."""
    mask = None
    edits = []
    for m in _DEFINE_RE.finditer(src):
        end = m.end()
        while True:  # the body runs to the first line that does not end in a backslash
            nl = src.find("\n", end)
            if nl < 0:
                end = len(src)
                break
            if src[nl - 1] != "\\":
                end = nl
                break
            end = nl + 1
        body = src[m.end():end]
        if not _ASM_RE.search(body):
            continue
        params = [p.strip() for p in m.group(1).split(",")]
        params = [p for p in params if re.fullmatch(r"[A-Za-z_]\w*", p) and p != "__VA_ARGS__"]
        if not params:
            continue
        if mask is None:
            mask = code_mask(src)
        names = re.compile(r"\b(" + "|".join(map(re.escape, params)) + r")\b")
        for n in names.finditer(src, m.start(1), end):
            if mask[n.start()]:
                edits.append((n.start(), n.end(), "cudasim_arg_" + n.group(1)))
    out, last = [], 0
    for a, b, text in edits:
        out += [src[last:a], text]
        last = b
    return "".join(out) + src[last:]


_ASM_RE = re.compile(r"\b(?:asm|__asm__|__asm)\b(?:\s+(?:volatile|__volatile__|goto|inline))*\s*\(")
_IF_RE = re.compile(r"^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|else|endif)\b([^\n]*)", re.M)
_GPU_ONLY_RE = re.compile(r"__CUDA_ARCH__|\bCUDASIM\b|__CUDASIM__")


def _gpu_only_lines(src: str) -> set[int]:
    """Lines inside an #if/#ifdef/#ifndef construct (any of its branches) whose condition names
    __CUDA_ARCH__ or CUDASIM: the preprocessor decides whether the simulator's build sees them."""
    lines, stack = set(), []  # stack: for each open conditional, whether it names one of them
    last_line, guarded = 1, False
    for m in _IF_RE.finditer(src):
        line = line_of(src, m.start())
        if guarded:
            lines.update(range(last_line, line))
        kind, cond = m.group(1), m.group(2)
        if kind in ("if", "ifdef", "ifndef"):
            stack.append(bool(_GPU_ONLY_RE.search(cond)))
        elif kind == "elif" and stack:
            stack[-1] = stack[-1] or bool(_GPU_ONLY_RE.search(cond))
        elif kind == "endif" and stack:
            stack.pop()
        guarded, last_line = any(stack), line + 1
    return lines


def _asm_edits(src: str, mask: bytearray, path: str) -> tuple[list[_Edit], bool]:
    """Inline PTX (asm statements) becomes calls of the simulator's PTX (kernels/sim/ptx.py); an
    instruction it does not run is an error naming the line, unless the preprocessor may hide the
    statement from the simulator (an #if on __CUDA_ARCH__ or CUDASIM). Also whether one of them calls the
    simulator's PTX (cudasim_ptx.h)."""
    if not any(mask[m.start()] for m in _ASM_RE.finditer(src)):
        return [], False
    from .ptx import asm_edits

    found = asm_edits(src, mask, path, _gpu_only_lines(src))
    return [_Edit(a, b, text) for a, b, text, _ in found], any(needs for *_, needs in found)


_PTX_NAMES_RE = re.compile(r"\b__cvta_\w+|\b__is(?:Shared|Global)\b|\b__cluster_dims__\b")


# TORCH_LIBRARY(ns, m), TORCH_LIBRARY_FRAGMENT(ns, m) and TORCH_LIBRARY_IMPL(ns, ...) with a namespace the file
# names itself (the _EXPAND forms take TORCH_EXTENSION_NAME, new at every build): renamed in a build that
# loads beside another of the same file (kernels.build's namespace suffix).
_NAMED_LIBRARY_RE = re.compile(r"\b(TORCH_LIBRARY(?:_FRAGMENT|_IMPL)?\s*\(\s*)(?!TORCH_EXTENSION_NAME\b)(\w+)")


def translate_source(src: str, path: str, include_map: dict[str, str] | None = None,
                     system_map: dict[str, str] | None = None, namespace_suffix: str = "") -> str:
    """Translate one file's text; `include_map` maps quoted include names to translated files,
    `system_map` maps <...> include names to the simulator's headers that stand in for them,
    `namespace_suffix` is appended to the op namespaces the file names itself."""
    src = _cuda_device_as_cpu(src)
    if namespace_suffix:
        src = _renamed_namespaces(src, namespace_suffix)
    src = _asm_macro_params_renamed(src)
    mask = code_mask(src)
    asm, asm_ptx = _asm_edits(src, mask, path)
    edits = asm + _launch_edits(src, mask, path) + _shared_edits(src, mask, path) + _kernel_return_edits(src, mask)
    edits += _simple_edits(src, mask, _PRAGMA_RE, lambda m: "")
    edits += _noinline_edits(src, mask)
    cluster_edits, cluster_regs = _cluster_dims_edits(src, mask, path)
    edits += cluster_edits
    if include_map:
        edits += _simple_edits(src, mask, _INCLUDE_RE,
                               lambda m: f'#include "{include_map[m.group(1)]}"' if m.group(1) in include_map else m.group(0))
    if system_map:
        edits += _simple_edits(src, mask, SYSTEM_INCLUDE_RE,
                               lambda m: f"#include <{system_map[m.group(1)]}>" if m.group(1) in system_map else m.group(0))
    edits.sort(key=lambda e: e.start)
    out, last = [], 0
    for e in edits:
        if e.start < last:
            raise TranslateError(f"{path}:{line_of(src, e.start)}: overlapping constructs the simulator cannot translate")
        out.append(src[last:e.start])
        out.append(e.text)
        last = e.end
    out.append(src[last:])
    if cluster_regs:
        out.append("\n" + cluster_regs)
    ptx = asm_ptx or any(mask[m.start()] for m in _PTX_NAMES_RE.finditer(src))
    return "#include <cudasim.h>\n" + ("#include <cudasim_ptx.h>\n" if ptx else "") + f'#line 1 "{path}"\n' + "".join(out)


def translate_tree(sources: SourceSet, out_dir: Path, display=lambda p: str(p),
                   system_map: dict[str, str] | None = None, namespace_suffix: str = "") -> Path:
    """Translate the entry file of `sources` and every local header it includes into `out_dir`
    (`system_map`: see translate_source); returns the translated entry file."""
    out_dir.mkdir(parents=True, exist_ok=True)
    done: dict[Path, Path] = {}

    def visit(p: Path) -> Path:
        if p in done:
            return done[p]
        target = out_dir / (f"sim_{len(done)}_{p.stem}" + (".cpp" if p == sources.entry else p.suffix or ".h"))
        done[p] = target
        file = sources.texts[p]
        include_map = {name: str(visit(q)) for name, q in file.includes.items()}
        text = translate_source(file.text, display(p), include_map, system_map, namespace_suffix)
        if not target.exists() or target.read_text() != text:
            target.write_text(text)
        return target

    return visit(sources.entry)
