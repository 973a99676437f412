"""`blockcli train`: the chapter's last milestone. AdamW against its update written by hand, the default tiny
model overfitting its batch, the exit codes, and the saved folder loading back (in blockcli, and in transformers
where it is installed) with the trained model's logits."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from blockcli import Model, load_config
from blockcli import train as training
from blockcli.cli import app
from blockcli.config import InputError, parse_config

runner = CliRunner()
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"


def default_model() -> Model:
    model = Model.from_config(parse_config(training.DEFAULT_MODEL))
    training.trainer_init(model, 0)
    return model


def test_the_default_overfits_from_near_ln_v_to_below_0_05():
    model = default_model()
    ids = training.random_batch(256, 4, 32, 0)
    history = training.train(model, ids, 100, 1e-2, 0.0)
    assert abs(history[0].loss - math.log(256)) < 0.1  # a uniform guess, about
    assert history[-1].loss < 0.05
    assert all(math.isfinite(s.grad_norm) and s.grad_norm > 0 for s in history)


def test_training_is_deterministic():
    runs = [training.train(default_model(), training.random_batch(256, 2, 8, 1), 5, 1e-2, 0.1) for _ in range(2)]
    assert runs[0] == runs[1]


def test_one_adamw_step_is_the_papers_update_by_hand():
    """θ₁ = θ₀ − lr·(λ·θ₀ for matrices) − lr·m̂/(√v̂ + ε), m̂ = g (β₁ cancels at t = 1), v̂ = g² (β₂ too)."""
    model = default_model()
    ids = training.random_batch(256, 2, 8, 3)
    before = {k: v.copy() for k, v in model.params.items()}
    _, grads = model.loss_and_grads(ids)
    lr, decay = 1e-3, 0.1
    training.train(model, ids, 1, lr, decay)
    for k, theta in before.items():
        g = grads[k].astype(np.float64)
        want = theta * (1 - lr * decay if theta.ndim >= 2 else 1.0) - lr * g / (np.abs(g) + 1e-8)
        assert np.allclose(model.params[k], want, rtol=1e-5, atol=1e-7), k


@pytest.mark.parametrize("args, message", [
    (["--steps", "0"], "--steps"), (["--lr", "nan"], "--lr"), (["--lr", "-1"], "--lr"),
    (["--weight-decay", "inf"], "--weight-decay"), (["--expect-loss", "nan"], "--expect-loss"),
    (["configs/chapter-block.yaml"], "training needs a model"), (["--seq", "500"], "learned positions"),
])
def test_bad_flags_exit_2_with_one_line(args, message):
    result = runner.invoke(app, ["train", *args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_text_that_is_empty_or_binary_exits_2(tmp_path):
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "binary.bin").write_bytes(bytes(range(256)))
    for name, message in (("empty.txt", "empty"), ("binary.bin", "binary")):
        result = runner.invoke(app, ["train", "--text", str(tmp_path / name)])
        assert result.exit_code == 2 and message in result.stderr, result.output


def test_text_is_read_as_its_utf8_bytes(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("héllo")
    ids = training.text_batch(path, 2, 4, 256)
    assert ids.tolist() == [[104, 195, 169, 108], [108, 111, 104, 195]]  # 'h', 'é' as two bytes, …, repeated
    with pytest.raises(InputError, match="256 ids"):
        training.text_batch(path, 2, 4, 100)


def test_expect_loss_gates_the_exit_code():
    assert runner.invoke(app, ["train", "--steps", "60", "--expect-loss", "0.05"]).exit_code == 0
    failed = runner.invoke(app, ["train", "--steps", "2", "--expect-loss", "0.05", "--json"])
    assert failed.exit_code == 1
    data = json.loads(failed.stdout)
    assert data["passed"] is False and len(data["steps"]) == 2 and data["final_loss"] == data["steps"][-1]["loss"]


def test_saved_folder_loads_back_with_the_trained_logits(tmp_path):
    out = tmp_path / "trained"
    result = runner.invoke(app, ["train", "--steps", "5", "--save", str(out), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["saved"] == [str(out / "config.json"), str(out / "model.safetensors")]
    model = default_model()
    training.train(model, training.random_batch(256, 4, 32, 0), 5, 1e-2, 0.0)
    again = Model.from_config(load_config(out), weights=out, dtype="float32")
    ids = np.random.default_rng(2).integers(0, 256, size=(2, 9))
    assert np.array_equal(again(ids), model(ids))
    assert load_config(out).block == model.config.block and load_config(out).model == model.config.model
    refused = runner.invoke(app, ["train", "--steps", "1", "--save", str(out)])
    assert refused.exit_code == 2 and "--force" in refused.stderr
    assert runner.invoke(app, ["train", "--steps", "1", "--save", str(out), "--force"]).exit_code == 0


def test_a_llama_shaped_config_saves_as_llama_and_another_shape_is_refused(tmp_path):
    llama = {"block": {"d_model": 16, "n_heads": 4, "n_kv_heads": 2, "d_ff": 32, "norm": "rmsnorm", "norm_eps": 1e-6,
                       "activation": "swiglu", "bias": False},
             "model": {"n_layers": 2, "vocab_size": 64, "positions": "rope", "max_positions": 32,
                       "tie_embeddings": False}}
    path = tmp_path / "llama.yaml"
    path.write_text(json.dumps(llama))
    assert runner.invoke(app, ["train", str(path), "--steps", "2", "--save", str(tmp_path / "l")]).exit_code == 0
    assert json.loads((tmp_path / "l" / "config.json").read_text())["model_type"] == "llama"
    odd = tmp_path / "odd.yaml"
    odd.write_text(json.dumps({**llama, "block": {**llama["block"], "placement": "sandwich"}}))
    refused = runner.invoke(app, ["train", str(odd), "--steps", "1", "--save", str(tmp_path / "o")])
    assert refused.exit_code == 2 and "GPT-2- and Llama-shaped" in refused.stderr and "placement" in refused.stderr


def test_a_model_folder_trains_its_own_weights_and_saves_under_its_names(tmp_path):
    out = tmp_path / "qwen2"
    result = runner.invoke(app, ["train", str(FIXTURES / "qwen2"), "--steps", "3", "--batch", "2", "--seq", "8",
                                 "--save", str(out)])
    assert result.exit_code == 0, result.output
    from safetensors.numpy import load_file

    saved = load_file(out / "model.safetensors")
    original = {}
    for file in (FIXTURES / "qwen2").glob("*.safetensors"):
        original.update(load_file(file))
    assert set(saved) == set(original) and all(saved[k].shape == original[k].shape for k in saved)
    assert any(not np.array_equal(saved[k], original[k]) for k in saved)  # trained
    assert (out / "config.json").read_text() == (FIXTURES / "qwen2" / "config.json").read_text()


@pytest.mark.torch
def test_transformers_loads_the_saved_folder_with_equal_logits(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "trained"
    assert runner.invoke(app, ["train", "--steps", "5", "--save", str(out)]).exit_code == 0
    theirs = transformers.AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager").eval()
    ours = Model.from_config(load_config(out), weights=out, dtype="float32")
    ids = np.random.default_rng(2).integers(0, 256, size=(2, 9))
    with torch.no_grad():
        want = theirs(torch.tensor(ids)).logits.numpy()
    assert np.max(np.abs(ours(ids) - want)) <= 1e-4 * np.max(np.abs(want))
