"""The eager and sdpa activation profiles against what transformers' autograd kept in one real step
(tests/fixtures/saved, made by its generate.py with torch; no torch here). Exact: the shapes decide every byte.
One stated difference: DeepSeek-V3's Q/K (d_qk) and V (d_v) head widths differ, so on a CPU SDPA ran its math
kernel, which keeps what eager keeps; blockcli's sdpa profile describes the fused kernels (flash,
memory-efficient), so that measurement is held to blockcli's eager figure instead."""

import json
from pathlib import Path

import pytest

from blockcli import sizing
from blockcli.count import count_parameters
from blockcli.hf import config_from_hf

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = json.loads((ROOT / "tests/fixtures/saved/saved_bytes.json").read_text())
CASES = [(name, impl, row) for name, m in FIXTURE["models"].items() for impl in ("eager", "sdpa")
         if isinstance(m[impl], list) for row in m[impl]]


def kept(name: str, attention: str, B: int, T: int) -> int:
    path = ROOT / FIXTURE["models"][name]["config"]
    cfg = config_from_hf(path)
    r = count_parameters(cfg)
    model_type = json.loads(path.read_text())["model_type"]
    return sizing.training(cfg, r.total, r.non_embedding, T, B, precision="fp32", attention=attention,
                           model_type=model_type).activation_bytes


@pytest.mark.parametrize("name,impl,row", CASES, ids=[f"{n}-{i}-B{r['B']}T{r['T']}" for n, i, r in CASES])
def test_profile_equals_transformers_saved_bytes(name, impl, row):
    attention = "eager" if (name == "deepseek_v3" and impl == "sdpa") else impl  # the CPU math kernel (above)
    assert kept(name, attention, row["B"], row["T"]) == row["bytes"]


def test_gemma2_sdpa_refused_as_transformers_refuses():
    assert "refused" in FIXTURE["models"]["gemma2"]["sdpa"]
    with pytest.raises(sizing.InputError, match="soft-cap"):
        kept("gemma2", "sdpa", 2, 8)


@pytest.mark.parametrize("args, named", [
    (["--train", "--tp", "2", "--attention", "eager"], "--attention eager"),
    (["--train", "--lora-rank", "8", "--lora-targets", "q", "--attention", "sdpa"], "--attention sdpa"),
    (["--tp", "2", "--kv-dtype", "q8_0"], "--kv-dtype q8_0"),
])
def test_what_only_one_device_models_is_refused_with_model_parallelism_or_lora(args: list[str], named: str) -> None:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "blockcli", "count", "llama-3.1-8b", *args],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and named in proc.stderr
