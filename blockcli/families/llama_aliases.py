"""Model types transformers runs as LlamaForCausalLM under a config class of their own: only the defaults differ.

- IQuest-Coder (IQuestCoderConfig): 8 K/V heads of 128 (not hidden_size / heads), RMSNorm eps 1e-5, no biases;
  its config class refuses `clip_qkv` and `use_sliding_window` (options of the original code no released
  checkpoint turns on).
"""

from __future__ import annotations

from blockcli.families.common import TRAINING_ONLY, Family, gated_rms, silu_gate
from blockcli.families.fields import Fields
from blockcli.families.llama import LLAMA


def _iquestcoder(f: Fields) -> tuple[dict, dict]:
    f.neutral("clip_qkv", None, "IQuestCoderConfig refuses it")
    f.neutral("use_sliding_window", False, "IQuestCoderConfig refuses it")
    f.ignore("pretraining_tp")  # not a field of IQuestCoderConfig; LlamaForCausalLM never reads it
    # IQuestCoderConfig's head_dim is 128 when absent; an explicit null is LlamaConfig's hidden_size // heads
    head_dim = None if f.has("head_dim") and f.data["head_dim"] is None else 128
    return gated_rms(f, silu_gate, kv_default=8, tie_default=False, head_dim_default=head_dim, eps_default=1e-5)


FAMILIES = (
    Family("iquestcoder", "IQuest-Coder", _iquestcoder, LLAMA, TRAINING_ONLY),
)
