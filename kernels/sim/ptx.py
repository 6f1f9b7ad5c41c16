"""Inline PTX for the simulator: each `asm` statement becomes C++ that calls the simulator's PTX.

translate.py hands every `asm(...)` statement of a file to `asm_edits`. A statement is read as GCC
and nvcc read it (string literals for the template, then `: outputs : inputs : clobbers`, operands
`[name] "constraint"(expression)`), its template is parsed as PTX (instructions, `{ }` scopes,
`.reg` declarations, labels, `@p` guards) and each instruction becomes a call of the simulator's own
implementation in include/cudasim_ptx/ (include/cudasim_ptx.h). The generated C++ keeps nvcc's
rules for operands (an "r" operand is a 4-byte integer, "l" 8 bytes, "f" a float, "n" a constant)
and lands on the asm statement's first line, so that the file keeps its line numbers; an error at
run time names the line of the instruction in the learner's file.

An instruction outside the set the simulator runs is a TranslateError naming the file, the line and
the instruction. The set is `SUPPORTED` below (kernels/sim/README.md lists it with the semantics).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

# ---------------------------------------------------------------------------------------------
# The asm statement


# constraint letter -> the C++ type of the simulator's register for it
REG_TYPES = {"h": "uint16_t", "r": "uint32_t", "l": "uint64_t", "f": "float", "d": "double"}


from .translate import _ASM_RE as ASM_RE
from .translate import TranslateError


class PtxError(TranslateError):
    """An asm statement the simulator cannot run; the message names the file and line."""


@dataclass
class Operand:
    mode: str        # '=' output, '+' read and written, '' input
    letter: str      # h r l f d n
    expr: str        # the C++ expression, as written
    name: str | None  # [name] for %[name]
    index: int = 0


@dataclass
class AsmStatement:
    start: int               # where `asm` starts in the source
    end: int                 # just after the ';' that closes it
    line: int                # the line of `asm`
    template: str            # the template, escapes decoded
    template_lines: list[int]  # the source line of every character of the template
    operands: list[Operand]
    basic: bool              # no ':' sections: '%' is not an operand reference
    in_macro: bool           # inside a #define: lines come from __LINE__


def _line_of(src: str, pos: int) -> int:
    return src.count("\n", 0, pos) + 1


_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'", "r": "\r", "0": "\0", "a": "\a", "v": "\v"}


def _read_string(src: str, i: int, line: int, path: str) -> tuple[str, list[int], int]:
    """The C string literal starting at src[i] == '"': its text, each character's line, the end."""
    out, lines = [], []
    j = i + 1
    while j < len(src):
        c = src[j]
        if c == '"':
            return "".join(out), lines, j + 1
        if c == "\n":
            break
        if c == "\\":
            nxt = src[j + 1] if j + 1 < len(src) else ""
            if nxt == "\n":  # a line continuation inside the literal
                j += 2
                line += 1
                continue
            if nxt == "x":
                m = re.match(r"[0-9A-Fa-f]+", src[j + 2:])
                out.append(chr(int(m.group(0), 16)) if m else "x")
                lines.append(line)
                j += 2 + (len(m.group(0)) if m else 0)
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            lines.append(line)
            j += 2
            continue
        out.append(c)
        lines.append(line)
        j += 1
    raise PtxError(f"{path}:{line}: an asm template string is not closed on its line")


def _skip_space(src: str, i: int) -> int:
    while i < len(src):
        if src[i].isspace():
            i += 1
        elif src.startswith("\\\n", i):
            i += 2
        elif src.startswith("//", i):
            j = src.find("\n", i)
            i = len(src) if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            i = len(src) if j < 0 else j + 2
        else:
            break
    return i


def _code_chars(text: str, i: int = 0):
    """(index, character, bracket depth before it) for the characters of `text` from `i` that are
    code: string and character literals and comments are skipped."""
    depth = 0
    while i < len(text):
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < len(text) and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if text.startswith("//", i) or text.startswith("/*", i):
            i = _skip_space(text, i)
            continue
        yield i, c, depth
        depth += c in "([{"
        depth -= c in ")]}"
        i += 1


