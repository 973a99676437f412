"""NumPy blocks with a backward(dy), for verify --grad: examples/my_block_backward.py's block, right, and
with one classic mistake each in what its backward returns."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

from my_block_backward import MyBlockWithBackward  # noqa: E402


class SlightlyOff(MyBlockWithBackward):
    """Every gradient 0.1 % too large: a constant folded in twice, say."""

    def backward(self, dy):
        dx, grads = super().backward(dy)
        return dx * 1.001, {k: g * 1.001 for k, g in grads.items()}


class ForgetsWo(MyBlockWithBackward):
    """Returns no gradient for W_O."""

    def backward(self, dy):
        dx, grads = super().backward(dy)
        del grads["w_o"]
        return dx, grads


class ZeroesItsScale(MyBlockWithBackward):
    """Multiplies LN2's scale by zero in the forward (and differentiates that truthfully)."""

    def __init__(self, weights, config):
        super().__init__({**weights, "ln2_gamma": weights["ln2_gamma"] * 0.0}, config)

    def backward(self, dy):
        dx, grads = super().backward(dy)
        return dx, {**grads, "ln2_gamma": grads["ln2_gamma"] * 0.0}


class LeaksBackward(MyBlockWithBackward):
    """Each position's dy also reaches the next position's input: the backward of a block that looks ahead."""

    def backward(self, dy):
        dx, grads = super().backward(dy)
        dx[:, 1:] += 0.5 * dy[:, :-1]
        return dx, grads


class ReturnsOnlyDx(MyBlockWithBackward):
    def backward(self, dy):
        return super().backward(dy)[0]
