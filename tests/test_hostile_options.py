"""Hostile options and --impl targets (issue 30, items 8-10): numbers of 5,000 digits, infinite tolerances, a torch
module on the meta device, user code that raises where blockcli used to call it unguarded, a target that leaves a
thread running, and the K/V cache of an int4 latent of odd width (half a byte per token)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from blockcli.config import InputError, MAX_DIGITS
from conftest import ROOT
from test_hostile_cli import SUBPROCESS_ENV

BUGGY = ROOT / "tests" / "impls" / "buggy_blocks.py"
HUGE = "1" * 5000  # past int()'s 4,300-digit limit


def blockcli(*args: str, env: dict | None = None, cwd: Path | None = None, timeout: float = 120):
    return subprocess.run([sys.executable, "-m", "blockcli", *args], capture_output=True, text=True, cwd=cwd,
                          env={**SUBPROCESS_ENV, **(env or {})}, timeout=timeout)


def short_error(proc: subprocess.CompletedProcess) -> str:
    """Exit 2, one line on stderr, nothing on stdout, and short: a 5,000-digit value is not echoed whole."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("blockcli: error: "), proc.stderr[-2000:]
    assert proc.stdout == "" and len(lines[0]) < 400, lines[0][:500]
    return lines[0]


@pytest.mark.parametrize("args, said", [
    (["count", "--max-memory", HUGE], "--max-memory: a number of 5,000 digits"),
    (["count", "--max-memory", f"1.{HUGE}GiB"], "--max-memory: a number of 5,001 digits"),
    (["count", "--max-memory", f"x{HUGE}"], "--max-memory: expected a size such as 80GiB"),
    (["count", "--expect", HUGE], "--expect: a number of 5,000 digits"),
    (["count", "--expect", f"3.{HUGE}M"], "--expect: a number of 5,001 digits"),
    (["count", "--max", HUGE], "--max: a number of 5,000 digits"),
    (["count", "--seq", HUGE], "Invalid value for '--seq'"),
    (["trace", "--layer", HUGE], "Invalid value for '--layer'"),
    (["count", "--train", "--dp", HUGE], "Invalid value for '--dp'"),
    (["verify", "--only", HUGE], "--only: expected check numbers"),
    (["trace", "--show-attention", f"{HUGE}:0"], "--show-attention: expected HEAD or LAYER:HEAD"),
], ids=lambda v: v[1] if isinstance(v, list) else None)
def test_a_number_of_5000_digits_is_one_short_line(args: list[str], said: str) -> None:
    assert said in short_error(blockcli(*args))


def test_a_memory_limit_of_5000_digits_in_the_environment_is_one_line() -> None:
    line = short_error(blockcli("trace", env={"BLOCKCLI_MEMORY_LIMIT": HUGE}))
    assert "BLOCKCLI_MEMORY_LIMIT: a number of 5,000 digits" in line


def test_numbers_up_to_the_digit_limit_still_parse() -> None:
    from blockcli.count import parse_amount
    from blockcli.sizing import parse_size

    assert parse_size("1" + "0" * (MAX_DIGITS - 1)) == 10 ** (MAX_DIGITS - 1)
    assert parse_size("1." + "0" * (MAX_DIGITS - 2) + "KiB") == 1024
    assert parse_amount("1" + "0" * (MAX_DIGITS - 1)) == (10 ** (MAX_DIGITS - 1), 0)
    with pytest.raises(InputError, match=f"a number of {MAX_DIGITS + 1} digits"):
        parse_size("1" + "0" * MAX_DIGITS)
    with pytest.raises(InputError, match=f"a number of {MAX_DIGITS + 1} digits"):
        parse_amount("1" + "0" * MAX_DIGITS, "--expect")


@pytest.mark.parametrize("option", ["--rtol", "--atol"])
@pytest.mark.parametrize("value", ["inf", "nan", "1e400"])
def test_a_tolerance_that_is_not_finite_is_refused(option: str, value: str) -> None:
    """--rtol inf passed item 12 whatever the block computed; NaN silently fell back to the default."""
    line = short_error(blockcli("verify", option, value, "--only", "12"))
    assert f"{option}: expected a finite tolerance >= 0" in line
    from blockcli import load_config
    from blockcli.verify import verify

    with pytest.raises(InputError, match=option):
        verify(load_config(None), only={12}, **{option[2:]: float(value)})


# ----------------------------------------------------------------------------- user code blockcli calls