def _matching_paren(src: str, i: int, path: str, line: int) -> int:
    """Index of the ')' closing the '(' at src[i]."""
    for k, c, depth in _code_chars(src, i):
        if c in ")]}" and depth == 1:
            return k
    raise PtxError(f"{path}:{line}: the asm statement's parentheses are not closed")


def _split_top(text: str, sep: str) -> list[str]:
    """Split at `sep` outside brackets, strings and character literals."""
    parts, last = [], 0
    for k, c, depth in _code_chars(text):
        if c == sep and depth == 0:
            parts.append(text[last:k])
            last = k + 1
    parts.append(text[last:])
    return parts


_OPERAND_RE = re.compile(r'^\s*(?:\[\s*(?P<name>\w+)\s*\])?\s*"(?P<c>[^"]*)"\s*\((?P<expr>.*)\)\s*$', re.S)


def parse_asm(src: str, start: int, path: str) -> AsmStatement:
    """Read the asm statement at `start` (where `asm` begins)."""
    line = _line_of(src, start)
    m = ASM_RE.match(src, start)
    if not m:
        raise PtxError(f"{path}:{line}: cannot read this asm statement")
    lparen = m.end() - 1
    rparen = _matching_paren(src, lparen, path, line)
    end = _skip_space(src, rparen + 1)
    if end < len(src) and src[end] == ";":
        end += 1
    # the template: string literals, until the first ':' at depth 0
    i = _skip_space(src, lparen + 1)
    text, lines = [], []
    while i < rparen and src[i] == '"':
        s, ls, i = _read_string(src, i, _line_of(src, i), path)
        text.append(s)
        lines += ls
        i = _skip_space(src, i)
    if not text or (i < rparen and src[i] != ":"):
        what = src[i:rparen].split(":")[0].strip() or "nothing"
        raise PtxError(f"{path}:{line}: the simulator reads an asm template made of string literals only; this "
                       f"one has {what!r} (a macro or a variable) where a string literal should be")
    sections = _split_top(src[i:rparen], ":")[1:] if i < rparen else []
    basic = i >= rparen
    operands: list[Operand] = []
    for k, sec in enumerate(sections[:2]):
        if not sec.strip():
            continue
        for part in _split_top(sec, ","):
            part = part.replace("\\\n", " ")  # a macro's line continuations between (or inside) operands
            om = _OPERAND_RE.match(part)
            if not om:
                raise PtxError(f"{path}:{line}: cannot read the asm operand {part.strip()!r}: expected "
                               '"constraint"(expression), such as "=r"(x) or "l"(ptr)')
            c = om.group("c").replace("&", "")
            mode = c[0] if c[:1] in "=+" else ""
            letter = c[len(mode):]
            if k == 0 and not mode:
                raise PtxError(f"{path}:{line}: the output operand \"{c}\" needs '=' or '+' in its constraint")
            if k == 1 and mode:
                raise PtxError(f"{path}:{line}: the input operand \"{c}\" cannot have '{mode}' in its constraint")
            if letter not in REG_TYPES and letter != "n":
                raise PtxError(f"{path}:{line}: the asm constraint \"{c}\" is not one the simulator runs: it takes "
                               "h, r, l, f, d (registers of 16, 32, 64 bits, float, double) and n (an immediate)")
            if letter == "n" and mode:
                raise PtxError(f"{path}:{line}: an \"n\" (immediate) operand cannot be an output")
            operands.append(Operand(mode, letter, om.group("expr").strip(), om.group("name"), len(operands)))
    if len(sections) >= 4 and sections[3].strip():
        raise PtxError(f"{path}:{line}: asm goto (jumps to C++ labels) is not run by the simulator")
    logical_start = src.rfind("\n", 0, start) + 1
    in_macro = src[logical_start:start].lstrip().startswith("#") or "\\\n" in src[start:end]
    k = logical_start - 1
    while k > 0 and src[k - 1] == "\\":  # a continuation line of a directive
        prev = src.rfind("\n", 0, k - 1) + 1
        if src[prev:k].lstrip().startswith("#"):
            in_macro = True
            break
        k = prev - 1
    return AsmStatement(start, end, line, "".join(text), lines, operands, basic, in_macro)


