"""Sizes as people read them, for tables and error messages alike (no imports: any layer may use it)."""

from __future__ import annotations


def human_bytes(n: float) -> str:
    """A byte count in binary units with three significant digits: 1536 → '1.5 KiB'."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"
