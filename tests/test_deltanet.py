"""The Gated DeltaNet token mixer and the hybrid families built on it: Qwen3-Next, Qwen3.5, Qwen3.5-MoE (issue #28).

Every expected number comes from outside blockcli:
- the fixtures in tests/fixtures/deltanet/ (tests/fixtures/deltanet/generate.py) hold transformers 5.24's logits, each
  layer's output, a decode step after a 6-token prompt, and four single-token steps after a 3-token prompt;
- tests/reference.py's `gated_deltanet` walks the recurrence one number at a time;
- the parameter totals are transformers' own (the causal LM built on the meta device: sum of numel over its
  parameters), for each config class's defaults and for a random config; the defaults' totals are also derived by
  hand below; the torch-marked test at the end recomputes every one of them;
- the K/V-cache and state bytes are derived by hand.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import reference as ref
from conftest import central_differences
from test_checkpoint import cli, relative
from test_gradients import compare
from blockcli import DecoderBlock, Model, load_config
from blockcli.config import ConfigError, parse_config
from blockcli.count import count_parameters
from blockcli.deltanet import DeltaNetState
from blockcli.hf import hf_to_mapping
from blockcli.ops import causal_conv1d
from blockcli.sizing import inference

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "deltanet"
NAMES = ["qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "olmo_hybrid", "lara_mini"]
TOLERANCE = {"float64": 1e-9, "float32": 1e-4}  # relative to the reference's largest magnitude


def expected(name: str, file: str = "expected.npz") -> dict[str, np.ndarray]:
    """A fixture's transformers outputs (expected.npz) or gradients (gradients.npz)."""
    with np.load(FIXTURES / name / file) as data:
        return {k: data[k] for k in data.files}



# ----------------------------------------------------------------------------- parity with transformers


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", NAMES)
def test_logits_every_layer_and_decode_steps_equal_transformers(name: str, dtype: str) -> None:
    folder, want = FIXTURES / name, expected(name)
    model = Model.from_config(load_config(folder), weights=folder, dtype=dtype)
    ids = want["input_ids"]
    layers = [model.embed(ids)]
    for block in model.blocks:
        layers.append(block(layers[-1]))
    prompt, steps = model.new_cache(), model.new_cache()
    model.step(ids[:, :-1], prompt)  # transformers' chunked kernel for the prompt, its recurrent one for the step
    model.step(ids[:, :3], steps)
    got = {"logits": model(ids), "layers": np.stack(layers[1:]), "decode_logits": model.step(ids[:, -1:], prompt),
           "steps": np.stack([model.step(ids[:, t:t + 1], steps) for t in range(3, ids.shape[1])])}
    for key, value in got.items():
        assert relative(value, want[f"{key}_{dtype}"]) <= TOLERANCE[dtype], key


@pytest.mark.parametrize("name", NAMES)
def test_decoding_one_token_at_a_time_equals_the_full_forward(name: str) -> None:
    folder = FIXTURES / name
    model = Model.from_config(load_config(folder), weights=folder, dtype="float64")
    ids = expected(name)["input_ids"]
    full = model(ids)
    caches = model.new_cache()
    steps = np.concatenate([model.step(ids[:, t:t + 1], caches) for t in range(ids.shape[1])], axis=1)
    assert relative(steps, full) <= 1e-12
    linear = [c for c in caches if isinstance(c, DeltaNetState)]
    assert linear and all(c.length == ids.shape[1] for c in caches)  # the DeltaNet layers' state counts tokens too


def test_the_stored_state_is_constant_in_the_sequence_length() -> None:
    folder = FIXTURES / "qwen3_next"
    model = Model.from_config(load_config(folder), weights=folder, dtype="float64")
    ids = expected("qwen3_next")["input_ids"]
    caches = model.new_cache()
    model.step(ids[:, :2], caches)
    shapes = [(c.recurrent.shape, c.conv.shape) for c in caches if isinstance(c, DeltaNetState)]
    model.step(ids[:, 2:], caches)
    assert [(c.recurrent.shape, c.conv.shape) for c in caches if isinstance(c, DeltaNetState)] == shapes
    assert shapes[0] == ((2, 4, 8, 6), (2, 2, 56))  # (B, h_v, d_k, d_v), (B, K − 1, C): C = 2·2·8 + 4·6


# ----------------------------------------------------------------------------- against the loop reference


MIXER = {"key_heads": 2, "value_heads": 4, "key_head_dim": 3, "value_head_dim": 5, "conv_kernel": 3, "norm_eps": 1e-6}
_BLOCK = {"d_model": 12, "n_heads": 2, "d_ff": 16, "norm": "rmsnorm", "activation": "swiglu", "bias": False,
          "linear_attention": MIXER}


def test_the_mixer_equals_the_loop_reference_and_continues_from_its_state() -> None:
    block = DecoderBlock.from_config(parse_config({"block": _BLOCK}), dtype="float64", seed=3)
    x = np.random.default_rng(0).standard_normal((2, 6, 12))
    want, state, window = ref.gated_deltanet(MIXER, block.params, x)
    assert relative(block.attn(x), want) <= 1e-12
    cache = DeltaNetState()
    first, rest = block.attn(x[:, :4], cache=cache), block.attn(x[:, 4:], cache=cache)
    assert relative(np.concatenate([first, rest], axis=1), want) <= 1e-12
    assert relative(cache.recurrent, state) <= 1e-12 and relative(cache.conv, window) <= 1e-12
    # the reference started from that state gives the same continuation
    again, _, _ = ref.gated_deltanet(MIXER, block.params, x[:, 4:], *ref.gated_deltanet(MIXER, block.params, x[:, :4])[1:])
    assert relative(rest, again) <= 1e-12


def test_causal_conv1d_is_the_causal_depthwise_convolution_by_hand() -> None:
    rng = np.random.default_rng(1)
    x, w, bias = rng.standard_normal((2, 5, 3)), rng.standard_normal((3, 4)), rng.standard_normal(3)
    y, state = causal_conv1d(x, w, bias)
    for b in range(2):
        for t in range(5):
            for c in range(3):
                want = bias[c] + sum(w[c, j] * x[b, t - 3 + j, c] for j in range(4) if t - 3 + j >= 0)
                assert abs(y[b, t, c] - want) < 1e-12
    assert np.array_equal(state, x[:, -3:])  # the last K − 1 inputs
    head, mid = causal_conv1d(x[:, :2], w, bias)  # in two pieces, the state carried between them
    tail, end = causal_conv1d(x[:, 2:], w, bias, mid)
    assert np.allclose(np.concatenate([head, tail], axis=1), y, atol=1e-12) and np.array_equal(end, state)
    short, kept = causal_conv1d(x[:, :1], w, None)  # fewer tokens than K − 1: zeros fill the rest of the window
    assert np.array_equal(kept, np.concatenate([np.zeros((2, 2, 3)), x[:, :1]], axis=1))
    assert np.allclose(short[:, 0], x[:, 0] * w[:, 3], atol=1e-15)


