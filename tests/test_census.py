"""The census of issue #28: every model type transformers can build as a causal LM, read or refused.

tests/fixtures/census/census.json.gz (tests/fixtures/census/generate.py) holds, for every `model_type` in
transformers 5.24's MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, its kind (decoder, encoder, encoder-decoder), the config
class's defaults (`config_class().to_dict()`, the entries every class shares kept once under "common") and the
parameter total of its causal-LM class built from them on the meta device. Every type blockcli claims counts the
defaults' config.json to that total (a vision-language one to its language model's share); every type it does
not claim is refused in one line, exit 2, an encoder or an encoder-decoder saying it is not a decoder-only model.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from blockcli.config import parse_config
from blockcli.count import count_parameters
from blockcli.families import COMPOSITES, FAMILIES
from blockcli.families.not_decoders import ENCODER_DECODERS, ENCODERS
from blockcli.hf import hf_to_mapping
from conftest import ROOT, config_error_message

CENSUS = json.loads(gzip.decompress((ROOT / "tests" / "fixtures" / "census" / "census.json.gz").read_bytes()))
TYPES: dict[str, dict[str, Any]] = CENSUS["types"]
CLAIMED = {*FAMILIES, *COMPOSITES}

# claimed, but not in the causal-LM mapping: vision-language models transformers maps to image-text-to-text, and
# their language models, which it builds only inside them
NOT_CAUSAL_LMS = {"emu3_text_model", "mistral3", "mllama_text_model", "qwen2_5_vl", "qwen2_5_vl_text", "qwen2_vl",
                  "qwen2_vl_text", "qwen3_vl", "qwen3_vl_moe", "qwen3_vl_moe_text", "qwen3_vl_text"}

# the decoder types blockcli does not read yet: each merge that adds a family takes its type out of this list
UNCLAIMED = {
    "axk2", "bailing_hybrid", "blt", "cpmant", "deepseek_v4", "doge",
    "dots3_note", "dots3_note_text", "gemma4_assistant",
    "gemma4_unified_assistant", "hrm_text", "hy_v4",
    "inkling2_loop_text", "inkling2_text", "inkling_text", "longcat_flash", "minimax_m3_vl_text",
    "modernbert-decoder", "moshi", "qwen4_exp", "qwen4_exp_text", "recurrent_gemma",
    "rwkv", "xlnet", "xlstm", "zamba", "zaya",
}

# claimed types whose defaults blockcli refuses although transformers builds the class from them: the field, null
# in the config class, without which transformers' forward fails
REFUSED_DEFAULTS = {"deepseek_v2": "num_experts_per_tok"}  # DeepseekV2Moe's top-k of None

# claimed types whose defaults transformers cannot build for want of an entry, not for a null: the error it raised and
# the field blockcli names (Cohere Compass's rope_parameters {} holds no RoPE for its full_attention layers)
UNBUILT_DEFAULTS = {"cohere_compass_text": ("KeyError: 'full_attention'", "rope_parameters")}


# claimed composites transformers could not build here for a missing optional package (Gemma 3n's timm vision tower
# wants PIL): their language model is the text type's defaults (its text_config), whose census total it must count
TOWER_UNBUILT = {"gemma3n": "gemma3n_text"}


def defaults(model_type: str) -> dict[str, Any]:
    """The config class's defaults as a config.json, model_type included."""
    return {**CENSUS["common"], **TYPES[model_type]["config"]}


# types whose config class is another type's, so that their config.json says that type: GPT-SW3 is GPT2Config
ALIASES = {"gpt-sw3": "gpt2"}
READ = {t for t in TYPES if t in CLAIMED or ALIASES.get(t) in CLAIMED}


def test_the_aliases_are_the_types_whose_defaults_say_another_model_type() -> None:
    assert ALIASES == {t: defaults(t)["model_type"] for t, entry in TYPES.items()
                       if entry["config"] is not None and entry["config"]["model_type"] != t}