# ---------------------------------------------------------------------------------------------
# PTX tokens

@dataclass
class Tok:
    kind: str   # id num op punct
    text: str
    line: int
    value: object = None  # op: the operand index


_NUM_RE = re.compile(r"0[fF][0-9A-Fa-f]{8}|0[dD][0-9A-Fa-f]{16}|0[xX][0-9A-Fa-f]+[uU]?|0[bB][01]+[uU]?"
                     r"|\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\d+[uU]?")
_ID_RE = re.compile(r"[A-Za-z_$%][\w$]*(?:(?:\.|::)[\w$]+)*")


def tokenize(stmt: AsmStatement, path: str) -> list[Tok]:
    """The template's tokens, with asm operand references (%0, %[name]) resolved."""
    t, lines = stmt.template, stmt.template_lines
    by_name = {o.name: o.index for o in stmt.operands if o.name}
    toks: list[Tok] = []
    i = 0

    def ln(k: int) -> int:
        return lines[min(k, len(lines) - 1)] if lines else stmt.line

    while i < len(t):
        c = t[i]
        if c.isspace():
            i += 1
            continue
        if t.startswith("//", i):
            j = t.find("\n", i)
            i = len(t) if j < 0 else j
            continue
        if t.startswith("/*", i):
            j = t.find("*/", i + 2)
            i = len(t) if j < 0 else j + 2
            continue
        if c == "%" and not stmt.basic:
            if t.startswith("%%", i):  # a literal '%': a special register or a %-named register
                m = _ID_RE.match(t, i + 1)
                if not m:
                    raise PtxError(f"{path}:{ln(i)}: cannot read the PTX after '%%'")
                toks.append(Tok("id", m.group(0), ln(i)))
                i = m.end()
                continue
            nxt = t[i + 1:i + 2]
            if nxt.isascii() and nxt.isalpha():  # %laneid with one '%', which nvcc also reads as a literal '%'
                m = _ID_RE.match(t, i)
                toks.append(Tok("id", m.group(0), ln(i)))
                i = m.end()
                continue
            m = re.match(r"%(\d+)|%\[(\w+)\]", t[i:])
            if not m:
                raise PtxError(f"{path}:{ln(i)}: '{t[i:i + 2]}' in an asm template: the simulator knows %0, %1, ... "
                               "and %[name] for operands, %% for a literal % and %name for a special register")
            idx = int(m.group(1)) if m.group(1) else by_name.get(m.group(2), -1)
            if not 0 <= idx < len(stmt.operands):
                raise PtxError(f"{path}:{ln(i)}: the asm template names operand {m.group(0)}, but the statement has "
                               f"{len(stmt.operands)} operand(s)")
            toks.append(Tok("op", m.group(0), ln(i), idx))
            i += m.end()
            continue
        if c.isdigit():
            m = _NUM_RE.match(t, i)
            toks.append(Tok("num", m.group(0), ln(i)))
            i = m.end()
            continue
        m = _ID_RE.match(t, i)
        if m:
            toks.append(Tok("id", m.group(0), ln(i)))
            i = m.end()
            continue
        if c == "." and i + 1 < len(t) and t[i + 1].isalpha():  # a directive such as .reg
            m = _ID_RE.match(t, i + 1)
            toks.append(Tok("id", "." + m.group(0), ln(i)))
            i = m.end()
            continue
        if c in "{}[],;@!:+-|<>":
            toks.append(Tok("punct", c, ln(i)))
            i += 1
            continue
        raise PtxError(f"{path}:{ln(i)}: unexpected character {c!r} in the PTX of an asm statement")
    return toks


# ---------------------------------------------------------------------------------------------
# PTX statements and operands

@dataclass
class Reg:        # a register: an asm operand (%0), a .reg of the template or a special register, or _
    kind: str     # op, name, sink
    name: str     # the C++ name for op and sink
    text: str     # as written
    index: int = -1  # op: the asm operand


@dataclass
class Imm:
    text: str


@dataclass
class Vec:
    items: list


@dataclass
class Mem:        # [base], [base+off], [base, {c0, c1}] (a tensor map and coordinates)
    base: object
    offset: int = 0
    coords: list | None = None


