"""The backward pass against transformers' autograd, and against central differences.

Every checkpoint fixture has a `gradients.npz` that tests/fixtures/hf/generate.py wrote with transformers 5.24
(`--gradients`): the loss of the checkpoint on fixed ids with two labels ignored (-100), and a fingerprint of every
parameter's gradient under the checkpoint's own tensor names and layouts (norm, max, two seeded random projections;
gpt2 and llama keep every gradient whole). `Model.loss_and_grads` on the folder must give the same loss and the
same gradients, tensor by tensor, in float64 (1e-10 on the loss, 1e-8 on the gradients) and float32 (1e-5, 1e-3).
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np
import pytest

from blockcli import DecoderBlock, Model, load_config
from blockcli.config import InputError, parse_config
from conftest import NO_BACKWARD

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"
WITH_GRADIENTS = sorted(p.parent.name for p in FIXTURES.glob("*/gradients.npz"))
IDS = np.array([[3, 17, 99, 42, 7, 120, 64], [0, 55, 23, 127, 8, 91, 12]])
LOSS_TOLERANCE = {"float64": 1e-10, "float32": 1e-5}
GRAD_TOLERANCE = {"float64": 1e-8, "float32": 1e-3}


def reference(name: str) -> dict[str, np.ndarray]:
    with np.load(FIXTURES / name / "gradients.npz") as data:
        return {k: data[k] for k in data.files}


def fingerprint(name: str, grad: np.ndarray) -> np.ndarray:
    """As the generator's: (‖g‖, max |g|, ⟨g, r₁⟩, ⟨g, r₂⟩), r seeded by the tensor's name."""
    r = np.random.default_rng(zlib.crc32(name.encode())).standard_normal((2,) + grad.shape)
    g = grad.astype(np.float64)
    return np.array([np.linalg.norm(g), np.abs(g).max(), np.sum(g * r[0]), np.sum(g * r[1])])


def test_every_checkpoint_fixture_has_gradients():
    folders = {p.name for p in FIXTURES.iterdir() if (p / "config.json").is_file()}
    assert set(WITH_GRADIENTS) == folders - NO_BACKWARD - {"gpt_oss-mxfp4"}  # MXFP4 weights are frozen


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", WITH_GRADIENTS)
def test_loss_and_gradients_equal_transformers(name: str, dtype: str) -> None:
    want = reference(name)
    if f"loss_{dtype}" not in want:
        pytest.skip(f"{name} has no {dtype} reference (bfloat16 weights: float32 only)")
    folder = FIXTURES / name
    compare(Model.from_config(load_config(folder), weights=folder, dtype=dtype), want, dtype, "")


AUX = sorted(name for name in WITH_GRADIENTS if "aux_loss_float64" in reference(name))


@pytest.mark.parametrize("name", AUX)
def test_the_load_balancing_loss_equals_transformers(tmp_path: Path, name: str) -> None:
    """output_router_logits on (router_aux_loss_coef 0.37): transformers adds the load-balancing loss, and so
    does blockcli, with its gradient through every router."""
    folder = tmp_path / name
    folder.mkdir()
    for file in (FIXTURES / name).iterdir():
        if file.name != "config.json":
            (folder / file.name).symlink_to(file)
    config = json.loads((FIXTURES / name / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "output_router_logits": True,
                                                    "router_aux_loss_coef": 0.37}))
    model = Model.from_config(load_config(folder), weights=folder, dtype="float64")
    assert model.config.block.moe.aux_loss_coef == 0.37
    want = reference(name)
    compare(model, want, "float64", "aux_")
    assert float(want["aux_loss_float64"]) > float(want["loss_float64"])  # it did add something


def compare(model: Model, want: dict[str, np.ndarray], dtype: str, prefix: str) -> None:
    """`loss_and_grads` on the fixture's ids and labels against the reference's loss and fingerprints (`prefix`:
    aux_ for the run with the load-balancing loss)."""
    ids = want.get("input_ids", IDS)  # a narrow vocabulary's fixture keeps its own (generate.py's ids_for)
    loss, grads = model.loss_and_grads(ids, want["labels"])
    expected = float(want[f"{prefix}loss_{dtype}"])
    assert abs(loss - expected) <= LOSS_TOLERANCE[dtype] * abs(expected)
    assert abs(model.loss(ids, want["labels"]) - loss) <= 1e-12 * abs(loss)
    names = [str(n) for n in want["names"]]
    assert sorted(grads) == names  # every stored tensor, none more: a tied head's copy is not a parameter
    tol = GRAD_TOLERANCE[dtype]
    fingerprints = want[f"{prefix}fingerprints_{dtype}"]
    scale = max(fp[1] for fp in fingerprints)  # the largest gradient of the model
    for n, ref_fp in zip(names, fingerprints):
        got = grads[n]
        assert got.dtype == np.dtype(dtype)
        fp = fingerprint(n, got)
        norm_r = np.sqrt(got.size)  # ‖r‖ of a standard normal r, within a few percent
        bounds = tol * np.array([ref_fp[0], ref_fp[1], ref_fp[0] * norm_r, ref_fp[0] * norm_r]) + tol * 1e-3 * scale
        assert np.all(np.abs(fp - ref_fp) <= bounds), (n, fp, ref_fp)
        if not prefix and f"{dtype}/{n}" in want:  # whole: each element within tol of the tensor's largest
            whole = want[f"{dtype}/{n}"]
            assert got.shape == whole.shape
            assert np.max(np.abs(got - whole)) <= tol * max(np.max(np.abs(whole)), 1e-3 * scale), n


def test_quantized_weights_are_frozen():
    folder = FIXTURES / "gpt_oss-mxfp4"
    model = Model.from_config(load_config(folder), weights=folder, dtype="float32")
    with pytest.raises(InputError, match="quantized.*frozen|frozen.*quantized") as err:
        model.loss_and_grads(IDS[:, :5] % 64)
    assert "gate_up_proj" in str(err.value) or "down_proj" in str(err.value)


# ----------------------------------------------------------------------------- the loss's inputs


def small_model(**model: object) -> Model:
    cfg = parse_config({"block": {"d_model": 8, "n_heads": 2, "d_ff": 12},
                        "model": {"n_layers": 1, "vocab_size": 11, "max_positions": 8, **model},
                        "run": {"dtype": "float64"}})
    return Model.from_config(cfg)


@pytest.mark.parametrize("ids, labels, message", [
    (np.array([[1, 11, 2]]), None, r"token ids must lie in \[0, 11\)"),
    (np.array([[1, 2, 3]]), np.array([[1, 2]]), "shape"),
    (np.array([[1, 2, 3]]), np.array([[1, -100, -100]]), "no position"),
    (np.array([[1, 2, 3]]), np.array([[1, 2, 12]]), "vocab_size"),
    (np.array([[1, 2, 3]]), np.array([[1.0, 2.0, 3.0]]), "integer"),
    (np.array([[5]]), None, "no position"),
])
def test_bad_labels_are_input_errors(ids, labels, message):
    with pytest.raises(InputError, match=message):
        small_model().loss(ids, labels)


def test_the_loss_is_the_mean_over_the_labels_left_by_hand():
    """Position t predicts label t + 1: the mean of −log softmax over the positions whose next label is kept."""
    model = small_model()
    ids = np.array([[1, 4, 2, 9, 3], [0, 5, 5, 7, 1]])
    labels = ids.copy()
    labels[0, 2] = labels[1, 4] = -100
    logits = model(ids)
    terms = []
    for b in range(2):
        for t in range(4):
            if labels[b, t + 1] != -100:
                row = logits[b, t]
                terms.append(np.log(np.sum(np.exp(row - row.max()))) + row.max() - row[labels[b, t + 1]])
    assert len(terms) == 6
    assert abs(model.loss(ids, labels) - np.mean(terms)) <= 1e-12


def test_the_loss_in_chunks_equals_it_whole(monkeypatch):
    import blockcli.block as block

    model = small_model(logit_softcap=2.0, tie_embeddings=False)
    ids = np.random.default_rng(1).integers(0, 11, size=(3, 7))
    whole = model.loss_and_grads(ids)
    monkeypatch.setattr(block, "LOSS_CHUNK_BYTES", 11 * 8 * 2)  # two rows of logits at a time
    chunked = model.loss_and_grads(ids)
    assert abs(whole[0] - chunked[0]) <= 1e-12
    assert all(np.allclose(whole[1][k], chunked[1][k], rtol=1e-12, atol=1e-14) for k in whole[1])


def test_ignored_labels_and_later_positions_contribute_nothing():
    """With every label ignored but position 2's (predicted from position 1), the loss and the gradients are those
    of the first three tokens alone: ignored positions add nothing, and nothing flows back from later ones."""
    model = small_model()
    ids = np.random.default_rng(4).integers(0, 11, size=(2, 7))
    labels = np.full_like(ids, -100)
    labels[:, 2] = ids[:, 2]
    loss, grads = model.loss_and_grads(ids, labels)
    short_loss, short = model.loss_and_grads(ids[:, :3], labels[:, :3])
    assert abs(loss - short_loss) <= 1e-12
    assert all(np.allclose(grads[k], short[k], rtol=1e-10, atol=1e-13) for k in grads)


def test_padding_row_of_the_embedding_gets_no_gradient_from_its_lookups():
    """nn.Embedding(padding_idx=p): the lookups of token p train nothing; tied, the head still trains the row."""
    ids = np.array([[0, 4, 0, 9, 3]])
    untied = small_model(padding_idx=0, tie_embeddings=False)
    assert np.all(untied.loss_and_grads(ids)[1]["wte"][0] == 0)
    assert np.any(small_model(tie_embeddings=False).loss_and_grads(ids)[1]["wte"][0] != 0)
    assert np.any(small_model(padding_idx=0).loss_and_grads(ids)[1]["wte"][0] != 0)  # the tied head's share


def test_padding_idx_is_read_from_pad_token_id_where_the_family_uses_it(tmp_path):
    llama = {"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1,
             "intermediate_size": 12, "vocab_size": 11, "max_position_embeddings": 8, "pad_token_id": 3}
    gpt2 = {"model_type": "gpt2", "n_embd": 8, "n_head": 2, "n_layer": 1, "vocab_size": 11, "n_positions": 8,
            "pad_token_id": 3}
    for data, expected in ((llama, 3), (gpt2, None), (dict(llama, pad_token_id=11), None)):
        path = tmp_path / "config.json"
        path.write_text(json.dumps(data))
        assert load_config(path).model.padding_idx == expected


# ----------------------------------------------------------------------------- the block's vector-Jacobian product


def test_block_vjp_is_causal_in_backward():
    """The gradient of the output at position t with respect to the input at s > t is exactly zero."""
    cfg = parse_config({"block": {"d_model": 16, "n_heads": 4, "n_kv_heads": 2, "d_ff": 24, "rope": True,
                                  "norm": "rmsnorm", "activation": "swiglu"}, "run": {"dtype": "float64"}})
    blk = DecoderBlock.from_config(cfg)
    x = np.random.default_rng(0).standard_normal((1, 6, 16))
    for t in range(6):
        dy = np.zeros_like(x)
        dy[0, t] = np.random.default_rng(t).standard_normal(16)
        dx, _ = blk.vjp(x, dy)
        assert np.all(dx[0, t + 1:] == 0) and np.any(dx[0, t] != 0)
