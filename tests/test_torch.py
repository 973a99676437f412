"""verify --impl on torch.nn.Module targets as they are: nanoGPT-style and transformers-style layers written in
tests/impls/torch_blocks.py, correct and with each classic bug failing the item meant for it."""

import json
import shutil
import sys

import pytest
from typer.testing import CliRunner

from blockcli.cli import app
from conftest import ROOT

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

runner = CliRunner()
TORCH = str(ROOT / "tests" / "impls" / "torch_blocks.py")
LLAMA_CONFIG = str(ROOT / "configs" / "gqa-swiglu-rope.yaml")
NANO_CONFIG = "block: {d_model: 64, n_heads: 4, d_ff: 256, activation: gelu, bias: true}\nrun: {batch: 2, seq_len: 8}\n"


@pytest.fixture
def nano_config(tmp_path):
    path = tmp_path / "nano.yaml"
    path.write_text(NANO_CONFIG)
    return str(path)


def run(target, config, *args):
    result = runner.invoke(app, ["verify", config, "--impl", target, "--json", *args])
    assert result.stdout.strip().startswith("{"), result.output
    return result, json.loads(result.stdout)


def statuses(data):
    return {c["id"]: c["status"] for c in data["checks"]}


def test_nanogpt_block_passes_through_its_factory(nano_config):
    result, data = run(f"{TORCH}:nanogpt", nano_config)
    assert result.exit_code == 0, data
    s = statuses(data)
    assert s[2] == "SKIP" and "no hook" in data["checks"][1]["measured"]  # the head split is inside forward
    assert all(s[i] == "PASS" for i in (1, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13, 14, 15, 16, 17))
    assert data["notes"] == []  # every parameter filled, every weight used


def test_gpt2_conv1d_layout_is_taken_as_is(nano_config):
    """Conv1D stores (in, out): transposing its square c_proj (as for nn.Linear) would fail item 12."""
    result, data = run(f"{TORCH}:gpt2_style", nano_config, "--only", "5,12")
    assert result.exit_code == 0 and statuses(data) == {5: "PASS", 12: "PASS"}, data


def test_a_module_updating_its_input_in_place_is_named(nano_config):
    result, data = run(f"{TORCH}:adds_into_its_input", nano_config)
    assert result.exit_code == 1 and len(data["errors"]) == 1 and "changed its input x in place" in data["errors"][0]


def test_gpt_neox_per_head_fused_qkv_is_filled_and_split(nano_config):
    """query_key_value's [q_i k_i v_i] layout: filled from W_Q | W_K | W_V reordered per head, and its output
    split back per head for items 5 (v_proj) and 12's first divergence (q_proj, k_proj)."""
    result, data = run(f"{TORCH}:NeoXLayer", nano_config)
    s = statuses(data)
    assert result.exit_code == 0 and data["notes"] == [], data
    assert all(s[i] == "PASS" for i in (3, 4, 5, 6, 7, 8, 9, 12, 17))


def test_a_weights_argument_factory_may_return_a_module_too(nano_config):
    target = f"{ROOT / 'tests' / 'impls' / 'torch_blocks.py'}:two_argument_factory"
    result, data = run(target, nano_config, "--only", "12")
    assert result.exit_code == 0 and statuses(data) == {12: "PASS"}


# Which items each classic bug must fail (the same intent as the NumPy bugs in test_impl.py).
NANOGPT_BUGS = {
    "nanogpt_softmax_queries": {3, 8}, "nanogpt_no_mask": {4, 8}, "nanogpt_scale_1_over_d": {12},
    "nanogpt_no_output_projection": {5}, "nanogpt_heads_wrong_order": {5},
}


@pytest.mark.parametrize("name", sorted(NANOGPT_BUGS))
def test_nanogpt_classic_bugs_fail_the_intended_item(nano_config, name):
    result, data = run(f"{TORCH}:{name}", nano_config)
    failed = {c["id"] for c in data["checks"] if c["status"] == "FAIL"}
    assert result.exit_code == 1 and NANOGPT_BUGS[name] <= failed, failed
    assert not failed & {1, 10, 14, 16}


def test_a_skipped_output_projection_is_named(nano_config):
    _, data = run(f"{TORCH}:nanogpt_no_output_projection", nano_config, "--only", "5")
    assert "attn.c_proj (filled from w_o) never ran" in data["checks"][0]["measured"]


def test_a_mask_cached_at_a_fixed_size_is_caught_at_the_long_t(nano_config):
    result, data = run(f"{TORCH}:nanogpt_mask_cached_at_16", nano_config)
    s = statuses(data)
    assert result.exit_code == 1 and s[8] == s[12] == "ERROR" and s[14] == "PASS"
    assert "(16) must match" in data["errors"][0] and "(64)" in data["errors"][0]