@dataclass
class Pair:       # d|p
    first: object
    second: object


@dataclass
class Instr:
    opcode: str
    parts: list[str]
    operands: list
    guard: Reg | None
    guard_neg: bool
    line: int
    text: str = ""


@dataclass
class Decl:
    type: str
    names: list[str]


@dataclass
class Label:
    name: str


@dataclass
class Block:
    items: list = field(default_factory=list)


SPECIALS = {"%laneid", "%warpid", "%nwarpid", "%smid", "%nsmid", "%gridid", "%clock", "%clock64", "%clock_hi",
            "%globaltimer", "%globaltimer_lo", "%globaltimer_hi", "%lanemask_eq", "%lanemask_le", "%lanemask_lt",
            "%lanemask_ge", "%lanemask_gt", "%dynamic_smem_size", "%total_smem_size", "%cluster_ctarank",
            "%cluster_nctarank", "%is_explicit_cluster"}
for _v in ("tid", "ntid", "ctaid", "nctaid", "clusterid", "nclusterid", "cluster_ctaid", "cluster_nctaid"):
    SPECIALS.update({f"%{_v}.x", f"%{_v}.y", f"%{_v}.z"})


class _Parser:
    def __init__(self, toks: list[Tok], path: str, stmt: AsmStatement):
        self.toks, self.i, self.path, self.stmt = toks, 0, path, stmt

    def fail(self, line: int, what: str):
        raise PtxError(f"{self.path}:{line}: {what}")

    def peek(self, k: int = 0) -> Tok | None:
        return self.toks[self.i + k] if self.i + k < len(self.toks) else None

    def take(self) -> Tok:
        t = self.peek()
        if t is None:
            self.fail(self.stmt.line, "the PTX of this asm statement ends in the middle of an instruction")
        self.i += 1
        return t

    def expect(self, text: str) -> Tok:
        t = self.take()
        if t.text != text:
            self.fail(t.line, f"expected '{text}' in the PTX, found '{t.text}'")
        return t

    def block(self, top: bool) -> Block:
        b = Block()
        while True:
            t = self.peek()
            if t is None:
                if not top:
                    self.fail(self.stmt.line, "a '{' in the PTX of this asm statement is not closed")
                return b
            if t.text == "}" and t.kind == "punct":
                if top:
                    self.fail(t.line, "a '}' in the PTX of this asm statement closes nothing")
                self.i += 1
                return b
            if t.text == "{" and t.kind == "punct":
                self.i += 1
                b.items.append(self.block(False))
            elif t.text == ";":
                self.i += 1
            elif t.kind == "id" and self.peek(1) is not None and self.peek(1).text == ":" and t.text[0] != ".":
                self.i += 2
                b.items.append(Label(t.text))
            elif t.kind == "id" and t.text in (".reg", ".pred"):
                b.items.append(self.decl())
            elif t.kind == "id" and t.text.startswith("."):
                self.fail(t.line, f"the PTX directive '{t.text}' is not run by the simulator (it knows .reg)")
            else:
                b.items.append(self.instr())

    def decl(self) -> Decl:
        first = self.take()
        typ = self.take().text if first.text == ".reg" else ".pred"
        if not typ.startswith("."):
            self.fail(first.line, f"expected a type after .reg, found '{typ}'")
        if re.fullmatch(r"\.v\d", typ):
            self.fail(first.line, "vector .reg declarations (.reg .v4 ...) are not run by the simulator")
        names = []
        while True:
            t = self.take()
            if t.kind != "id":
                self.fail(t.line, f"expected a register name in a .reg declaration, found '{t.text}'")
            if self.peek() is not None and self.peek().text == "<":
                self.take()
                n = int(self.take().text)
                self.expect(">")
                names += [f"{t.text}{k}" for k in range(n)]
            else:
                names.append(t.text)
            t = self.take()
            if t.text == ";":
                return Decl(typ, names)
            if t.text != ",":
                self.fail(t.line, f"expected ',' or ';' in a .reg declaration, found '{t.text}'")

    def instr(self) -> Instr:
        guard, neg = None, False
        t = self.take()
        line = t.line
        if t.text == "@":
            if self.peek() is not None and self.peek().text == "!":
                self.take()
                neg = True
            g = self.take()
            guard = self.reg_of(g)
            t = self.take()
        if t.kind != "id":
            self.fail(t.line, f"expected a PTX instruction, found '{t.text}'")
        opcode = t.text
        operands = []
        if self.peek() is not None and self.peek().text != ";":
            while True:
                operands.append(self.operand())
                nxt = self.take()
                if nxt.text == ";":
                    break
                if nxt.text != ",":
                    self.fail(nxt.line, f"expected ',' or ';' after an operand of {opcode}, found '{nxt.text}'")
        else:
            self.take()
        parts = opcode.split(".")
        return Instr(opcode, parts, operands, guard, neg, line)

    def reg_of(self, t: Tok) -> Reg:
        if t.kind == "op":
            return Reg("op", f"cudasim_a{t.value}", t.text, t.value)
        if t.kind != "id":
            self.fail(t.line, f"expected a register, found '{t.text}'")
        if t.text == "_":
            return Reg("sink", "cudasim_sink", "_")
        return Reg("name", t.text, t.text)

    def operand(self):
        first = self.single()
        if self.peek() is not None and self.peek().text == "|":
            self.take()
            return Pair(first, self.single())
        return first

    def single(self):
        t = self.take()
        if t.text == "{":
            items = []
            while True:
                items.append(self.single())
                nxt = self.take()
                if nxt.text == "}":
                    return Vec(items)
                if nxt.text != ",":
                    self.fail(nxt.line, f"expected ',' or '}}' in a vector operand, found '{nxt.text}'")
        if t.text == "[":
            base = self.single()
            off, coords = 0, None
            nxt = self.take()
            while nxt.text in "+-":
                sign = -1 if nxt.text == "-" else 1
                num = self.take()
                if num.kind == "op":
                    self.fail(num.line, "an address [reg+%N] needs an immediate offset; add the register first")
                off += sign * _int_value(num, self)
                nxt = self.take()
            if nxt.text == ",":
                v = self.single()
                coords = v.items if isinstance(v, Vec) else [v]
                nxt = self.take()
            if nxt.text != "]":
                self.fail(nxt.line, f"expected ']' to close an address, found '{nxt.text}'")
            return Mem(base, off, coords)
        if t.text == "-":
            num = self.take()
            if num.kind != "num":
                self.fail(num.line, "expected a number after '-'")
            return Imm("-" + num.text)
        if t.text == "!":
            self.fail(t.line, "a negated predicate operand (!p) is not run by the simulator")
        if t.kind == "num":
            return Imm(t.text)
        return self.reg_of(t)


