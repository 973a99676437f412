"""Hostile inputs through the real command line, end to end.

The contract under test: every bad input ends with exactly ONE line on stderr,
`blockcli: error: <message naming the file or the field and what was expected>`,
exit code 2, no traceback, no partial output file left behind, no existing file
overwritten. Exit codes: 0 ok, 1 a check/expectation failed, 2 usage/input error.

Each case runs the package's `__main__` in its own process (see DRIVER below: forked
from a driver that imported blockcli once, checked against plain `python -m blockcli`),
in its own folder as the cwd, so file names in the arguments are relative and the
message must contain them. All cases run once, in a module fixture, and each test below
checks one result; the folder's files are snapshotted before the run and compared after
it, which is how "nothing left behind, nothing overwritten" is proved.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

D, H, D_FF, B, T = 16, 2, 32, 2, 4
SMALL_YAML = f"block: {{d_model: {D}, n_heads: {H}, d_ff: {D_FF}}}\nrun: {{batch: {B}, seq_len: {T}}}\n"
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
ROOT_REASON = "running as root: chmod 000 does not stop root from reading the file"
MARKER = "PWNED"  # created only if a pickle or a YAML tag ran code


# ============================================================================ arrays and files


def flat_weights(seed: int = 0) -> dict[str, np.ndarray]:
    """One block's weights under blockcli's flat keys, W shaped (in, out)."""
    rng = np.random.default_rng(seed)
    shapes = {
        "ln1_gamma": (D,), "ln1_beta": (D,),
        "w_q": (D, D), "b_q": (D,), "w_k": (D, D), "b_k": (D,), "w_v": (D, D), "b_v": (D,),
        "w_o": (D, D), "b_o": (D,),
        "ln2_gamma": (D,), "ln2_beta": (D,),
        "w_up": (D, D_FF), "b_up": (D_FF,), "w_down": (D_FF, D), "b_down": (D,),
    }
    out = {k: 0.3 * rng.standard_normal(s) for k, s in shapes.items()}
    out["ln1_gamma"] += 1.0
    out["ln2_gamma"] += 1.0
    return out


def gpt2_weights(flat: dict[str, np.ndarray], prefix: str = "", buffers: bool = False) -> dict[str, np.ndarray]:
    """The same block under GPT-2 checkpoint names: c_attn packs q|k|v along its output axis."""
    names = {
        "ln_1.weight": flat["ln1_gamma"], "ln_1.bias": flat["ln1_beta"],
        "attn.c_attn.weight": np.concatenate([flat["w_q"], flat["w_k"], flat["w_v"]], axis=1),
        "attn.c_attn.bias": np.concatenate([flat["b_q"], flat["b_k"], flat["b_v"]]),
        "attn.c_proj.weight": flat["w_o"], "attn.c_proj.bias": flat["b_o"],
        "ln_2.weight": flat["ln2_gamma"], "ln_2.bias": flat["ln2_beta"],
        "mlp.c_fc.weight": flat["w_up"], "mlp.c_fc.bias": flat["b_up"],
        "mlp.c_proj.weight": flat["w_down"], "mlp.c_proj.bias": flat["b_down"],
    }
    if buffers:  # GPT-2 checkpoints also store the causal mask buffers
        names["attn.bias"] = np.tril(np.ones((1, 1, T, T), dtype=np.float32))
        names["attn.masked_bias"] = np.array(-1e4, dtype=np.float32)
    return {prefix + k: v for k, v in names.items()}


def block_input(seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((B, T, D))


def npz_bytes(arrays: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def npy_bytes(array: Any, allow_pickle: bool = False) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=allow_pickle)
    return buf.getvalue()


def garbage(n: int = 2048, seed: int = 0) -> bytes:
    rng = random.Random(seed)
    return bytes(rng.randrange(256) for _ in range(n))


class Evil:
    """Unpickling this creates the marker folder: proof that a pickle was loaded."""

    def __init__(self, target: str) -> None:
        self.target = target

    def __reduce__(self) -> tuple:
        return (os.mkdir, (self.target,))


def pickled_object_array(folder: Path) -> np.ndarray:
    arr = np.empty((D, D), dtype=object)
    arr[...] = 0.0
    arr[0, 0] = Evil(str(folder / MARKER))
    return arr


def with_weight(key: str, value: Any, drop: tuple[str, ...] = ()) -> dict[str, Any]:
    w = {k: v for k, v in flat_weights().items() if k not in drop}
    w[key] = value
    return w


def without(key: str) -> dict[str, Any]:
    return {k: v for k, v in flat_weights().items() if k != key}


def poisoned(key: str, index: tuple[int, ...], value: float) -> dict[str, Any]:
    w = flat_weights()
    w[key] = w[key].copy()
    w[key][index] = value
    return w


def input_with(index: tuple[int, ...], value: float) -> np.ndarray:
    x = block_input()
    x[index] = value
    return x


DIR = object()  # a folder where a file belongs


def make(**files: Any) -> Callable[[Path], None]:
    """A setup: cfg.yaml plus the named files (bytes, text, DIR, or a callable(folder) -> bytes).

    Keyword names use '__' for '/' and '_DOT_' for '.', e.g. weights_DOT_npz.
    """

    def setup(folder: Path) -> None:
        (folder / "cfg.yaml").write_text(SMALL_YAML)
        for key, content in files.items():
            path = folder / key.replace("__", "/").replace("_DOT_", ".")
            path.parent.mkdir(parents=True, exist_ok=True)
            if callable(content):
                content = content(folder)
            if content is DIR:
                path.mkdir()
            elif isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content)

    return setup


# ============================================================================ the cases


@dataclass
class Case:
    id: str
    args: list[str]
    setup: Callable[[Path], None] = field(default_factory=make)
    code: int = 2
    names: tuple[str, ...] = ()  # text the one error line must contain
    unreadable: str = ""  # chmod 000 this file before the run


def deep_yaml() -> str:
    return "[" * 10000 + "]" * 10000


ERROR_CASES: list[Case] = [
    # ---------------------------------------------------------------- count: the YAML config
    Case("count-config-missing", ["count", "nope.yaml"], names=("nope.yaml",)),
    Case("count-config-empty", ["count", "empty.yaml"], make(empty_DOT_yaml=""), names=("empty.yaml", "empty")),
    Case("count-config-in-missing-folder", ["count", "no/such/c.yaml"], names=("no/such/c.yaml",)),
    Case("count-config-is-directory", ["count", "conf.yaml"], make(conf_DOT_yaml=DIR), names=("conf.yaml",)),
    Case("count-config-truncated", ["count", "trunc.yaml"],
         make(trunc_DOT_yaml="block:\n  d_model: 16\n  n_heads: [2, "), names=("trunc.yaml", "line")),
    Case("count-config-binary", ["count", "garbage.yaml"], make(garbage_DOT_yaml=garbage()),
         names=("garbage.yaml",)),
    Case("count-config-non-utf8", ["count", "latin.yaml"],
         make(latin_DOT_yaml=b"block:\n  norm: layern\xe9rm\n"), names=("latin.yaml",)),
    Case("count-config-top-level-list", ["count", "list.yaml"], make(list_DOT_yaml="- block\n- run\n"),
         names=("list.yaml",)),
    Case("count-config-unknown-field", ["count", "typo.yaml"], make(typo_DOT_yaml="block:\n  d_modle: 16\n"),
         names=("block.d_modle", "d_model")),
    Case("count-config-string-for-int", ["count", "str.yaml"],
         make(str_DOT_yaml="block:\n  d_model: sixteen\n"), names=("block.d_model",)),
    Case("count-config-bool-for-int", ["count", "bool.yaml"],
         make(bool_DOT_yaml="block:\n  d_model: 16\n  n_heads: true\n"), names=("block.n_heads",)),
    Case("count-config-negative-size", ["count", "neg.yaml"], make(neg_DOT_yaml="block:\n  d_ff: -32\n"),
         names=("block.d_ff",)),
    Case("count-config-indivisible-heads", ["count", "heads.yaml"],
         make(heads_DOT_yaml="block:\n  d_model: 16\n  n_heads: 3\n"), names=("block.n_heads", "16", "3")),
    Case("count-config-unknown-enum", ["count", "enum.yaml"], make(enum_DOT_yaml="block:\n  norm: batchnorm\n"),
         names=("block.norm", "layernorm", "rmsnorm")),
    Case("count-config-python-tag", ["count", "evil.yaml"],
         make(evil_DOT_yaml=lambda f: f"block: !!python/object/apply:os.mkdir ['{f / MARKER}']\n"),
         names=("evil.yaml",)),
    Case("count-config-os-system-tag", ["count", "evil2.yaml"],
         make(evil2_DOT_yaml=lambda f: f'block: !!python/object/apply:os.system ["touch {f / MARKER}"]\n'),
         names=("evil2.yaml",)),
    Case("count-config-deeply-nested", ["count", "deep.yaml"], make(deep_DOT_yaml=deep_yaml()),
         names=("deep.yaml",)),
    Case("count-config-huge-int", ["count", "huge.yaml"],
         make(huge_DOT_yaml="block:\n  d_model: 1" + "0" * 400 + "\n"), names=("block.d_model",)),
    Case("count-config-control-character", ["count", "ctrl.yaml"],
         make(ctrl_DOT_yaml="block:\n  norm: \x07layernorm\n"), names=("ctrl.yaml",)),
    Case("count-config-unreadable", ["count", "locked.yaml"], make(locked_DOT_yaml=SMALL_YAML),
         names=("locked.yaml",), unreadable="locked.yaml"),
    Case("count-hf-config-missing", ["count", "nope.json"], names=("nope.json",)),
    Case("count-unknown-preset", ["count", "gpt3"], names=("gpt3", "config.json")),
    Case("count-expect-garbage", ["count", "cfg.yaml", "--expect", "garbage"], names=("--expect", "garbage")),
    Case("count-max-garbage", ["count", "cfg.yaml", "--max", "lots"], names=("--max", "lots")),
    Case("count-format-unknown", ["count", "cfg.yaml", "--format", "xml"], names=("--format", "xml")),

    # ---------------------------------------------------------------- trace --weights (.npz)
    Case("trace-weights-missing", ["trace", "cfg.yaml", "--weights", "nope.npz", "--save", "out.npz"],
         names=("nope.npz",)),
    Case("trace-weights-directory", ["trace", "cfg.yaml", "--weights", "w.npz", "--save", "out.npz"],
         make(w_DOT_npz=DIR), names=("w.npz",)),
    Case("trace-weights-empty-file", ["trace", "cfg.yaml", "--weights", "empty.npz", "--save", "out.npz"],
         make(empty_DOT_npz=b""), names=("empty.npz",)),
    Case("trace-weights-truncated", ["trace", "cfg.yaml", "--weights", "trunc.npz", "--save", "out.npz"],
         make(trunc_DOT_npz=lambda f: npz_bytes(flat_weights())[:3000]), names=("trunc.npz",)),
    Case("trace-weights-binary", ["trace", "cfg.yaml", "--weights", "garbage.npz", "--save", "out.npz"],
         make(garbage_DOT_npz=garbage()), names=("garbage.npz",)),
    Case("trace-weights-text", ["trace", "cfg.yaml", "--weights", "text.npz"],
         make(text_DOT_npz="w_q: [1, 2, 3]\n"), names=("text.npz",)),
    Case("trace-weights-single-npy", ["trace", "cfg.yaml", "--weights", "single.npz"],
         make(single_DOT_npz=lambda f: npy_bytes(flat_weights()["w_q"])), names=("single.npz",)),
    Case("trace-weights-missing-key", ["trace", "cfg.yaml", "--weights", "missing_key.npz", "--save", "out.npz"],
         make(missing_key_DOT_npz=lambda f: npz_bytes(without("w_k"))), names=("missing_key.npz", "w_k")),
    Case("trace-weights-unexpected-key", ["trace", "cfg.yaml", "--weights", "extra_key.npz", "--save", "out.npz"],
         make(extra_key_DOT_npz=lambda f: npz_bytes(with_weight("w_extra", np.zeros(3)))),
         names=("extra_key.npz", "w_extra")),
    Case("trace-weights-wrong-shape", ["trace", "cfg.yaml", "--weights", "shape.npz", "--save", "out.npz"],
         make(shape_DOT_npz=lambda f: npz_bytes(with_weight("w_q", np.zeros((D, 8))))),
         names=("shape.npz", "w_q", "(16, 8)", "(16, 16)")),
    Case("trace-weights-transposed", ["trace", "cfg.yaml", "--weights", "transposed.npz"],
         make(transposed_DOT_npz=lambda f: npz_bytes(with_weight("w_up", np.zeros((D_FF, D))))),
         names=("transposed.npz", "w_up", "(32, 16)", "(16, 32)")),
    Case("trace-weights-wrong-rank", ["trace", "cfg.yaml", "--weights", "rank.npz", "--save", "out.npz"],
         make(rank_DOT_npz=lambda f: npz_bytes(with_weight("ln1_gamma", np.ones((1, D))))),
         names=("rank.npz", "ln1_gamma", "(1, 16)", "(16,)")),
    Case("trace-weights-pickled-object-array", ["trace", "cfg.yaml", "--weights", "pickle.npz", "--save", "out.npz"],
         make(pickle_DOT_npz=lambda f: npz_bytes(with_weight("w_q", pickled_object_array(f)))),
         names=("pickle.npz",)),
    Case("trace-weights-nan", ["trace", "cfg.yaml", "--weights", "nan.npz", "--save", "out.npz"],
         make(nan_DOT_npz=lambda f: npz_bytes(poisoned("w_up", (0, 0), np.nan))), names=("nan.npz", "w_up")),
    Case("trace-weights-inf", ["trace", "cfg.yaml", "--weights", "inf.npz", "--save", "out.npz"],
         make(inf_DOT_npz=lambda f: npz_bytes(poisoned("b_down", (3,), -np.inf))), names=("inf.npz", "b_down")),
    Case("trace-weights-complex", ["trace", "cfg.yaml", "--weights", "complex.npz", "--save", "out.npz"],
         make(complex_DOT_npz=lambda f: npz_bytes(with_weight("w_v", flat_weights()["w_v"] + 1j))),
         names=("complex.npz", "w_v")),
    Case("trace-weights-strings", ["trace", "cfg.yaml", "--weights", "strings.npz", "--save", "out.npz"],
         make(strings_DOT_npz=lambda f: npz_bytes(with_weight("w_o", np.full((D, D), "0.5")))),
         names=("strings.npz", "w_o")),
    Case("trace-weights-gpt2-bad-packing", ["trace", "cfg.yaml", "--weights", "gpt2_bad.npz"],
         make(gpt2_bad_DOT_npz=lambda f: npz_bytes({**gpt2_weights(flat_weights()),
                                                   "attn.c_attn.weight": np.zeros((D, 3 * D - 1))})),
         names=("gpt2_bad.npz", "attn.c_attn.weight")),
    Case("trace-weights-gpt2-wrong-width", ["trace", "cfg.yaml", "--weights", "gpt2_wide.npz"],
         make(gpt2_wide_DOT_npz=lambda f: npz_bytes({**gpt2_weights(flat_weights()),
                                                    "mlp.c_fc.weight": np.zeros((D, 2 * D_FF))})),
         names=("gpt2_wide.npz",)),
    Case("trace-weights-gpt2-two-blocks", ["trace", "cfg.yaml", "--weights", "gpt2_two.npz"],
         make(gpt2_two_DOT_npz=lambda f: npz_bytes({**gpt2_weights(flat_weights(), "h.0."),
                                                   **gpt2_weights(flat_weights(), "h.1.")})),
         names=("gpt2_two.npz",)),
    Case("trace-weights-unreadable", ["trace", "cfg.yaml", "--weights", "locked.npz", "--save", "out.npz"],
         make(locked_DOT_npz=lambda f: npz_bytes(flat_weights())), names=("locked.npz",),
         unreadable="locked.npz"),

    # ---------------------------------------------------------------- trace --input (.npy)
    Case("trace-input-missing", ["trace", "cfg.yaml", "--input", "nope.npy", "--save", "out.npz"],
         names=("nope.npy",)),
    Case("trace-input-directory", ["trace", "cfg.yaml", "--input", "x.npy", "--save", "out.npz"],
         make(x_DOT_npy=DIR), names=("x.npy",)),
    Case("trace-input-empty-file", ["trace", "cfg.yaml", "--input", "empty.npy", "--save", "out.npz"],
         make(empty_DOT_npy=b""), names=("empty.npy",)),
    Case("trace-input-truncated", ["trace", "cfg.yaml", "--input", "trunc.npy", "--save", "out.npz"],
         make(trunc_DOT_npy=lambda f: npy_bytes(block_input())[:300]), names=("trunc.npy",)),
    Case("trace-input-header-only", ["trace", "cfg.yaml", "--input", "header.npy"],
         make(header_DOT_npy=lambda f: npy_bytes(block_input())[:128]), names=("header.npy",)),
    Case("trace-input-binary", ["trace", "cfg.yaml", "--input", "garbage.npy", "--save", "out.npz"],
         make(garbage_DOT_npy=garbage()), names=("garbage.npy",)),
    Case("trace-input-pickled-object-array", ["trace", "cfg.yaml", "--input", "pickle.npy", "--save", "out.npz"],
         make(pickle_DOT_npy=lambda f: npy_bytes(np.array([[[Evil(str(f / MARKER))] * D] * T] * B, dtype=object),
                                                 allow_pickle=True)),
         names=("pickle.npy",)),
    Case("trace-input-nan", ["trace", "cfg.yaml", "--input", "nan.npy", "--save", "out.npz"],
         make(nan_DOT_npy=lambda f: npy_bytes(input_with((1, 2, 3), np.nan))), names=("nan.npy",)),
    Case("trace-input-inf", ["trace", "cfg.yaml", "--input", "inf.npy", "--save", "out.npz"],
         make(inf_DOT_npy=lambda f: npy_bytes(input_with((0, 0, 0), np.inf))), names=("inf.npy",)),
    Case("trace-input-complex", ["trace", "cfg.yaml", "--input", "complex.npy", "--save", "out.npz"],
         make(complex_DOT_npy=lambda f: npy_bytes(block_input() + 1j)), names=("complex.npy",)),
    Case("trace-input-strings", ["trace", "cfg.yaml", "--input", "strings.npy", "--save", "out.npz"],
         make(strings_DOT_npy=lambda f: npy_bytes(np.full((B, T, D), "1.0"))), names=("strings.npy",)),
    Case("trace-input-rank-2", ["trace", "cfg.yaml", "--input", "rank2.npy", "--save", "out.npz"],
         make(rank2_DOT_npy=lambda f: npy_bytes(block_input()[0])), names=("rank2.npy", "(4, 16)")),
    Case("trace-input-rank-4", ["trace", "cfg.yaml", "--input", "rank4.npy", "--save", "out.npz"],
         make(rank4_DOT_npy=lambda f: npy_bytes(block_input()[None])), names=("rank4.npy", "(1, 2, 4, 16)")),
    Case("trace-input-wrong-width", ["trace", "cfg.yaml", "--input", "wide.npy", "--save", "out.npz"],
         make(wide_DOT_npy=lambda f: npy_bytes(np.zeros((B, T, 8)))), names=("wide.npy", "16", "(2, 4, 8)")),
    Case("trace-input-empty-array", ["trace", "cfg.yaml", "--input", "none.npy", "--save", "out.npz"],
         make(none_DOT_npy=lambda f: npy_bytes(np.zeros((B, 0, D)))), names=("none.npy",)),
    Case("trace-input-is-npz", ["trace", "cfg.yaml", "--input", "x.npz", "--save", "out.npz"],
         make(x_DOT_npz=lambda f: npz_bytes({"x": block_input()})), names=("x.npz",)),
    Case("trace-input-unreadable", ["trace", "cfg.yaml", "--input", "locked.npy", "--save", "out.npz"],
         make(locked_DOT_npy=lambda f: npy_bytes(block_input())), names=("locked.npy",),
         unreadable="locked.npy"),

    # ---------------------------------------------------------------- trace --save / --export-*
    Case("trace-save-existing-file", ["trace", "cfg.yaml", "--save", "out.npz"],
         make(out_DOT_npz=b"precious bytes, not to be overwritten"), names=("out.npz",)),
    Case("trace-save-existing-file-with-weights", ["trace", "cfg.yaml", "--weights", "w.npz", "--save", "out.npz"],
         make(w_DOT_npz=lambda f: npz_bytes(flat_weights()), out_DOT_npz=b"precious"), names=("out.npz",)),
    Case("trace-save-missing-folder", ["trace", "cfg.yaml", "--save", "nofolder/out.npz"],
         names=("nofolder",)),
    Case("trace-save-is-directory", ["trace", "cfg.yaml", "--save", "outdir"], make(outdir=DIR),
         names=("outdir",)),
    Case("trace-export-svg-existing-file", ["trace", "cfg.yaml", "--export-svg", "table.svg"],
         make(table_DOT_svg="<svg>precious</svg>"), names=("table.svg",)),
    Case("trace-export-html-existing-file", ["trace", "cfg.yaml", "--export-html", "table.html"],
         make(table_DOT_html="<p>precious</p>"), names=("table.html",)),

    # ---------------------------------------------------------------- trace: config and options
    Case("trace-config-unknown-field", ["trace", "typo.yaml", "--save", "out.npz"],
         make(typo_DOT_yaml="block:\n  d_modle: 16\n"), names=("block.d_modle", "d_model")),
    Case("trace-config-binary", ["trace", "garbage.yaml", "--save", "out.npz"],
         make(garbage_DOT_yaml=garbage(seed=3)), names=("garbage.yaml",)),
    Case("trace-unknown-preset", ["trace", "llama-9"], names=("llama-9",)),
    Case("trace-show-attention-bad-head", ["trace", "cfg.yaml", "--show-attention", "7"],
         names=("--show-attention", "7")),
    Case("trace-show-attention-garbage", ["trace", "cfg.yaml", "--show-attention", "x:y"],
         names=("--show-attention", "x:y")),
    Case("trace-batch-zero", ["trace", "cfg.yaml", "--batch", "0"], names=("--batch",)),

    # ---------------------------------------------------------------- verify
    Case("verify-config-missing", ["verify", "nope.yaml"], names=("nope.yaml",)),
    Case("verify-config-unknown-field", ["verify", "typo.yaml"], make(typo_DOT_yaml="block:\n  d_modle: 16\n"),
         names=("block.d_modle", "d_model")),
    Case("verify-config-python-tag", ["verify", "evil.yaml"],
         make(evil_DOT_yaml=lambda f: f"run: !!python/object/apply:os.mkdir ['{f / MARKER}']\n"),
         names=("evil.yaml",)),
    Case("verify-second-config-bad", ["verify", "cfg.yaml", "typo.yaml"],
         make(typo_DOT_yaml="run:\n  seq_lne: 4\n"), names=("run.seq_lne", "seq_len")),
    Case("verify-only-99", ["verify", "cfg.yaml", "--only", "99"], names=("--only", "99")),
    Case("verify-only-garbage", ["verify", "cfg.yaml", "--only", "four"], names=("--only", "four")),
    Case("verify-skip-99", ["verify", "cfg.yaml", "--skip", "99"], names=("--skip", "99")),
    Case("verify-inject-nosuch", ["verify", "cfg.yaml", "--inject", "nosuch"], names=("--inject", "nosuch")),
    Case("verify-weights-missing", ["verify", "cfg.yaml", "--weights", "nope.npz"], names=("nope.npz",)),
    Case("verify-weights-directory", ["verify", "cfg.yaml", "--weights", "w.npz"], make(w_DOT_npz=DIR),
         names=("w.npz",)),
    Case("verify-weights-empty-file", ["verify", "cfg.yaml", "--weights", "empty.npz"], make(empty_DOT_npz=b""),
         names=("empty.npz",)),
    Case("verify-weights-truncated", ["verify", "cfg.yaml", "--weights", "trunc.npz"],
         make(trunc_DOT_npz=lambda f: npz_bytes(flat_weights())[:-100]), names=("trunc.npz",)),
    Case("verify-weights-missing-key", ["verify", "cfg.yaml", "--weights", "missing_key.npz"],
         make(missing_key_DOT_npz=lambda f: npz_bytes(without("b_o"))), names=("missing_key.npz", "b_o")),
    Case("verify-weights-unexpected-key", ["verify", "cfg.yaml", "--weights", "extra.npz"],
         make(extra_DOT_npz=lambda f: npz_bytes(with_weight("w_gate", np.zeros((D, D_FF))))),
         names=("extra.npz", "w_gate")),
    Case("verify-weights-wrong-shape", ["verify", "cfg.yaml", "--weights", "shape.npz"],
         make(shape_DOT_npz=lambda f: npz_bytes(with_weight("w_down", np.zeros((D_FF, D + 1))))),
         names=("shape.npz", "w_down", "(32, 17)", "(32, 16)")),
    Case("verify-weights-pickled-object-array", ["verify", "cfg.yaml", "--weights", "pickle.npz"],
         make(pickle_DOT_npz=lambda f: npz_bytes(with_weight("w_k", pickled_object_array(f)))),
         names=("pickle.npz",)),
    Case("verify-weights-nan", ["verify", "cfg.yaml", "--weights", "nan.npz"],
         make(nan_DOT_npz=lambda f: npz_bytes(poisoned("ln2_gamma", (5,), np.nan))), names=("nan.npz", "ln2_gamma")),
    Case("verify-weights-complex", ["verify", "cfg.yaml", "--weights", "complex.npz"],
         make(complex_DOT_npz=lambda f: npz_bytes(with_weight("b_up", np.zeros(D_FF, dtype=complex)))),
         names=("complex.npz", "b_up")),
    Case("verify-weights-unreadable", ["verify", "cfg.yaml", "--weights", "locked.npz"],
         make(locked_DOT_npz=lambda f: npz_bytes(flat_weights())), names=("locked.npz",),
         unreadable="locked.npz"),
]

OK_CASES: list[Case] = [
    Case("ok-count-empty-mapping", ["count", "empty.yaml"], make(empty_DOT_yaml="{}\n"), code=0),
    Case("ok-trace-flat-weights", ["trace", "cfg.yaml", "--weights", "w.npz", "--input", "x.npy",
                                   "--save", "y.npz"],
         make(w_DOT_npz=lambda f: npz_bytes(flat_weights()), x_DOT_npy=lambda f: npy_bytes(block_input())), code=0),
    Case("ok-trace-gpt2-weights", ["trace", "cfg.yaml", "--weights", "w.npz", "--input", "x.npy",
                                   "--save", "y.npz"],
         make(w_DOT_npz=lambda f: npz_bytes(gpt2_weights(flat_weights())),
              x_DOT_npy=lambda f: npy_bytes(block_input())), code=0),
    Case("ok-trace-gpt2-weights-h0", ["trace", "cfg.yaml", "--weights", "w.npz", "--input", "x.npy",
                                      "--save", "y.npz"],
         make(w_DOT_npz=lambda f: npz_bytes(gpt2_weights(flat_weights(), "h.0.", buffers=True)),
              x_DOT_npy=lambda f: npy_bytes(block_input())), code=0),
    Case("ok-trace-seeded-weights", ["trace", "cfg.yaml", "--input", "x.npy", "--save", "y.npz"],
         make(x_DOT_npy=lambda f: npy_bytes(block_input())), code=0),
    Case("ok-trace-save-force", ["trace", "cfg.yaml", "--save", "out.npz", "--force"],
         make(out_DOT_npz=b"old contents"), code=0),
]

CASES = {c.id: c for c in ERROR_CASES + OK_CASES}
assert len(CASES) == len(ERROR_CASES) + len(OK_CASES), "duplicate case ids"


# ============================================================================ running

# Starting a fresh interpreter costs ~0.7 s of CPU (numpy, typer, rich imports), too slow for
# ~90 cases. So a driver process imports blockcli once and forks one child per case; each
# child chdirs into the case folder, points fds 1 and 2 at files, and runs the package's
# __main__ exactly as `python -m blockcli ARGS` does (runpy, sys.argv, the interpreter's
# handling of SystemExit and of uncaught exceptions). Its exit status is the case's exit code.
# test_driver_matches_python_dash_m re-runs some cases with a plain
# `subprocess.run([sys.executable, "-m", "blockcli", ...])` and requires identical results.
DRIVER = r"""
import json, os, runpy, signal, sys
jobs = json.load(open(sys.argv[1]))
parallel = max(1, os.cpu_count() or 1)
import numpy, yaml, typer, rich.console, rich.table  # noqa: E401 - warm the imports children share
import blockcli.cli, blockcli.config, blockcli.block, blockcli.count, blockcli.inputs  # noqa: E401
for extra in ("blockcli.trace", "blockcli.render", "blockcli.verify", "blockcli.mutants", "blockcli.hf",
              "typer._adapters", "typer.rich_utils", "pydantic", "numpy.random", "rich.traceback", "rich.markdown",
              "rich.panel", "rich.syntax", "rich.pretty", "pygments.lexers", "hashlib", "zoneinfo"):
    try:
        __import__(extra)
    except Exception:
        pass  # the child will import it itself and report whatever goes wrong


