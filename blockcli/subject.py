"""What verify checks: the `Subject` interface every target is wrapped in, and how a target fails.

blockcli's own block (verify.block_subject), a seeded bug (mutants) and a user's implementation
(impl.impl_subject) all become a Subject; a target that breaks while being checked raises
SubjectError, which verify reports once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import numpy as np

    from blockcli.block import DecoderBlock


@dataclass
class Subject:
    """What is being verified: blockcli's own block, a seeded bug, or a user's implementation."""

    forward: Callable[[np.ndarray], np.ndarray]  # x (B, T, d) float64 → y (B, T, d)
    weights: dict[str, np.ndarray]  # the weights it was built from, under blockcli's keys
    intermediates: Callable[[np.ndarray], dict[str, np.ndarray]] | None = None  # None: a black box
    parameters: Callable[[], dict[str, np.ndarray]] | None = None  # the arrays it exposes, if any
    forward32: Callable[[np.ndarray], np.ndarray] | None = None  # the same subject in float32
    block: DecoderBlock | None = None  # set when the subject is blockcli's block (or a seeded bug)
    # the same subject built again on other weights (the stability probe of item 17); None: cannot be rebuilt
    rebuild: Callable[[dict[str, np.ndarray]], Callable[[np.ndarray], np.ndarray]] | None = None
    notes: list[str] = field(default_factory=list)  # how the subject was adapted (per sequence, torch, …)
    torch: bool = False  # a torch.nn.Module: its intermediates come from forward hooks on its submodules
    unused: dict[str, str] = field(default_factory=dict)  # weight key → the filled submodule that never ran
    # (x, dy) → (dx, {weight key: gradient, None where none reached it}): its own backward (blockcli's VJP, a torch
    # module's autograd, a NumPy block's backward(dy)); None: it has none
    gradients: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, dict[str, np.ndarray | None]]] | None = None


class SubjectError(Exception):
    """The subject itself failed (raised, exited, timed out, changed its input, returned the wrong thing); the
    message says how, and `traceback` holds the user's traceback when there is one."""

    def __init__(self, message: str, traceback: str = "") -> None:
        super().__init__(message)
        self.traceback = traceback
