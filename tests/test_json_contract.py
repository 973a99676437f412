"""The JSON as a contract: every command's output walked key by key against the README's JSON section.

Each command's object starts with `schema_version`; every key found in its output is named in the
README's subsection for that command; every shape is a list of integers (several tensors': a list of
those); the text is strict JSON (no NaN or Infinity); verify's figures are numbers.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
# mappings whose keys are data (dtype names, a group's overridden fields), not part of the schema
DATA_KEYS = {"parameter_bytes_by_dtype", "stored_dtypes", "overrides", "saved_by_operation", "schemes", "parts",
             "by_component"}

RUNS = {
    "count --json": [["count"], ["count", "gpt2"], ["count", "deepseek-v3", "--train", "--max-memory", "1TiB"],
                     ["count", "tests/fixtures/hf/llama"], ["count", "tests/fixtures/quantized/gptq-qwen3-4bit-act-order"],
                     ["count", "gpt-oss-20b", "--train", "--recompute", "full"],
                     ["count", "configs/alternating-window.yaml"],
                     ["count", "tests/fixtures/hf/mixtral", "--train", "--lora-rank", "8", "--lora-targets",
                      "all-linear", "--frozen-dtype", "nf4"],
                     ["count", "mixtral-8x7b", "--train", "--tp", "2", "--pp", "4", "--ep", "2", "--dp", "2",
                      "--sp", "--micro-batches", "4", "--vpp", "2", "--max-memory", "80GiB"],
                     ["count", "llama-2-70b", "--tp", "16", "--pp", "2"]],
    "trace --json": [["trace"], ["trace", "configs/tiny-gpt.yaml"], ["trace", "gpt2", "--shapes-only"],
                     ["trace", "--backward"], ["trace", "configs/tiny-gpt.yaml", "--backward", "--shapes-only"]],
    "verify --json": [["verify"], ["verify", "configs/alternating-window.yaml", "--only", "1,4,10"],
                      ["verify", "configs/tiny-gpt.yaml", "configs/worked-shapes.yaml", "--only", "1,12"],
                      ["verify", "--impl", "tests/impls/buggy_blocks.py:Raises", "--only", "8,14"]],
    "verify --mutants --json": [["verify", "--mutants", "--only", "12"], ["verify", "--list-mutants"]],
    "train --json": [["train", "--steps", "3"]],
    "presets --json": [["presets"]],
}


def section(heading: str) -> str:
    start = README.index(f"#### `{heading}")
    end = README.find("\n#### ", start + 1)
    end = README.find("\n## ", start) if end < 0 else end
    return README[start:end]


def walk(obj, path: str = ""):
    """(path, key, value) for every key, descending into lists and objects."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield path, key, value
            if key not in DATA_KEYS:
                yield from walk(value, f"{path}.{key}")
    elif isinstance(obj, list):
        for value in obj:
            yield from walk(value, path)


def strict(text: str):
    def refuse(constant: str):
        raise AssertionError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def is_shape(value) -> bool:
    return isinstance(value, list) and all(isinstance(n, int) and not isinstance(n, bool) for n in value)


@pytest.mark.parametrize("heading", list(RUNS))
def test_every_key_of_every_output_is_documented(heading):
    documented = set(re.findall(r"`([a-z_0-9]+)`", section(heading)))
    for args in RUNS[heading]:
        proc = subprocess.run([sys.executable, "-m", "blockcli", *args, "--json"], cwd=ROOT, capture_output=True,
                              text=True)
        assert proc.returncode in (0, 1), proc.stderr
        data = strict(proc.stdout)
        assert list(data)[0] == "schema_version" and data["schema_version"] == 1, args
        for path, key, value in walk(data):
            assert key in documented, f"{' '.join(args)}: {path}.{key} is not in the README's `{heading}` section"
            if key in ("shape", "output_shape"):
                assert is_shape(value), (args, path, key, value)
            if key in ("shapes", "input_shapes"):
                assert isinstance(value, list) and all(is_shape(s) for s in value), (args, path, key, value)
            if key == "figures":
                for f in value:
                    assert f["value"] is None or isinstance(f["value"], (int, float))
                    assert f["tolerance"] is None or isinstance(f["tolerance"], (int, float))


def test_verify_figures_are_the_numbers_of_the_prose():
    proc = subprocess.run([sys.executable, "-m", "blockcli", "verify", "--json"], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    checks = {c["id"]: c for c in strict(proc.stdout)["checks"]}
    assert {f["quantity"]: f["value"] for f in checks[10]["figures"]} == \
        {"hand count": 3_152_384, "array count": 3_152_384, "hand − arrays": 0}  # the worked block's count
    for c in checks.values():
        for f in c["figures"]:
            if f["tolerance"] is not None and c["status"] == "PASS" and f["value"] is not None:
                assert f["value"] <= f["tolerance"] or "must be > 0" in f["quantity"], (c["id"], f)
            if f["tolerance"] is not None and c["status"] == "PASS":
                shown = f"{f['tolerance']:.3g}" if f["tolerance"] else ""
                assert not shown or shown in c["tolerance"] or f"{f['tolerance']:g}" in c["tolerance"] \
                    or c["tolerance"].startswith(("atol", "above", "exact", "shape")), (c["id"], f, c["tolerance"])


def test_csv_columns_are_the_documented_names():
    proc = subprocess.run([sys.executable, "-m", "blockcli", "count", "deepseek-v3", "--format", "csv"], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    header = proc.stdout.splitlines()[0].split(",")
    assert header == ["component", "shape", "weights", "biases", "count", "share", "formula", "name", "kind"]
    for column in header:
        assert f"`{column}`" in section("count --json")
    assert "block 2: 256 routed experts (top-8 per token)" in proc.stdout  # the table's label, its block named
