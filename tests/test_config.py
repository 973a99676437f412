"""Config loading and validation: `blockcli.config.load_config` / `parse_config`.

The contract under test: a valid config gives frozen dataclasses with the reference
chapter's defaults (d_model 512, n_heads 8, d_ff 2048, LayerNorm eps 1e-5, tanh-GELU,
every bias, pre-norm); every bad input raises `ConfigError` (never another exception)
whose one-line message starts with the field path (`block.n_heads: ...`) or names the
file, and says what was expected.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from blockcli.config import ConfigError, parse_config
from blockcli.sources import load_config
from conftest import config_error_message

SMALL = {"block": {"d_model": 16, "n_heads": 2, "d_ff": 32}, "run": {"batch": 2, "seq_len": 4}}


def config_error(source: Any) -> str:
    """Load `source` (a mapping goes through parse_config, anything else through load_config)
    and return the ConfigError message; fail if it loads or raises anything else."""
    load = (lambda: parse_config(source)) if isinstance(source, dict) else (lambda: load_config(source))
    return config_error_message(load, source)


def write(tmp_path: Path, text: str | bytes, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def block(**fields: Any) -> dict[str, Any]:
    """A config mapping whose block section is the small block updated with `fields`."""
    return {"block": {**SMALL["block"], **fields}}


# ============================================================================ defaults


def check_reference_defaults(cfg: Any) -> None:
    b = cfg.block
    assert (b.d_model, b.n_heads, b.d_ff) == (512, 8, 2048)
    assert b.norm == "layernorm"
    assert b.norm_eps == 1e-5
    assert b.activation == "gelu_tanh"
    assert (b.bias.qkv, b.bias.out, b.bias.mlp, b.bias.norm) == (True, True, True, True)
    assert b.placement == "pre"
    assert b.n_kv_heads == b.n_heads == 8
    assert b.head_dim == 64
    assert b.rope == 0.0
    assert cfg.model is None


@pytest.mark.parametrize("source", [None, {}, {"block": {}}, {"block": None}],
                         ids=["none", "empty-mapping", "empty-block", "null-block"])
def test_defaults_are_the_reference_block(source: Any) -> None:
    cfg = load_config(source) if source is None else parse_config(source)
    check_reference_defaults(cfg)


def test_parse_config_of_none_gives_defaults() -> None:
    check_reference_defaults(parse_config(None))


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n", "~\n"],
                         ids=["empty", "blank-lines", "comment", "document-marker", "explicit-null"])
def test_empty_yaml_file_is_refused(tmp_path: Path, text: str) -> None:
    # An empty file is far likelier a mistake (a truncated download, the wrong file) than a wish for
    # the default block, which `{}` spells out.
    message = config_error_message(lambda: load_config(write(tmp_path, text)), text)
    assert "file is empty" in message


def test_empty_mapping_file_gives_defaults(tmp_path: Path) -> None:
    check_reference_defaults(load_config(write(tmp_path, "{}\n")))


def test_n_kv_heads_defaults_to_n_heads_and_head_dim_to_d_model_over_n_heads() -> None:
    b = parse_config(block()).block
    assert b.n_kv_heads == 2
    assert b.head_dim == 8


def test_config_is_frozen() -> None:
    cfg = parse_config(block())
    with pytest.raises(Exception):
        cfg.block.d_model = 8  # type: ignore[misc]


def test_small_yaml_file_loads(tmp_path: Path) -> None:
    path = write(tmp_path, "block:\n  d_model: 16\n  n_heads: 2\n  d_ff: 32\nrun:\n  batch: 2\n  seq_len: 4\n")
    cfg = load_config(path)
    assert (cfg.block.d_model, cfg.block.n_heads, cfg.block.d_ff) == (16, 2, 32)
    assert (cfg.run.batch, cfg.run.seq_len) == (2, 4)
    assert cfg.name == str(path)


def test_load_config_accepts_str_path(tmp_path: Path) -> None:
    path = write(tmp_path, "block: {d_model: 16, n_heads: 2, d_ff: 32}\n")
    assert load_config(str(path)).block.d_model == 16


# ============================================================================ numeric strings


@pytest.mark.parametrize("field, text, value", [
    ("norm_eps", "1e-5", 1e-5),
    ("norm_eps", "1E-6", 1e-6),
    ("norm_eps", "0.001", 1e-3),
    ("rope_theta", "1e4", 1e4),
    ("rope_theta", "500000", 5e5),
    ("dropout", "0.1", 0.1),
])
def test_numeric_strings_accepted_in_float_fields(field: str, text: str, value: float) -> None:
    got = getattr(parse_config(block(**{field: text})).block, field)
    assert isinstance(got, float)
    assert got == pytest.approx(value)


def test_yaml_1e_minus_5_without_dot_is_accepted(tmp_path: Path) -> None:
    # YAML 1.1 loaders read `1e-5` (no dot) as a string; float fields must still accept it.
    path = write(tmp_path, "block:\n  norm_eps: 1e-5\n  rope_theta: 1e4\n")
    b = load_config(path).block
    assert b.norm_eps == pytest.approx(1e-5)
    assert b.rope_theta == pytest.approx(1e4)


@pytest.mark.parametrize("text", ["abc", "", "1e-5x", "0x10"])
def test_non_numeric_string_in_float_field(text: str) -> None:
    assert config_error(block(norm_eps=text)).startswith("block.norm_eps")


# ============================================================================ files


def test_yaml_syntax_error_names_file_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "block:\n  d_model: 16\n  n_heads: [2, 3\n  d_ff: 32\n")
    message = config_error(path)
    assert str(path) in message
    assert re.search(r"line \d+", message), message
    assert re.search(r"column \d+", message), message


def test_yaml_bad_indentation(tmp_path: Path) -> None:
    path = write(tmp_path, "block:\n  d_model: 16\n n_heads: 2\n")
    message = config_error(path)
    assert str(path) in message
    assert re.search(r"line \d+", message) and re.search(r"column \d+", message), message


def test_yaml_tab_indentation(tmp_path: Path) -> None:
    path = write(tmp_path, "block:\n\td_model: 16\n")
    assert str(path) in config_error(path)


def test_truncated_yaml(tmp_path: Path) -> None:
    path = write(tmp_path, 'block: {d_model: 16, n_heads: "2')
    assert str(path) in config_error(path)


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    message = config_error(path)
    assert str(path) in message
    assert re.search(r"not found|no such|does not exist", message, re.I), message


def test_missing_file_in_missing_folder(tmp_path: Path) -> None:
    path = tmp_path / "no" / "such" / "dir" / "c.yaml"
    assert str(path) in config_error(path)


def test_directory_instead_of_file(tmp_path: Path) -> None:
    folder = tmp_path / "configs.yaml"
    folder.mkdir()
    message = config_error(folder)
    assert str(folder) in message
    assert "directory" in message.lower()


def test_directory_without_suffix(tmp_path: Path) -> None:
    message = config_error(tmp_path)
    assert str(tmp_path) in message
    assert "directory" in message.lower()


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="running as root: chmod 000 does not stop root from reading the file")
def test_unreadable_file(tmp_path: Path) -> None:
    path = write(tmp_path, "block: {d_model: 16, n_heads: 2}\n")
    path.chmod(0)
    try:
        message = config_error(path)
    finally:
        path.chmod(0o644)
    assert str(path) in message
    assert "permission" in message.lower()


def test_unknown_preset_name_never_suggests_another_model() -> None:
    # GPT-3 is not GPT-2, and Mistral 7B v0.2 is neither v0.1 nor v0.3: a word holding a digit must match
    for name in ("gpt3", "mistral-7b-v0.2", "llama-3.1-8", "mixtral-8x22b", "qwen3-8b-base"):
        message = config_error(name)
        assert message.startswith(name) and "did you mean" not in message, message
        assert "config.json" in message and "blockcli presets" in message, message


@pytest.mark.parametrize("typed, preset", [("lama-3-8b", "llama-3-8b"), ("gpt-os-20b", "gpt-oss-20b"),
                                           ("deepsek-v3", "deepseek-v3")])
def test_a_misspelt_word_suggests_the_preset(typed: str, preset: str) -> None:
    assert f"did you mean '{preset}'?" in config_error(typed)


@pytest.mark.parametrize("typed, preset", [
    ("Llama-3.1-8B", "llama-3.1-8b"), ("GPT2", "gpt2"), ("Mistral-7B-v0.3", "mistral-7b-v0.3"),
    # the Hub repository a preset was transcribed from, and that repository's name: the same model
    ("meta-llama/Llama-3.1-8B", "llama-3.1-8b"), ("mistral-7b-v0.1", "mistral-7b"),
    ("mistralai/Mistral-7B-v0.1", "mistral-7b"), ("Llama-3.3-70B-Instruct", "llama-3.3-70b"),
    ("openai-community/gpt2", "gpt2"),
])
def test_preset_names_match_in_any_case_and_by_their_hub_repository(typed: str, preset: str) -> None:
    from blockcli.sources import load_config

    assert load_config(typed).name == preset


def test_every_alias_is_its_presets_own_source() -> None:
    from blockcli.config import preset_aliases
    from blockcli.sources import load_config

    for alias, name in preset_aliases().items():
        source = load_config(name).about.source.lower()
        assert f"huggingface.co/{alias}/" in source or f"/{alias}/blob/" in source, (alias, name, source)


# ============================================================================ top level


@pytest.mark.parametrize("text", ["- 1\n- 2\n", "[block, run]\n", "42\n", "hello\n", "true\n", "3.5\n",
                                  "'block'\n"],
                         ids=["list", "flow-list", "int", "string", "bool", "float", "quoted-string"])
def test_top_level_not_a_mapping(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text)
    message = config_error(path)
    assert str(path) in message
    assert "mapping" in message


@pytest.mark.parametrize("data", [[1, 2], "block", 7, 2.5, True], ids=["list", "str", "int", "float", "bool"])
def test_parse_config_rejects_non_mapping(data: Any) -> None:
    assert "mapping" in config_error_of_data(data)


def config_error_of_data(data: Any) -> str:
    try:
        parse_config(data)
    except ConfigError as exc:
        return str(exc)
    except BaseException as exc:  # noqa: BLE001
        pytest.fail(f"expected ConfigError, got {type(exc).__name__}: {exc}")
    pytest.fail(f"{data!r} loaded")


@pytest.mark.parametrize("section, value", [
    ("block", [16, 2]), ("block", 16), ("block", "d_model: 16"), ("block", True),
    ("model", [1]), ("model", 12), ("run", "fast"), ("run", [2, 4]), ("about", 3),
])
def test_section_not_a_mapping(section: str, value: Any) -> None:
    message = config_error({section: value})
    assert message.startswith(section), message
    assert "mapping" in message


# ============================================================================ unknown keys


@pytest.mark.parametrize("data, path, suggestion", [
    ({"blok": {}}, "blok", "block"),
    ({"modle": {}}, "modle", "model"),
    ({"block": {"d_modle": 16}}, "block.d_modle", "d_model"),
    ({"block": {"n_head": 2}}, "block.n_head", "n_heads"),
    ({"block": {"activaton": "relu"}}, "block.activaton", "activation"),
    ({"block": {"norm_epsilon": 1e-5}}, "block.norm_epsilon", "norm_eps"),
    ({"model": {"n_layer": 2}}, "model.n_layer", "n_layers"),
    ({"model": {"vocab": 100}}, "model.vocab", "vocab_size"),
    ({"run": {"seq_lne": 4}}, "run.seq_lne", "seq_len"),
    ({"run": {"bach": 4}}, "run.bach", "batch"),
    ({"about": {"descripton": "x"}}, "about.descripton", "description"),
    ({"block": {"bias": {"qvk": False}}}, "block.bias.qvk", "qkv"),
])
def test_unknown_key_suggests_the_closest_field(data: dict, path: str, suggestion: str) -> None:
    message = config_error(data)
    assert message.startswith(path), message
    assert "did you mean" in message.lower(), message
    assert suggestion in message


def test_unknown_key_without_close_match_lists_allowed(tmp_path: Path) -> None:
    message = config_error({"block": {"zzzzzz": 1}})
    assert message.startswith("block.zzzzzz"), message
    assert "d_model" in message  # what was expected


def test_unknown_key_in_yaml_file(tmp_path: Path) -> None:
    path = write(tmp_path, "block:\n  d_modle: 16\n")
    message = config_error(path)
    assert message.startswith("block.d_modle"), message
    assert "d_model" in message


@pytest.mark.parametrize("key", [1, None, True, (1, 2)], ids=["int", "null", "bool", "tuple"])
def test_non_string_key(key: Any) -> None:
    message = config_error({"block": {key: 16}})
    assert message.startswith("block."), message


def test_non_string_key_in_yaml(tmp_path: Path) -> None:
    path = write(tmp_path, "block:\n  1: 16\n")
    assert config_error(path).startswith("block.1"), "message must start with the field path"
    path = write(tmp_path, "block:\n  ? [a, b]\n  : 2\n", "unhashable.yaml")
    message = config_error(path)
    assert message.startswith("block.") or str(path) in message, message


# ============================================================================ types


INT_FIELDS = [("block", "d_model"), ("block", "n_heads"), ("block", "d_ff"), ("block", "n_kv_heads"),
              ("block", "head_dim"), ("model", "n_layers"), ("model", "vocab_size"),
              ("model", "max_positions"), ("run", "batch"), ("run", "seq_len"), ("run", "seed")]


def with_field(section: str, key: str, value: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"block": dict(SMALL["block"])}
    data.setdefault(section, {})
    data[section] = {**data[section], key: value}
    return data


@pytest.mark.parametrize("section, key", INT_FIELDS, ids=[f"{s}.{k}" for s, k in INT_FIELDS])
@pytest.mark.parametrize("value", ["16", "sixteen", 16.5, True, False, [16], {"a": 1}, None],
                         ids=["numeric-str", "str", "float", "true", "false", "list", "mapping", "null"])
def test_wrong_type_in_int_field(section: str, key: str, value: Any) -> None:
    message = config_error(with_field(section, key, value))
    assert message.startswith(f"{section}.{key}"), message
    assert "integer" in message


def test_bool_is_not_an_int_in_yaml(tmp_path: Path) -> None:
    # bool is a subclass of int in Python; `n_heads: true` must still be refused.
    path = write(tmp_path, "block:\n  d_model: 16\n  n_heads: true\n")
    message = config_error(path)
    assert message.startswith("block.n_heads"), message


@pytest.mark.parametrize("key", ["norm_eps", "rope_theta", "dropout"])
@pytest.mark.parametrize("value", [True, [1e-5], {"x": 1}, None], ids=["bool", "list", "mapping", "null"])
def test_wrong_type_in_float_field(key: str, value: Any) -> None:
    message = config_error(block(**{key: value}))
    assert message.startswith(f"block.{key}"), message
    assert "number" in message


@pytest.mark.parametrize("section, key", [("model", "tie_embeddings"), ("model", "final_norm"),
                                          ("model", "lm_head_bias"), ("block.bias", "qkv")])
@pytest.mark.parametrize("value", [1, 0, "yes", "true", None], ids=["one", "zero", "yes", "str-true", "null"])
def test_wrong_type_in_bool_field(section: str, key: str, value: Any) -> None:
    if section == "block.bias":
        data = block(bias={key: value})
    else:
        data = with_field(section, key, value)
    message = config_error(data)
    assert message.startswith(f"{section}.{key}"), message


@pytest.mark.parametrize("value", [1, "all", [True], 0.5], ids=["int", "str", "list", "float"])
def test_bias_wrong_type(value: Any) -> None:
    message = config_error(block(bias=value))
    assert message.startswith("block.bias"), message


@pytest.mark.parametrize("key", ["description", "source"])
def test_about_text_fields_must_be_strings(key: str) -> None:
    assert config_error({"about": {key: 5}}).startswith(f"about.{key}")


# ============================================================================ sizes


@pytest.mark.parametrize("section, key", INT_FIELDS[:-1], ids=[f"{s}.{k}" for s, k in INT_FIELDS[:-1]])
@pytest.mark.parametrize("value", [0, -1, -512])
def test_zero_and_negative_sizes(section: str, key: str, value: int) -> None:
    message = config_error(with_field(section, key, value))
    assert message.startswith(f"{section}.{key}"), message
    assert str(value) in message


@pytest.mark.parametrize("section, key", [("run", "seed"), ("model", "position_offset")])
def test_negative_seed_and_offset(section: str, key: str) -> None:
    assert config_error(with_field(section, key, -1)).startswith(f"{section}.{key}")


def test_zero_seed_and_offset_are_fine() -> None:
    cfg = parse_config({**block(), "run": {"seed": 0}, "model": {"position_offset": 0}})
    assert cfg.run.seed == 0 and cfg.model is not None and cfg.model.position_offset == 0


def test_d_model_not_divisible_by_n_heads() -> None:
    message = config_error({"block": {"d_model": 512, "n_heads": 7}})
    assert message.startswith("block.n_heads"), message
    assert "d_model=512 is not divisible by n_heads=7" in message


def test_explicit_head_dim_allows_indivisible_d_model() -> None:
    b = parse_config({"block": {"d_model": 30, "n_heads": 4, "head_dim": 8}}).block
    assert b.head_dim == 8


@pytest.mark.parametrize("n_heads, n_kv_heads", [(8, 3), (8, 16), (6, 4)])
def test_n_heads_not_divisible_by_n_kv_heads(n_heads: int, n_kv_heads: int) -> None:
    message = config_error({"block": {"d_model": 48, "n_heads": n_heads, "n_kv_heads": n_kv_heads}})
    assert message.startswith("block.n_kv_heads"), message
    assert f"n_heads={n_heads}" in message and f"n_kv_heads={n_kv_heads}" in message


def test_grouped_query_attention_is_fine() -> None:
    b = parse_config({"block": {"d_model": 64, "n_heads": 8, "n_kv_heads": 2}}).block
    assert (b.n_heads, b.n_kv_heads, b.head_dim) == (8, 2, 8)


# ============================================================================ enums


@pytest.mark.parametrize("path, value, allowed", [
    ("block.norm", "batchnorm", ["layernorm", "rmsnorm"]),
    ("block.norm", "LayerNorm", ["layernorm", "rmsnorm"]),
    ("block.activation", "gelu_new", ["gelu_tanh", "gelu", "relu", "silu", "swiglu", "geglu"]),
    ("block.activation", 3, ["gelu_tanh", "relu"]),
    ("block.placement", "peri", ["pre", "post", "parallel", "sandwich"]),
    ("model.positions", "xpos", ["learned", "sinusoidal", "rope", "none", "alibi"]),
    ("run.dtype", "float16", ["float32", "float64"]),
    ("run.dtype", None, ["float32", "float64"]),
])
def test_unknown_enum_value_lists_the_allowed_ones(path: str, value: Any, allowed: list[str]) -> None:
    section, key = path.split(".")
    data = block(**{key: value}) if section == "block" else with_field(section, key, value)
    message = config_error(data)
    assert message.startswith(path), message
    for name in allowed:
        assert name in message, f"{name!r} not listed in {message!r}"


# ============================================================================ ranges


@pytest.mark.parametrize("value", [1.5, -0.1, 2, "1.01", float("nan"), float("inf")],
                         ids=["1.5", "-0.1", "2", "str-1.01", "nan", "inf"])
def test_rope_fraction_out_of_range(value: Any) -> None:
    message = config_error({**block(rope=value), "model": {"positions": "rope"}})
    assert message.startswith("block.rope"), message


def test_rope_fraction_that_rotates_nothing() -> None:
    # head_dim 8: a fraction of 0.1 rotates int(0.8) = 0 dimensions
    message = config_error({**block(rope=0.1), "model": {"positions": "rope"}})
    assert message.startswith("block.rope"), message


def test_rope_on_block_without_rope_positions() -> None:
    message = config_error({**block(rope=0.5), "model": {"positions": "learned"}})
    assert message.startswith("block.rope"), message
    assert "model.positions" in message


def test_rope_layout_needs_rope_and_a_known_layout() -> None:
    message = config_error(block(rope_layout="interleaved"))
    assert message.startswith("block.rope_layout") and "rotary positions" in message, message
    message = config_error({**block(rope=True, rope_layout="every_two"), "model": {"positions": "rope"}})
    assert message.startswith("block.rope_layout") and "half, interleaved" in message, message
    assert parse_config(block(rope=True, rope_layout="interleaved")).block.rope_layout == "interleaved"
    assert parse_config(block(placement="parallel_shared")).block.shared_norm


def test_rope_fraction_in_range_is_kept() -> None:
    cfg = parse_config({**block(rope=0.5), "model": {"positions": "rope"}})
    assert cfg.block.rope == 0.5 and cfg.block.rope_dims == 4


@pytest.mark.parametrize("key, value", [("norm_eps", 0), ("norm_eps", -1e-5), ("norm_eps", 2.0),
                                        ("norm_eps", float("nan")), ("dropout", 1.0), ("dropout", -0.1),
                                        ("rope_theta", 0), ("rope_theta", -1.0), ("rope_theta", float("inf"))])
def test_float_out_of_range(key: str, value: float) -> None:
    assert config_error(block(**{key: value})).startswith(f"block.{key}")


# ============================================================================ bias


def test_bias_mapping_with_unknown_group() -> None:
    message = config_error(block(bias={"qkv": False, "attn": True}))
    assert message.startswith("block.bias.attn"), message
    for group in ("qkv", "out", "mlp", "norm"):
        assert group in message


def test_bias_mapping_partial_defaults_to_true() -> None:
    b = parse_config(block(bias={"qkv": False})).block.bias
    assert (b.qkv, b.out, b.mlp, b.norm) == (False, True, True, True)


@pytest.mark.parametrize("value", [True, False])
def test_bias_bool_sets_every_group(value: bool) -> None:
    b = parse_config(block(bias=value)).block.bias
    assert (b.qkv, b.out, b.mlp, b.norm) == (value,) * 4


# ============================================================================ hostile YAML


@pytest.mark.parametrize("template", [
    "!!python/object/apply:os.system ['touch {marker}']\n",
    "block:\n  d_model: !!python/object/apply:os.system ['touch {marker}']\n",
    "block: !!python/object/apply:subprocess.check_call [['touch', '{marker}']]\n",
    "run:\n  seed: !!python/object/new:os.system ['touch {marker}']\n",
    "about:\n  description: !!python/name:os.system\n",
    "!!python/object:builtins.dict {{}}\n",
])
def test_python_tags_never_construct_objects(tmp_path: Path, template: str) -> None:
    marker = tmp_path / "HACKED"
    path = write(tmp_path, template.format(marker=marker))
    message = config_error(path)
    assert not marker.exists(), "a YAML tag executed code"
    assert str(path) in message


def test_python_tag_echo_hacked(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, 'block: !!python/object/apply:os.system ["echo hacked"]\n')
    config_error(path)
    out, err = capfd.readouterr()
    assert "hacked" not in out and "hacked" not in err


def test_anchors_and_aliases_are_fine(tmp_path: Path) -> None:
    text = ("block:\n"
            "  d_model: &width 16\n"
            "  n_heads: 2\n"
            "  d_ff: &ff 32\n"
            "  bias: &flags {qkv: false, out: true, mlp: true, norm: true}\n"
            "run:\n"
            "  batch: &two 2\n"
            "  seq_len: *two\n"
            "  seed: *width\n")
    cfg = load_config(write(tmp_path, text))
    assert cfg.block.d_model == 16 and cfg.block.d_ff == 32
    assert cfg.block.bias.qkv is False
    assert (cfg.run.batch, cfg.run.seq_len, cfg.run.seed) == (2, 2, 16)


def test_merge_key_is_fine(tmp_path: Path) -> None:
    text = ("block:\n"
            "  d_model: 16\n"
            "  n_heads: 2\n"
            "  d_ff: 32\n"
            "  bias:\n"
            "    <<: &flags {qkv: true, out: false, mlp: true, norm: true}\n"
            "    qkv: false\n")
    b = load_config(write(tmp_path, text)).block
    assert (b.bias.qkv, b.bias.out, b.bias.mlp, b.bias.norm) == (False, False, True, True)


def test_load_config_of_a_mapping() -> None:
    assert load_config(block()).block.d_model == 16
    message = config_error(load_config_mapping_error())
    assert message.startswith("block.d_modle"), message


def load_config_mapping_error() -> Any:
    from types import MappingProxyType

    return MappingProxyType({"block": {"d_modle": 16}})  # a Mapping that is not a dict: load_config path


def test_undefined_alias(tmp_path: Path) -> None:
    path = write(tmp_path, "block:\n  d_model: *nowhere\n")
    message = config_error(path)
    assert str(path) in message


def test_alias_bomb_is_refused_quickly(tmp_path: Path) -> None:
    # "billion laughs": nine levels of nine-fold aliases
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    text = "block:\n  d_model:\n    " + "\n    ".join("- " + ln.split(": ", 1)[1] for ln in lines) + "\n"
    path = write(tmp_path, text)
    start = time.monotonic()
    message = config_error(path)
    assert time.monotonic() - start < 5
    assert message.startswith("block.d_model") or str(path) in message, message


@pytest.mark.parametrize("text", [
    "[" * 10000 + "]" * 10000,
    "block: " + "[" * 10000 + "]" * 10000,
    "{a: " * 10000 + "1" + "}" * 10000,
    "- " * 10000 + "1\n",
], ids=["lists", "lists-under-block", "mappings", "block-style-lists"])
def test_deeply_nested_yaml(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text)
    old = sys.getrecursionlimit()
    message = config_error(path)
    assert sys.getrecursionlimit() == old
    assert str(path) in message or message.startswith("block"), message


def test_deeply_nested_mapping_passed_directly() -> None:
    data: Any = 1
    for _ in range(10000):
        data = [data]
    message = config_error({"block": {"d_model": data}})
    assert message.startswith("block.d_model"), message


# ============================================================================ huge numbers


@pytest.mark.parametrize("key", ["d_model", "n_heads", "d_ff"])
@pytest.mark.parametrize("value", [10**13, 10**100, 10**400], ids=["1e13", "1e100", "1e400"])
def test_huge_int_sizes(key: str, value: int) -> None:
    message = config_error(block(**{key: value}))
    assert message.startswith(f"block.{key}"), message


@pytest.mark.parametrize("key", ["norm_eps", "rope_theta", "dropout"])
@pytest.mark.parametrize("value", [10**400, -(10**400), "1e400", "-1e400", 1e308 * 10],
                         ids=["int-1e400", "int-minus-1e400", "str-1e400", "str-minus-1e400", "float-inf"])
def test_huge_numbers_in_float_fields(key: str, value: Any) -> None:
    message = config_error(block(**{key: value}))
    assert message.startswith(f"block.{key}"), message


@pytest.mark.parametrize("text, path", [
    ("block:\n  d_model: 1" + "0" * 400 + "\n", "block.d_model"),
    ("block:\n  rope_theta: 1" + "0" * 400 + "\n", "block.rope_theta"),
    ("block:\n  norm_eps: 1.0e400\n", "block.norm_eps"),
    ("run:\n  seed: 1" + "0" * 30 + "\n", "run.seed"),
], ids=["d_model-400-digits", "rope_theta-400-digits", "norm_eps-1e400", "seed-31-digits"])
def test_huge_numbers_in_yaml(tmp_path: Path, text: str, path: str) -> None:
    message = config_error(write(tmp_path, text))
    assert message.startswith(path), message


def test_integer_with_more_digits_than_python_converts(tmp_path: Path) -> None:
    # Python refuses int(str) beyond 4300 digits with a ValueError; that must not escape.
    path = write(tmp_path, "block:\n  d_model: 1" + "0" * 5000 + "\n")
    message = config_error(path)
    assert message.startswith("block.d_model") or str(path) in message, message


# ============================================================================ bytes


def test_binary_garbage_with_nul_bytes(tmp_path: Path) -> None:
    import random

    rng = random.Random(0)
    data = bytes(rng.randrange(256) for _ in range(4096)) + b"\x00"
    path = write(tmp_path, data)
    assert str(path) in config_error(path)


def test_binary_garbage_without_nul_bytes(tmp_path: Path) -> None:
    import random

    rng = random.Random(1)
    data = bytes(rng.randrange(1, 256) for _ in range(4096))
    path = write(tmp_path, data)
    assert str(path) in config_error(path)


@pytest.mark.parametrize("data", [
    b"block:\n  d_model: \xff\xfe\n",
    b"block:\n  norm: layern\xe9rm\n",  # Latin-1, not UTF-8
    b"\xc3(",
], ids=["ff-fe", "latin1", "bad-continuation"])
def test_non_utf8_bytes(tmp_path: Path, data: bytes) -> None:
    path = write(tmp_path, data)
    message = config_error(path)
    assert str(path) in message
    assert "utf-8" in message.lower() or "utf8" in message.lower(), message


def test_utf16_file(tmp_path: Path) -> None:
    path = write(tmp_path, "block:\n  d_model: 16\n".encode("utf-16"))
    assert str(path) in config_error(path)


def test_control_characters_in_yaml(tmp_path: Path) -> None:
    path = write(tmp_path, "block:\n  norm: \x07layernorm\x1b\n")
    message = config_error(path)
    assert str(path) in message or message.startswith("block.norm"), message


def test_gzip_file_named_yaml(tmp_path: Path) -> None:
    import gzip

    path = write(tmp_path, gzip.compress(b"block:\n  d_model: 16\n"))
    assert str(path) in config_error(path)


def test_utf8_bom_is_fine(tmp_path: Path) -> None:
    path = write(tmp_path, b"\xef\xbb\xbfblock:\n  d_model: 16\n  n_heads: 2\n")
    assert load_config(path).block.d_model == 16


def test_alibi_positions_set_the_blocks_alibi_and_refuse_rope() -> None:
    config = parse_config({"model": {"positions": "alibi"}})
    assert config.block.alibi and not config.block.rope
    for data in ({"block": {"alibi": True, "rope": True}}, {"block": {"rope": True}, "model": {"positions": "alibi"}}):
        with pytest.raises(ConfigError, match=r"^block\.(alibi|rope): .*pick one"):
            parse_config(data)
    # ALiBi may bias the scores of a model with learned positions too (block.alibi alone)
    assert parse_config({"block": {"alibi": True}, "model": {"positions": "learned"}}).block.alibi


def test_alibi_with_a_soft_cap_is_refused_naming_the_field():
    """No reference orders ALiBi's biases and a soft cap on the same scores (BLOOM has one, Gemma 2 the other)."""
    for data in ({"block": {"alibi": True, "attention_softcap": 0.5}},
                 {"block": {"attention_softcap": 0.5}, "model": {"positions": "alibi"}}):
        with pytest.raises(ConfigError, match=r"^block\.attention_softcap: ALiBi"):
            parse_config(data)


