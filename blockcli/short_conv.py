"""The gated short convolution token mixer (LFM2's): a causal depthwise conv of a few taps, gated before and after.

Shapes: B batch, T sequence, d model width, K taps (config.ShortConv):

    [b | c | x] = u·W_in                 (B, T, d) each
    y = c ⊙ conv1d(b ⊙ x)                causal, depthwise, K taps over T
    out = y·W_out                        (B, T, d)

Its decode state is the conv's window, the last inputs (B, K − 1, d) blockcli keeps (transformers keeps K): constant
in T.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from blockcli import ops as F
from blockcli.config import BlockConfig, InputError
from blockcli.ops import STANDARD_OPS, Array, Ops

IN_LABEL, GATE_IN_LABEL, GATE_OUT_LABEL, OUT_LABEL = ("conv in-projection (b | c | x)", "b ⊙ x", "c ⊙ conv",
                                                      "conv out-projection")
# the symbolic shapes of a short-conv layer's rows
SYMBOLIC = {"conv_in": "(B, T, 3·d)", "conv_gate_in": "(B, T, d)", "short_conv": "(B, T, d)",
            "conv_gate_out": "(B, T, d)"}
NO_BACKWARD = ("gradients through a short-convolution layer are not implemented: verify --grad, train and trace "
               "--backward refuse models with block.short_conv layers")


def conv_label(kernel: int) -> str:
    return f"causal conv over T (kernel {kernel}, per channel), state (B, K−1, d) constant in T"


@dataclass
class ConvCache:
    """A short-conv layer's decode state: its conv's last K − 1 inputs (B, K − 1, d); `length` the tokens seen."""

    conv: Array | None = None
    length: int = 0


class ShortConvMixer:
    """A short-conv layer's mixer, called as attention is: (B, T, d) → (B, T, d), with a ConvCache to decode."""

    def __init__(self, cfg: BlockConfig, p: dict[str, Array], ops: Ops = STANDARD_OPS) -> None:
        assert cfg.short_conv is not None
        self.cfg, self.c, self.p, self.ops = cfg, cfg.short_conv, p, ops

    def __call__(self, u: Array, rec: Callable[..., None], cache: Any = None, drop_probs: Any = None,
                 tape: Any = None) -> Array:
        if tape is not None:
            raise InputError(NO_BACKWARD)
        p, d = self.p, self.cfg.d_model
        state = cache if isinstance(cache, ConvCache) else None
        bcx = F.linear(u, p["w_conv_in"], p.get("b_conv_in"))  # (B, T, 3·d)
        rec("conv_in", IN_LABEL, bcx, (u, p["w_conv_in"]), kind="linear", params=("w_conv_in", "b_conv_in"))
        b, c, x = np.split(bcx, [d, 2 * d], axis=-1)  # (B, T, d) each
        gated = b * x  # (B, T, d)
        rec("conv_gate_in", GATE_IN_LABEL, gated, (bcx,), kind="gate")
        conv, window = F.causal_conv1d(gated, p["short_conv"], p.get("b_short_conv"),
                                       state.conv if state is not None else None)  # (B, T, d), (B, K−1, d)
        rec("short_conv", conv_label(self.c.kernel), conv, (gated, p["short_conv"]), kind="conv",
            params=("short_conv", "b_short_conv"))
        y = c * conv  # (B, T, d)
        rec("conv_gate_out", GATE_OUT_LABEL, y, (bcx, conv), kind="gate")
        out = F.linear(y, p["w_conv_out"], p.get("b_conv_out"))  # (B, T, d)
        rec("attn_out", OUT_LABEL, out, (y, p["w_conv_out"]), kind="linear", params=("w_conv_out", "b_conv_out"))
        if state is not None:
            state.conv, state.length = window, state.length + u.shape[1]
        return out

    def backward(self, dy: Array, tape: Any) -> Array:
        raise InputError(NO_BACKWARD)
