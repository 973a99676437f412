"""A torch.nn.Module verified as it is: its parameters filled from blockcli's weights by name, hooks for intermediates.

Imported only when an `--impl` target returns a torch.nn.Module (torch stays an optional dependency).
Parameter names are matched by dotted suffix, so a wrapper module around a layer works, against the
naming schemes below (or a user's `--weights-map`). Matrix layout is decided by module type: an
nn.Linear stores (out, in) and is transposed from blockcli's (in, out); GPT-2's Conv1D already
stores (in, out). The module runs in the verified dtype, in eval mode, without gradients; `gradients` runs
its own autograd (verify --grad) and lays each parameter's gradient out as blockcli's weight.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from blockcli.config import BlockConfig, InputError

# Module name suffix → (blockcli keys its weight is made of, concatenated along the output axis; its bias's keys).
# Norm modules map weight → gamma and bias → beta.
SCHEMES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # nanoGPT and GPT-2 (fused c_attn; GPT-2's Conv1D or nanoGPT's nn.Linear)
    "ln_1": (("ln1_gamma",), ("ln1_beta",)),
    "attn.c_attn": (("w_q", "w_k", "w_v"), ("b_q", "b_k", "b_v")),
    "attn.c_proj": (("w_o",), ("b_o",)),
    "ln_2": (("ln2_gamma",), ("ln2_beta",)),
    "mlp.c_fc": (("w_up",), ("b_up",)),
    "mlp.c_proj": (("w_down",), ("b_down",)),
    # split Q/K/V under attn. (GPT-J, GPT-Neo, nanoGPT variants)
    "attn.q_proj": (("w_q",), ("b_q",)),
    "attn.k_proj": (("w_k",), ("b_k",)),
    "attn.v_proj": (("w_v",), ("b_v",)),
    "attn.out_proj": (("w_o",), ("b_o",)),
    "mlp.fc_in": (("w_up",), ("b_up",)),
    "mlp.fc_out": (("w_down",), ("b_down",)),
    # transformers' Llama, Mistral, Qwen2 (and OPT-style self_attn.out_proj, fc1, fc2)
    "input_layernorm": (("ln1_gamma",), ("ln1_beta",)),
    "self_attn.q_proj": (("w_q",), ("b_q",)),
    "self_attn.k_proj": (("w_k",), ("b_k",)),
    "self_attn.v_proj": (("w_v",), ("b_v",)),
    "self_attn.o_proj": (("w_o",), ("b_o",)),
    # q/k norms: Qwen3 and Gemma 3 per head (d_h,), OLMo 2 over the projection; Gemma's (1 + w) norms store
    # w, which is what blockcli's gamma holds under norm_unit_offset, so every norm fills as it is
    "self_attn.q_norm": (("q_norm_gamma",), ("q_norm_beta",)),
    "self_attn.k_norm": (("k_norm_gamma",), ("k_norm_beta",)),
    "self_attn.out_proj": (("w_o",), ("b_o",)),
    "post_attention_layernorm": (("ln2_gamma",), ("ln2_beta",)),
    "mlp.gate_proj": (("w_gate",), ("b_gate",)),
    "mlp.up_proj": (("w_up",), ("b_up",)),
    "mlp.down_proj": (("w_down",), ("b_down",)),
    "self_attn_layer_norm": (("ln1_gamma",), ("ln1_beta",)),
    "final_layer_norm": (("ln2_gamma",), ("ln2_beta",)),
    "fc1": (("w_up",), ("b_up",)),
    "fc2": (("w_down",), ("b_down",)),
    # GPT-NeoX (Pythia): Q, K, V fused per head, [q_0 k_0 v_0 q_1 k_1 v_1 …] along the output (PER_HEAD_QKV)
    "attention.query_key_value": (("w_q", "w_k", "w_v"), ("b_q", "b_k", "b_v")),
    "attention.dense": (("w_o",), ("b_o",)),
    "mlp.dense_h_to_4h": (("w_up",), ("b_up",)),
    "mlp.dense_4h_to_h": (("w_down",), ("b_down",)),
}
PER_HEAD_QKV = {"attention.query_key_value"}  # fused per head rather than Q | K | V (needs h = h_kv)

# Module name suffix → what its forward hook records (see Recorder.hook).
ROLES = {
    "ln_1": "ln1", "input_layernorm": "ln1", "self_attn_layer_norm": "ln1",
    "attn.c_attn": "qkv", "attention.query_key_value": "qkv_per_head", "attention.dense": "o",
    "attention": "attn",
    "attn.q_proj": "q", "self_attn.q_proj": "q", "attn.k_proj": "k", "self_attn.k_proj": "k",
    "attn.v_proj": "v", "self_attn.v_proj": "v",
    "attn.c_proj": "o", "attn.out_proj": "o", "self_attn.o_proj": "o", "self_attn.out_proj": "o",
    "attn": "attn", "self_attn": "attn", "attn.attn_dropout": "weights",
    "ln_2": "ln2", "post_attention_layernorm": "ln2", "final_layer_norm": "ln2",
    "mlp": "mlp", "fc2": "mlp",
}


def _suffix(name: str, table: Mapping[str, Any]) -> str | None:
    """The longest key of `table` that `name` ends with at a dot boundary."""
    found = [s for s in table if name == s or name.endswith("." + s)]
    return max(found, key=len) if found else None


class TorchBlock:
    """A torch.nn.Module filled from blockcli's weights, called on NumPy arrays, with its intermediates hooked."""

    def __init__(self, module: Any, weights: Mapping[str, np.ndarray], cfg: BlockConfig,
                 weights_map: Mapping[str, Any] | None, label: str) -> None:
        import torch

        self.torch, self.module, self.cfg = torch, module, cfg
        for name, tensor in [*module.named_parameters(), *module.named_buffers()]:  # the inputs come as CPU tensors
            if tensor.device.type != "cpu":
                why = ("which holds shapes but no data to run on; build the module on the CPU (blockcli fills "
                       "its parameters, not its buffers)" if tensor.is_meta else
                       "and blockcli runs modules on the CPU (move it with module.to('cpu'))")
                raise InputError(f"--impl {label}: {name} is on the {tensor.device.type} device, {why}")
        dtype = next(iter(weights.values())).dtype
        self.dtype = torch.float64 if dtype == np.float64 else torch.float32
        module.to(self.dtype)
        module.eval()
        self.notes: list[str] = []
        self.filled = self._fill(weights, weights_map or {}, label)  # module name → the blockcli keys it holds
        self.unused: dict[str, str] = {}  # blockcli key → a filled module that did not run in the last call
        self.roles = {name: ROLES[s] for name, _ in module.named_modules() if name and (s := _suffix(name, ROLES))}

    def _fill(self, weights: Mapping[str, np.ndarray], user_map: Mapping[str, Any],
              label: str) -> dict[str, list[str]]:
        torch, modules = self.torch, dict(self.module.named_modules())
        # parameter name → (its blockcli keys, their widths along the output axis, stored transposed, fused per head)
        self.layouts: dict[str, tuple[tuple[str, ...], tuple[int, ...], bool, bool]] = {}
        used: set[str] = set()
        unfilled, filled = [], {}  # filled: module name → the blockcli keys of its parameters
        for name, param in self.module.named_parameters():
            owner_name, _, leaf = name.rpartition(".")
            owner = modules.get(owner_name)
            keys = self._keys_for(name, owner_name, leaf, owner, user_map)
            if keys is None:
                unfilled.append(name)
                continue
            missing = [k for k in keys if k not in weights]
            if missing:
                unfilled.append(f"{name} (no {', '.join(missing)} in this config)")
                continue
            value = np.concatenate([weights[k] for k in keys], axis=-1)
            per_head = _suffix(owner_name, SCHEMES) in PER_HEAD_QKV and _suffix(name, user_map) is None
            if per_head:
                if self.cfg.n_kv_heads != self.cfg.n_heads:
                    raise InputError(f"--impl {label}: {name} fuses Q, K and V per head, which needs "
                                     f"n_kv_heads = n_heads (the config has {self.cfg.n_kv_heads}/{self.cfg.n_heads})")
                value = _per_head(value, self.cfg.n_heads)
            transposed = False
            if value.ndim == 2:
                value, transposed = self._layout(value, owner, tuple(param.shape), name, keys, label)
            if tuple(value.shape) != tuple(param.shape):
                raise InputError(f"--impl {label}: parameter {name} has shape {tuple(param.shape)}, but "
                                 f"{_joined(keys)} {tuple(value.shape)} as the module stores it")
            with torch.no_grad():
                param.copy_(torch.from_numpy(np.ascontiguousarray(value)))
            used.update(keys)
            filled.setdefault(owner_name, []).extend(keys)
            self.layouts[name] = (keys, tuple(weights[k].shape[-1] for k in keys), transposed, per_head)
        if unfilled:
            self.notes.append(f"parameters not filled (left as the module built them): {', '.join(unfilled)}")
        spare = sorted(set(weights) - used)
        if spare:
            self.notes.append(f"weights the module has no parameter for: {', '.join(spare)}")
        return filled

    @staticmethod
    def _keys_for(name: str, owner_name: str, leaf: str, owner: Any,
                  user_map: Mapping[str, Any]) -> tuple[str, ...] | None:
        mapped = _suffix(name, user_map)
        if mapped is not None:
            value = user_map[mapped]
            return (value,) if isinstance(value, str) else tuple(value)
        scheme = _suffix(owner_name, SCHEMES)
        if scheme is None:
            return None
        matrix, bias = SCHEMES[scheme]
        if leaf == "weight":
            return matrix
        return bias if leaf == "bias" else None

    def _layout(self, value: np.ndarray, owner: Any, shape: tuple[int, ...], name: str, keys: tuple[str, ...],
                label: str) -> tuple[np.ndarray, bool]:
        """blockcli's (in, out) as the module stores it, and whether that is transposed: for nn.Linear, not for
        Conv1D."""
        kind = type(owner).__name__
        if isinstance(owner, self.torch.nn.Linear):
            return value.T, True
        if kind == "Conv1D":
            return value, False
        if value.shape == shape and value.T.shape != shape:
            return value, False
        if value.T.shape == shape:
            self.notes.append(f"{name}: a {kind}, taken as (out, in) like nn.Linear")
            return value.T, True
        raise InputError(f"--impl {label}: parameter {name} has shape {shape}, but {_joined(keys)} "
                         f"{value.shape}")

    def parameters(self) -> dict[str, np.ndarray]:
        return {n: p.detach().cpu().numpy() for n, p in self.module.named_parameters()}

    def __call__(self, x: np.ndarray, return_intermediates: bool = False) -> Any:
        torch = self.torch
        recorder = Recorder(self.cfg)
        handles = [module.register_forward_hook(recorder.hook(name, self.roles.get(name)))
                   for name, module in self.module.named_modules() if name in self.roles or name in self.filled]
        try:
            with torch.no_grad():
                out = self.module(torch.from_numpy(x))  # shares x's memory: an in-place change is seen
        finally:
            for handle in handles:
                handle.remove()
        self.unused.clear()
        for name, keys in self.filled.items():
            if name not in recorder.ran:
                for key in keys:
                    self.unused[key] = name
        y = out[0] if isinstance(out, (tuple, list)) else out
        y = y.detach().cpu().numpy() if isinstance(y, torch.Tensor) else y
        if isinstance(y, np.ndarray):
            recorder.inter["y"] = y  # the second residual's sum (item 6), as the module returned it
        return (y, recorder.inter) if return_intermediates else y


    def gradients(self, x: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray | None]]:
        """The module's own autograd at x for the cotangent dy: (dx, {blockcli key: gradient}), each parameter's
        gradient laid out as blockcli's weight (None where autograd left .grad empty: a detached parameter)."""
        torch = self.torch
        for param in self.module.parameters():
            param.grad = None
        given = torch.from_numpy(x.copy()).requires_grad_(True)
        with torch.enable_grad():
            out = self.module(given)
            y = out[0] if isinstance(out, (tuple, list)) else out
            y.backward(torch.from_numpy(np.ascontiguousarray(dy, dtype=x.dtype)))
        dx = given.grad.detach().cpu().numpy() if given.grad is not None else np.zeros_like(x)
        grads: dict[str, np.ndarray | None] = {}
        for name, param in self.module.named_parameters():
            if name not in self.layouts:
                continue
            keys, widths, transposed, per_head = self.layouts[name]
            if param.grad is None:
                grads.update(dict.fromkeys(keys))
                continue
            g = param.grad.detach().cpu().numpy()
            g = g.T if transposed else g
            g = _from_per_head(g, self.cfg.n_heads) if per_head else g
            for key, part in zip(keys, np.split(g, np.cumsum(widths)[:-1], axis=-1)):
                grads[key] = part.copy()
        return dx, grads