def _int_value(t: Tok, parser: _Parser) -> int:
    if t.kind != "num":
        parser.fail(t.line, f"expected a number, found '{t.text}'")
    s = t.text.rstrip("uU")
    return int(s, 0) if not re.match(r"0\d", s) else int(s, 8)


# ---------------------------------------------------------------------------------------------
# C++ generation

class Emit:
    """What an instruction's translation needs: operands as C++, the site, errors."""

    def __init__(self, path: str, stmt: AsmStatement):
        self.path, self.stmt = path, stmt
        self.scopes: list[dict[str, tuple[str, str]]] = [{}]  # PTX name -> (C++ name, .type)
        self.labels: list[dict[str, str]] = [{}]
        self.decls: list[str] = []
        self.label_names: list[str] = []
        self.uid = 0
        self.instr: Instr | None = None
        self.uses_sink = False

    def fail(self, what: str, line: int | None = None):
        ins = self.instr
        where = line or (ins.line if ins else self.stmt.line)
        prefix = f"{ins.opcode}: " if ins else ""
        raise PtxError(f"{self.path}:{where}: {prefix}{what}")

    def line_expr(self, line: int) -> str:
        return "__LINE__" if self.stmt.in_macro else str(line)

    def site(self) -> str:
        ins = self.instr
        return (f'::cudasim::ptx::Site{{__FILE__, {self.line_expr(ins.line)}, "{ins.opcode}", '
                f'{self.line_expr(self.stmt.line)}}}')

    def lookup(self, r: Reg) -> tuple[str, str]:
        for s in reversed(self.scopes):
            if r.text in s:
                return s[r.text]
        return "", ""

    def reg(self, x, what: str = "operand") -> str:
        """A register operand as a C++ lvalue."""
        if isinstance(x, Reg):
            if x.kind == "op":
                if self.stmt.operands[x.index].letter == "n":
                    self.fail(f"the {what} {x.text} must be a register, but its constraint is \"n\" (an immediate)")
                return x.name
            if x.kind == "sink":
                self.uses_sink = True
                return x.name
            name, _ = self.lookup(x)
            if name:
                return name
            if x.text in SPECIALS:
                self.fail(f"the special register {x.text} cannot be written")
            self.fail(f"'{x.text}' is not a register declared in this asm statement (.reg) or an operand")
        self.fail(f"the {what} must be a register")

    def val(self, x) -> str:
        """Any source operand as a C++ expression (a register, special register or immediate)."""
        if isinstance(x, Imm):
            return imm_expr(x.text)
        if isinstance(x, Reg):
            if x.kind == "op":
                return x.name
            if x.kind == "sink":
                self.fail("'_' (no register) cannot be read")
            if not self.lookup(x)[0]:
                if x.text in SPECIALS:
                    return f"::cudasim::ptx::sr_{x.text[1:].replace('.', '_')}()"
                self.fail(f"'{x.text}' is not a register declared in this asm statement (.reg), an operand or a "
                          "special register the simulator knows")
            return self.reg(x)
        if isinstance(x, (Vec, Mem, Pair)):
            self.fail("this operand cannot be a vector, an address or a pair here")
        self.fail("unexpected operand")

    def imm(self, x, what: str) -> int:
        """An operand that must be a constant: a literal, or an "n" asm operand (returned as None then)."""
        if isinstance(x, Imm):
            return int(x.text.rstrip("uU"), 0)
        if isinstance(x, Reg) and x.kind == "op" and self.stmt.operands[x.index].letter == "n":
            return None
        self.fail(f"the {what} must be an immediate (a number, or an \"n\" operand)")

    def addr(self, m) -> str:
        if not isinstance(m, Mem) or m.coords is not None:
            self.fail("expected an address operand such as [%1] or [%1+16]")
        if isinstance(m.base, Imm):
            return f"::cudasim::ptx::Addr{{{imm_expr(m.base.text)}.u64() + ({m.offset}ll)}}"
        return f"::cudasim::ptx::addr({self.val(m.base)}, {m.offset}ll)"

    def vec(self, x, n: int | tuple, what: str) -> list:
        items = x.items if isinstance(x, Vec) else [x]
        counts = (n,) if isinstance(n, int) else n
        if len(items) not in counts:
            self.fail(f"the {what} must be {' or '.join(map(str, counts))} register(s) in braces, got {len(items)}")
        return items

    def fresh(self, prefix: str) -> str:
        self.uid += 1
        return f"cudasim_{prefix}{self.uid}"


