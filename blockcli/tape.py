"""What a training forward pass keeps for its backward, and the gradients the backward fills in.

A layer called with a `Tape` saves, under its own key (`ln1`, `attn`, `mlp`, `blocks.3.attn` inside a
model), exactly the arrays its backward reads; the backward takes them back (freeing them as it goes,
so a model's saved activations shrink layer by layer) and adds each parameter's gradient under the
parameter's key. `saved_bytes` is what the forward kept, each array counted once however many
operations keep it: the figure `trace --backward` reconciles with `count --train`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

Array = np.ndarray


@dataclass
class Tape:
    saved: dict[str, dict[str, Any]] = field(default_factory=dict)  # operation key → what it saved
    grads: dict[str, Array] = field(default_factory=dict)  # parameter key → its gradient so far
    prefix: str = ""  # the keys of a block inside a model: 'blocks.3.'
    peak_bytes: int = 0  # the most the saved arrays ever held at once

    def within(self, prefix: str) -> Tape:
        """The same tape seen from inside a part of the model: keys under `prefix`."""
        return _View(self._root(), self.prefix + prefix)

    def keep(self, key: str, **arrays: Any) -> None:
        """Save arrays (or small values: indices, flags) for the backward of operation `key`."""
        root = self._root()
        full = self.prefix + key
        assert full not in root.saved, f"operation {full} saved twice in one pass"
        root.saved[full] = arrays
        root.peak_bytes = max(root.peak_bytes, root.saved_bytes())

    def take(self, key: str) -> dict[str, Any]:
        """What operation `key` saved, removed from the tape (its backward runs once)."""
        return self._root().saved.pop(self.prefix + key)

    def add(self, key: str, grad: Array) -> None:
        """Add to parameter `key`'s gradient (a parameter used twice, as a tied embedding is, sums both)."""
        root, full = self._root(), self.prefix + key
        if full in root.grads:
            root.grads[full] = root.grads[full] + grad
        else:
            root.grads[full] = grad  # a fresh array of the backward's (or a view of one), never a scratch buffer

    def saved_bytes(self) -> int:
        """Bytes the saved arrays hold now, each array (and each buffer behind views) counted once."""
        seen: dict[int, int] = {}
        for arrays in self._root().saved.values():
            for value in arrays.values():
                if isinstance(value, np.ndarray):
                    base = value if value.base is None else value.base
                    if isinstance(base, np.ndarray):
                        seen[id(base)] = max(seen.get(id(base), 0), base.nbytes)
                    else:
                        seen[id(value)] = value.nbytes
        return sum(seen.values())

    def _root(self) -> Tape:
        return self


class _View(Tape):
    def __init__(self, root: Tape, prefix: str) -> None:
        self._parent = root
        self.prefix = prefix

    def _root(self) -> Tape:
        return self._parent
