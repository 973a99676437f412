"""Per-layer overrides (`layers:`): layers that differ from the base block.

Expected values come from tests/reference.py's slow loop model (which merges the overrides itself),
from hand formulas written here, and from running each layer's block alone.
"""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference as ref  # noqa: E402

from blockcli.block import DecoderBlock, Model  # noqa: E402
from blockcli.config import ConfigError, InputError, layer_list, parse_config  # noqa: E402
from blockcli.count import count_parameters  # noqa: E402
from blockcli.sizing import inference  # noqa: E402
from blockcli.trace import analytic_trace, run_trace  # noqa: E402
from blockcli.verify import verify  # noqa: E402

BLOCK = {"d_model": 16, "n_heads": 4, "n_kv_heads": 2, "d_ff": 24, "norm": "rmsnorm", "activation": "swiglu",
         "bias": False, "placement": "pre", "rope": True, "sliding_window": 3}
MODEL = {"n_layers": 4, "vocab_size": 19, "positions": "rope", "max_positions": 32, "tie_embeddings": True}
# layers 1 and 3: global attention, a wider MLP, another RoPE base and K/V head count
LAYERS = [{"indices": [1, 3], "block": {"sliding_window": 0, "d_ff": 40, "rope_theta": 1e6, "n_kv_heads": 4}}]


def mapping(**extra):
    return {"block": dict(BLOCK), "model": dict(MODEL), "layers": [dict(e) for e in LAYERS],
            "run": {"batch": 2, "seq_len": 7, "dtype": "float64"}, **extra}


def random_weights(shapes, seed):
    rng = np.random.default_rng(seed)
    return {k: (1.0 + 0.2 * rng.standard_normal(s)) if k.endswith("_gamma") else 0.3 * rng.standard_normal(s)
            for k, s in sorted(shapes.items())}


def test_each_layer_gets_its_block():
    cfg = parse_config(mapping())
    assert [cfg.layer_block(i).sliding_window for i in range(4)] == [3, 0, 3, 0]
    assert [cfg.layer_block(i).d_ff for i in range(4)] == [24, 40, 24, 40]
    assert cfg.block.d_ff == 24  # the base block stays the config's block
    assert [g.layers for g in cfg.layer_groups()] == [(0, 2), (1, 3)]
    assert cfg.layer_groups()[1].overrides == {"n_kv_heads": 4, "d_ff": 40, "rope_theta": 1e6, "sliding_window": 0}


def test_overrides_equal_to_the_base_leave_the_layers_alike():
    cfg = parse_config(dict(mapping(), layers=[{"indices": [2], "block": {"sliding_window": 3}}]))
    assert not cfg.layers_differ and len(cfg.layer_groups()) == 1


@pytest.mark.parametrize("layers, message", [
    ([{"indices": [4], "block": {}}], "layers[0].indices: expected layer indices 0..3"),
    ([{"indices": [1], "block": {}}, {"indices": [2, 1], "block": {}}],
     "layers[1].indices: layer 1 is already overridden by layers[0]"),
    ([{"indices": [1, 1], "block": {}}], "layers[0].indices: layer 1 is listed twice"),
    ([{"indices": [1], "block": {"sliding_window": -2}}], "layers[0].block.sliding_window: expected an integer >= 0"),
    ([{"indices": [1], "block": {"d_model": 32}}], "layers[0].block.d_model: cannot differ per layer"),
    ([{"indices": [1], "block": {"windw": 2}}], "layers[0].block.windw: unknown field"),
    ([{"indices": [1], "block": {"n_kv_heads": 3}}], "layers[0].block.n_kv_heads: n_heads=4 is not divisible"),
    ([{"indices": [], "block": {}}], "layers[0].indices: expected a non-empty list"),
    ([{"indices": [True], "block": {}}], "layers[0].indices: expected layer indices"),
    ([{"indices": [0]}], "layers[0].block: expected a mapping"),
    ({"indices": [0]}, "layers: expected a list"),
])
def test_bad_overrides_are_one_line_naming_the_field(layers, message):
    with pytest.raises(ConfigError) as err:
        parse_config(dict(mapping(), layers=layers))
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_overrides_need_a_model():
    with pytest.raises(ConfigError, match="layers: per-layer overrides need a model section"):
        parse_config({"block": BLOCK, "layers": LAYERS})