_CPP_TYPES = {".pred": "bool", ".b8": "uint8_t", ".u8": "uint8_t", ".s8": "uint8_t", ".b16": "uint16_t",
              ".u16": "uint16_t", ".s16": "uint16_t", ".f16": "uint16_t", ".bf16": "uint16_t", ".b32": "uint32_t",
              ".u32": "uint32_t", ".s32": "uint32_t", ".f32": "float", ".b64": "uint64_t", ".u64": "uint64_t",
              ".s64": "uint64_t", ".f64": "double", ".f16x2": "uint32_t", ".bf16x2": "uint32_t"}


def imm_expr(text: str) -> str:
    """A PTX literal as a C++ value of the simulator's immediate types."""
    neg = text.startswith("-")
    s = text[1:] if neg else text
    if s[:2] in ("0f", "0F"):
        return f"::cudasim::ptx::Bits32{{0x{s[2:]}u}}"
    if s[:2] in ("0d", "0D"):
        return f"::cudasim::ptx::Bits64{{0x{s[2:]}ull}}"
    if "." in s or re.search(r"[eE]", s) and not s[:2].lower() == "0x":
        return f"::cudasim::ptx::FImm{{{'-' if neg else ''}{s}}}"
    s = s.rstrip("uU")
    v = int(s, 0) if not re.match(r"0\d", s) else int(s, 8)
    if neg:
        v = -v
    return f"::cudasim::ptx::Imm{{{v}ll}}" if -2**63 <= v < 2**63 else f"::cudasim::ptx::Imm{{{v - 2**64}ll}}"


