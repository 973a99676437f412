"""Every model family blockcli reads, as data: `FAMILIES[model_type]` is a `Family`.

A family is one table row in the module of its lineage (Llama's relatives share llama.py):

    Family("qwen3", "Qwen3", _qwen3, LLAMA, TRAINING_ONLY)

- `read` maps the config.json fields onto blockcli's `block` and `model` sections through
  `Fields`, which records every key it looks at. Most families are a few lines on a shared
  builder (`gated_rms` for the Llama-like blocks); every key is mapped, accepted at a neutral
  value with the reason (`f.neutral`), ignored on purpose (`ignored`, or `f.ignore` with a
  comment), listed in `unread` (a published field the family's transformers modelling code never
  reads, with the reason: accepted at any value, with a note), or refused: hf.py refuses any key
  left unread, naming it.
- `tensors` lists the checkpoint's tensor names against blockcli's parameter keys, with the
  layout each is stored in (blockcli/tensor_names.py explains the layouts).

A vision-language `model_type` (Gemma 3 4B and up, Mistral 3) is a `Composite` row in the module of its
language model's family (`COMPOSITES`): its `text_config` is read as that family's config.json, its
checkpoint's language-model tensors under the nested names tensor_names.nested gives them.

Adding a family: write its `read` (defaults are the transformers config class's), its TensorMap
(or reuse a sibling's), add the row, and list the module below if it is new. Then its tiny fixture (a spec in
tests/fixtures/hf/generate.py's FAMILIES; a vision side too large for the fixture budget saved with one tensor:
THINNED_ASIDE), its fuzz draw (tests/fixtures/cases/draws.py), its counts by hand beside transformers' meta-device
total, its README row, and its type out of tests/test_census.py's UNCLAIMED.
"""

from __future__ import annotations

from blockcli.families import (afmoe, bloom, codegen, cohere, deepseek, diffllama, dory, falcon, gemma2, gemma3n, gemma4,
                               git, glm, gpt2, gpt_neo, gpt_neox, gpt_oss, gptj, hybrid, jetmoe, kimi, llama, llama4,
                               llama_aliases, llama_relatives, mamba1, minimax, mllama, moe, moe_relatives, mpt, opt,
                               phi, phi3, qwen3_next, stablelm, starcoder2)
from blockcli.families.common import Composite, Family

_MODULES = (gpt2, opt, gpt_neox, llama, gemma2, starcoder2, gptj, phi, phi3, cohere, stablelm, falcon, bloom, moe,
            deepseek, gpt_oss, glm, llama_relatives, qwen3_next, gpt_neo, mpt, moe_relatives, codegen,
            llama_aliases, llama4, hybrid, kimi, mamba1, gemma4, minimax, afmoe, gemma3n, jetmoe, diffllama, dory,
            mllama, git)

FAMILIES: dict[str, Family] = {family.model_type: family for module in _MODULES for family in module.FAMILIES}
# vision-language model_types whose `text_config` is one of the families above
COMPOSITES: dict[str, Composite] = {c.model_type: c for module in _MODULES for c in getattr(module, "COMPOSITES", ())}
