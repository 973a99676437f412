"""Properties over random valid configs, across every variant the schema allows (hypothesis)."""

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from blockcli import ops
from blockcli.block import DecoderBlock, Model
from blockcli.config import parse_config
from strategies import block_mappings


def build(block, seq, attention="full"):
    cfg = parse_config({"block": block, "run": {"batch": 2, "seq_len": seq, "dtype": "float64"}})
    return DecoderBlock.from_config(cfg, attention=attention), cfg


def inputs(cfg, seed=0):
    return np.random.default_rng(seed).standard_normal((2, cfg.run.seq_len, cfg.block.d_model))


@given(block_mappings(), st.integers(1, 9))
def test_output_shape_equals_input_shape(block, seq):
    blk, cfg = build(block, seq)
    assert blk(inputs(cfg)).shape == (2, seq, cfg.block.d_model)


@given(block_mappings(), st.integers(2, 9), st.integers(1, 3))
def test_cached_decoding_equals_full_pass(block, seq, chunk):
    blk, cfg = build(block, seq)
    x = inputs(cfg)
    cache = blk.new_cache()
    steps = [blk.step(x[:, t:t + chunk], cache) for t in range(0, seq, chunk)]
    assert np.max(np.abs(np.concatenate(steps, axis=1) - blk(x))) < 1e-10


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])  # the fixture only patches constants
@given(block_mappings(), st.integers(2, 12), st.integers(1, 5), st.integers(1, 3))
def test_tiled_threaded_pass_equals_full_table(shared_tiles, block, seq, rows, kv_heads):
    full, cfg = build(block, seq, "full")
    chunked = DecoderBlock(cfg.block, full.params, attention="chunked")
    # tiles of `rows` query rows × `kv_heads` K/V heads (with their query groups), shared among 3 threads
    chunked.attn.tile_bytes = kv_heads * cfg.block.n_heads // cfg.block.n_kv_heads * seq * 8 * rows
    x = inputs(cfg)
    assert np.max(np.abs(chunked(x) - full(x))) < 1e-12


@given(block_mappings(), st.integers(2, 8), st.data())
def test_future_token_never_changes_earlier_outputs(block, seq, data):
    blk, cfg = build(block, seq)
    x = inputs(cfg)
    j = data.draw(st.integers(1, seq - 1))
    moved = x.copy()
    moved[:, j] += 5.0
    assert np.array_equal(blk(moved)[:, :j], blk(x)[:, :j])


@given(block_mappings(), st.integers(1, 6))
def test_model_cached_decoding_equals_full_pass(block, seq):
    data = {"block": block, "model": {"n_layers": 2, "vocab_size": 17, "max_positions": 8,
                                      "positions": "rope" if block["rope"] else "learned"},
            "run": {"dtype": "float64"}}
    model = Model.from_config(parse_config(data))
    ids = np.random.default_rng(1).integers(0, 17, size=(2, seq))
    caches = model.new_cache()
    steps = np.concatenate([model.step(ids[:, t:t + 1], caches) for t in range(seq)], axis=1)
    assert np.max(np.abs(steps - model(ids))) < 1e-10


def test_softmax_of_huge_logits_is_finite():
    logits = np.array([[1e308, -1e308, 0.0], [3e38, 3e38, -3e38]])
    out = ops.softmax(logits.copy())
    assert np.all(np.isfinite(out)) and np.allclose(out.sum(axis=-1), 1.0)
    single = ops.softmax(np.array([[3e38, 1e38, -3e38]], dtype=np.float32))
    assert np.all(np.isfinite(single))


def test_layer_norm_of_constant_tokens_is_finite():
    x = np.full((2, 3, 8), 7.0)
    out = ops.layer_norm(x, np.ones(8), np.zeros(8), 1e-5)
    assert np.all(np.isfinite(out)) and np.all(out == 0.0)
    assert np.all(np.isfinite(ops.rms_norm(np.zeros((1, 2, 4)), np.ones(4), None, 1e-6)))
