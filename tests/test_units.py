"""Byte sizes as people read them: three significant digits in binary units, never exponent form."""

from __future__ import annotations

import pytest

from blockcli.units import human_bytes


@pytest.mark.parametrize("n, text", [
    (0, "0 B"),
    (1023, "1023 B"),
    (1536, "1.5 KiB"),  # 1536 / 1024
    (2**20, "1 MiB"),
    (1020 * 2**20, "1020 MiB"),  # 1,020 MiB: the rounding to three digits would write 1.02e+03
    (int(999.4 * 2**20), "999 MiB"),
    (int(999.6 * 2**20), "1000 MiB"),
    (5000 * 2**40, "5000 TiB"),
    (3 * 2**30 // 2, "1.5 GiB"),
])
def test_human_bytes(n: int, text: str) -> None:
    assert human_bytes(n) == text