def child(job):
    signal.alarm(120)
    os.chdir(job["cwd"])
    for fd, name in ((1, job["stdout"]), (2, job["stderr"])):
        target = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    sys.argv = ["blockcli", *job["args"]]
    try:
        runpy.run_module("blockcli", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:  # what the interpreter does with SystemExit
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            sys.stderr.write(f"{exc.code}\n")
            code = 1
    except BaseException:  # what the interpreter does with an uncaught exception
        sys.excepthook(*sys.exc_info())
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code & 0xFF)


codes, running = {}, {}
for job in jobs:
    while len(running) >= parallel:
        pid, status = os.wait()
        codes[running.pop(pid)] = os.waitstatus_to_exitcode(status)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            child(job)
        finally:
            os._exit(99)
    running[pid] = job["id"]
while running:
    pid, status = os.wait()
    codes[running.pop(pid)] = os.waitstatus_to_exitcode(status)
json.dump(codes, open(sys.argv[2], "w"))
"""

SUBPROCESS_ENV = {**os.environ, "NO_COLOR": "1", "TERM": "dumb", "COLUMNS": "200", "PYTHONIOENCODING": "utf-8"}


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str
    folder: Path
    before: dict[str, str]
    after: dict[str, str]


def snapshot(folder: Path) -> dict[str, str]:
    """Every file and folder under `folder` → a digest of its content ('dir' for folders)."""
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        if path.is_dir():
            out[rel] = "dir"
        else:
            try:
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
            except PermissionError:
                out[rel] = "unreadable"
    return out


def prepare(case: Case, folder: Path) -> dict[str, str]:
    folder.mkdir(parents=True)
    case.setup(folder)
    if case.unreadable:
        (folder / case.unreadable).chmod(0)
    return snapshot(folder)


def finish(case: Case, folder: Path) -> dict[str, str]:
    if case.unreadable:
        (folder / case.unreadable).chmod(0o644)
    return snapshot(folder)


def run_all(cases: list[Case], base: Path) -> dict[str, Result]:
    io_dir = base / "_io"
    io_dir.mkdir()
    jobs, befores = [], {}
    for case in cases:
        befores[case.id] = prepare(case, base / case.id)
        jobs.append({"id": case.id, "args": case.args, "cwd": str(base / case.id),
                     "stdout": str(io_dir / f"{case.id}.out"), "stderr": str(io_dir / f"{case.id}.err")})
    (io_dir / "jobs.json").write_text(json.dumps(jobs))
    driver = subprocess.run([sys.executable, "-c", DRIVER, str(io_dir / "jobs.json"), str(io_dir / "codes.json")],
                            env=SUBPROCESS_ENV, capture_output=True, text=True, timeout=600)
    assert driver.returncode == 0, f"test driver failed:\n{driver.stderr}"
    codes = json.loads((io_dir / "codes.json").read_text())
    results = {}
    for case in cases:
        read = lambda ext: (io_dir / f"{case.id}.{ext}").read_text("utf-8", errors="replace")  # noqa: E731
        results[case.id] = Result(codes[case.id], read("out"), read("err"), base / case.id,
                                  befores[case.id], finish(case, base / case.id))
    return results


def run_python_dash_m(case: Case, folder: Path) -> Result:
    """The plain way: a fresh `python -m blockcli ARGS` in the case folder."""
    before = prepare(case, folder)
    proc = subprocess.run([sys.executable, "-m", "blockcli", *case.args], cwd=folder, env=SUBPROCESS_ENV,
                          capture_output=True, text=True, encoding="utf-8", errors="replace", timeout=120)
    return Result(proc.returncode, proc.stdout, proc.stderr, folder, before, finish(case, folder))


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Result]:
    wanted = [c for c in CASES.values() if not (c.unreadable and IS_ROOT)]
    return run_all(wanted, tmp_path_factory.mktemp("hostile"))


def describe(r: Result) -> str:
    err = r.stderr if len(r.stderr) < 3000 else "...\n" + r.stderr[-3000:]
    return f"exit {r.code}\n--- stderr ---\n{err}--- stdout (first 1000 chars) ---\n{r.stdout[:1000]}"


@pytest.mark.parametrize("key", ["count-config-unknown-field", "trace-weights-wrong-shape", "verify-inject-nosuch",
                                 "ok-count-empty-mapping"])
def test_driver_matches_python_dash_m(key: str, results: dict[str, Result], tmp_path: Path) -> None:
    """The fork driver gives what a fresh `python -m blockcli` gives: same code, stdout, stderr, files."""
    case = CASES[key]
    plain, forked = run_python_dash_m(case, tmp_path / key), results[key]
    assert (plain.code, plain.stderr, plain.stdout) == (forked.code, forked.stderr, forked.stdout)
    assert plain.after.keys() == forked.after.keys()


# ============================================================================ the error contract


@pytest.mark.parametrize("case", ERROR_CASES, ids=[c.id for c in ERROR_CASES])
def test_bad_input_gives_one_error_line(case: Case, results: dict[str, Result]) -> None:
    if case.unreadable and IS_ROOT:
        pytest.skip(ROOT_REASON)
    r = results[case.id]
    traceback = "Traceback" in r.stderr or "Traceback" in r.stdout
    assert not traceback, describe(r)
    lines = r.stderr.splitlines()
    assert len(lines) == 1, f"expected exactly one stderr line, got {len(lines)}\n{describe(r)}"
    line = lines[0]
    assert line.startswith("blockcli: error: "), describe(r)
    assert len(line) > len("blockcli: error: ") + 5, describe(r)
    for text in case.names:
        assert text in line, f"error line does not name {text!r}: {line}"
    assert r.code == case.code, describe(r)


@pytest.mark.parametrize("case", ERROR_CASES, ids=[c.id for c in ERROR_CASES])
def test_bad_input_leaves_files_alone(case: Case, results: dict[str, Result]) -> None:
    """No output file left behind, no temporary file, no existing file changed, no pickle/tag ran."""
    if case.unreadable and IS_ROOT:
        pytest.skip(ROOT_REASON)
    r = results[case.id]
    assert not (r.folder / MARKER).exists(), "a pickle or a YAML tag executed code"
    created = sorted(set(r.after) - set(r.before))
    removed = sorted(set(r.before) - set(r.after))
    changed = sorted(k for k in r.before.keys() & r.after.keys() if r.before[k] != r.after[k])
    assert not created, f"left behind: {created}"
    assert not removed, f"removed: {removed}"
    assert not changed, f"overwritten: {changed}"


def test_every_command_and_file_kind_is_covered() -> None:
    """The table exercises each command and each file each command reads or writes."""
    seen = {(c.args[0], opt) for c in ERROR_CASES
            for opt in [a for a in c.args if a.startswith("--")] or ["config"]}
    for need in [("count", "config"), ("trace", "config"), ("verify", "config"),
                 ("trace", "--weights"), ("trace", "--input"), ("trace", "--save"),
                 ("verify", "--weights"), ("count", "--expect"), ("verify", "--only"), ("verify", "--inject")]:
        assert need in seen, need


# ============================================================================ inputs that must work


@pytest.mark.parametrize("case", OK_CASES, ids=[c.id for c in OK_CASES])
def test_good_input_succeeds_quietly(case: Case, results: dict[str, Result]) -> None:
    r = results[case.id]
    assert r.code == 0, describe(r)
    quiet = r.stderr == "" and "Traceback" not in r.stdout
    assert quiet, describe(r)
    assert r.stdout.strip(), "no output"


def saved_y(r: Result, name: str = "y.npz") -> np.ndarray:
    with np.load(r.folder / name, allow_pickle=False) as data:
        assert "y" in data.files, data.files
        return data["y"]


def test_gpt2_named_weights_give_the_same_output_as_flat_keys(results: dict[str, Result]) -> None:
    flat, gpt2, h0 = (results[k] for k in ("ok-trace-flat-weights", "ok-trace-gpt2-weights",
                                           "ok-trace-gpt2-weights-h0"))
    for r in (flat, gpt2, h0):
        assert r.code == 0, describe(r)
    y = saved_y(flat)
    assert y.shape == (B, T, D)
    assert np.all(np.isfinite(y))
    np.testing.assert_array_equal(saved_y(gpt2), y)
    np.testing.assert_array_equal(saved_y(h0), y)


def test_given_weights_are_actually_used(results: dict[str, Result]) -> None:
    flat, seeded = results["ok-trace-flat-weights"], results["ok-trace-seeded-weights"]
    assert flat.code == 0 and seeded.code == 0
    assert not np.allclose(saved_y(flat), saved_y(seeded))


def test_successful_save_leaves_no_temporary_file(results: dict[str, Result]) -> None:
    for key in ("ok-trace-flat-weights", "ok-trace-gpt2-weights", "ok-trace-seeded-weights", "ok-trace-save-force"):
        r = results[key]
        created = set(r.after) - set(r.before)
        assert created <= {"y.npz"}, f"{key}: unexpected files {created}"


def test_save_with_force_replaces_the_file(results: dict[str, Result]) -> None:
    r = results["ok-trace-save-force"]
    assert r.code == 0, describe(r)
    assert r.after["out.npz"] != r.before["out.npz"]
    assert saved_y(r, "out.npz").shape == (B, T, D)


def test_empty_mapping_means_defaults(results: dict[str, Result]) -> None:
    r = results["ok-count-empty-mapping"]
    assert r.code == 0, describe(r)
    # the default block (d=512, h=8, d_ff=2048, all biases): 4·(512²+512) + 2·512·2048 + 2048 + 512 + 4·512
    assert "3,152,384" in r.stdout or "3152384" in r.stdout, r.stdout
