"""Planted bugs: a copy of a solution file with one small, named change, so the bug never drifts from it."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLANTED = ROOT / "build" / "planted"


def plant(source: Path, old: str, new: str, name: str) -> Path:
    """Write `source` with `old` (which must occur exactly once) replaced by `new` to build/planted/<name>.

    The copy lands in build/, so its includes of the shared headers resolve as the original's do;
    a solution that changes so that `old` no longer occurs once fails here, not silently.
    """
    text = Path(source).read_text()
    count = text.count(old)
    assert count == 1, f"{Path(source).name} contains {old!r} {count} times, not once: update the planted bug"
    PLANTED.mkdir(parents=True, exist_ok=True)
    dest = PLANTED / name
    # the note goes last, so the copy's line numbers are the solution's
    planted = text.replace(old, new) + f"\n// planted bug: {old!r} -> {new!r}\n"
    if not dest.exists() or dest.read_text() != planted:
        dest.write_text(planted)
    return dest