def test_model_matches_the_loop_reference_layer_by_layer():
    cfg = parse_config(mapping())
    shapes = ref.model_param_shapes(BLOCK, MODEL, layers=LAYERS)
    assert shapes["blocks.1.w_gate"] == (16, 40) and shapes["blocks.0.w_gate"] == (16, 24)
    w = random_weights(shapes, seed=3)
    model = Model.from_config(cfg, weights=w)
    ids = np.random.default_rng(1).integers(0, MODEL["vocab_size"], size=(2, 7))
    expected = ref.model_forward(BLOCK, MODEL, w, ids, layers=LAYERS)
    assert np.max(np.abs(model(ids) - expected)) <= 1e-12
    # the overrides matter: keeping the base block's window on layers 1 and 3 gives other logits
    kept = [{"indices": [1, 3], "block": {k: v for k, v in LAYERS[0]["block"].items() if k != "sliding_window"}}]
    assert np.max(np.abs(model(ids) - ref.model_forward(BLOCK, MODEL, w, ids, layers=kept))) > 1e-3


@pytest.mark.parametrize("chunk", [1, 3])
def test_decode_with_a_cache_per_layer_equals_the_full_pass(chunk):
    cfg = parse_config(mapping())
    model = Model.from_config(cfg, weights=random_weights(ref.model_param_shapes(BLOCK, MODEL, layers=LAYERS), 5))
    ids = np.random.default_rng(2).integers(0, MODEL["vocab_size"], size=(2, 7))
    caches = model.new_cache()
    steps = np.concatenate([model.step(ids[:, t:t + chunk], caches) for t in range(0, 7, chunk)], axis=1)
    assert np.max(np.abs(steps - model(ids))) <= 1e-12


def block_params(d, h, h_kv, d_h, d_ff):
    """Hand count of one bias-free RMSNorm SwiGLU block: two norms, Q, K, V, O, three MLP matrices."""
    return 2 * d + d * h * d_h + 2 * d * h_kv * d_h + h * d_h * d + 3 * d * d_ff


def test_count_groups_and_exact_total():
    result = count_parameters(parse_config(mapping()))
    sliding, wide = block_params(16, 4, 2, 4, 24), block_params(16, 4, 4, 4, 40)
    assert result.total == 19 * 16 + 16 + 2 * sliding + 2 * wide  # tied head counted once
    assert result.group_counts == (sliding, wide) and result.reconciled.match
    blocks = next(c for c in result.components if c.name == "blocks")
    assert blocks.count == 2 * sliding + 2 * wide and blocks.expression == f"2·{sliding:,} + 2·{wide:,}"
    assert {c.group for c in result.components if c.name == "mlp.gate"} == {0, 1}


def test_count_cli_shows_each_group_with_its_layers(tmp_path):
    path = tmp_path / "mixed.yaml"
    path.write_text(json.dumps(mapping()))  # JSON is YAML
    out = subprocess.run([sys.executable, "-m", "blockcli", "count", str(path), "--json"], capture_output=True,
                         text=True, check=True).stdout
    groups = json.loads(out)["layer_groups"]
    assert [(g["layers"], g["n_layers"]) for g in groups] == [([0, 2], 2), ([1, 3], 2)]
    assert groups[1]["overrides"]["sliding_window"] == 0
    table = subprocess.run([sys.executable, "-m", "blockcli", "count", str(path)], capture_output=True,
                           text=True, check=True, env=dict(os.environ, COLUMNS="200")).stdout
    # each group's name in the first column, what it is in the formula column (wrapped over lines)
    rows: list[list[str]] = []
    for line in table.splitlines():
        cells = [cell.strip() for cell in line.split("│")[1:-1]]
        if len(cells) == 7:
            if cells[0] or not rows:
                rows.append(cells)
            else:
                rows[-1][6] += " " + cells[6]
    headers = {r[0]: r[6] for r in rows if r[0].startswith("block ") and not any(r[1:6])}
    assert headers == {"block 1": "layers 0, 2 (2 layers): the base block",
                       "block 2": "layers 1, 3 (2 layers): d_ff 40, n_kv_heads 4, rope_theta 1e+06, sliding_window 0"}


def test_count_shows_layers_alike_in_parameters_as_one_group():
    """Layer 1 differs only in its RoPE base and window (no parameters of their own), layer 3 in its MLP width too:
    count has two groups, the first layers 0-2 with what differs among them named; the blocks stay three."""
    layers = [{"indices": [1], "block": {"rope_theta": 1e6, "sliding_window": 0}},
              {"indices": [3], "block": {"d_ff": 40}}]
    cfg = parse_config(dict(mapping(), layers=layers))
    assert len(cfg.layer_groups()) == 3
    result = count_parameters(cfg)
    assert [(g.layers, g.overrides, g.varies) for g in result.groups] == [
        ((0, 1, 2), {}, ("rope_theta", "sliding_window")), ((3,), {"d_ff": 40}, ())]
    narrow, wide = block_params(16, 4, 2, 4, 24), block_params(16, 4, 2, 4, 40)
    assert result.group_counts == (narrow, wide) and result.total == 19 * 16 + 16 + 3 * narrow + wide
    assert result.groups[0].describe() == ("layers 0-2 (3 layers): alike in parameters, differing in rope_theta, "
                                           "sliding_window")
    blocks = next(c for c in result.components if c.name == "blocks")
    assert blocks.expression == f"3·{narrow:,} + 1·{wide:,}"


