"""Kimi-Linear (issue #28): Kimi Delta Attention (the Gated DeltaNet with a decay per key channel), NoPE latent
attention and DeepSeek-V3's mixture.

Every expected number comes from outside blockcli:
- the fixture tests/fixtures/deltanet/kimi_linear (tests/fixtures/deltanet/generate.py) holds transformers 5.24's
  logits, each layer's output, a decode step after a 6-token prompt and four single-token steps after a 3-token
  prompt (its torch path: chunk_kimi_delta_attention for prompts, recurrent_kimi_delta_attention for steps; no fla);
- tests/reference.py's `kimi_delta_attention` walks the recurrence one number at a time;
- the parameter totals are transformers' own (KimiLinearForCausalLM on the meta device), for KimiLinearConfig's
  defaults and for a random config; the defaults' total is also derived by hand below, and the torch-marked test
  recomputes both;
- the state and K/V-cache bytes are derived by hand.
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
from blockcli.sizing import inference

FOLDER = Path(__file__).resolve().parent / "fixtures" / "deltanet" / "kimi_linear"
TOLERANCE = {"float64": 1e-9, "float32": 1e-4}  # relative to the reference's largest magnitude


def expected() -> dict[str, np.ndarray]:
    with np.load(FOLDER / "expected.npz") as data:
        return {k: data[k] for k in data.files}


# ----------------------------------------------------------------------------- parity with transformers


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_logits_every_layer_and_decode_steps_equal_transformers(dtype: str) -> None:
    want = expected()
    model = Model.from_config(load_config(FOLDER), weights=FOLDER, dtype=dtype)
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


def test_decoding_one_token_at_a_time_equals_the_full_forward() -> None:
    model = Model.from_config(load_config(FOLDER), weights=FOLDER, dtype="float64")
    ids = expected()["input_ids"]
    full = model(ids)
    caches = model.new_cache()
    steps = np.concatenate([model.step(ids[:, t:t + 1], caches) for t in range(ids.shape[1])], axis=1)
    assert relative(steps, full) <= 1e-12
    kda = [c for c in caches if isinstance(c, DeltaNetState)]
    assert len(kda) == 2 and all(c.length == ids.shape[1] for c in caches)
    assert kda[0].recurrent.shape == (2, 2, 8, 8) and kda[0].conv.shape == (2, 2, 48)  # (B, h, d, d), (B, K − 1, 3·h·d)


def test_the_fixture_reads_as_transformers_built_it() -> None:
    """Layers 1 and 3 KDA, layer 2 NoPE latent attention (linear_attn_config's 1-indexed lists); layer 0 dense."""
    config = load_config(FOLDER)
    kinds = [config.layer_block(i) for i in range(3)]
    assert [b.linear_attention is not None for b in kinds] == [True, False, True]
    assert [b.moe is not None for b in kinds] == [False, True, True]
    m, mla = kinds[0].linear_attention, kinds[1].mla
    assert (m.decay, m.key_heads, m.value_heads, m.key_head_dim, m.value_head_dim, m.conv_kernel) == (
        "channel", 2, 2, 8, 8, 3)
    assert (mla.q_lora_rank, mla.kv_lora_rank, mla.qk_nope_head_dim, mla.qk_rope_head_dim, mla.v_head_dim) == (
        0, 8, 6, 4, 5)
    assert not kinds[1].rope and config.model.positions == "none" and kinds[1].rope_dims == 0
    moe = kinds[1].moe
    assert (moe.n_experts, moe.top_k, moe.d_expert, moe.d_shared, moe.n_groups, moe.top_groups, moe.routed_scaling,
            moe.renormalize) == (4, 2, 8, 8, 2, 1, 1.5, True)


# ----------------------------------------------------------------------------- against the loop reference


MIXER = {"key_heads": 2, "value_heads": 2, "key_head_dim": 3, "value_head_dim": 3, "conv_kernel": 3,
         "norm_eps": 1e-5, "decay": "channel"}
_BLOCK = {"d_model": 10, "n_heads": 2, "d_ff": 16, "norm": "rmsnorm", "activation": "swiglu", "bias": False,
          "linear_attention": MIXER}


def test_the_mixer_equals_the_loop_reference_and_continues_from_its_state() -> None:
    block = DecoderBlock.from_config(parse_config({"block": _BLOCK}), dtype="float64", seed=3)
    rng = np.random.default_rng(4)
    block.params["dn_A_log"][...] = rng.standard_normal(2) * 0.5  # decays that differ per head and per channel
    block.params["dn_dt_bias"][...] = rng.standard_normal(6) * 0.5
    x = rng.standard_normal((2, 6, 10))
    want, state, window = ref.kimi_delta_attention(MIXER, block.params, x)
    assert relative(block.attn(x), want) <= 1e-12
    cache = DeltaNetState()
    first, rest = block.attn(x[:, :4], cache=cache), block.attn(x[:, 4:], cache=cache)
    assert relative(np.concatenate([first, rest], axis=1), want) <= 1e-12
    assert relative(cache.recurrent, state) <= 1e-12 and relative(cache.conv, window) <= 1e-12
    again, _, _ = ref.kimi_delta_attention(MIXER, block.params, x[:, 4:],
                                           *ref.kimi_delta_attention(MIXER, block.params, x[:, :4])[1:])
    assert relative(rest, again) <= 1e-12


def test_the_per_channel_decay_is_not_the_per_head_one() -> None:
    """A mutation check on the reference: the same weights with every channel of a head given the head's mean decay
    input differ (so the fixture's agreement says the decay is per channel)."""
    block = DecoderBlock.from_config(parse_config({"block": _BLOCK}), dtype="float64", seed=3)
    x = np.random.default_rng(5).standard_normal((1, 4, 10))
    params = dict(block.params)
    params["dn_dt_bias"] = np.array([-3.0, 0.0, 3.0, 1.0, -1.0, 2.0])
    flat = dict(params, dn_dt_bias=np.repeat(params["dn_dt_bias"].reshape(2, 3).mean(axis=1), 3))
    assert relative(ref.kimi_delta_attention(MIXER, params, x)[0], ref.kimi_delta_attention(MIXER, flat, x)[0]) > 1e-3


# ----------------------------------------------------------------------------- counts against transformers


def _by_hand(d: int = 2304, layers: int = 27, vocab: int = 163840, h: int = 32, r_kv: int = 512, d_nope: int = 128,
             d_rope: int = 64, d_v: int = 128, h_l: int = 32, d_l: int = 128, K: int = 4, d_ff: int = 9216,
             E: int = 256, d_e: int = 1024, shared: int = 1, full: int = 6, dense: int = 1) -> int:
    """KimiLinearConfig's defaults by hand: 27 layers, every fourth from layer 4 latent attention (q_proj,
    kv_a_proj_with_mqa, its norm, kv_b_proj, o_proj), the rest KDA (q, k, v; three convs; f_a, f_b, dt_bias, A_log;
    b; g_a, g_b; o_norm; o_proj); layer 0 a dense SwiGLU MLP, the others 256 experts with a router (and its
    selection-bias buffer, no parameter) and a shared expert; two norms a layer, the final norm, untied head."""
    w = h_l * d_l
    kda = 3 * d * w + 3 * w * K + d * d_l + d_l * w + w + h_l + d * h_l + d * d_l + d_l * w + d_l + w * d
    mla = d * h * (d_nope + d_rope) + d * (r_kv + d_rope) + r_kv + r_kv * h * (d_nope + d_v) + h * d_v * d
    moe = d * E + 3 * E * d * d_e + 3 * d * d_e * shared
    return (full * mla + (layers - full) * kda + dense * 3 * d * d_ff + (layers - dense) * moe + layers * 2 * d + d
            + 2 * vocab * d)


# a random config in the published spellings: 3 KDA heads of 9 and a 5-tap conv, latent attention with a query
# latent, layers 2 and 5 latent attention, layers 0 and 2 dense, 6 experts in 3 groups (top 2 groups, top 3), 2 shared
RANDOM = dict(hidden_size=40, num_attention_heads=5, num_key_value_heads=5, num_hidden_layers=6, vocab_size=301,
              intermediate_size=36, moe_intermediate_size=12, num_experts=6, num_experts_per_token=3,
              num_shared_experts=2, num_expert_group=3, topk_group=2, kv_lora_rank=10, q_lora_rank=14,
              qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=7,
              linear_attn_config={"num_heads": 3, "head_dim": 9, "short_conv_kernel_size": 5,
                                  "full_attn_layers": [2, 5], "kda_layers": [1, 3, 4, 6]},
              mlp_layer_types=["dense", "sparse", "dense", "sparse", "sparse", "sparse"], routed_scaling_factor=1.7,
              rms_norm_eps=1e-6, model_max_length=512, pad_token_id=0, bos_token_id=1, eos_token_id=2)
DEFAULTS_TOTAL, RANDOM_TOTAL = 49_133_074_464, 112_428  # transformers' meta-device totals


def _count(fields: dict) -> Any:
    return count_parameters(parse_config(hf_to_mapping({"model_type": "kimi_linear", **fields}, "x.json")))


def test_the_defaults_and_a_random_config_count_as_transformers_and_reconcile() -> None:
    counted = [_count(f) for f in ({}, RANDOM)]
    assert [c.total for c in counted] == [DEFAULTS_TOTAL, RANDOM_TOTAL] and DEFAULTS_TOTAL == _by_hand()
    assert all(c.reconciled.match for c in counted)  # the closed form against the declared shapes
    # the random config's KDA layer by hand: h 3, d 9, K 5 on width 40 (and layer 0's dense MLP, its two norms)
    w, d = 27, 40
    kda = 3 * d * w + 3 * w * 5 + d * 9 + 9 * w + w + 3 + d * 3 + d * 9 + 9 * w + 9 + w * d
    groups = dict(zip((g.layers[0] for g in counted[1].groups), counted[1].group_counts))
    assert groups[0] == kda + 3 * d * 36 + 2 * d


def test_the_fixture_counts_as_transformers_and_reconciles_with_its_tensors() -> None:
    assert count_parameters(load_config(FOLDER)).total == int(expected()["parameters"])
    proc = cli("count", FOLDER)
    assert proc.returncode == 0, proc.stderr
    assert f"formula {int(expected()['parameters']):,} vs checkpoint tensors" in proc.stdout
    assert "match" in proc.stdout.split("vs checkpoint tensors")[1].splitlines()[0]


def test_the_spellings_and_the_layer_kinds_read_as_kimi_linear_config_reads_them() -> None:
    both = dict(RANDOM, num_local_experts=6)  # an attribute_map alias beside its field: equal values agree
    assert _count(both).total == RANDOM_TOTAL
    types = ["linear_attention", "full_attention", "linear_attention", "linear_attention", "full_attention",
             "linear_attention"]
    # layer_types wins over linear_attn_config's lists; without either list, every fourth layer from layer 4 is full
    first = parse_config(hf_to_mapping({"model_type": "kimi_linear", **dict(RANDOM, layer_types=types[::-1])}, "x"))
    assert [first.layer_block(i).mla is not None for i in range(6)] == [t == "full_attention" for t in types[::-1]]
    nested = {k: v for k, v in RANDOM["linear_attn_config"].items() if k != "kda_layers"}
    plain = parse_config(hf_to_mapping({"model_type": "kimi_linear", **dict(RANDOM, linear_attn_config=nested)}, "x"))
    assert [plain.layer_block(i).mla is not None for i in range(6)] == [False, False, False, False, True, False]


@pytest.mark.parametrize("fields, named", [
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"num_key_value_heads": 1}, "num_key_value_heads"),
    ({"attention_bias": True}, "attention_bias"),
    ({"linear_attn_config": {"gate_lower_bound": -5.0}}, "linear_attn_config.gate_lower_bound"),
    ({"linear_attn_config": {"full_attn_layers": [0], "kda_layers": [1]}}, "linear_attn_config.full_attn_layers"),
    ({"linear_attn_config": {"full_attn_layers": [2], "kda_layers": [1]}}, "linear_attn_config"),
    ({"num_local_experts": 7}, "num_experts"),  # an alias disagreeing with its field
    ({"mlp_layer_types": ["dense"]}, "mlp_layer_types"),
])
def test_what_blockcli_cannot_run_is_refused_naming_the_field(fields: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        hf_to_mapping({"model_type": "kimi_linear", **dict(RANDOM, **fields)}, "x.json")


def test_the_channel_decay_needs_one_head_kind_of_one_width() -> None:
    with pytest.raises(ConfigError, match="block.linear_attention.decay"):
        parse_config({"block": {**_BLOCK, "linear_attention": {**MIXER, "value_head_dim": 4}}})


# ----------------------------------------------------------------------------- the backward


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_loss_and_gradients_equal_transformers_autograd(dtype: str) -> None:
    """gradients.npz (transformers' loss.backward() on the fixture: every tensor's fingerprint under its stored name
    and layout, the q, k and v convs apart, the experts per expert) against Model.loss_and_grads."""
    with np.load(FOLDER / "gradients.npz") as data:
        grads = {k: data[k] for k in data.files}
    compare(Model.from_config(load_config(FOLDER), weights=FOLDER, dtype=dtype), grads, dtype, "")


def test_the_backward_equals_central_differences() -> None:
    layer = DecoderBlock.from_config(parse_config({"block": _BLOCK}), dtype="float64", seed=5)
    rng = np.random.default_rng(1)
    layer.params["dn_A_log"][...] = rng.standard_normal(2) * 0.5
    layer.params["dn_dt_bias"][...] = rng.standard_normal(6) * 0.5
    x, dy = rng.standard_normal((2, 6, 10)), rng.standard_normal((2, 6, 10))
    dx, grads = layer.vjp(x, dy)

    def loss() -> float:
        return np.sum(layer(x) * dy)

    assert relative(dx, central_differences(loss, x)) <= 1e-7
    for key, value in layer.params.items():
        assert relative(grads[key], central_differences(loss, value)) <= 1e-6, key


# ----------------------------------------------------------------------------- sizing and trace


def test_the_state_is_counted_once_and_the_latent_cache_per_token() -> None:
    """The fixture: layer 2 latent attention (r_kv 8 + d_rope 4 per token), layers 1 and 3 KDA (S 2·8·8 and the
    window of 2 taps over 3·2·8 = 48 channels, plus one more input per channel as transformers keeps K)."""
    config = load_config(FOLDER)
    per_token = (8 + 4) * 4
    for B, T in ((1, 8), (3, 100)):
        inf = inference(config, int(expected()["parameters"]), T, B, "float32")
        assert inf.kv_bytes_per_token == per_token and inf.kv_bytes == B * T * per_token
        assert inf.state_bytes == B * 2 * (2 * 8 * 8 + 3 * 48) * 4
    text = " ".join(cli("count", FOLDER, "--batch", 1, "--seq", 8).stdout.split())  # the console wraps long lines
    assert ("recurrent state (Kimi Delta Attention layers, constant in T): 2.12 KiB for 1 sequence "
            "(B·L_kda·(h·d_k·d_v + K·C) × float32: the state and the conv's window)") in text
    data = json.loads(cli("count", FOLDER, "--batch", 1, "--seq", 8, "--json").stdout)
    assert data["inference"]["kv_cache"]["state"]["of"] == "Kimi Delta Attention"


@pytest.mark.parametrize("attention", ["full", "chunked"])
def test_analytic_trace_rows_equal_the_executed_ones(attention: str) -> None:
    from blockcli.trace import analytic_trace, run_trace, with_run

    # the fixture's layers with dense MLPs (a mixture's executed rows report each expert's load: they differ by design)
    fields = json.loads((FOLDER / "config.json").read_text())
    dense = parse_config(hf_to_mapping({**fields, "mlp_layer_types": ["dense"] * 3}, "config.json"))
    config = with_run(dense, batch=2, seq_len=5)
    executed, analytic = run_trace(config, attention=attention).rows, analytic_trace(config, attention).rows
    assert executed == analytic
    keys = {r.key.split(".")[-1] for r in executed}
    assert {"dn_f_a_proj", "dn_f_b_proj", "dn_g_a_proj", "dn_g_b_proj", "dn_decay"} <= keys
    assert "q_rope" not in keys and "k_rope" not in keys  # NoPE: nothing rotates


# ----------------------------------------------------------------------------- against transformers itself


@pytest.mark.torch
def test_the_totals_here_are_transformers_own() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    totals = []
    for fields in ({}, RANDOM):
        config = transformers.AutoConfig.for_model("kimi_linear", **fields)
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(config)
        totals.append(sum(p.numel() for p in model.parameters()))
        data = {k: v for k, v in config.to_dict().items() if k != "transformers_version"}
        assert _count(data).total == totals[-1]  # every field spelled out, as save_pretrained writes them
    assert totals == [DEFAULTS_TOTAL, RANDOM_TOTAL]


# ----------------------------------------------------------------------------- the preset

# https://huggingface.co/moonshotai/Kimi-Linear-48B-A3B-Instruct/blob/main/config.json's fields (the architecture)
PUBLISHED = dict(model_type="kimi_linear", vocab_size=163840, hidden_size=2304, head_dim=72, intermediate_size=9216,
                 num_hidden_layers=27, num_attention_heads=32, num_key_value_heads=32, kv_lora_rank=512,
                 q_lora_rank=None, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, mla_use_nope=True,
                 linear_attn_config={"full_attn_layers": [4, 8, 12, 16, 20, 24, 27], "head_dim": 128,
                                     "kda_layers": [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23,
                                                    25, 26], "num_heads": 32, "short_conv_kernel_size": 4},
                 model_max_length=1048576, moe_intermediate_size=1024, moe_layer_freq=1, moe_renormalize=True,
                 moe_router_activation_func="sigmoid", num_expert_group=1, num_experts=256, num_experts_per_token=8,
                 num_shared_experts=1, first_k_dense_replace=1, topk_group=1, hidden_act="silu", rms_norm_eps=1e-5,
                 routed_scaling_factor=2.446, tie_word_embeddings=False, num_nextn_predict_layers=0,
                 rope_theta=10000.0, use_grouped_topk=True, bos_token_id=163584, eos_token_id=163586,
                 pad_token_id=163839)
PUBLISHED_TOTAL = 49_122_675_072  # transformers' meta-device total for PUBLISHED


def test_the_preset_counts_as_transformers_by_hand_and_as_its_config_json() -> None:
    import yaml

    config = load_config("kimi-linear-48b-a3b")
    assert count_parameters(config).total == PUBLISHED_TOTAL == _by_hand(full=7)
    path = Path(__file__).resolve().parents[1] / "blockcli" / "presets" / "kimi-linear-48b-a3b.yaml"
    assert yaml.safe_load(path.read_text(encoding="utf-8"))["about"]["parameters"] == PUBLISHED_TOTAL
    converted = parse_config(hf_to_mapping(PUBLISHED, "config.json"))
    assert [converted.layer_block(i) for i in range(27)] == [config.layer_block(i) for i in range(27)]
    assert converted.model == config.model


@pytest.mark.torch
def test_the_preset_total_is_transformers_own() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**PUBLISHED))
    assert sum(p.numel() for p in model.parameters()) == PUBLISHED_TOTAL


