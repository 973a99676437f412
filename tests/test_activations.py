"""The activation registry's kernels: each forward equals the reference's scalar formula, each backward the
central difference of its forward, and (torch-marked) both equal torch's own functions under autograd; xIELU's
(with learned scalars of its own) the same, its scalars' gradients included, against transformers' module."""

from __future__ import annotations

import math

import numpy as np
import pytest

import reference as ref
from blockcli.activations import ACTIVATIONS, FROM_TRANSFORMERS, GATED_NAMES, SPELLINGS
from blockcli.ops import ACTIVATION_KERNELS, clamped_swiglu_gate, clamped_swiglu_gate_backward, clamped_swiglu_up, \
    clamped_swiglu_up_backward, xielu, xielu_backward

# points of every region: both sides of 0, ReLU6's 6, hardswish's ±3, softplus's 20, far tails; no kink itself
POINTS = np.array([-40.0, -21.0, -7.3, -3.2, -2.9, -1.1, -0.37, -1e-3, 2e-3, 0.41, 0.9, 1.7, 2.95, 3.05, 5.9, 6.1, 11.0,
                   19.5, 20.5, 40.0])
KINKS = {"relu": [0.0], "relu2": [0.0], "relu6": [0.0, 6.0], "leaky_relu": [0.0], "hardswish": [-3.0, 3.0],
         "gelu_10": [10.0]}


@pytest.mark.parametrize("name", sorted(ACTIVATION_KERNELS))
def test_each_forward_equals_the_references_scalar_formula(name: str) -> None:
    forward, _ = ACTIVATION_KERNELS[name]
    got = forward(POINTS.copy())
    want = np.array([ref.ACT_FN[name](float(x)) for x in POINTS])
    # relative to the largest magnitude, as the parity tests hold a forward: σ's far tail (4e-18 at −40) is
    # 0 in the tanh form the kernels use, which keeps every value finite
    assert np.max(np.abs(got - want)) <= 1e-13 * np.max(np.abs(want)), (name, got - want)


@pytest.mark.parametrize("name", sorted(ACTIVATION_KERNELS))
def test_each_backward_equals_the_central_difference_of_its_forward(name: str) -> None:
    forward, backward = ACTIVATION_KERNELS[name]
    x = POINTS[np.all([np.abs(POINTS - k) > 1e-3 for k in KINKS.get(name, [])], axis=0)] if name in KINKS else POINTS
    dy = np.random.default_rng(3).standard_normal(x.shape)
    step = 1e-6 * np.maximum(1.0, np.abs(x))
    numeric = (forward(x + step) - forward(x - step)) / (2 * step) * dy
    got = backward(x, dy)
    assert got.dtype == x.dtype and got.shape == x.shape
    assert np.allclose(got, numeric, rtol=1e-6, atol=1e-8), (name, np.max(np.abs(got - numeric)))


def test_the_clamped_swiglu_branches_have_zero_gradient_where_clamped() -> None:
    alpha, limit = 1.3, 0.5
    x = np.array([-2.0, -0.6, -0.4, 0.1, 0.45, 0.55, 3.0])
    dy = np.ones_like(x)
    step = 1e-7
    gate = (clamped_swiglu_gate(x + step, alpha, limit) - clamped_swiglu_gate(x - step, alpha, limit)) / (2 * step)
    assert np.allclose(clamped_swiglu_gate_backward(x, dy, alpha, limit), gate, atol=1e-7)
    assert np.all(clamped_swiglu_gate_backward(x, dy, alpha, limit)[x > limit] == 0)
    up = (clamped_swiglu_up(x + step, limit) - clamped_swiglu_up(x - step, limit)) / (2 * step)
    assert np.allclose(clamped_swiglu_up_backward(x, dy, limit), up, atol=1e-7)
    assert np.all(clamped_swiglu_up_backward(x, dy, limit)[np.abs(x) > limit] == 0)


def test_every_spelling_is_a_function_or_a_gated_form_of_one() -> None:
    assert set(SPELLINGS) == set(ACTIVATIONS) | set(GATED_NAMES)
    assert all(GATED_NAMES[name] in ACTIVATIONS for name in GATED_NAMES)
    assert set(FROM_TRANSFORMERS.values()) <= set(ACTIVATIONS)
    assert set(ref.FUNCTIONS) == set(ACTIVATION_KERNELS)  # the reference writes every function out


# ----------------------------------------------------------------------------- torch (its own functions, autograd)