def test_kv_cache_and_flops_are_summed_per_layer():
    cfg = parse_config(mapping())
    T, B = 10, 2
    inf = inference(cfg, 0, T, B, "float32")
    # per token: K and V of h_kv·d_h floats per layer; the sliding layers keep 3 tokens, the global ones T
    assert inf.kv_bytes_per_token == 4 * 2 * (2 * 2 * 4 + 2 * 4 * 4)
    assert inf.kv_bytes == 4 * 2 * B * (2 * 2 * 4 * 3 + 2 * 4 * 4 * T)
    d, V = 16, 19
    per_token = lambda h_kv, d_ff: 2 * (d * (16 + 2 * h_kv * 4) + 16 * d + 3 * d * d_ff)  # noqa: E731
    attention = lambda keys: 4 * 4 * 4 * keys  # noqa: E731 - 2·d_h·2 per key and head, h=4
    assert inf.decode == B * (2 * (per_token(2, 24) + per_token(4, 40)) + 2 * d * V
                              + 2 * attention(3) + 2 * attention(T))
    causal_window = sum(min(t + 1, 3) for t in range(T))
    assert inf.prefill.scores_causal == B * (2 * attention(causal_window) + 2 * attention(T * (T + 1) // 2))


def test_trace_runs_each_layer_block_and_analytic_rows_agree():
    cfg = parse_config(mapping())
    executed = run_trace(cfg, attention="full")
    assert executed.rows == analytic_trace(cfg, "full").rows
    w1 = {r.layer: r.output_shape for r in executed.rows if r.key.endswith(".mlp_act") or r.key.endswith(".mlp_1")}
    assert any(shape[-1] == 40 for shape in w1.values()) and any(shape[-1] == 24 for shape in w1.values())


def test_trace_layer_picks_that_layers_block(tmp_path):
    path = tmp_path / "mixed.yaml"
    path.write_text(json.dumps(mapping()))
    run = subprocess.run([sys.executable, "-m", "blockcli", "trace", str(path), "--layer", "1", "--json"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert any("layer 1's block: layers 1, 3" in n for n in data["notes"])
    assert any(op["output_shape"][-1] == 40 for op in data["ops"])
    collapsed = json.loads(subprocess.run([sys.executable, "-m", "blockcli", "trace", str(path), "--json"],
                                          capture_output=True, text=True, check=True).stdout)
    assert {op["key"].split(".")[1] for op in collapsed["ops"] if op["key"].startswith("blocks.")} == {"0,2", "1,3"}


def test_verify_checks_the_chosen_layers_block():
    cfg = parse_config(mapping())
    report = verify(cfg, only={12}, layer=1)
    assert report.passed and any("verified layer 1's block" in n for n in report.notes)
    default = verify(cfg, only={12})
    assert any("verified layer 0's block" in n and "--layer N picks another" in n for n in default.notes)


def test_verify_layer_out_of_range_is_one_line():
    with pytest.raises(InputError, match=r"^--layer 9: the model has layers 0\.\.3$"):
        verify(parse_config(mapping()), only={12}, layer=9)


def test_sandwich_block_counts_four_norms():
    result = count_parameters(parse_config({"block": dict(BLOCK, placement="sandwich")}))
    norms = next(c for c in result.components if c.name == "norms")
    assert norms.label == "four norms" and norms.count == 4 * 16


def test_config_to_dict_carries_the_overrides():
    data = parse_config(mapping()).to_dict()
    assert data["layers"] == [{"indices": [1, 3], "block": {"n_kv_heads": 4, "d_ff": 40, "rope_theta": 1e6,
                                                             "sliding_window": 0}}]
    assert math.isclose(parse_config({**data, "run": {}}).layer_block(3).rope_theta, 1e6)


def test_sandwich_training_keeps_both_branch_outputs_for_their_norms():
    from blockcli.sizing import activation_terms

    pre = activation_terms(parse_config({"block": BLOCK}).block, 8, 2, "mixed", "none")
    sandwich = activation_terms(parse_config({"block": dict(BLOCK, placement="sandwich")}).block, 8, 2, "mixed", "none")
    extra = [t for t in sandwich if t.name not in {u.name for u in pre}]
    # the attention output and the MLP output, (b, s, d) each at 2 bytes: read again by their norms' backward
    assert [t.bytes for t in extra] == [2 * 2 * 8 * 16] * 2


@pytest.mark.parametrize("layers, text", [
    ((3,), "layer 3"),
    ((5, 6), "layers 5, 6"),
    ((0, 1, 2), "layers 0-2"),
    ((0, 2, 4), "layers 0, 2, 4"),
    ((0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 12), "layers 0-4, 6-10, 12"),  # Gemma 3's sliding layers, cut short
    ((1, 2, 4, 5, 6), "layers 1, 2, 4-6"),
])
def test_layer_lists_write_runs_of_three_or_more_as_ranges(layers, text):
    assert layer_list(layers) == text


def test_a_layers_entry_can_leave_its_layers_without_positions():
    """Under positions: rope, `rope: false` in a layers entry means no rotation there (SmolLM3's NoPE);
    the base block's own `rope: false` still means "rotate", as positions: rope says."""
    data = {"block": {"d_model": 16, "n_heads": 2, "d_ff": 32, "rope": False},
            "model": {"n_layers": 3, "vocab_size": 11, "positions": "rope", "max_positions": 8},
            "layers": [{"indices": [1], "block": {"rope": False}}]}
    cfg = parse_config(data)
    assert [cfg.layer_block(i).rope for i in range(3)] == [1.0, 0.0, 1.0]
    # the base block's RoPE settings stay behind, and the group says only what the entry said
    layered = parse_config({**data, "block": {**data["block"], "rope_layout": "interleaved",
                                              "rope_scaling": {"type": "linear", "factor": 2.0}}})
    assert layered.layer_block(1).rope_layout == "half" and layered.layer_block(1).rope_scaling is None
    assert [g.overrides for g in layered.layer_groups()] == [{}, {"rope": False}]
    assert layered.group_of(1).describe() == "layer 1 (1 layer): rope false"
    # the NoPE layer runs as the same block of a model without positions does, on the same weights
    model = Model.from_config(cfg, dtype="float64")
    plain = parse_config({**data, "model": {**data["model"], "positions": "none"}, "layers": None})
    x = np.random.default_rng(0).standard_normal((2, 5, 16))
    for i, differs in ((1, False), (0, True)):
        weights = {k: v for k, v in model.blocks[i].params.items()}
        reference = DecoderBlock.from_config(plain.block, weights=weights, dtype="float64")
        assert plain.block.rope == 0.0
        assert np.array_equal(model.blocks[i](x), reference(x)) != differs


def test_a_cross_attention_layer_is_counted_and_runs_as_the_identity():
    """Mllama's cross-attention layer (block.cross_attention): its parameters counted by hand (the base block's, per-head
    q/k norms of d_h, two tanh gates), its output its input, no gradient into its parameters, no K/V cache; the model's
    extra token rows sit in the embedding only."""
    layers = [{"indices": [1], "block": {"cross_attention": True, "qk_norm": "head", "rope": False}}]
    model = dict(MODEL, tie_embeddings=False, extra_token_rows=8)
    cfg = parse_config(dict(mapping(), model=model, layers=layers))
    plain = block_params(16, 4, 2, 4, 24)
    result = count_parameters(cfg)
    assert result.total == (19 + 8) * 16 + 19 * 16 + 16 + 3 * plain + plain + 2 * 4 + 2
    block = DecoderBlock.from_config(cfg.layer_block(1), seed=3)
    x = np.random.default_rng(0).standard_normal((2, 5, 16))
    assert np.array_equal(block(x), x)
    dx, grads = block.vjp(x, np.ones_like(x))
    assert np.array_equal(dx, np.ones_like(x)) and all(not g.any() for g in grads.values())
    assert inference(cfg, 0, 10, 2, "float32").kv_bytes_per_token == 4 * 2 * 3 * 2 * 4  # three attention layers
    assert Model.from_config(cfg, seed=1).params["wte"].shape == (27, 16)


@pytest.mark.parametrize("block, model, message", [
    ({"cross_attention": True}, {}, "block.cross_attention: Mllama's cross-attention layer"),
    ({}, {"extra_token_rows": 8}, "model.extra_token_rows: 8 rows past the vocabulary"),
])
def test_cross_attention_and_extra_token_rows_refuse_what_they_are_not(block, model, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(dict(mapping(), block={**BLOCK, **block}, model={**MODEL, **model}, layers=[]))