# ----------------------------------------------------------------------------- counts against transformers


def _sizes(d: int, f: int | None, layers: int, heads: int, vocab: int, positions: int) -> dict[str, int]:
    sizes = dict(hidden_size=d, intermediate_size=f, num_hidden_layers=layers, num_attention_heads=heads,
                 vocab_size=vocab, max_position_embeddings=positions)
    return {k: v for k, v in sizes.items() if v is not None}


def _hybrid_by_hand(d: int, layers: int, vocab: int, h: int, kv: int, mlp: int, full_every: int = 4,
                    h_k: int = 16, h_v: int = 32, d_k: int = 128, d_v: int = 128, d_h: int = 256, K: int = 4) -> int:
    """A hybrid model by hand: every full_every-th layer gated attention (Q twice as wide: q | gate, K, V, O, q/k
    norms over d_h), the others Gated DeltaNet (q, k, v, z, b, a, the conv over q | k | v, dt_bias, A_log, the output
    norm over d_v, W_O); `mlp` per layer; two norms a layer, the final norm, untied embeddings and head."""
    full = layers // full_every
    attention = d * 2 * h * d_h + 2 * d * kv * d_h + h * d_h * d + 2 * d_h
    deltanet = (d * (2 * h_k * d_k + 2 * h_v * d_v + 2 * h_v) + (2 * h_k * d_k + h_v * d_v) * K + 2 * h_v + d_v
                + h_v * d_v * d)
    return full * attention + (layers - full) * deltanet + layers * (mlp + 2 * d) + d + 2 * vocab * d


def _moe_by_hand(d: int, experts: int, d_e: int, d_s: int) -> int:
    return d * experts + 3 * experts * d * d_e + 3 * d * d_s + d  # router, experts, shared expert and its gate


# a random config: 6 heads over 3 K/V heads of 16, 3 key heads of 10 read by 6 value heads of 14, a 5-tap conv, every
# other layer full attention, biases on q/k/v/o, tied
_RANDOM = dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=3, head_dim=16, num_hidden_layers=5,
               vocab_size=300, max_position_embeddings=96, linear_num_key_heads=3, linear_num_value_heads=6,
               linear_key_head_dim=10, linear_value_head_dim=14, linear_conv_kernel_dim=5, tie_word_embeddings=True,
               pad_token_id=0, full_attention_interval=2, attention_bias=True)

# model_type → (the config class's sizes, transformers' total for them, the total by hand, a random config, its total)
CASES: dict[str, tuple[dict, int, int, dict, int]] = {
    # Qwen3NextConfig: Qwen3-Next-80B-A3B's shapes (48 layers, 512 experts of 512, top 10)
    "qwen3_next": (_sizes(2048, 5632, 48, 16, 151936, 32768), 79_674_391_296,
                   _hybrid_by_hand(2048, 48, 151936, 16, 2, _moe_by_hand(2048, 512, 512, 512)),
                   dict(_RANDOM, intermediate_size=40, num_experts=6, num_experts_per_tok=3, moe_intermediate_size=20,
                        shared_expert_intermediate_size=16, decoder_sparse_step=2, mlp_only_layers=[4],
                        norm_topk_prob=False), 158_542),
    # Qwen3_5TextConfig: Qwen3.5-9B's shapes
    "qwen3_5_text": (_sizes(4096, 12288, 32, 16, 248320, 32768), 8_953_803_264,
                     _hybrid_by_hand(4096, 32, 248320, 16, 4, 3 * 4096 * 12288),
                     dict(_RANDOM, intermediate_size=72), 153_262),
    # Qwen3_5MoeTextConfig: Qwen3.5-35B-A3B's shapes (no intermediate_size: every layer a mixture)
    "qwen3_5_moe_text": (_sizes(2048, None, 40, 16, 248320, 32768), 34_660_610_688,
                         _hybrid_by_hand(2048, 40, 248320, 16, 2, _moe_by_hand(2048, 256, 512, 512)),
                         dict(_RANDOM, num_experts=6, num_experts_per_tok=3, moe_intermediate_size=20,
                              shared_expert_intermediate_size=16), 201_022),
}


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_the_defaults_and_a_random_config_count_as_transformers_and_reconcile(model_type: str) -> None:
    sizes, defaults_total, by_hand, fields, random_total = CASES[model_type]
    counted = [count_parameters(parse_config(hf_to_mapping({"model_type": model_type, **f}, "x.json")))
               for f in (sizes, fields)]
    assert [c.total for c in counted] == [defaults_total, random_total] and defaults_total == by_hand
    assert all(c.reconciled.match for c in counted)  # the closed form against the declared shapes


@pytest.mark.parametrize("name", NAMES)
def test_the_fixtures_count_as_transformers_and_reconcile_with_their_tensors(name: str) -> None:
    config = load_config(FIXTURES / name)
    assert count_parameters(config).total == int(expected(name)["parameters"])
    proc = cli("count", FIXTURES / name)
    assert proc.returncode == 0, proc.stderr
    assert f"formula {int(expected(name)['parameters']):,} vs checkpoint tensors" in proc.stdout
    assert "match" in proc.stdout.split("vs checkpoint tensors")[1].splitlines()[0]


def test_layer_types_pick_the_mixer_per_layer() -> None:
    fields = dict(CASES["qwen3_5_text"][3], num_hidden_layers=4,
                  layer_types=["full_attention", "linear_attention", "linear_attention", "full_attention"])
    del fields["full_attention_interval"]
    config = parse_config(hf_to_mapping({"model_type": "qwen3_5_text", **fields}, "x.json"))
    kinds = [config.layer_block(i).linear_attention is not None for i in range(4)]
    assert kinds == [False, True, True, False]
    full, linear = config.layer_block(0), config.layer_block(1)
    assert full.attention_gate and full.qk_norm == "head" and full.norm_unit_offset and full.rope_dims == 4
    assert not linear.attention_gate and linear.qk_norm == "none"
    assert (linear.linear_attention.key_heads, linear.linear_attention.value_heads,
            linear.linear_attention.key_head_dim, linear.linear_attention.value_head_dim,
            linear.linear_attention.conv_kernel) == (3, 6, 10, 14, 5)


