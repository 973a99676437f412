"""The activation registry: every elementwise function an MLP may apply, as one row each.

A row says what the function is (its formula), which names transformers gives it (`ACT2FN` keys),
its cost per element forward and backward (the FLOPs convention of blockcli.trace), what its backward
needs from the forward (`saves`), and whether it exists only as a gated MLP's activation. The block,
trace, sizing, config validation, the family maps and the README's table all read these rows; the
NumPy kernels live in blockcli.ops, keyed by the same names (ops checks that the two agree).

MLP structure is separate from the activation: a plain MLP is act(x·W_up)·W_down, a gated one
(act(x·W_gate) ⊙ x·W_up)·W_down, with any activation here (`block.gated`). Three gated forms keep the
names people know them by, and the YAML may write them alone: `swiglu` (SiLU, gated), `geglu` (tanh
GELU, gated) and `reglu` (ReLU, gated). `clamped_swiglu` (gpt-oss) is gated only: it also changes the
up branch, to clip(u, ±c) + 1.

An activation may carry learned scalars of its own (`params`: xIELU's a_p and a_n), one each per layer, held as
the block's parameters `act_<name>` and counted among the MLP's, and stored constants (`buffers`: xIELU's β and
ε), held as buffers `act_<name>`, read from a checkpoint and never trained.

This module imports nothing (count and convert start without NumPy).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Activation:
    name: str  # blockcli's name (block.activation)
    formula: str
    hf_names: tuple[str, ...]  # transformers' ACT2FN keys that compute this function
    flops: int  # per element, forward
    backward_flops: int  # per element, the vector-Jacobian product dy → dx
    saves: str = "input"  # what the backward reads: the input x, or the output alone (ReLU: y > 0 is x > 0)
    gated_only: bool = False  # exists only as a gated MLP's activation (it changes the up branch too)
    # learned scalars of its own, one each per layer: block parameters `act_<name>` of shape (1,) (xIELU's a_p, a_n)
    params: tuple[str, ...] = ()
    # stored constants of its own (buffers, not parameters): name → the value transformers builds it with
    buffers: tuple[tuple[str, float], ...] = ()


ACTIVATIONS: dict[str, Activation] = {a.name: a for a in (
    Activation("gelu_tanh", "0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))",
               ("gelu_new", "gelu_pytorch_tanh", "gelu_fast", "gelu_python_tanh", "gelu_accurate"), 8, 14),
    Activation("gelu", "x·Φ(x) = 0.5·x·(1 + erf(x/√2))", ("gelu", "gelu_python"), 8, 10),
    Activation("relu", "max(x, 0)", ("relu",), 1, 1, saves="output"),
    Activation("silu", "x·σ(x)", ("silu", "swish"), 4, 6),
    Activation("relu2", "max(x, 0)²", ("relu2",), 2, 2),
    Activation("quick_gelu", "x·σ(1.702·x)", ("quick_gelu",), 5, 7),
    Activation("gelu_10", "clip(x·Φ(x), −10, 10)", ("gelu_10",), 10, 11),
    Activation("relu6", "min(max(x, 0), 6)", ("relu6",), 2, 2),
    Activation("leaky_relu", "x if x ≥ 0 else 0.01·x", ("leaky_relu",), 2, 2),
    Activation("sigmoid", "σ(x) = 1/(1 + e^−x)", ("sigmoid",), 4, 3, saves="output"),
    Activation("tanh", "tanh(x)", ("tanh",), 4, 3, saves="output"),
    Activation("mish", "x·tanh(softplus(x))", ("mish",), 8, 12),
    Activation("hardswish", "x·min(max(x + 3, 0), 6)/6", ("hardswish",), 4, 3),
    Activation("linear", "x (the identity)", ("linear",), 0, 0, saves="nothing"),
    Activation("laplace", "0.5·(1 + erf((x − μ)/(σ·√2))), μ = 0.707107, σ = 0.282095", ("laplace",), 8, 8),
    # Apertus' xIELU: a learned quadratic above 0 and a learned ELU-like slope below, per layer; β = 0.5, ε = −1e-6
    Activation("xielu", "α_p·x² + β·x if x > 0 else α_n·(expm1(min(x, ε)) − x) + β·x; α_p = softplus(a_p), "
               "α_n = β + softplus(a_n), β = 0.5, ε = −10⁻⁶", ("xielu",), 7, 6, params=("alpha_p", "alpha_n"),
               buffers=(("beta", 0.5), ("eps", -1e-6))),
    Activation("clamped_swiglu", "g·σ(α·g) with g = min(x, c); the up branch clip(u, ±c) + 1 (gpt-oss)", (), 7, 8,
               gated_only=True),
)}

# gated forms known by a name of their own: that name alone means gated with this activation
GATED_NAMES = {"swiglu": "silu", "geglu": "gelu_tanh", "reglu": "relu", "clamped_swiglu": "clamped_swiglu"}
NAME_OF_GATED = {act: name for name, act in GATED_NAMES.items()}

# what block.activation may say: a function, or a gated form's own name
SPELLINGS = tuple(ACTIVATIONS) + tuple(name for name in GATED_NAMES if name not in ACTIVATIONS)

# an activation's stored constant, as a block key (act_beta) → the value it is built with
BUFFER_VALUES = {f"act_{name}": value for a in ACTIVATIONS.values() for name, value in a.buffers}

# transformers' ACT2FN key → blockcli's activation
FROM_TRANSFORMERS = {hf: a.name for a in ACTIVATIONS.values() for hf in a.hf_names}


def function_of(activation: str) -> Activation:
    """The registry row of an activation, by a function's name or a gated form's (`swiglu`: SiLU)."""
    return ACTIVATIONS[GATED_NAMES.get(activation, activation)]


def spelling(function: str, gated: bool) -> str:
    """How block.activation writes `function` in an MLP gated or not: the gated form's own name when it
    has one (silu, gated: `swiglu`), else the function's (then `block.gated` says gated)."""
    return NAME_OF_GATED.get(function, function) if gated else function


def mlp_flops(activation: str, gated: bool) -> int:
    """FLOPs per d_ff-wide element of the activation step: the function, and in a gated MLP the product
    with the up branch (clamped SwiGLU's up branch costs 3 more: clip (2) and + 1)."""
    row = function_of(activation)
    return row.flops + (1 if gated else 0) + (3 if row.gated_only else 0)


def mlp_kind(activation: str, gated: bool) -> str:
    """The trace's kind of an MLP's activation step: block.activation, or `gated_<function>` for a gated
    MLP whose form has no name of its own (gated_relu2)."""
    return activation if not gated or activation in GATED_NAMES else f"gated_{activation}"


# every activation step an MLP can have → its FLOPs per element (trace's ELEMENT_FLOPS reads these)
MLP_KIND_FLOPS = {mlp_kind(spelling(a.name, gated), gated): mlp_flops(a.name, gated)
                  for a in ACTIVATIONS.values() for gated in (False, True) if gated or not a.gated_only}