def test_a_parameters_method_that_raises_is_a_one_line_input_error(tmp_path: Path) -> None:
    """Its parameters() used to be called outside the guarded calls: a traceback."""
    target = tmp_path / "exposes.py"
    target.write_text(f"import sys\nsys.path.insert(0, {str(BUGGY.parent)!r})\nfrom buggy_blocks import Correct\n\n"
                      "class Broken(Correct):\n    def parameters(self):\n        raise NotImplementedError('no data')\n\n"
                      "class Unused(Correct):\n    @property\n    def unused(self):\n        raise RuntimeError('lazy')\n")
    line = short_error(blockcli("verify", "--impl", f"{target}:Broken"))
    assert "listing its parameters raised NotImplementedError: no data" in line
    line = short_error(blockcli("verify", "--impl", f"{target}:Unused"))
    assert "inspecting it raised RuntimeError: lazy" in line


@pytest.mark.torch
def test_a_torch_module_built_on_the_meta_device_is_named(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    target = tmp_path / "meta_block.py"
    target.write_text(f"import sys\nimport torch\nsys.path.insert(0, {str(BUGGY.parent)!r})\nimport torch_blocks\n\n"
                      "def build(config):\n    b = config['block']\n    with torch.device('meta'):\n"
                      "        return torch_blocks.Block(torch_blocks.GPTConfig(n_embd=b['d_model'], "
                      "n_head=b['n_heads']))\n")
    config = tmp_path / "nano.yaml"
    config.write_text("block: {d_model: 64, n_heads: 4, d_ff: 256, activation: gelu, bias: true}\n"
                      "run: {batch: 2, seq_len: 8}\n")
    line = short_error(blockcli("verify", str(config), "--impl", f"{target}:build"))
    assert "ln_1.weight is on the meta device, which holds shapes but no data" in line


THREADED = """import sys, threading, time
sys.path.insert(0, {impls!r})
from buggy_blocks import Correct

class LeavesAThread(Correct):
    def __init__(self, weights, config):
        super().__init__(weights, config)
        threading.Thread(target=time.sleep, args=({seconds},), name="user-worker").start()  # not a daemon
"""


def test_a_target_that_leaves_a_thread_running_is_an_error_and_blockcli_still_exits(tmp_path: Path) -> None:
    """A non-daemon thread the target started and never joins: the interpreter waited for it at exit (here an
    hour). blockcli waits min(5 s, --timeout), reports it as an error of the target (exit 1) and exits."""
    target = tmp_path / "threaded.py"
    target.write_text(THREADED.format(impls=str(BUGGY.parent), seconds=3600))
    start = time.monotonic()
    proc = blockcli("verify", "--impl", f"{target}:LeavesAThread", "--timeout", "2", "--json", timeout=300)
    elapsed = time.monotonic() - start
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert data["passed"] is False and all(c["status"] != "FAIL" for c in data["checks"])  # the block is correct
    assert len(data["errors"]) == 1 and re.search(r"left \d+ non-daemon threads? running \('user-worker'",
                                                  data["errors"][0]), data["errors"]
    assert "2 s after its last call" in data["errors"][0]
    assert elapsed < 240  # not the hour the thread sleeps
    table = blockcli("verify", "--impl", f"{target}:LeavesAThread", "--timeout", "1", timeout=300)
    assert table.returncode == 1 and "1 error outside the checks" in table.stdout


def test_a_thread_that_ends_soon_after_the_checks_is_waited_for(tmp_path: Path) -> None:
    target = tmp_path / "threaded.py"
    target.write_text(THREADED.format(impls=str(BUGGY.parent), seconds=0.5))
    proc = blockcli("verify", "--impl", f"{target}:LeavesAThread", "--json", timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert json.loads(proc.stdout)["errors"] == []


# ----------------------------------------------------------------------------- int4 K/V of an odd width


ODD_LATENT = {"d_model": 24, "n_heads": 3, "d_ff": 40, "norm": "rmsnorm", "activation": "swiglu", "bias": False,
              "rope": True, "mla": {"q_lora_rank": 10, "kv_lora_rank": 29, "qk_nope_head_dim": 4,
                                    "qk_rope_head_dim": 4, "v_head_dim": 5}}


def test_an_int4_cache_of_an_odd_width_is_16_5_bytes_per_token_not_17(tmp_path: Path) -> None:
    """One layer's latent: r_kv + d_rope = 29 + 4 = 33 int4 values, 132 bits = 16.5 bytes a token; three tokens
    pack into 396 bits = 49.5 bytes, 50 whole bytes. Expanded: h·(d_h + d_v) = 3·(8 + 5) = 39 values, 19.5 bytes a
    token, 58.5 → 59 bytes for three."""
    path = tmp_path / "odd.yaml"
    path.write_text(json.dumps({"block": ODD_LATENT, "run": {"batch": 1, "seq_len": 3}}))
    kv = json.loads(blockcli("count", str(path), "--kv-dtype", "int4", "--json").stdout)["inference"]["kv_cache"]
    assert (kv["bytes_per_token"], kv["bits_per_token"], kv["bytes"]) == (16.5, 132, 50)
    expanded = kv["expanded"]
    assert (expanded["bytes_per_token"], expanded["bits_per_token"], expanded["bytes"]) == (19.5, 156, 59)
    table = " ".join(blockcli("count", str(path), "--kv-dtype", "int4").stdout.split())  # lines unwrapped
    assert ("16.5 bytes per token (L·(r_kv + d_rope) × int4, two values a byte); 50 B for 1 × 3 tokens (packed, "
            "rounded up to a whole byte)") in table
    assert "19.5 bytes per token (L·h·(d_h + d_v) × int4, two values a byte); 59 B for 1 × 3 tokens" in table
    assert "17 bytes per token" not in table
    whole = json.loads(blockcli("count", str(path), "--kv-dtype", "int8", "--json").stdout)["inference"]["kv_cache"]
    assert whole["bytes_per_token"] == 33 and isinstance(whole["bytes_per_token"], int) and whole["bytes"] == 99


@pytest.mark.parametrize("index", ["9" * 5000, "\u00b2"], ids=["5000-digits", "superscript-two"])
def test_a_weights_key_with_a_layer_index_int_cannot_read_is_one_line(tmp_path: Path, index: str) -> None:
    """'blocks.N.' picks a whole model's layer N out of an .npz; an N of 5,000 digits, or '²' (which isdigit()
    accepts), reached int() and gave a traceback."""
    import numpy as np

    np.savez(tmp_path / "w.npz", **{f"blocks.{index}.w_q": np.zeros(2)})
    line = short_error(blockcli("trace", "--weights", str(tmp_path / "w.npz")))
    assert "w.npz: missing weight" in line


@pytest.mark.parametrize("body, said", [
    ("[" * 200_000 + "]" * 200_000, "JSON nested too deeply"),  # RecursionError
    ('{"steps": [{"step": 1, "loss": ' + "9" * 5000 + ', "grad_norm": 1}]}', "a number has too many digits"),
    ('{"steps": [{"step": 1, "loss": ' + "9" * 400 + ', "grad_norm": 1}]}',  # past float's range: OverflowError
     "steps[0].loss: expected a finite number, got 9999"),
    ('{"steps": [{"step": "' + "x" * 5000 + '", "loss": 1, "grad_norm": 1}]}', "(5,002 characters)"),
], ids=["nested-200000-deep", "5000-digits", "400-digit-loss", "5000-character-step"])
def test_a_hostile_train_log_is_one_short_line(tmp_path: Path, body: str, said: str) -> None:
    """report --train-log reads JSON like every other file: through config.parse_json."""
    path = tmp_path / "log.json"
    path.write_text(body)
    line = short_error(blockcli("report", "--train-log", str(path), "-o", str(tmp_path / "r.html")))
    assert line.startswith(f"blockcli: error: --train-log {path}: ") and said in line, line
    assert not (tmp_path / "r.html").exists()


def test_a_training_run_that_diverges_is_one_line_without_numpy_warnings() -> None:
    """--lr 1e30 overflows within two steps: the non-finite loss is refused, and NumPy's overflow warnings (five
    of them, with their source lines) no longer come before the error line."""
    line = short_error(blockcli("train", "--steps", "3", "--lr", "1e30"))
    assert "the loss or the gradient is no longer finite" in line and "try a smaller --lr" in line


@pytest.mark.parametrize("args, said", [
    (["--steps", HUGE], "Invalid value for '--steps'"),
    (["--seed", HUGE], "Invalid value for '--seed'"),
    (["--lr", "1e400"], "--lr: expected a positive finite learning rate, got inf"),
    (["--expect-loss", "nan"], "--expect-loss: expected a finite number"),
], ids=["5000-digit-steps", "5000-digit-seed", "lr-past-float", "nan-expected-loss"])
def test_hostile_training_numbers_are_one_short_line(args: list[str], said: str) -> None:
    assert said in short_error(blockcli("train", *args))