@pytest.mark.parametrize("fields, named", [
    ({"layer_types": ["linear_attention", "sliding_attention"]}, "layer_types"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"linear_num_key_heads": 4, "linear_num_value_heads": 6}, "linear_num_value_heads"),
])
def test_what_blockcli_cannot_run_is_refused_naming_the_field(fields: dict, named: str) -> None:
    data = dict(CASES["qwen3_5_text"][3], num_hidden_layers=2, **fields)
    with pytest.raises(ConfigError, match=named):
        hf_to_mapping({"model_type": "qwen3_5_text", **data}, "x.json")


@pytest.mark.parametrize("key, value", [("qk_norm", "head"), ("attention_gate", True), ("sliding_window", 4),
                                        ("mla", {"kv_lora_rank": 4, "qk_nope_head_dim": 4, "qk_rope_head_dim": 2,
                                                 "v_head_dim": 4})])
def test_softmax_attention_settings_on_a_deltanet_layer_are_refused(key: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=f"block.{key}: a setting of softmax attention"):
        parse_config({"block": {**_BLOCK, key: value}})


def test_value_heads_must_be_a_multiple_of_the_key_heads() -> None:
    with pytest.raises(ConfigError, match="block.linear_attention.value_heads"):
        parse_config({"block": {**_BLOCK, "linear_attention": {**MIXER, "value_heads": 3}}})


# ----------------------------------------------------------------------------- sizing


def test_the_kv_cache_counts_the_attention_layers_per_token_and_the_deltanet_state_once() -> None:
    """qwen3_next's fixture: layers 1 and 3 full attention (2 K/V heads of 8), layers 0 and 2 Gated DeltaNet
    (4 value heads, d_k 8, d_v 6, a 3-tap conv over C = 2·2·8 + 4·6 = 56 channels)."""
    config = load_config(FIXTURES / "qwen3_next")
    per_token = 2 * 2 * 2 * 8 * 4  # 2 layers × K and V × 2 heads × 8, float32
    state = 2 * (4 * 8 * 6 + 3 * 56) * 4  # 2 layers × (S + the conv's window of K inputs, as transformers keeps it)
    for B, T in ((1, 8), (3, 100)):
        inf = inference(config, 39_948, T, B, "float32")
        assert inf.kv_bytes_per_token == per_token
        assert inf.state_bytes == B * state
        assert inf.kv_bytes == B * T * per_token
        assert inf.memory_bytes == inf.parameter_bytes + inf.kv_bytes + inf.state_bytes + inf.activation_bytes
    proc = cli("count", FIXTURES / "qwen3_next", "--batch", 1, "--seq", 8)
    text = " ".join(proc.stdout.split())  # the console wraps long lines
    assert ("K/V cache (attention layers only): 256 bytes per token (2·L_attn·h_kv·d_h × float32); 2 KiB for 1 × 8 "
            "tokens") in text
    assert ("recurrent state (Gated DeltaNet layers, constant in T): 2.81 KiB for 1 sequence "
            "(B·L_dn·(h_v·d_k·d_v + K·C) × float32: the state and the conv's window)") in text
    data = json.loads(cli("count", FIXTURES / "qwen3_next", "--batch", 1, "--seq", 8, "--json").stdout)
    kv = data["inference"]["kv_cache"]
    assert (kv["bytes_per_token"], kv["bytes"]) == (per_token, 8 * per_token)
    assert (kv["state"]["of"], kv["state"]["bytes"], kv["state"]["constant_in_T"]) == ("Gated DeltaNet", state, True)


# ----------------------------------------------------------------------------- the backward


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", NAMES)
def test_loss_and_gradients_equal_transformers_autograd(name: str, dtype: str) -> None:
    """gradients.npz (transformers' loss.backward() on the fixture: every tensor's fingerprint, under its stored
    name and layout, Qwen3-Next's in_proj_qkvz and in_proj_ba grouped by key head) against Model.loss_and_grads."""
    folder = FIXTURES / name
    compare(Model.from_config(load_config(folder), weights=folder, dtype=dtype), expected(name, "gradients.npz"), dtype, "")


@pytest.mark.parametrize("name", ["qwen3_next", "qwen3_5_moe_text", "lara_mini"])
def test_the_load_balancing_loss_and_its_gradients_equal_transformers(tmp_path: Path, name: str) -> None:
    """output_router_logits on (router_aux_loss_coef 0.37, as the generator ran it)."""
    for file in (FIXTURES / name).iterdir():
        if file.name != "config.json":
            (tmp_path / file.name).symlink_to(file)
    config = json.loads((FIXTURES / name / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "output_router_logits": True,
                                                      "router_aux_loss_coef": 0.37}))
    compare(Model.from_config(load_config(tmp_path), weights=tmp_path, dtype="float64"), expected(name, "gradients.npz"), "float64",
            "aux_")


@pytest.mark.parametrize("block", [_BLOCK, {**_BLOCK, "linear_attention": None, "n_heads": 3, "n_kv_heads": 1,
                                            "head_dim": 4, "bias": True, "attention_gate": True, "rope": 0.5,
                                            "qk_norm": "head"}], ids=["deltanet", "gated-attention"])
def test_the_backward_equals_central_differences(block: dict) -> None:
    layer = DecoderBlock.from_config(parse_config({"block": block}), dtype="float64", seed=5)
    rng = np.random.default_rng(1)
    x, dy = rng.standard_normal((2, 6, 12)), rng.standard_normal((2, 6, 12))
    dx, grads = layer.vjp(x, dy)

    def loss() -> float:
        return np.sum(layer(x) * dy)

    assert relative(dx, central_differences(loss, x)) <= 1e-7
    for key, value in layer.params.items():
        assert relative(grads[key], central_differences(loss, value)) <= 1e-6, key


# ----------------------------------------------------------------------------- against transformers itself


