"""The K/V cache bytes `count` prints against transformers' own cache after a prefill (torch and transformers
only; skipped without them): each fixture folder's model is built by transformers, run over B × T tokens with
a DynamicCache, and the bytes of every layer's cached keys and values are summed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

HF = Path(__file__).parent / "fixtures" / "hf"
# full attention on every layer (a sliding-window cache keeps a whole prefill until its next update: README)
FOLDERS = ("llama", "qwen3", "gpt2", "gpt_neox", "olmoe", "glm4")


def transformers_cache_bytes(folder: Path, batch: int, seq: int) -> int:
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids = torch.randint(0, model.config.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(0))
    cache = transformers.DynamicCache(config=model.config)
    with torch.no_grad():
        model(ids, past_key_values=cache, use_cache=True)
    return sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))


@pytest.mark.parametrize("name", FOLDERS)
def test_kv_cache_bytes_equal_transformers_cache_after_a_prefill(name: str) -> None:
    folder = HF / name
    if not (folder / "config.json").exists():
        pytest.skip(f"no fixture folder {name}")
    batch, seq = 2, 7
    out = subprocess.run([sys.executable, "-m", "blockcli", "count", str(folder), "--seq", str(seq), "--batch",
                          str(batch), "--dtype", "float32", "--json"], capture_output=True, text=True, check=True)
    ours = json.loads(out.stdout)["inference"]["kv_cache"]["bytes"]
    assert ours == transformers_cache_bytes(folder, batch, seq)