class Recorder:
    """What the hooks of one call saw, under verify's intermediate names."""

    def __init__(self, cfg: BlockConfig) -> None:
        self.cfg, self.inter, self.ran = cfg, {}, set()

    def hook(self, name: str, role: str | None) -> Any:
        def record(_module: Any, args: tuple[Any, ...], output: Any) -> None:
            self.ran.add(name)
            first_in = _array(args[0]) if args else None
            out = _array(output[0] if isinstance(output, (tuple, list)) else output)
            b, inter = self.cfg, self.inter
            if role == "ln1" and out is not None:
                inter["ln1_out"] = out
            elif role == "qkv" and out is not None:
                q_w, kv_w = b.n_heads * b.head_dim, b.n_kv_heads * b.head_dim
                inter["q_proj"], inter["k_proj"], inter["v_proj"] = \
                    out[..., :q_w], out[..., q_w:q_w + kv_w], out[..., q_w + kv_w:]
            elif role == "qkv_per_head" and out is not None:
                per_head = out.reshape(*out.shape[:-1], b.n_heads, 3, b.head_dim)  # (B, T, h, 3, d_h)
                for i, key in enumerate(("q_proj", "k_proj", "v_proj")):
                    inter[key] = per_head[..., i, :].reshape(*out.shape[:-1], b.n_heads * b.head_dim)
            elif role in ("q", "k", "v") and out is not None:
                inter[f"{role}_proj"] = out
            elif role == "o":
                if first_in is not None:
                    inter["attn_concat"] = first_in
                if out is not None:
                    inter["attn_out"] = out
            elif role == "attn":
                if out is not None:
                    inter["attn_out"] = out
                weights = _array(output[1]) if isinstance(output, (tuple, list)) and len(output) > 1 else None
                if weights is not None and weights.ndim == 4:
                    inter["attn_weights"] = weights
            elif role == "weights" and first_in is not None and first_in.ndim == 4:
                inter["attn_weights"] = first_in
            elif role == "ln2":
                if first_in is not None:
                    inter["h"] = first_in
                if out is not None:
                    inter["ln2_out"] = out
            elif role == "mlp" and out is not None:
                inter["mlp_out"] = out

        return record