def _on_meta(config: Any, auto: str = "AutoModelForCausalLM", aside: str = "model.visual.") -> int:
    """transformers' own total: the model built from `config` on the meta device, outside `aside`."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    with torch.device("meta"):
        model = getattr(transformers, auto).from_config(config)
    return sum(p.numel() for n, p in model.named_parameters() if not n.startswith(aside))


@pytest.mark.torch
@pytest.mark.parametrize("model_type", sorted(CASES))
def test_the_totals_here_are_transformers_own(model_type: str) -> None:
    transformers = pytest.importorskip("transformers")
    sizes, defaults_total, _, fields, random_total = CASES[model_type]
    defaults, random = (transformers.AutoConfig.for_model(model_type, **f) for f in ({}, fields))
    assert {key: getattr(defaults, key) for key in sizes} == sizes
    assert [_on_meta(defaults), _on_meta(random)] == [defaults_total, random_total]
    for config, want in ((defaults, defaults_total), (random, random_total)):  # every field spelled out
        data = {k: v for k, v in config.to_dict().items() if k != "transformers_version"}
        assert count_parameters(parse_config(hf_to_mapping(data, "x.json"))).total == want


def test_math_of_the_hand_count_is_the_formula_rows() -> None:
    """The hand count's two kinds of layer, as the count's own rows name them (the formula evaluated apart)."""
    config = parse_config(hf_to_mapping({"model_type": "qwen3_5_text", **CASES["qwen3_5_text"][0]}, "x.json"))
    result = count_parameters(config)
    groups = dict(zip((g.layers[0] for g in result.groups), result.group_counts))
    d = 4096
    assert groups[3] == 2 * d * 16 * 256 + 2 * d * 4 * 256 + 16 * 256 * d + 2 * 256 + 3 * d * 12288 + 2 * d
    assert groups[0] == (d * (2 * 2048 + 2 * 4096 + 64) + 8192 * 4 + 64 + 128 + 4096 * d + 3 * d * 12288 + 2 * d)


# ----------------------------------------------------------------------------- trace


@pytest.mark.parametrize("attention", ["full", "chunked"])
def test_analytic_trace_rows_equal_the_executed_ones(attention: str) -> None:
    """Qwen3.5's dense fixture: a gated-attention layer, then two Gated DeltaNet layers (the mixtures' rows differ
    between the two traces by design: the executed one reports each expert's load)."""
    from blockcli.trace import analytic_trace, run_trace, with_run

    config = with_run(load_config(FIXTURES / "qwen3_5_text"), batch=2, seq_len=5)
    assert run_trace(config, attention=attention).rows == analytic_trace(config, attention).rows


def test_the_trace_names_the_recurrence_and_counts_its_products_by_hand() -> None:
    from blockcli.trace import run_trace, with_run

    config = with_run(parse_config({"block": _BLOCK}), batch=2, seq_len=5)
    rows = {r.key: r for r in run_trace(config).rows}
    rule, conv = rows["dn_delta_rule"], rows["dn_conv"]
    assert rule.output_shape == (2, 5, 4, 5) and rule.symbolic == "(B, T, h_v, d_v)"
    assert "state S: B, h_v, d_k, d_v" in rule.op
    # per token and value head: Sᵀk, k δᵀ and Sᵀq, d_k·d_v multiply-adds each; the decay d_k·d_v multiplies
    assert rule.matmul_flops == 2 * 5 * 4 * 3 * 5 * 2 * 3 and rule.flops == rule.matmul_flops + 2 * 5 * 4 * 3 * 5
    assert conv.matmul_flops == 2 * 5 * (2 * 2 * 3 + 4 * 5) * 3 * 2 and conv.params == (2 * 2 * 3 + 4 * 5) * 3
    totals = run_trace(config).totals
    assert totals["kv_cache_bytes"] == 2 * (4 * 3 * 5 + 2 * (2 * 2 * 3 + 4 * 5)) * 4  # S and the window, float32


# ----------------------------------------------------------------------------- the vision-language models


@pytest.mark.parametrize("model_type, text_type", [("qwen3_5", "qwen3_5_text"), ("qwen3_5_moe", "qwen3_5_moe_text")])
def test_the_vision_language_models_count_their_language_model(model_type: str, text_type: str) -> None:
    """An empty text_config is the text config class's defaults: transformers' Qwen3_5ForConditionalGeneration
    (and its MoE's) on the meta device holds the totals above outside its vision tower (model.visual.*)."""
    mapping = hf_to_mapping({"model_type": model_type, "text_config": {}}, "x.json")
    assert count_parameters(parse_config(mapping)).total == CASES[text_type][1]


@pytest.mark.torch
@pytest.mark.parametrize("model_type, text_type", [("qwen3_5", "qwen3_5_text"), ("qwen3_5_moe", "qwen3_5_moe_text")])
def test_the_vision_language_totals_are_transformers_own(model_type: str, text_type: str) -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model(model_type)
    assert _on_meta(config, "AutoModelForImageTextToText") == CASES[text_type][1]


# ----------------------------------------------------------------------------- presets


# preset → (the published config.json's fields, transformers' total for them on the meta device, by hand)
PRESETS = {
    # https://huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct/blob/main/config.json: Qwen3NextConfig's shapes
    "qwen3-next-80b-a3b": (dict(model_type="qwen3_next", hidden_size=2048, intermediate_size=5120, num_hidden_layers=48,
                                num_attention_heads=16, num_key_value_heads=2, head_dim=256, vocab_size=151936,
                                max_position_embeddings=262144, rope_theta=10000000, partial_rotary_factor=0.25,
                                num_experts=512, num_experts_per_tok=10, moe_intermediate_size=512,
                                shared_expert_intermediate_size=512, full_attention_interval=4),
                           79_674_391_296, _hybrid_by_hand(2048, 48, 151936, 16, 2, _moe_by_hand(2048, 512, 512, 512))),
    # https://huggingface.co/Qwen/Qwen3.5-35B-A3B/blob/main/config.json's text_config: Qwen3_5MoeTextConfig's shapes
    "qwen3.5-35b-a3b": (dict(model_type="qwen3_5_moe_text", hidden_size=2048, num_hidden_layers=40, num_attention_heads=16,
                             num_key_value_heads=2, head_dim=256, vocab_size=248320, max_position_embeddings=262144,
                             rope_parameters={"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
                                              "mrope_section": [11, 11, 10], "mrope_interleaved": True},
                             num_experts=256, num_experts_per_tok=8, moe_intermediate_size=512,
                             shared_expert_intermediate_size=512, full_attention_interval=4),
                        34_660_610_688, _hybrid_by_hand(2048, 40, 248320, 16, 2, _moe_by_hand(2048, 256, 512, 512))),
}


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_the_presets_count_as_transformers_by_hand_and_as_their_config_json(preset: str) -> None:
    import yaml

    fields, transformers_total, by_hand = PRESETS[preset]
    config = load_config(preset)
    assert count_parameters(config).total == transformers_total == by_hand
    path = Path(__file__).resolve().parents[1] / "blockcli" / "presets" / f"{preset}.yaml"
    assert yaml.safe_load(path.read_text(encoding="utf-8"))["about"]["parameters"] == transformers_total
    converted = parse_config(hf_to_mapping(fields, "config.json"))
    assert [converted.layer_block(i) for i in range(converted.model.n_layers)] == \
        [config.layer_block(i) for i in range(config.model.n_layers)] and converted.model == config.model