def translate_asm(stmt: AsmStatement, path: str) -> tuple[str, bool]:
    """The C++ that runs one asm statement (on one line: the caller keeps the line count), and whether that C++
    calls the simulator's PTX (cudasim_ptx.h): a statement with no instruction and no output needs only cudasim.h."""
    from . import ptx_ops

    toks = tokenize(stmt, path)
    body = _Parser(toks, path, stmt).block(True)
    if not body.items and not any(o.mode == "=" for o in stmt.operands):
        # no instruction, no output to poison: a compiler barrier or a value held in registers (helpers.cuh's
        # keep_packed). Its operands get nvcc's checks (cudasim.h) and nothing else happens, so the file needs no
        # cudasim_ptx.h.
        checks = []
        for o in stmt.operands:
            if o.letter == "n":
                checks.append(f"(void)std::integral_constant<long long, static_cast<long long>({o.expr})>::value;")
            elif o.mode == "+":
                checks.append(f"::cudasim::asm_operand_inout<'{o.letter}'>({o.expr});")
            else:
                checks.append(f"::cudasim::asm_operand_in<'{o.letter}'>({o.expr});")
        return "do { " + " ".join(checks) + " } while (0);", False
    em = Emit(path, stmt)
    code = _emit_block(body, em, ptx_ops.EMITTERS, top=True)
    pre, post = [], []
    for o in stmt.operands:
        a = f"cudasim_a{o.index}"
        if o.letter == "n":
            pre.append(f"::cudasim::ptx::Imm {a}{{std::integral_constant<long long, static_cast<long long>({o.expr})>::value}};")
            continue
        t = REG_TYPES[o.letter]
        if o.mode:
            pre.append(f"auto& cudasim_o{o.index} = ({o.expr});")
            init = f"::cudasim::ptx::reg_in<'{o.letter}'>(cudasim_o{o.index})" if o.mode == "+" else \
                f"::cudasim::ptx::reg_fresh<'{o.letter}'>(cudasim_o{o.index})"
            pre.append(f"{t} {a} = {init};")
            post.append(f"::cudasim::ptx::reg_out<'{o.letter}'>(cudasim_o{o.index}, {a});")
        else:
            pre.append(f"{t} {a} = ::cudasim::ptx::reg_in<'{o.letter}'>(({o.expr}));")
    head = ""
    if em.label_names:
        head = "__label__ " + ", ".join(em.label_names) + "; "
    sink = "uint64_t cudasim_sink = 0; (void)cudasim_sink; " if em.uses_sink else ""
    text = "do { " + head + " ".join(pre) + " " + sink + " ".join(em.decls) + " " + code + " " + " ".join(post) + " } while (0);"
    return " ".join(text.split("\n")), True


def _emit_block(b: Block, em: Emit, emitters: dict, top: bool) -> str:
    if not top:
        em.scopes.append({})
        em.labels.append({})
    # labels and registers are known in the whole block, whatever the order
    for it in b.items:
        if isinstance(it, Label):
            cname = em.fresh("L")
            em.labels[-1][it.name] = cname
            em.label_names.append(cname)
        elif isinstance(it, Decl):
            ctype = _CPP_TYPES.get(it.type)
            if ctype is None:
                raise PtxError(f"{em.path}:{em.stmt.line}: .reg {it.type} is not a register type the simulator knows")
            for n in it.names:
                cname = em.fresh("r")
                em.scopes[-1][n] = (cname, it.type)
                init = "false" if ctype == "bool" else "::cudasim::ptx::poison<" + ctype + ">()"
                em.decls.append(f"{ctype} {cname} = {init};")
    out = []
    for it in b.items:
        if isinstance(it, Label):
            out.append(f"{em.labels[-1][it.name]}: ;")
        elif isinstance(it, Block):
            out.append(_emit_block(it, em, emitters, top=False))
        elif isinstance(it, Instr):
            em.instr = it
            if it.opcode in ("bra", "bra.uni"):
                code = _emit_branch(it, em)
            else:
                fn = emitters.get(it.parts[0])
                code = fn(it, em) if fn else None
                if code is None:
                    em.fail(unsupported_message(it))
            if it.guard is not None:
                g = em.val(it.guard)
                code = f"if ({'!' if it.guard_neg else ''}::cudasim::ptx::pred({g})) {{ {code} }}"
            out.append(code)
            em.instr = None
    if not top:
        em.scopes.pop()
        em.labels.pop()
    return "{ " + " ".join(out) + " }"


