"""The long tail of issue #28 (GPT-Neo, MPT, ...): what each family's config.json maps onto.

Their totals (the config class's defaults, by hand too, and a random config, against transformers' meta-device
builds) are rows of tests/test_dense_families.py's CASES; their fixtures in tests/fixtures/hf/<family>/ check
logits, every layer, a decode step and the gradients against transformers (tests/test_checkpoint.py,
tests/test_gradients.py).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from blockcli.config import ConfigError
from test_dense_families import CASES, mapped


# ----------------------------------------------------------------------------- what each family maps onto


def test_gpt_neo_leaves_its_scores_unscaled_and_windows_the_local_layers() -> None:
    data = mapped("gpt_neo", CASES["gpt_neo"][0])
    block = data["block"]
    assert (block["attention_scale"], block["d_ff"], block["activation"], "sliding_window" in block) == \
        (1.0, 8192, "gelu_tanh", False)  # gelu_new is GELU's tanh approximation
    assert block["bias"] == {"qkv": False, "out": True, "mlp": True, "norm": True}
    assert data["layers"] == [{"indices": list(range(1, 24, 2)), "block": {"sliding_window": 256}}]
    random = mapped("gpt_neo", CASES["gpt_neo"][3])  # local, global, local
    assert random["block"]["sliding_window"] == 5 and random["layers"] == [{"indices": [1], "block": {"sliding_window": 0}}]
    only_global = mapped("gpt_neo", {**CASES["gpt_neo"][0], "attention_types": [[["global"], 24]]})
    assert "layers" not in only_global and "sliding_window" not in only_global["block"]


@pytest.mark.parametrize("types, said", [
    ([[["global", "local"], 11]], "spells out 22 layers; expected 'num_layers' = 24"),
    ([[["global", "dilated"], 12]], "'global' or 'local'"),
    ([["global", 24]], "a list of [kinds, repeats] pairs"),
    ("global", "a list of [kinds, repeats] pairs"),
])
def test_gpt_neo_attention_types_that_do_not_spell_out_its_layers_are_refused(types: Any, said: str) -> None:
    with pytest.raises(ConfigError, match=f"field 'attention_types'.*{re.escape(said)}"):
        mapped("gpt_neo", {**CASES["gpt_neo"][0], "attention_types": types})