@pytest.mark.torch
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_the_preset_totals_are_transformers_own(preset: str) -> None:
    transformers = pytest.importorskip("transformers")
    fields, want, _ = PRESETS[preset]
    assert _on_meta(transformers.AutoConfig.for_model(**fields)) == want


@pytest.mark.torch
def test_the_cache_bytes_are_transformers_cache_after_a_prefill() -> None:
    """transformers' DynamicCache after a 7-token prefill of the qwen3_next fixture (batch 2): the attention layers'
    keys and values, the DeltaNet layers' recurrent state and conv window (the last K − 1 inputs, as blockcli
    counts them): K/V bytes and state bytes together are what the cache holds."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    folder = FIXTURES / "qwen3_next"
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        cache = model(torch.tensor(expected("qwen3_next")["input_ids"]), use_cache=True).past_key_values
    held = 0
    for layer in cache.layers:
        tensors = ([layer.keys, layer.values] if hasattr(layer, "keys") else
                   [*layer.conv_states.values(), *layer.recurrent_states.values()])
        held += sum(t.numel() * t.element_size() for t in tensors)
    sized = inference(load_config(folder), 39_948, 7, 2, "float32")
    assert held == sized.kv_bytes + sized.state_bytes


def test_a_vision_language_checkpoint_reads_its_language_model_and_sets_the_tower_aside(tmp_path: Path) -> None:
    """The qwen3_5_text fixture saved as a Qwen3.5 vision-language checkpoint would hold it: its config under
    text_config, its tensors under model.language_model., a vision tower under model.visual.; the language model read
    from it gives transformers' logits of that language model (text alone: the tower never runs)."""
    from safetensors.numpy import load_file, save_file

    source = FIXTURES / "qwen3_5_text"
    text = {k: v for k, v in json.loads((source / "config.json").read_text()).items() if k != "architectures"}
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "qwen3_5", "text_config": text, "tie_word_embeddings": True, "image_token_id": 120,
        "vision_config": {"depth": 1, "hidden_size": 8, "num_heads": 2, "out_hidden_size": 32}}))
    tensors = {f"model.language_model.{name[len('model.'):]}": value
               for name, value in load_file(source / "model.safetensors").items()}
    tensors["model.visual.blocks.0.attn.qkv.weight"] = np.zeros((24, 8), dtype=np.float32)
    save_file(tensors, tmp_path / "model.safetensors")
    model = Model.from_config(load_config(tmp_path), weights=tmp_path, dtype="float64")
    want = expected("qwen3_5_text")
    assert relative(model(want["input_ids"]), want["logits_float64"]) <= 1e-9
    assert any("model.visual." in note for note in model.notes)


def test_the_report_maps_the_attention_layers_and_says_why_not_the_deltanet_ones(tmp_path: Path) -> None:
    proc = cli("report", FIXTURES / "qwen3_next", "-o", tmp_path / "r.html")
    assert proc.returncode == 0, proc.stderr[-600:]
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "no maps of layers 0, 2: Gated DeltaNet layers mix tokens through a recurrent state" in page
    assert "layer 1, head 0" in page and "layer 3, head 0" in page


def test_every_seeded_bug_is_caught_or_said_not_to_apply_on_each_kind_of_layer() -> None:
    """verify --mutants on qwen3_next: a DeltaNet layer runs no softmax-attention operation, and the checks a
    gated-attention layer skips (5, 12) are said not to apply, so no seeded bug escapes unexplained."""
    data = json.loads(cli("verify", FIXTURES / "qwen3_next", "--mutants", "--json").stdout)
    assert data["passed"] and all(m["caught_by"] for m in data["mutants"])
    reasons = {(n["name"], n["layer"]): n["reason"] for n in data["not_applicable"]}
    assert "runs none of softmax attention's operations" in reasons["split-no-transpose", 0]
    assert "do not apply to this layer" in reasons["missing-wo", 1]


def test_tensor_parallelism_splits_the_kv_heads_and_the_deltanet_state() -> None:
    """--tp 2 on qwen3_next's fixture, 1 × 8 tokens: each rank holds one of the 2 K/V heads of the 2 attention layers
    (8 tokens × K and V × 8 × float32 each) and half of each DeltaNet layer's state (S 4·8·6 and the window 3·56)."""
    data = json.loads(cli("count", FIXTURES / "qwen3_next", "--tp", 2, "--batch", 1, "--seq", 8, "--json").stdout)
    assert data["parallel"]["stages"][0]["kv_cache_bytes"] == 2 * 8 * 2 * 8 * 4 + 2 * (4 * 8 * 6 + 3 * 56) // 2 * 4


@pytest.mark.parametrize("block", [_BLOCK, {**_BLOCK, "linear_attention": {**MIXER, "value_heads": 2}},
                                   {**_BLOCK, "linear_attention": None, "attention_gate": True, "rope": 0.5}],
                         ids=["value-heads-over-key-heads", "as-many", "gated-attention"])
def test_what_the_backward_keeps_is_its_closed_form(block: dict) -> None:
    """The tape's bytes after the forward (its peak) equal blockcli.saved's closed form, term by term written
    from the code (tests/test_deltanet.py holds them equal, as trace --backward prints both)."""
    from blockcli.saved import block_saved_bytes
    from blockcli.tape import Tape

    cfg = parse_config({"block": block}).block
    layer = DecoderBlock.from_config(cfg, dtype="float32", seed=2)
    tape = Tape()
    layer(np.random.default_rng(0).standard_normal((3, 5, 12)).astype(np.float32), tape=tape)
    assert tape.saved_bytes() == block_saved_bytes(cfg, 3, 5, 4)


# ----------------------------------------------------------------------------- OLMo Hybrid (olmo_hybrid)