def test_what_the_backward_keeps_is_its_closed_form() -> None:
    """The tape's bytes after a KDA layer's forward equal blockcli.saved's closed form (its decay input and g per key
    channel, the two low-rank bottlenecks beside the Gated DeltaNet's saves), as trace --backward prints both."""
    from blockcli.saved import block_saved_bytes
    from blockcli.tape import Tape

    cfg = parse_config({"block": _BLOCK}).block
    layer = DecoderBlock.from_config(cfg, dtype="float32", seed=2)
    tape = Tape()
    layer(np.random.default_rng(0).standard_normal((3, 5, 10)).astype(np.float32), tape=tape)
    assert tape.saved_bytes() == block_saved_bytes(cfg, 3, 5, 4)
    # by hand: 4 arrays of d (input, norms), the MLP's two pre-activations, 3·C of the conv, q and k, b and β, the
    # decay input and g (h·d_k each), the bottlenecks (d_k, d_v), z, o, W_O's input, each step's S
    h, d = 2, 3
    assert block_saved_bytes(cfg, 3, 5, 4) == 3 * 5 * 4 * (4 * 10 + 2 * 16 + 3 * 18 + 2 * h * d + 2 * h + 2 * h * d
                                                          + 2 * d + 3 * h * d + h * d * d)


