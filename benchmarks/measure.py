"""Helpers every benchmark shares: timing the garbage collector and laying out a result table.

No imports of other benchmark modules, so any of them can use it.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from typing import Any


class GcTimer:
    """Seconds the cyclic garbage collector runs while installed (through ``gc.callbacks``)."""

    __slots__ = ("_start", "seconds")

    def __init__(self) -> None:
        self.seconds = 0.0
        self._start = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._start

    def __enter__(self) -> GcTimer:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


def sectioned(title: str, header: str, rows: Sequence[Any], line: Callable[[Any], str]) -> str:
    """A result table: a title, the header, then one block of rows per ``row.section``, each
    row's ``line`` and, under it, its ``row.note`` if it has one."""
    lines = [title, "", header, "-" * len(header)]
    section = None
    for row in rows:
        if row.section != section:
            if section is not None:
                lines.append("")
            section = row.section
            lines.append(f"[{section}]")
        lines.append(line(row).rstrip())
        if getattr(row, "note", ""):
            lines.append(f"      ({row.note})")
    return "\n".join(lines)