def _olmo_hybrid_by_hand(d: int, f: int, vocab: int, layers: int, full: int, h: int, kv: int, h_k: int, h_v: int,
                         d_k: int, d_v: int, K: int, tied: bool, bias: bool) -> int:
    """OLMo 3's attention layers (Q, K, V, O, biases with attention_bias, q/k norms over the whole projection: h·d_h
    and h_kv·d_h) and Gated DeltaNet layers (q, k, v, the gate g, b, a, the three convs over q, k, v without bias,
    dt_bias and A_log per value head, the output norm over d_v, W_O); a SwiGLU and two norms a layer."""
    d_h = d // h
    attention = 2 * d * h * d_h + 2 * d * kv * d_h + (h + kv) * d_h + bias * (h * d_h + 2 * kv * d_h + d)
    deltanet = (d * (2 * h_k * d_k + 2 * h_v * d_v + 2 * h_v) + (2 * h_k * d_k + h_v * d_v) * K + 2 * h_v + d_v
                + h_v * d_v * d)
    return full * attention + (layers - full) * deltanet + layers * (3 * d * f + 2 * d) + d + (2 - tied) * vocab * d


# transformers 5.24's OlmoHybridForCausalLM on the meta device (recomputed by the torch-marked test)
OLMO_HYBRID_RANDOM = dict(hidden_size=96, num_attention_heads=6, num_key_value_heads=2, intermediate_size=50,
                          num_hidden_layers=5, vocab_size=300, linear_num_key_heads=3, linear_num_value_heads=3,
                          linear_key_head_dim=10, linear_value_head_dim=14, linear_conv_kernel_dim=3,
                          attention_bias=True, tie_word_embeddings=True, pad_token_id=0, eos_token_id=1,
                          linear_allow_neg_eigval=False,
                          layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention",
                                       "full_attention"], rope_parameters={"rope_theta": None, "rope_type": "default"})
OLMO_HYBRID_CASES = {
    # OlmoHybridConfig: 32 layers, every fourth attention (30 heads of 128), DeltaNet 30 × 96 key, 30 × 192 value heads
    "defaults": ({}, 7_430_870_688, _olmo_hybrid_by_hand(3840, 11008, 100352, 32, 8, 30, 30, 30, 30, 96, 192, 4,
                                                          False, False)),
    # NoPE (rope_theta null, as the released checkpoints), β = σ(b), biases, tied
    "random": (OLMO_HYBRID_RANDOM, 208_050, _olmo_hybrid_by_hand(96, 50, 300, 5, 2, 6, 2, 3, 3, 10, 14, 3, True, True)),
}


@pytest.mark.parametrize("case", sorted(OLMO_HYBRID_CASES))
def test_olmo_hybrid_counts_as_transformers_and_by_hand(case: str) -> None:
    fields, want, by_hand = OLMO_HYBRID_CASES[case]
    counted = count_parameters(parse_config(hf_to_mapping({"model_type": "olmo_hybrid", **fields}, "x.json")))
    assert counted.total == want == by_hand and counted.reconciled.match


@pytest.mark.torch
@pytest.mark.parametrize("case", sorted(OLMO_HYBRID_CASES))
def test_the_olmo_hybrid_totals_here_are_transformers_own(case: str) -> None:
    transformers = pytest.importorskip("transformers")
    fields, want, _ = OLMO_HYBRID_CASES[case]
    config = transformers.AutoConfig.for_model("olmo_hybrid", **fields)
    assert _on_meta(config) == want
    data = {k: v for k, v in config.to_dict().items() if k != "transformers_version"}
    assert count_parameters(parse_config(hf_to_mapping(data, "x.json"))).total == want


def test_olmo_hybrid_layers() -> None:
    """Every fourth layer OLMo 3's attention (norms after each branch, q/k norms over the projection), the others
    pre-norm Gated DeltaNet layers with β = 2·σ(b) (linear_allow_neg_eigval), three convs, the output norm's eps 1e-5;
    RoPE by default, none with a null rope_theta."""
    config = parse_config(hf_to_mapping({"model_type": "olmo_hybrid", "num_hidden_layers": 4}, "x.json"))
    kinds = [config.layer_block(i).linear_attention is not None for i in range(4)]
    assert kinds == [True, True, True, False]
    attention, linear = config.layer_block(3), config.layer_block(0)
    assert (attention.placement, attention.qk_norm, linear.placement, linear.qk_norm) == (
        "post_branch", "projection", "pre", "none")
    m = linear.linear_attention
    assert (m.key_heads, m.value_heads, m.key_head_dim, m.value_head_dim, m.beta_scale, m.split_conv, m.norm_eps) == (
        30, 30, 96, 192, 2.0, True, 1e-5)
    assert config.model.positions == "rope" and attention.rope_theta == 10000.0 and not config.model.tie_embeddings
    nope = parse_config(hf_to_mapping({"model_type": "olmo_hybrid", "num_hidden_layers": 2,
                                       "rope_parameters": {"rope_type": "default", "rope_theta": None}}, "x.json"))
    assert nope.model.positions == "none" and not nope.layer_block(1).rope  # one layer: the last one attention
    assert nope.layer_block(0).linear_attention is not None and nope.layer_block(1).linear_attention is None