@pytest.mark.torch
def test_a_checkpoint_in_transformers_in_memory_names_reads_to_the_same_logits(tmp_path: Path) -> None:
    """save_pretrained(save_original_format=False): the q | k | v convs stacked in one conv1d (C, 1, K), the decay's
    projections under forget_gate, the MLPs under mlp., the experts fused; the same logits as the fixture's."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(FOLDER, dtype=torch.float32)
    model.save_pretrained(tmp_path, save_original_format=False)
    from safetensors import safe_open

    with safe_open(tmp_path / "model.safetensors", "np") as stored:
        names = set(stored.keys())
    assert "model.layers.0.self_attn.conv1d.weight" in names and "model.layers.1.mlp.experts.gate_up_proj" in names
    ours = Model.from_config(load_config(tmp_path), weights=tmp_path, dtype="float64")
    assert relative(ours(expected()["input_ids"]), expected()["logits_float64"]) <= TOLERANCE["float64"]


def test_the_preset_names_its_latent_cache_and_its_kda_state_by_hand() -> None:
    """Kimi-Linear-48B at 1M tokens: 7 latent-attention layers cache r_kv + d_rope = 576 numbers a token (expanded,
    32 heads of 192 keys and 128 values), 20 KDA layers a state of 32·128·128 and a window of 4 × 3·4096 whatever T."""
    latent, expanded = 7 * (512 + 64) * 4, 7 * 32 * (192 + 128) * 4
    state = 20 * (32 * 128 * 128 + 4 * 3 * 4096) * 4
    text = " ".join(cli("count", "kimi-linear-48b-a3b", "--seq", 1048576).stdout.split())
    assert (f"K/V cache (attention layers only), compressed latent, what MLA-aware inference engines store: "
            f"{latent:,} bytes per token (L_attn·(r_kv + d_rope) × float32)") in text
    assert f"expanded keys and values, as a plain K/V cache holds them: {expanded:,} bytes per token" in text
    assert "recurrent state (Kimi Delta Attention layers, constant in T): 43.8 MiB for 1 sequence" in text
    kv = json.loads(cli("count", "kimi-linear-48b-a3b", "--seq", 1048576, "--json").stdout)["inference"]["kv_cache"]
    assert (kv["bytes_per_token"], kv["expanded"]["bytes_per_token"], kv["state"]["bytes"]) == (latent, expanded, state)
    assert kv["formula"] == "L_attn·(r_kv + d_rope) per token" and kv["state"]["of"] == "Kimi Delta Attention"


@pytest.mark.torch
def test_the_cache_bytes_are_transformers_cache_after_a_prefill() -> None:
    """transformers' DynamicCache after the fixture's 7-token prefill (batch 2): the latent-attention layer's
    normalised latent and unrotated key part, the KDA layers' conv window (its last K inputs) and float32 state:
    blockcli's K/V bytes and state bytes together."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(FOLDER, dtype=torch.float32).eval()
    with torch.no_grad():
        cache = model(torch.tensor(expected()["input_ids"]), use_cache=True).past_key_values
    held = 0
    for layer in cache.layers:
        tensors = ([layer.keys, layer.values] if hasattr(layer, "keys") else
                   [*layer.conv_states.values(), *layer.recurrent_states.values()])
        held += sum(t.numel() * t.element_size() for t in tensors)
    ours = inference(load_config(FOLDER), int(expected()["parameters"]), 7, 2, "float32")
    assert held == ours.kv_bytes + ours.state_bytes


def test_verify_and_report_name_the_mixer() -> None:
    from blockcli.verify import unmodelled

    block = load_config(FOLDER).layer_block(0)
    assert unmodelled(2, block) == "a Kimi Delta Attention layer has no softmax attention heads"
    assert "tests/test_kimi_linear.py" in unmodelled(12, block)