def _emit_branch(it: Instr, em: Emit) -> str:
    if len(it.operands) != 1 or not isinstance(it.operands[0], Reg):
        em.fail("bra takes one label")
    name = it.operands[0].text
    for s in reversed(em.labels):
        if name in s:
            return f"goto {s[name]};"
    em.fail(f"the label '{name}' is not in this asm statement")


def unsupported_message(it: Instr) -> str:
    return (f"the simulator does not run the PTX instruction '{it.opcode}'. It runs mma.sync, ldmatrix, stmatrix, "
            "cp.async, the mbarrier, cp.async.bulk and wgmma families, ld/st, atom/red, mov, cvt, cvta and the common integer "
            "and float instructions (kernels/sim/README.md, 'Inline PTX', lists them); use the CUDA C++ API "
            "for this one, or keep the asm under #if defined(__CUDA_ARCH__) with a C++ fallback for the simulator")


# ---------------------------------------------------------------------------------------------
# The hook translate.py calls

def asm_edits(src: str, mask: bytearray, path: str, gpu_only: set[int]) -> list[tuple[int, int, str, bool]]:
    """(start, end, replacement, whether the replacement needs cudasim_ptx.h) for every asm statement in code.
    One that cannot be translated is a PtxError, except on lines the preprocessor may hide from the simulator
    (`gpu_only`: inside an #if on __CUDA_ARCH__ or CUDASIM), which are left as they are."""
    edits = []
    pos = 0
    for m in ASM_RE.finditer(src):
        if m.start() < pos or not mask[m.start()]:
            continue
        line = _line_of(src, m.start())
        try:
            stmt = parse_asm(src, m.start(), path)
            code, needs_ptx = translate_asm(stmt, path)
        except PtxError as e:
            if line in gpu_only:
                continue
            deferred = _deferred_error(src, m, path, line, e)
            if deferred is None:
                raise
            stmt, code, needs_ptx = deferred
        original = src[stmt.start:stmt.end]
        pad = "".join(" \\\n" if original[max(0, k - 1):k] == "\\" else "\n"
                      for k, c in enumerate(original) if c == "\n")
        edits.append((stmt.start, stmt.end, code + pad, needs_ptx))
        pos = stmt.end
    return edits


def _in_define(src: str, pos: int) -> bool:
    """Whether `pos` lies in the body of a #define (its logical line, continuations followed back, starts so)."""
    start = src.rfind("\n", 0, pos) + 1
    while start > 1 and src[start - 2] == "\\":  # the line before continues into this one
        start = src.rfind("\n", 0, start - 1) + 1
    return re.match(r"[ \t]*#[ \t]*define\b", src[start:]) is not None


def _deferred_error(src: str, m: re.Match, path: str, line: int, error: PtxError):
    """An asm statement the simulator cannot run inside a #define: nvcc sees it only where the macro is used (a
    header's macro for an instruction that a file never calls is common), so the simulator's error waits for a use
    too: the statement becomes a static_assert that fails, with the error's words, where the macro is expanded.
    None where the statement's extent cannot be read (the error stands)."""
    if not _in_define(src, m.start()):
        return None
    try:
        rparen = _matching_paren(src, m.end() - 1, path, line)
    except PtxError:
        return None
    end = _skip_space(src, rparen + 1)
    if end < len(src) and src[end] == ";":
        end += 1
    words = str(error).replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")
    code = f'static_assert(false, "cudasim: {words}");'
    stmt = AsmStatement(m.start(), end, line, "", [], [], True, True)
    return stmt, code, False