@pytest.mark.parametrize("fields, named", [
    ({"layer_types": ["linear_attention", "linear_attention"]}, "'layer_types': expected linear_attention and "
                                                                "full_attention layers both"),
    ({"layer_types": ["linear_attention", "sliding_attention"]}, "'layer_types'"),
    ({"hidden_act": "gelu"}, "'hidden_act'"),
    ({"head_dim": 64}, "'head_dim'"),
    ({"mlp_bias": True}, "'mlp_bias'"),
    ({"sliding_window": 4096}, "'sliding_window'"),
    ({"linear_num_key_heads": 4, "linear_num_value_heads": 6}, "'linear_num_value_heads'"),
])
def test_olmo_hybrid_fields_blockcli_cannot_run_are_named(fields: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        hf_to_mapping({"model_type": "olmo_hybrid", "num_hidden_layers": 2, **fields}, "x.json")


def test_olmo_hybrid_reads_its_published_tensor_names(tmp_path: Path) -> None:
    """The fixture (saved under transformers' own names) renamed as OLMo-core publishes it: attention_layer_norm and
    feedforward_layer_norm, the conv as three tensors q_conv1d, k_conv1d, v_conv1d of their own widths; the same
    logits as transformers' (the split of the conv is checked by them)."""
    from safetensors.numpy import load_file, save_file

    folder, want = FIXTURES / "olmo_hybrid", expected("olmo_hybrid")
    stored = load_file(folder / "model.safetensors")
    kw = 2 * 4
    renamed = {}
    for name, value in stored.items():
        if name.endswith("linear_attn.conv1d.weight"):
            base = name[:-len("conv1d.weight")]
            renamed.update({f"{base}q_conv1d.weight": value[:kw], f"{base}k_conv1d.weight": value[kw:2 * kw],
                            f"{base}v_conv1d.weight": value[2 * kw:]})
            continue
        name = name.replace("input_layernorm", "attention_layer_norm")
        renamed[name.replace("post_attention_layernorm", "feedforward_layer_norm")] = value
    assert any("q_conv1d" in n for n in renamed) and any("attention_layer_norm" in n for n in renamed)
    save_file(renamed, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text((folder / "config.json").read_text())
    model = Model.from_config(load_config(tmp_path), weights=tmp_path, dtype="float64")
    assert relative(model(want["input_ids"]), want["logits_float64"]) <= TOLERANCE["float64"]


def test_verify_with_gradients_passes_on_olmo_hybrid() -> None:
    """verify --grad on both of its layer kinds: the pre-norm DeltaNet layer (β = 2·σ(b), three convs) and OLMo 3's
    attention layer (norms after each branch), their backward against central differences."""
    proc = cli("verify", FIXTURES / "olmo_hybrid", "--grad")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "one layer of each of its 2 kinds verified (layers 0, 1)" in proc.stdout


def test_beta_scale_and_split_conv_equal_the_loop_reference_and_central_differences() -> None:
    """OLMo Hybrid's options: β = 2·σ(b) and the conv as three parameters, against tests/reference.py's loop (its
    one conv the three stacked); the backward through β = s·σ(b) against central differences of one weight."""
    mixer = {**MIXER, "beta_scale": 2.0, "split_conv": True}
    block = DecoderBlock.from_config(parse_config({"block": {**_BLOCK, "linear_attention": mixer}}), dtype="float64",
                                     seed=5)
    p = block.params
    assert "dn_conv" not in p and p["dn_v_conv"].shape == (20, 3)
    x = np.random.default_rng(2).standard_normal((2, 6, 12))
    stacked = {**p, "dn_conv": np.concatenate([p["dn_q_conv"], p["dn_k_conv"], p["dn_v_conv"]], axis=0)}
    want, _, _ = ref.gated_deltanet(mixer, stacked, x)
    assert relative(block.attn(x), want) <= 1e-12
    plain, _, _ = ref.gated_deltanet(MIXER, stacked, x)
    assert relative(plain, want) > 1e-3  # the scale matters
    model = Model.from_config(parse_config({"block": {**_BLOCK, "linear_attention": mixer},
                                            "model": {"n_layers": 1, "vocab_size": 20, "positions": "none"}}),
                              dtype="float64", seed=6)
    ids = np.random.default_rng(3).integers(0, 20, (2, 5))
    loss, grads = model.loss_and_grads(ids)
    key, at, h = "blocks.0.dn_b", (3, 1), 1e-6
    weights = model.params
    weights[key][at] += h
    up = model.loss_and_grads(ids)[0]
    weights[key][at] -= 2 * h
    down = model.loss_and_grads(ids)[0]
    weights[key][at] += h
    assert abs((up - down) / (2 * h) - grads[key][at]) <= 1e-7 * max(1.0, abs(grads[key][at]))


# ----------------------------------------------------------------------------- Lara-4-Mini (lara_mini)


def _lara_mini_by_hand(d: int, vocab: int, layers: int, linear: int, h: int, kv: int, d_h: int, h_k: int, h_v: int,
                       d_k: int, d_v: int, K: int, E: int, d_e: int, d_s: int, tied: bool, bias: bool) -> int:
    """Qwen3's attention layers (Q, K, V, O, their biases with attention_bias, q/k norms over d_h) and Qwen3.5's Gated
    DeltaNet layers (q|k|v, z, b, a, the conv over q|k|v without bias, dt_bias and A_log per value head, the output
    norm over d_v, W_O); on every layer the router (E·d), E SwiGLU experts of d_e, the ungated shared expert of d_s
    and two norms; the final norm; the embedding (and an untied head)."""
    attention = 2 * d * h * d_h + 2 * d * kv * d_h + 2 * d_h + bias * (h * d_h + 2 * kv * d_h + d)
    deltanet = (d * (2 * h_k * d_k + 2 * h_v * d_v + 2 * h_v) + (2 * h_k * d_k + h_v * d_v) * K + 2 * h_v + d_v
                + h_v * d_v * d)
    mixture = E * d + 3 * E * d * d_e + 3 * d * d_s
    return (linear * deltanet + (layers - linear) * attention + layers * (mixture + 2 * d) + d
            + (2 - tied) * vocab * d)


# transformers 5.24's LaraMiniForCausalLM on the meta device (recomputed by the torch-marked test); the default
# period-5 pattern over 6 layers: DeltaNet at 0, 2, 5
LARA_MINI_RANDOM = dict(hidden_size=96, num_attention_heads=6, num_key_value_heads=2, head_dim=10, num_hidden_layers=6,
                        vocab_size=300, linear_num_key_heads=3, linear_num_value_heads=6, linear_key_head_dim=12,
                        linear_value_head_dim=14, linear_conv_kernel_dim=3, attention_bias=True,
                        tie_word_embeddings=False, num_experts=5, num_experts_per_tok=3, moe_intermediate_size=20,
                        shared_expert_intermediate_size=14, pad_token_id=0, eos_token_id=1, sliding_window=7)
LARA_MINI_CASES = {
    # LaraMiniConfig: 34 layers (14 DeltaNet: 8 × 128 key, 16 × 128 value heads), 16/4 heads of 128, 128 experts of
    # 512 and a shared one of 512, tied
    "defaults": ({}, 7_281_684_672, _lara_mini_by_hand(1024, 151936, 34, 14, 16, 4, 128, 8, 16, 128, 128, 4, 128, 512,
                                                        512, True, False)),
    "random": (LARA_MINI_RANDOM, 403_698, _lara_mini_by_hand(96, 300, 6, 3, 6, 2, 10, 3, 6, 12, 14, 3, 5, 20, 14,
                                                              False, True)),
}


@pytest.mark.parametrize("case", sorted(LARA_MINI_CASES))
def test_lara_mini_counts_as_transformers_and_by_hand(case: str) -> None:
    fields, want, by_hand = LARA_MINI_CASES[case]
    counted = count_parameters(parse_config(hf_to_mapping({"model_type": "lara_mini", **fields}, "x.json")))
    assert counted.total == want == by_hand and counted.reconciled.match


@pytest.mark.torch
@pytest.mark.parametrize("case", sorted(LARA_MINI_CASES))
def test_the_lara_mini_totals_here_are_transformers_own(case: str) -> None:
    transformers = pytest.importorskip("transformers")
    fields, want, _ = LARA_MINI_CASES[case]
    config = transformers.AutoConfig.for_model("lara_mini", **fields)
    assert _on_meta(config) == want
    data = {k: v for k, v in config.to_dict().items() if k != "transformers_version"}
    assert count_parameters(parse_config(hf_to_mapping(data, "x.json"))).total == want


def test_lara_mini_layers() -> None:
    """The period-5 pattern: DeltaNet, sliding attention (window 512, RoPE over the whole head), DeltaNet, full
    attention without positions, sliding attention; plain norms; the mixture on every layer, softmax, renormalised,
    an ungated shared expert; tied."""
    config = parse_config(hf_to_mapping({"model_type": "lara_mini", "num_hidden_layers": 5}, "x.json"))
    blocks = [config.layer_block(i) for i in range(5)]
    assert [b.linear_attention is not None for b in blocks] == [True, False, True, False, False]
    assert [b.sliding_window for b in blocks] == [0, 512, 0, 0, 512]  # 0: no window
    assert [bool(blocks[i].rope) for i in (1, 3, 4)] == [True, False, True]  # the attention layers
    assert [b.qk_norm for b in blocks] == ["none", "head", "none", "head", "head"]
    assert not any(b.norm_unit_offset or b.attention_gate for b in blocks)
    moe = blocks[0].moe
    assert (moe.n_experts, moe.top_k, moe.d_expert, moe.d_shared, moe.renormalize, moe.shared_gate) == (
        128, 4, 512, 512, True, False)
    m = blocks[0].linear_attention
    assert (m.key_heads, m.value_heads, m.key_head_dim, m.value_head_dim, m.conv_kernel, m.norm_eps) == (
        8, 16, 128, 128, 4, 1e-6)
    assert config.model.tie_embeddings and blocks[1].rope_theta == 10000.0
    # a full layer 0 has no positions either (the base block is the sliding layers'; every other layer an override)
    first = parse_config(hf_to_mapping({"model_type": "lara_mini", "num_hidden_layers": 2,
                                        "layer_types": ["full_attention", "sliding_attention"]}, "x.json"))
    assert [bool(first.layer_block(i).rope) for i in range(2)] == [False, True]
    assert [first.layer_block(i).sliding_window for i in range(2)] == [0, 512]


@pytest.mark.parametrize("fields, named", [
    ({"intermediate_size": 64}, "'intermediate_size'"),
    ({"mlp_only_layers": [0]}, "'mlp_only_layers'"),
    ({"decoder_sparse_step": 2}, "'decoder_sparse_step'"),
    ({"full_attention_interval": 4}, "'full_attention_interval'"),
    ({"partial_rotary_factor": 0.5}, "'partial_rotary_factor'"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.25}},
     "'rope_parameters.partial_rotary_factor'"),
    ({"layer_types": ["linear_attention", "chunked_attention"]}, "'layer_types'"),
    ({"hidden_act": "gelu"}, "'hidden_act'"),
    ({"num_experts_per_tok": 9, "num_experts": 8}, "'num_experts_per_tok'"),
    ({"linear_num_key_heads": 4, "linear_num_value_heads": 6}, "'linear_num_value_heads'"),
    ({"sliding_window": None}, "'sliding_window'"),
])
def test_lara_mini_fields_blockcli_cannot_run_are_named(fields: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        hf_to_mapping({"model_type": "lara_mini", "num_hidden_layers": 2, **fields}, "x.json")


def test_lara_mini_window_and_nope_matter_on_the_fixture(tmp_path: Path) -> None:
    """The fixture's sliding layer 0 (a window of 3 over 7 tokens, RoPE) and its NoPE full layer 2: a wider window, or
    RoPE on layer 2, gives other logits than transformers'."""
    folder, want = FIXTURES / "lara_mini", expected("lara_mini")
    for file in folder.iterdir():
        if file.name != "config.json":
            (tmp_path / file.name).symlink_to(file)
    config = json.loads((folder / "config.json").read_text())
    for changed in ({"sliding_window": 64}, {"layer_types": ["sliding_attention", "linear_attention",
                                                             "sliding_attention"], "sliding_window": 64}):
        (tmp_path / "config.json").write_text(json.dumps({**config, **changed}))
        model = Model.from_config(load_config(tmp_path), weights=tmp_path, dtype="float64")
        assert relative(model(want["input_ids"]), want["logits_float64"]) > 1e-3


def test_lara_mini_reads_transformers_in_memory_names(tmp_path: Path) -> None:
    """The fixture is saved as the published checkpoints are (one in_proj, rows q | k | v | z | b | a; out_norm);
    split into transformers' in-memory in_proj_qkv, in_proj_z, in_proj_b, in_proj_a and norm, the same logits."""
    from safetensors.numpy import load_file, save_file

    folder, want = FIXTURES / "lara_mini", expected("lara_mini")
    stored, renamed = load_file(folder / "model.safetensors"), {}
    qkv, z = 2 * 2 * 4 + 4 * 6, 4 * 6  # 2 key heads of 4 twice, 4 value heads of 6
    for name, value in stored.items():
        if name.endswith("linear_attn.in_proj.weight"):
            base = name[:-len("in_proj.weight")]
            renamed.update({f"{base}in_proj_qkv.weight": value[:qkv], f"{base}in_proj_z.weight": value[qkv:qkv + z],
                            f"{base}in_proj_b.weight": value[qkv + z:qkv + z + 4],
                            f"{base}in_proj_a.weight": value[qkv + z + 4:]})
            continue
        renamed[name.replace("out_norm", "norm")] = value
    assert stored.keys() != renamed.keys() and renamed.keys() >= {"model.layers.1.linear_attn.in_proj_a.weight"}
    save_file(renamed, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text((folder / "config.json").read_text())
    model = Model.from_config(load_config(tmp_path), weights=tmp_path, dtype="float64")
    assert relative(model(want["input_ids"]), want["logits_float64"]) <= TOLERANCE["float64"]


def test_verify_with_gradients_passes_on_lara_mini() -> None:
    """verify --grad on its three layer kinds: sliding attention with RoPE, the DeltaNet, NoPE full attention."""
    proc = cli("verify", FIXTURES / "lara_mini", "--grad")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "one layer of each of its 3 kinds verified (layers 0, 1, 2)" in proc.stdout