def _joined(keys: tuple[str, ...]) -> str:
    """'w_up makes' or 'w_q | w_k | w_v make': the blockcli side of a shape message."""
    return f"{keys[0]} makes" if len(keys) == 1 else f"{' | '.join(keys)} make"


def _per_head(fused: np.ndarray, n_heads: int) -> np.ndarray:
    """Q | K | V along the last axis (…, 3·h·d_h) → per head [q_i k_i v_i] (GPT-NeoX's query_key_value)."""
    q, k, v = np.split(fused, 3, axis=-1)  # (…, h·d_h) each
    heads = [part.reshape(*part.shape[:-1], n_heads, -1) for part in (q, k, v)]  # (…, h, d_h)
    return np.stack(heads, axis=-2).reshape(fused.shape)  # (…, h, 3, d_h) → (…, 3·h·d_h)


def _from_per_head(fused: np.ndarray, n_heads: int) -> np.ndarray:
    """_per_head undone: per head [q_i k_i v_i] (…, 3·h·d_h) → Q | K | V."""
    per_head = fused.reshape(*fused.shape[:-1], n_heads, 3, -1)  # (…, h, 3, d_h)
    return np.concatenate([per_head[..., i, :].reshape(*fused.shape[:-1], -1) for i in range(3)], axis=-1)


def _array(value: Any) -> np.ndarray | None:
    """A tensor's values as a NumPy copy (None for anything else)."""
    if hasattr(value, "detach") and hasattr(value, "numpy"):
        return value.detach().cpu().numpy().copy()
    return None