def test_a_depth_or_expert_count_no_model_comes_near_is_refused_before_any_is_walked(tmp_path):
    """count, trace and verify walk the layers and the experts one by one: 10⁸ of them would take minutes, so
    model.n_layers and moe.n_experts (and a config.json's num_hidden_layers, n_layer, num_local_experts …) stop
    at 100,000, with one line naming the field."""
    import json

    from blockcli.sources import load_config

    with pytest.raises(ConfigError, match=r"model\.n_layers: expected at most 100,000"):
        parse_config({"block": {"d_model": 8, "n_heads": 2, "d_ff": 8}, "model": {"n_layers": 10**8, "vocab_size": 5}})
    hf = {"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2, "intermediate_size": 8,
          "num_hidden_layers": 10**9, "vocab_size": 5, "max_position_embeddings": 8}
    (tmp_path / "config.json").write_text(json.dumps(hf))
    with pytest.raises(ConfigError, match=r"field 'num_hidden_layers': expected an integer <= 100,000"):
        load_config(tmp_path / "config.json")
    assert parse_config({"block": {"d_model": 8, "n_heads": 2, "d_ff": 8},
                         "model": {"n_layers": 100_000, "vocab_size": 5}}).model.n_layers == 100_000
    with pytest.raises(ConfigError, match=r"block\.moe\.n_experts: expected at most 100,000"):  # the experts too
        parse_config({"block": {"d_model": 8, "n_heads": 2, "d_ff": 8, "bias": False,
                                "moe": {"n_experts": 10**8, "top_k": 1, "d_expert": 4}}})
    (tmp_path / "config.json").write_text(json.dumps({**hf, "model_type": "mixtral", "num_hidden_layers": 2,
                                                      "num_key_value_heads": 2, "num_local_experts": 10**8}))
    with pytest.raises(ConfigError, match=r"field 'num_local_experts': expected an integer <= 100,000"):
        load_config(tmp_path / "config.json")
