"""Every TORCH_CHECK message in the repository's .cu files formats numbers and shapes with std::to_string
or shape_str. Streaming an integer or sizes() straight into TORCH_CHECK killed the process (SIGSEGV) when
the check failed in an nvcc-built extension on an H100 machine (torch 2.11, CUDA 13.0; the evidence is
tests/test_lesson04.py's check_message probe), while the simulator's build took it: a refusal test then
passes on the simulator and crashes on the GPU. This scan finds such a message without a GPU."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernels.build.sources import code_mask, line_of, masked_text

ROOT = Path(__file__).resolve().parent.parent
# the probe that shows the crash streams numbers on purpose; tests/sim_compat holds code written the way
# public extensions are (numbers streamed in included), to show that it builds and runs unchanged
EXEMPT = {ROOT / "tests" / "toolkit" / "check_message.cu", *(ROOT / "tests" / "sim_compat").glob("*.cu")}
NUMBER = re.compile(r"\.(size|sizes|numel|dim|stride|strides|nbytes|storage_offset)\s*\(|^\s*-?\d+\s*$")
FORMATTED = re.compile(r"^\s*(std::to_string|shape_str|c10::toString)\s*\(")


def streamed_numbers(text: str) -> list[tuple[int, str]]:
    """(line, argument) for each TORCH_CHECK message argument that looks like a number or a shape
    streamed in unformatted."""
    masked, found = masked_text(text, code_mask(text)), []
    for m in re.finditer(r"\bTORCH_CHECK\s*\(", masked):
        depth, args, start = 1, [], m.end()
        i = start
        while i < len(masked) and depth:
            c = masked[i]
            if c in "([{":
                depth += 1
            elif c in ")]}":
                depth -= 1
            elif c == "," and depth == 1:
                args.append((start, i))
                start = i + 1
            i += 1
        args.append((start, i - 1))
        for a, b in args[1:]:  # the first argument is the condition
            arg = masked[a:b]
            if NUMBER.search(arg) and not FORMATTED.match(arg):
                found.append((line_of(text, a), " ".join(text[a:b].split())))
    return found


def _sources() -> list[Path]:
    folders = [ROOT / d for d in ("kernels", "lessons", "solutions", "tests")]
    return sorted(p for d in folders for p in d.rglob("*.cu") if p not in EXEMPT and "build" not in p.parts)


def test_the_scan_finds_a_number_or_a_shape_streamed_in_and_passes_formatted_ones():
    bad = 'TORCH_CHECK(a.size(0) == n, "a must have ", n, " rows, got ", a.size(0), " and ", a.sizes());'
    good = ('TORCH_CHECK(a.size(0) == n, "a must have ", std::to_string(n), " rows, got ",\n'
            '            std::to_string(a.size(0)), " of shape ", shape_str(a.sizes()), " on ", a.device());')
    assert [arg for _, arg in streamed_numbers(bad)] == ["a.size(0)", "a.sizes()"]
    assert streamed_numbers(good) == []
    assert streamed_numbers('// TORCH_CHECK(x, "n = ", x.numel());\nTORCH_CHECK(ok, "f(a, b) = ", 2);') == [(2, "2")]


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_torch_check_messages_format_their_numbers(path):
    found = streamed_numbers(path.read_text())
    assert not found, "\n".join(f"{path.relative_to(ROOT)}:{line}: wrap {arg} in std::to_string(...) or shape_str(...)"
                                for line, arg in found)