def test_transformers_style_layer_float32_internals_hint_and_rtol():
    result, data = run(f"{TORCH}:LlamaStyle", LLAMA_CONFIG)
    s = statuses(data)
    check = data["checks"][11]
    assert result.exit_code == 1 and s[12] == "FAIL" and "float32 arithmetic happens somewhere" in check["hint"]
    assert all(s[i] == "PASS" for i in (1, 3, 4, 5, 6, 7, 8, 9, 10, 13, 14, 15, 16, 17))
    result, data = run(f"{TORCH}:LlamaStyle", LLAMA_CONFIG, "--rtol", "1e-6")
    assert result.exit_code == 0 and statuses(data)[12] == "PASS"


def test_transformers_style_bugs_get_their_hints():
    _, data = run(f"{TORCH}:LlamaStyleUnscaled", LLAMA_CONFIG, "--only", "12", "--rtol", "1e-6")
    assert data["checks"][0]["status"] == "FAIL" and "1/√d_h" in data["checks"][0]["hint"]
    _, data = run(f"{TORCH}:LlamaStyleInterleavedRope", LLAMA_CONFIG, "--only", "12", "--rtol", "1e-6")
    assert data["checks"][0]["status"] == "FAIL" and "interleaved RoPE" in data["checks"][0]["hint"]


def test_the_readme_nanogpt_example_runs_against_a_model_py(tmp_path, nano_config, monkeypatch):
    shutil.copy(TORCH, tmp_path / "model.py")  # stands in for nanoGPT's model.py (Block, GPTConfig)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "model", raising=False)
    result, data = run(f"{ROOT / 'examples' / 'nanogpt_block.py'}:block", nano_config)
    assert result.exit_code == 0 and data["passed"], data


def test_weights_map_fills_names_no_scheme_knows(tmp_path):
    module = tmp_path / "renamed.py"
    module.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT / 'tests' / 'impls')!r})\n"
        "import torch_blocks\n"
        "class Renamed(torch_blocks.Block):\n"
        "    def __init__(self, config):\n"
        "        b = config['block']\n"
        "        super().__init__(torch_blocks.GPTConfig(n_embd=b['d_model'], n_head=b['n_heads']))\n"
        "        self.attn.qkv = self.attn.c_attn\n"
        "        del self.attn.c_attn\n"
        "        self.attn.c_attn = self.attn.qkv\n")
    # the map names the fused projection under its own path (a suffix); the rest is nanoGPT's scheme
    wmap = tmp_path / "map.yaml"
    wmap.write_text("attn.qkv.weight: [w_q, w_k, w_v]\nattn.qkv.bias: [b_q, b_k, b_v]\n")
    config = tmp_path / "nano.yaml"
    config.write_text(NANO_CONFIG)
    result, data = run(f"{module}:Renamed", str(config), "--weights-map", str(wmap), "--only", "12")
    assert result.exit_code == 0 and statuses(data) == {12: "PASS"}, data
    wmap.write_text("attn.qkv.weight: w_nope\n")
    bad = runner.invoke(app, ["verify", str(config), "--impl", f"{module}:Renamed", "--weights-map", str(wmap)])
    assert bad.exit_code == 2 and "no weight 'w_nope'" in bad.stderr


def test_unfilled_parameters_and_spare_weights_are_named(nano_config, tmp_path):
    config = tmp_path / "nobias.yaml"
    config.write_text(NANO_CONFIG.replace("bias: true", "bias: false"))
    _, data = run(f"{TORCH}:nanogpt", str(config), "--only", "12")
    notes = " ".join(data["notes"])
    assert "parameters not filled" in notes and "attn.c_attn.bias (no b_q, b_k, b_v in this config)" in notes
    assert statuses(data) == {12: "FAIL"}  # the module's own random biases are not blockcli's zeros


def test_a_one_argument_factory_must_return_a_module(tmp_path):
    target = tmp_path / "one.py"
    target.write_text("def make(config):\n    return lambda x: x\n")
    result = runner.invoke(app, ["verify", "--impl", f"{target}:make"])
    assert result.exit_code == 2 and "make(config) returned function, not a torch.nn.Module" in result.stderr


def test_the_readme_llama_example_passes_with_rtol_1e_6():
    """transformers' own LlamaDecoderLayer (skipped where transformers is not installed, as in CI)."""
    pytest.importorskip("transformers")
    target = f"{ROOT / 'examples' / 'llama_layer.py'}:LlamaLayer"
    result, data = run(target, LLAMA_CONFIG, "--rtol", "1e-6")
    assert result.exit_code == 0, data
    assert statuses(data)[12] == "PASS" and statuses(data)[2] == "SKIP"
    result, data = run(target, LLAMA_CONFIG)
    assert result.exit_code == 1 and "float32 arithmetic" in data["checks"][11]["hint"]


