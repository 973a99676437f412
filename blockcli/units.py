"""Sizes as people read them, for tables and error messages alike (no imports: any layer may use it)."""

from __future__ import annotations


def human_bytes(n: float) -> str:
    """A byte count in binary units with three significant digits (whole units from 1,000 on): 1536 → '1.5 KiB'."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            value = n / scale
            # three significant digits, but never exponent form: 1,020 MiB stays "1020 MiB", not "1.02e+03 MiB"
            return f"{value:.3g} {unit}" if value < 999.5 else f"{value:.0f} {unit}"
    return f"{int(n)} B"