def _torch_functions(torch):  # what transformers' ACT2FN computes, from torch's own primitives
    nn = torch.nn.functional
    return {
        "gelu_tanh": lambda x: nn.gelu(x, approximate="tanh"), "gelu": nn.gelu, "relu": nn.relu, "silu": nn.silu,
        "relu2": lambda x: torch.square(nn.relu(x)), "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),
        "gelu_10": lambda x: torch.clip(nn.gelu(x), -10, 10), "relu6": nn.relu6, "leaky_relu": nn.leaky_relu,
        "sigmoid": torch.sigmoid, "tanh": torch.tanh, "mish": nn.mish, "hardswish": nn.hardswish,
        "linear": lambda x: x, "laplace": lambda x: 0.5 * (1.0 + torch.erf((x - 0.707107) / (0.282095 * math.sqrt(2.0)))),
    }


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(ACTIVATION_KERNELS))
def test_each_kernel_equals_torch_forward_and_backward(name: str) -> None:
    torch = pytest.importorskip("torch")
    forward, backward = ACTIVATION_KERNELS[name]
    x = torch.tensor(POINTS, dtype=torch.float64, requires_grad=True)
    dy = np.random.default_rng(5).standard_normal(POINTS.shape)
    y = _torch_functions(torch)[name](x)
    y.backward(torch.tensor(dy))
    for got, want in ((forward(POINTS.copy()), y.detach().numpy()), (backward(POINTS, dy), x.grad.numpy())):
        assert np.max(np.abs(got - want)) <= 1e-12 * np.max(np.abs(want)), (name, got - want)


# ----------------------------------------------------------------------------- xIELU (learned scalars of its own)

# the layer's stored a_p, a_n (before their softplus), β and ε: transformers' initial a_p (α_p = 0.8) and others
XIELU_POINTS = [(math.log(math.expm1(0.8)), math.log(math.expm1(0.3)), 0.5, -1e-6), (-0.7, 1.3, 0.5, -1e-6),
                (0.4, -2.0, 0.3, -1e-2)]


@pytest.mark.parametrize("scalars", XIELU_POINTS)
def test_xielu_equals_the_references_formula(scalars: tuple[float, ...]) -> None:
    stored = [np.array([s]) for s in scalars]
    want = np.array([ref.xielu(float(x), *scalars) for x in POINTS])
    assert np.max(np.abs(xielu(POINTS.copy(), *stored) - want)) <= 1e-13 * np.max(np.abs(want))


@pytest.mark.parametrize("scalars", XIELU_POINTS)
def test_xielu_backward_equals_central_differences_in_x_and_both_scalars(scalars: tuple[float, ...]) -> None:
    a_p, a_n, beta, eps = scalars
    x = POINTS[np.abs(POINTS - eps) > 1e-3]  # min(x, ε)'s kink
    dy = np.random.default_rng(7).standard_normal(x.shape)
    dx, d_p, d_n = xielu_backward(x, dy, *(np.array([s]) for s in scalars))

    def f(x: np.ndarray, a_p: float, a_n: float) -> float:
        return xielu(x, np.array([a_p]), np.array([a_n]), np.array([beta]), np.array([eps]))

    step = 1e-6 * np.maximum(1.0, np.abs(x))
    assert np.allclose(dx, (f(x + step, a_p, a_n) - f(x - step, a_p, a_n)) / (2 * step) * dy, rtol=1e-6, atol=1e-8)
    h = 1e-6
    assert d_p == pytest.approx(float(np.sum((f(x, a_p + h, a_n) - f(x, a_p - h, a_n)) / (2 * h) * dy)), rel=1e-6)
    assert d_n == pytest.approx(float(np.sum((f(x, a_p, a_n + h) - f(x, a_p, a_n - h)) / (2 * h) * dy)), rel=1e-6)


@pytest.mark.torch
def test_xielu_equals_transformers_activation_under_autograd() -> None:
    torch = pytest.importorskip("torch")
    activations = pytest.importorskip("transformers.activations")
    module = activations.XIELUActivation(alpha_p_init=0.6, alpha_n_init=1.1, dtype=torch.float64)
    x = torch.tensor(POINTS, dtype=torch.float64, requires_grad=True)
    dy = np.random.default_rng(5).standard_normal(POINTS.shape)
    y = module(x)
    y.backward(torch.tensor(dy))
    stored = [getattr(module, n).detach().numpy().reshape(1) for n in ("alpha_p", "alpha_n", "beta", "eps")]
    assert set(dict(module.named_parameters())) == {"alpha_p", "alpha_n"}  # β and ε are buffers
    got = xielu(POINTS.copy(), *stored)
    assert np.max(np.abs(got - y.detach().numpy())) <= 1e-12 * np.max(np.abs(got))
    dx, d_p, d_n = xielu_backward(POINTS, dy, *stored)
    assert np.max(np.abs(dx - x.grad.numpy())) <= 1e-12 * np.max(np.abs(dx))
    assert (d_p, d_n) == pytest.approx((module.alpha_p.grad.item(), module.alpha_n.grad.item()), rel=1e-12)