def test_torch_is_imported_only_for_a_torch_target():
    import subprocess

    probe = ("import atexit, sys;"
             "atexit.register(lambda: sys.stderr.write('torch loaded: %s' % ('torch' in sys.modules)));"
             "from blockcli.cli import main; sys.argv = ['blockcli', 'verify', '--impl', sys.argv[1], '--only', '14'];"
             " main()")
    numpy_target = f"{ROOT / 'tests' / 'impls' / 'buggy_blocks.py'}:Correct"
    out = subprocess.run([sys.executable, "-c", probe, numpy_target], capture_output=True, text=True)
    assert out.returncode == 0 and out.stderr.endswith("torch loaded: False"), out.stderr
    out = subprocess.run([sys.executable, "-c", probe, f"{TORCH}:nanogpt"], capture_output=True, text=True)
    assert out.stderr.endswith("torch loaded: True"), out.stderr


def test_a_parameter_of_the_wrong_shape_exits_2_naming_it(tmp_path):
    config = tmp_path / "narrow.yaml"
    config.write_text(NANO_CONFIG.replace("d_ff: 256", "d_ff: 128"))  # nanoGPT's MLP is always 4·d wide
    result = runner.invoke(app, ["verify", str(config), "--impl", f"{TORCH}:nanogpt"])
    assert result.exit_code == 2 and result.stdout == ""
    assert "parameter mlp.c_fc.weight has shape (256, 64), but w_up makes (128, 64) as the module stores it" \
        in result.stderr
    assert "Traceback" not in result.stderr


QWEN3_BLOCK = ("block: {d_model: 32, n_heads: 4, n_kv_heads: 2, head_dim: 16, d_ff: 64, norm: rmsnorm, "
               "norm_eps: 1.0e-6, activation: swiglu, bias: false, rope: true, qk_norm: head}\n")
GEMMA_BLOCK = ("block: {d_model: 32, n_heads: 4, n_kv_heads: 1, head_dim: 16, d_ff: 64, norm: rmsnorm, "
               "norm_eps: 1.0e-6, activation: geglu, bias: false, rope: true, norm_unit_offset: true}\n")


@pytest.mark.parametrize("target, block", [("Qwen3Layer", QWEN3_BLOCK), ("GemmaLayer", GEMMA_BLOCK)])
def test_transformers_qk_norms_and_unit_offset_norms_are_filled(tmp_path, target, block):
    """Qwen3's q_norm / k_norm (d_h,) and Gemma's (1 + w) RMSNorm weights are filled from blockcli's weights:
    left as built (ones), Qwen3's item 12 fails; Gemma's stored w is blockcli's gamma as it is."""
    pytest.importorskip("transformers")
    path = tmp_path / "block.yaml"
    path.write_text(block + "run: {batch: 2, seq_len: 8}\n")
    result, data = run(f"{ROOT / 'tests' / 'impls' / 'hf_layers.py'}:{target}", str(path), "--rtol", "1e-6")
    assert result.exit_code == 0, data
    assert data["notes"] == []  # every parameter filled, every weight used
    assert statuses(data)[12] == "PASS"


# ----------------------------------------------------------------------------- verify --grad on torch autograd

GRAD_ITEMS = {20, 21, 22, 23}


@pytest.mark.parametrize("target", ["nanogpt", "gpt2_style", "NeoXLayer"])
def test_torch_autograd_passes_the_gradient_checks(target, nano_config):
    """Linear (transposed), Conv1D (as stored) and per-head fused Q/K/V gradients laid out as blockcli's weights."""
    result, data = run(f"{TORCH}:{target}", nano_config, "--grad", "--only", "20,21,22,23")
    assert statuses(data) == dict.fromkeys(GRAD_ITEMS, "PASS"), data["checks"]
    assert result.exit_code == 0


def test_a_float32_inside_layer_is_held_to_blockcli_not_to_finite_differences():
    """transformers-style Llama (RMSNorm, softmax, RoPE tables in float32): item 20 says why it cannot judge."""
    result, data = run(f"{TORCH}:LlamaStyle", LLAMA_CONFIG, "--grad", "--only", "20,21,22,23", "--rtol", "1e-6")
    assert statuses(data) == {20: "SKIP", 21: "PASS", 22: "PASS", 23: "PASS"}, data["checks"]
    assert "float32 arithmetic inside" in data["checks"][0]["measured"]
    assert result.exit_code == 0


def test_custom_autograd_function_right_and_buggy_examples():
    example = ROOT / "examples" / "custom_autograd_block.py"
    good = runner.invoke(app, ["verify", "--impl", f"{example}:Block", "--grad", "--json"])
    assert good.exit_code == 0, good.output
    bad = runner.invoke(app, ["verify", "--impl", f"{example}:BuggyBlock", "--grad", "--json"])
    assert bad.exit_code == 1
    data = json.loads(bad.stdout)
    assert {c["id"] for c in data["checks"] if c["passed"] is False} == {20, 23}  # the forward checks all pass


def test_a_detached_parameter_is_named(nano_config):
    result, data = run(f"{TORCH}:detached_norm", nano_config, "--grad", "--only", "22")
    assert result.exit_code == 1
    assert "none returned: ln2_gamma" in data["checks"][0]["measured"]
