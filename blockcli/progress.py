"""Progress of long work, told to whoever listens. Nothing here prints: the CLI listens and draws a
progress line on a terminal; with no listener (a pipe, --json, the Python API) a report costs a
list lookup.

A report names a task ("seeded bugs", "checks", "forward pass"), how much of it is done and of how
much (None: not known), and what it is on now; a task whose `done` reaches `total` is finished.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, Optional

Listener = Callable[[str, int, Optional[int], str], None]
_listeners: list[Listener] = []


def report(task: str, done: int, total: int | None = None, now: str = "") -> None:
    """`done` of `total` steps of `task` are finished; `now` says what runs next."""
    if _listeners:
        _listeners[-1](task, done, total, now)


@contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Send the reports made inside the block to `listener`."""
    _listeners.append(listener)
    try:
        yield
    finally:
        _listeners.remove(listener)