def test_the_census_is_transformers_whole_causal_lm_mapping() -> None:
    assert CENSUS["transformers"] == json.loads((ROOT / "tests/fixtures/hf/VERSIONS.json").read_text())["transformers"]
    assert len(TYPES) == 196 and all(entry["kind"] is not None or "error" in entry for entry in TYPES.values())
    assert CLAIMED - set(TYPES) == NOT_CAUSAL_LMS


def test_blockclis_encoders_and_encoder_decoders_are_the_censuss() -> None:
    assert ENCODERS == {t for t, entry in TYPES.items() if entry["kind"] == "encoder"}
    assert ENCODER_DECODERS == {t for t, entry in TYPES.items() if entry["kind"] == "encoder-decoder"}
    assert not CLAIMED & (ENCODERS | ENCODER_DECODERS)


def test_the_unclaimed_list_is_every_decoder_type_blockcli_does_not_read() -> None:
    claimed_yet_listed = UNCLAIMED & CLAIMED
    assert not claimed_yet_listed, f"blockcli reads these now: take them out of UNCLAIMED: {sorted(claimed_yet_listed)}"
    decoders = {t for t, entry in TYPES.items() if entry["kind"] in ("decoder", None)}
    assert decoders - READ == UNCLAIMED


@pytest.mark.parametrize("model_type", sorted(READ))
def test_a_claimed_types_defaults_count_as_transformers_builds_them(model_type: str) -> None:
    entry = TYPES[model_type]
    want = entry.get("language_model_parameters", entry["parameters"])
    if model_type in TOWER_UNBUILT:
        text = TYPES[TOWER_UNBUILT[model_type]]
        assert "requires the PIL library" in entry["error"] and want is None
        assert {k: v for k, v in entry["config"]["text_config"].items() if k in text["config"]} == text["config"]
        want = text["parameters"]
    if want is None or model_type in REFUSED_DEFAULTS:  # transformers cannot build (or run) them: neither can blockcli
        message = config_error_message(lambda: hf_to_mapping(defaults(model_type), "config.json"), model_type)
        if model_type in UNBUILT_DEFAULTS:
            error, field = UNBUILT_DEFAULTS[model_type]
            assert entry["error"] == error and message.startswith(f"config.json: field '{field}'")
            return
        assert message.startswith("config.json: field '") and " is null; " in message
        if model_type in REFUSED_DEFAULTS:
            assert entry["parameters"] is not None and f"'{REFUSED_DEFAULTS[model_type]}'" in message
        return
    assert count_parameters(parse_config(hf_to_mapping(defaults(model_type), "config.json"))).total == want


@pytest.mark.parametrize("model_type", sorted(UNCLAIMED))
def test_an_unclaimed_decoder_type_is_refused_as_not_supported(model_type: str) -> None:
    data = defaults(model_type) if TYPES[model_type]["config"] is not None else {"model_type": model_type}
    message = config_error_message(lambda: hf_to_mapping(data, "config.json"), model_type)
    assert message.startswith(f"config.json: field 'model_type' = '{model_type}' is not a supported model family")


@pytest.mark.parametrize("model_type", sorted(ENCODERS | ENCODER_DECODERS))
def test_an_encoder_or_encoder_decoder_is_refused_as_not_a_decoder(model_type: str) -> None:
    kind = "an encoder-decoder" if model_type in ENCODER_DECODERS else "an encoder"
    message = config_error_message(lambda: hf_to_mapping({"model_type": model_type}, "config.json"), model_type)
    assert message == (f"config.json: field 'model_type' = '{model_type}' is {kind} model, not a decoder-only one; "
                       f"blockcli reads decoder-only language models")


@pytest.mark.parametrize("model_type, said", [("bart", "is an encoder-decoder model, not a decoder-only one"),
                                              ("bert", "is an encoder model, not a decoder-only one"),
                                              ("rwkv", "is not a supported model family")])
def test_the_cli_refuses_them_in_one_line_exit_2(tmp_path: Path, model_type: str, said: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": model_type}))
    done = subprocess.run([sys.executable, "-m", "blockcli", "count", str(path)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and said in done.stderr and "Traceback" not in done.stderr
