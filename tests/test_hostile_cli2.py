"""Hostile inputs, part II (issue 17): silent wrong numbers, CI gates, runaway reads, messages, files.

The same contract as test_hostile_cli.py, through the real command line: a bad input ends with ONE
stderr line `blockcli: error: …` naming what is wrong, exit code 2, no traceback, no warning lines;
a folder snapshot taken before and after the run proves nothing was left behind, half-written or
overwritten. Cases that need a real process of their own (an environment variable, standard input,
stdout closed or on /dev/full, a file-size limit) run as `python -m blockcli`; the rest go through
test_hostile_cli's fork driver. Signals (SIGTERM, SIGHUP) and two concurrent writers run for real.
"""

from __future__ import annotations

import gc
import glob
import hashlib
import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from conftest import default_signals
from test_hf import GPT2
from test_hostile_cli import (SMALL_YAML, SUBPROCESS_ENV, block_input, flat_weights, gpt2_weights, make, npy_bytes,
                              npz_bytes, run_all)

# The small block of SMALL_YAML (d=16, h=2, d_ff=32) by hand: 4 projections of (16² + 16),
# the MLP's 16·32 + 32 and 32·16 + 16, two LayerNorms of 2·16: 1088 + 1072 + 64.
SMALL_COUNT = 4 * (16 * 16 + 16) + (16 * 32 + 32) + (32 * 16 + 16) + 2 * 2 * 16
# The default block (d=512, h=8, d_ff=2048, all biases): 4·(512²+512) + 2·512·2048 + 2048 + 512 + 4·512.
DEFAULT_COUNT = 4 * (512 * 512 + 512) + 2 * 512 * 2048 + 2048 + 512 + 4 * 512
# The big block of BIG_YAML (d=2048, h=16, d_ff=8192), above verify's 40,000,000 scaling threshold.
BIG_YAML = "block: {d_model: 2048, n_heads: 16, d_ff: 8192}\n"
BIG_COUNT = 4 * (2048 * 2048 + 2048) + 2 * 2048 * 8192 + 8192 + 2048 + 4 * 2048
CHECK_IDS = ",".join(str(i) for i in range(1, 20))  # the README's checklist: items 1-19


# ============================================================================ files the cases need


def zip_of(members: list[tuple[str, bytes]], compress: bool = False) -> bytes:
    """An .npz built by hand, so that it can hold what np.savez never writes (two members of one name)."""
    import io
    import warnings

    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate name it is asked to write
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED) as z:
            for name, data in members:
                z.writestr(name, data)
    return buf.getvalue()


def flat_members(**replace: bytes) -> list[tuple[str, bytes]]:
    return [(f"{k}.npy", replace.get(k, npy_bytes(v))) for k, v in flat_weights().items()]


def lying_header(array: np.ndarray, claimed: str) -> bytes:
    """The .npy bytes of `array` with a header that claims the shape `claimed` instead."""
    data = npy_bytes(array)
    real = str(array.shape).encode()
    assert real in data[:128]
    return data.replace(real, claimed.encode(), 1)


def with_big_value(key: str) -> dict[str, np.ndarray]:
    w = flat_weights()
    w[key] = w[key].copy()
    w[key][0, 0] = 1e39  # finite in float64, beyond float32's largest value (3.4e38)
    return w


def input_with_big_value() -> np.ndarray:
    x = block_input()
    x[1, 2, 3] = -1e39
    return x


def fifo(name: str) -> Callable[[Path], None]:
    """A setup making a FIFO beside the case folder (a snapshot would block reading it inside)."""

    def setup(folder: Path) -> None:
        make()(folder)
        os.mkfifo(folder.parent / name)

    return setup


def symlink(name: str, target: str, **files: Any) -> Callable[[Path], None]:
    def setup(folder: Path) -> None:
        make(**files)(folder)
        os.symlink(target, folder / name)

    return setup


# ============================================================================ the cases


@dataclass
class Case:
    id: str
    args: list[str]
    setup: Callable[[Path], None] = field(default_factory=make)
    code: int = 2
    names: tuple[str, ...] = ()  # text the one stderr line must contain
    stderr: str = "error"  # "error": one error line; "note": one note line; "": nothing at all
    created: tuple[str, ...] = ()  # files the run may create
    env: dict[str, str] = field(default_factory=dict)
    stdin: bytes | None = None
    stdout: str = "pipe"  # or "closed", or a device such as /dev/full
    fsize: int = 0  # a file-size limit (RLIMIT_FSIZE) in bytes, 0 for none
    own: bool = False  # run as its own process even so (the fork driver's snapshot follows links)
    unreadable: str = ""  # for test_hostile_cli's driver (unused here)

    @property
    def own_process(self) -> bool:
        return bool(self.own or self.env or self.stdin is not None or self.stdout != "pipe" or self.fsize)


CASES: list[Case] = [
    # ---------------------------------------------------------------- silent wrong results
    Case("yaml-octal-d-model", ["count", "o.yaml"], make(o_DOT_yaml="block:\n  d_model: 0640\n"),
         names=("o.yaml", "line 2", "0640", "octal")),
    Case("yaml-octal-d-ff", ["count", "o.yaml"], make(o_DOT_yaml="block:\n  d_model: 64\n  d_ff: 02000\n"),
         names=("o.yaml", "line 3", "02000", "octal")),
    Case("yaml-base-60", ["count", "s.yaml"], make(s_DOT_yaml="block:\n  d_ff: 1:30\n"),
         names=("s.yaml", "line 2", "1:30", "base-60")),
    Case("yaml-base-60-float", ["count", "s.yaml"], make(s_DOT_yaml="block:\n  norm_eps: 1:30.5\n"),
         names=("s.yaml", "line 2", "base-60")),
    Case("yaml-key-twice", ["count", "d.yaml"], make(d_DOT_yaml="block:\n  d_model: 64\n  d_model: 32\n"),
         names=("d.yaml", "line 3", "d_model", "twice", "line 2")),
    Case("yaml-section-twice", ["count", "d.yaml"],
         make(d_DOT_yaml="block: {d_model: 64, n_heads: 8}\nrun: {batch: 1}\nblock: {d_ff: 8}\n"),
         names=("d.yaml", "line 3", "block", "twice")),
    Case("yaml-empty-file", ["count", "e.yaml"], make(e_DOT_yaml=""), names=("e.yaml", "empty")),
    Case("yaml-comment-only-file", ["count", "e.yaml"], make(e_DOT_yaml="# nothing yet\n"), names=("e.yaml", "empty")),
    Case("weights-gpt2-and-flat-q", ["trace", "cfg.yaml", "--weights", "w.npz"],
         make(w_DOT_npz=lambda f: npz_bytes({**gpt2_weights(flat_weights()), "w_q": flat_weights()["w_q"]})),
         names=("w.npz", "'w_q'", "twice", "attn.c_attn.weight")),
    Case("weights-zip-member-twice", ["trace", "cfg.yaml", "--weights", "w.npz"],
         make(w_DOT_npz=lambda f: zip_of(flat_members() + [("w_q.npy", npy_bytes(np.zeros((16, 16))))])),
         names=("w.npz", "w_q.npy", "two members")),
    Case("ok-expect-precision", ["count", "--expect", "3.1523840M"], code=0, stderr=""),
    Case("expect-precision-near-miss", ["count", "--expect", "3.1523850M"], code=1,
         names=("3.1523850M", f"{DEFAULT_COUNT:,}"), stderr="plain"),
    Case("expect-not-whole", ["count", "--expect", "3.15238405M"], names=("--expect", "whole number")),
    Case("about-parameters-differ", ["count", "a.yaml"],
         make(a_DOT_yaml="about: {parameters: 5000}\n" + SMALL_YAML), code=0, stderr="note",
         names=("about.parameters", "5,000", f"{SMALL_COUNT:,}")),
    Case("batch-with-input", ["trace", "cfg.yaml", "--input", "x.npy", "--batch", "3"],
         make(x_DOT_npy=lambda f: npy_bytes(block_input())), names=("--batch", "--input")),
    Case("seq-with-input", ["trace", "cfg.yaml", "--input", "x.npy", "--seq", "4"],
         make(x_DOT_npy=lambda f: npy_bytes(block_input())), names=("--seq", "--input")),

    # ---------------------------------------------------------------- CI gates
    Case("verify-only-and-skip-select-nothing", ["verify", "cfg.yaml", "--only", "4", "--skip", "4"],
         names=("--only 4", "--skip 4", "no check")),
    Case("verify-skip-everything", ["verify", "cfg.yaml", "--skip", CHECK_IDS], names=("--skip", "no check")),
    Case("stdout-closed-count", ["count", "cfg.yaml"], stdout="closed", names=("standard output", "closed")),
    Case("stdout-full-count", ["count", "cfg.yaml"], stdout="/dev/full",
         names=("standard output", "No space left on device")),
    Case("stdout-full-trace-table", ["trace", "cfg.yaml"], stdout="/dev/full",
         names=("standard output", "No space left on device")),
    Case("stdout-full-verify-json", ["verify", "cfg.yaml", "--json"], stdout="/dev/full",
         names=("standard output", "No space left on device")),

    # ---------------------------------------------------------------- runaway reads
    Case("config-dev-zero", ["count", "/dev/zero"], names=("/dev/zero", "character device", "regular file")),
    Case("config-dev-urandom", ["count", "/dev/urandom"], names=("/dev/urandom", "character device")),
    Case("config-fifo", ["count", "../pipe-config.yaml"], fifo("pipe-config.yaml"),
         names=("pipe-config.yaml", "FIFO")),
    Case("weights-fifo", ["trace", "cfg.yaml", "--weights", "../pipe-weights.npz"], fifo("pipe-weights.npz"),
         names=("pipe-weights.npz", "FIFO")),
    Case("input-dev-zero", ["trace", "cfg.yaml", "--input", "/dev/zero"], names=("/dev/zero", "character device")),
    Case("ok-config-from-stdin", ["count", "-"], stdin=SMALL_YAML.encode(), code=0, stderr=""),
    Case("stdin-over-the-cap", ["count", "-"], stdin=b"# padding\n" * 110_000, names=("standard input", "1 MiB")),
    Case("config-over-the-cap", ["count", "big.yaml"],
         make(big_DOT_yaml=SMALL_YAML + "# padding\n" * 110_000), names=("big.yaml", "1 MiB")),
    Case("weights-header-claims-a-huge-array", ["trace", "cfg.yaml", "--weights", "w.npz"],
         make(w_DOT_npz=lambda f: zip_of(flat_members(w_q=lying_header(flat_weights()["w_q"], "(1000000, 1000000)")))),
         names=("w.npz", "'w_q'", "(1000000, 1000000)")),
    Case("weights-header-shape-not-the-configs", ["trace", "cfg.yaml", "--weights", "w.npz"],
         make(w_DOT_npz=lambda f: npz_bytes({**flat_weights(), "w_up": np.zeros((512, 512), dtype=np.float32)})),
         names=("w.npz", "'w_up'", "(512, 512)", "(16, 32)")),
    Case("weights-zip-bomb", ["trace", "cfg.yaml", "--weights", "w.npz"],
         make(w_DOT_npz=lambda f: zip_of(flat_members() + [("pad.npy", npy_bytes(np.zeros(2**24)))], compress=True)),
         names=("w.npz", "unpacks to", "pad.npy")),
    Case("input-header-claims-a-huge-array", ["trace", "cfg.yaml", "--input", "x.npy"],
         make(x_DOT_npy=lambda f: lying_header(block_input(), "(100000, 100000, 16)")),
         names=("x.npy", "(100000, 100000, 16)")),
    Case("unasked-real-pass-too-slow", ["trace", "cfg.yaml", "--seq", "300000", "--json"], code=0, stderr=""),

    # ---------------------------------------------------------------- tracebacks and messages
    Case("save-past-file-size-limit", ["trace", "cfg.yaml", "--save", "y.npz"], fsize=4096,
         names=("y.npz", "File too large", "nothing was written")),
    Case("export-svg-past-file-size-limit", ["trace", "cfg.yaml", "--export-svg", "t.svg"], fsize=4096,
         names=("t.svg", "File too large")),
    Case("export-html-past-file-size-limit", ["trace", "cfg.yaml", "--export-html", "t.html"], fsize=4096,
         names=("t.html", "File too large")),
    Case("expect-superscript-two", ["count", "--expect", "²"], names=("--expect", "²")),
    Case("max-superscript-two", ["count", "--max", "²"], names=("--max", "²")),
    Case("memory-limit-superscript-two", ["trace", "cfg.yaml"], env={"BLOCKCLI_MEMORY_LIMIT": "²"},
         names=("BLOCKCLI_MEMORY_LIMIT", "²")),
    Case("ok-ascii-terminal-trace", ["trace", "cfg.yaml", "--show-attention", "1"],
         env={"PYTHONIOENCODING": "ascii"}, code=0, stderr=""),
    Case("ok-ascii-terminal-count", ["count", "cfg.yaml"], env={"PYTHONIOENCODING": "ascii"}, code=0, stderr=""),
    Case("ok-ascii-terminal-verify", ["verify", "cfg.yaml"], env={"PYTHONIOENCODING": "ascii"}, code=0, stderr=""),
    Case("ok-ascii-terminal-json-non-ascii-name", ["count", "модель.yaml", "--json"],
         make(модель_DOT_yaml=SMALL_YAML), env={"PYTHONIOENCODING": "ascii"},
         code=0, stderr=""),
    Case("weight-beyond-float32", ["trace", "cfg.yaml", "--weights", "w.npz"],
         make(w_DOT_npz=lambda f: npz_bytes(with_big_value("w_q"))), names=("w.npz", "'w_q'", "float32")),
    Case("input-beyond-float32", ["trace", "cfg.yaml", "--input", "x.npy"],
         make(x_DOT_npy=lambda f: npy_bytes(input_with_big_value())), names=("x.npy", "float32")),
    Case("ok-weight-beyond-float32-in-float64", ["trace", "cfg.yaml", "--weights", "w.npz", "--dtype", "float64"],
         make(w_DOT_npz=lambda f: npz_bytes(with_big_value("w_up"))), code=0, stderr=""),
    Case("verify-float32-overflow-no-warnings", ["verify", "cfg.yaml", "--weights", "w.npz", "--only", "13"],
         make(w_DOT_npz=lambda f: npz_bytes(with_big_value("w_q"))), code=1, stderr=""),
    Case("verify-big-block-with-weights", ["verify", "big.yaml", "--weights", "w.npz"],
         make(big_DOT_yaml=BIG_YAML, w_DOT_npz=lambda f: npz_bytes({"w_q": np.zeros(2)})),
         names=("--weights", f"{BIG_COUNT:,}", "40,000,000", "scaled-down")),
    Case("verify-big-block-weights-missing", ["verify", "big.yaml", "--weights", "nope.npz"],
         make(big_DOT_yaml=BIG_YAML), names=("nope.npz", "file not found")),
    Case("symlink-loop-no-suffix", ["count", "loop"], symlink("loop", "loop"), names=("loop", "symbolic link loop"),
         own=True),
    Case("save-under-a-file", ["trace", "cfg.yaml", "--save", "c.yaml/y.npz"], make(c_DOT_yaml="x: 1\n"),
         names=("c.yaml/y.npz", "c.yaml is a file, not a folder")),
    Case("ok-local-file-named-like-a-preset", ["count", "gpt2"], make(gpt2=SMALL_YAML), code=0, stderr="note",
         names=("local file", "gpt2", "preset")),

    # ---------------------------------------------------------------- files
    Case("save-and-export-collide", ["trace", "cfg.yaml", "--save", "out.npz", "--export-svg", "out.npz"],
         names=("--save", "--export-svg", "out.npz")),
    Case("save-and-export-collide-via-path", ["trace", "cfg.yaml", "--export-html", "o.html",
                                              "--export-svg", "./sub/../o.html"],
         make(sub__keep="k"), names=("--export-html", "--export-svg")),
    Case("save-trailing-slash", ["trace", "cfg.yaml", "--save", "newdir/"], names=("newdir/", "trailing slash")),
    Case("convert-output-trailing-slash", ["convert", "hf.json", "--output", "newdir/"],
         make(hf_DOT_json=json.dumps(GPT2)), names=("--output newdir/", "trailing slash")),
    Case("save-trailing-slash-existing-folder", ["trace", "cfg.yaml", "--save", "outdir/"],
         make(outdir__keep="k"), names=("outdir/", "trailing slash")),
    Case("save-dev-full", ["trace", "cfg.yaml", "--save", "/dev/full"], names=("/dev/full", "character device")),
    Case("save-dev-full-force", ["trace", "cfg.yaml", "--save", "/dev/full", "--force"],
         names=("/dev/full", "character device", "regular file")),
    Case("save-force-dangling-symlink", ["trace", "cfg.yaml", "--save", "dl.npz", "--force"],
         symlink("dl.npz", "nowhere.npz"), names=("dl.npz", "symbolic link", "regular file"), own=True),
    Case("save-force-symlink-to-file", ["trace", "cfg.yaml", "--save", "ln.npz", "--force"],
         symlink("ln.npz", "real.npz", real_DOT_npz=b"precious"), names=("ln.npz", "symbolic link"), own=True),
    Case("ok-save-force-regular-file", ["trace", "cfg.yaml", "--save", "y.npz", "--force"],
         make(y_DOT_npz=b"old"), code=0, stderr="", created=("y.npz",)),
    Case("ok-exports-written", ["trace", "cfg.yaml", "--save", "y.npz", "--export-svg", "t.svg",
                                "--export-html", "t.html"], code=0, stderr="", created=("y.npz", "t.svg", "t.html")),

    # ---------------------------------------------------------------- options
    Case("timeout-nan", ["verify", "cfg.yaml", "--timeout", "nan"], names=("--timeout", "nan")),
    Case("timeout-zero", ["verify", "cfg.yaml", "--timeout", "0"], names=("--timeout", "positive")),
    Case("timeout-inf", ["verify", "cfg.yaml", "--timeout", "inf"], names=("--timeout", "inf")),
]
BY_ID = {c.id: c for c in CASES}
assert len(BY_ID) == len(CASES), "duplicate case ids"


# ============================================================================ running


@dataclass
class Result:
    code: int
    stdout: bytes
    stderr: str
    folder: Path
    before: dict[str, str]
    after: dict[str, str]


def snapshot(folder: Path) -> dict[str, str]:
    """Every entry under `folder` (links not followed) → its kind and content digest, or its link target."""
    out = {}
    for path in sorted(folder.rglob("*")):
        info = os.lstat(path)
        rel = str(path.relative_to(folder))
        if stat.S_ISLNK(info.st_mode):
            out[rel] = "link -> " + os.readlink(path)
        elif stat.S_ISDIR(info.st_mode):
            out[rel] = "dir"
        elif stat.S_ISREG(info.st_mode):
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            out[rel] = "special"
    return out


def run_own_process(case: Case, folder: Path) -> tuple[int, bytes, str]:
    """A fresh `python -m blockcli ARGS` with the case's environment, stdin, stdout and limits."""
    env = {**SUBPROCESS_ENV, **case.env}

    def limits() -> None:
        if case.fsize:
            resource.setrlimit(resource.RLIMIT_FSIZE, (case.fsize, case.fsize))

    stdout: Any = subprocess.PIPE if case.stdout == "pipe" else open(case.stdout, "wb")  # noqa: SIM115
    try:
        proc = subprocess.run([sys.executable, "-m", "blockcli", *case.args], cwd=folder, env=env,
                              input=case.stdin if case.stdin is not None else b"", stdout=stdout,
                              stderr=subprocess.PIPE, timeout=300, preexec_fn=limits)
    finally:
        if stdout is not subprocess.PIPE:
            stdout.close()
    return proc.returncode, proc.stdout or b"", proc.stderr.decode("utf-8", "replace")


def run_with_stdout_closed(case: Case, folder: Path) -> tuple[int, bytes, str]:
    """`blockcli ARGS >&-`: the shell closes fd 1 before starting the program."""
    proc = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", sys.executable, "-m", "blockcli", *case.args],
                          cwd=folder, env={**SUBPROCESS_ENV, **case.env}, stdin=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, timeout=300)
    return proc.returncode, b"", proc.stderr.decode("utf-8", "replace")


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Result]:
    base = tmp_path_factory.mktemp("hostile2")
    forked = [c for c in CASES if not c.own_process]
    (base / "forked").mkdir()
    driven = run_all(forked, base / "forked")  # type: ignore[arg-type]  # the driver needs id, args, setup
    out = {c.id: Result(r.code, r.stdout.encode(), r.stderr, r.folder, r.before, r.after)
           for c, r in ((c, driven[c.id]) for c in forked)}

    own = [c for c in CASES if c.own_process]

    def run(case: Case) -> tuple[str, Result]:
        folder = base / "own" / case.id
        folder.mkdir(parents=True)
        case.setup(folder)
        before = snapshot(folder)
        runner = run_with_stdout_closed if case.stdout == "closed" else run_own_process
        code, stdout, stderr = runner(case, folder)
        return case.id, Result(code, stdout, stderr, folder, before, snapshot(folder))

    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        out.update(pool.map(run, own))
    return out


def describe(r: Result) -> str:
    return f"exit {r.code}\n--- stderr ---\n{r.stderr[-3000:]}--- stdout ---\n{r.stdout[:1000]!r}"


# ============================================================================ the contract, per case


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_exit_code_and_the_one_stderr_line(case: Case, results: dict[str, Result]) -> None:
    r = results[case.id]
    assert "Traceback" not in r.stderr and b"Traceback" not in r.stdout, describe(r)
    assert "Warning" not in r.stderr, describe(r)
    assert r.code == case.code, describe(r)
    lines = r.stderr.splitlines()
    if case.stderr == "":
        assert lines == [], describe(r)
        return
    assert len(lines) == 1, f"expected exactly one stderr line\n{describe(r)}"
    prefix = {"error": "blockcli: error: ", "note": "blockcli: note: ", "plain": "blockcli: "}[case.stderr]
    assert lines[0].startswith(prefix), describe(r)
    for text in case.names:
        assert text in lines[0], f"the line does not name {text!r}: {lines[0]}"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_nothing_lost_half_written_or_overwritten(case: Case, results: dict[str, Result]) -> None:
    r = results[case.id]
    created = set(r.after) - set(r.before)
    removed = set(r.before) - set(r.after)
    changed = {k for k in r.before.keys() & r.after.keys() if r.before[k] != r.after[k]}
    assert not removed, f"removed: {removed}"
    assert created <= set(case.created), f"left behind: {sorted(created - set(case.created))}"
    assert changed <= set(case.created), f"overwritten: {sorted(changed - set(case.created))}"
    assert not [k for k in r.after if ".blockcli-" in k], "a temporary file was left"


# ============================================================================ what the good cases produced


def test_expect_with_trailing_zero_is_exact(results: dict[str, Result]) -> None:
    assert f"{DEFAULT_COUNT:,}" in results["ok-expect-precision"].stdout.decode()
    assert DEFAULT_COUNT == 3_152_384  # what 3.1523840M spells


def test_config_read_from_stdin(results: dict[str, Result]) -> None:
    assert f"{SMALL_COUNT:,}" in results["ok-config-from-stdin"].stdout.decode()


def test_local_file_named_like_a_preset_is_what_was_counted(results: dict[str, Result]) -> None:
    out = results["ok-local-file-named-like-a-preset"].stdout.decode()
    assert f"{SMALL_COUNT:,}" in out  # the local d=16 block, not GPT-2's 124M


def test_unasked_slow_pass_falls_back_to_shapes(results: dict[str, Result]) -> None:
    data = json.loads(results["unasked-real-pass-too-slow"].stdout)
    assert data["mode"] == "analytic" and data["seq_len"] == 300_000
    assert any("would take about" in n and "shapes only" in n for n in data["notes"]), data["notes"]


@pytest.mark.parametrize("key", ["ok-ascii-terminal-trace", "ok-ascii-terminal-count", "ok-ascii-terminal-verify"])
def test_ascii_terminal_gets_ascii_box_drawing(key: str, results: dict[str, Result]) -> None:
    r = results[key]
    assert r.stdout.isascii(), [ch for ch in r.stdout.decode("ascii", "replace") if not ch.isascii()][:5]
    text = r.stdout.decode("ascii")
    assert "+--" in text or "|" in text  # Rich's ASCII box
    assert "\\u" not in text and "\\x" not in text  # every character blockcli draws has an ASCII spelling


def test_ascii_terminal_json_keeps_a_non_ascii_name(results: dict[str, Result]) -> None:
    r = results["ok-ascii-terminal-json-non-ascii-name"]
    assert r.stdout.isascii()
    data = json.loads(r.stdout)
    assert data["config"] == "модель.yaml" and data["total"] == SMALL_COUNT


def test_weight_beyond_float32_runs_in_float64(results: dict[str, Result]) -> None:
    assert "real forward pass" in results["ok-weight-beyond-float32-in-float64"].stdout.decode()


def test_verify_reports_the_float32_overflow_as_a_failed_check(results: dict[str, Result]) -> None:
    out = results["verify-float32-overflow-no-warnings"].stdout.decode()
    assert "FAIL" in out and "13" in out


def test_force_replaced_the_regular_file_with_a_result(results: dict[str, Result]) -> None:
    r = results["ok-save-force-regular-file"]
    with np.load(r.folder / "y.npz", allow_pickle=False) as data:
        assert data["y"].shape == (2, 4, 16)


def test_exports_are_complete_documents(results: dict[str, Result]) -> None:
    folder = results["ok-exports-written"].folder
    assert (folder / "t.svg").read_text().rstrip().endswith("</svg>")
    assert (folder / "t.html").read_text().rstrip().lower().endswith("</html>")


def test_symlink_targets_untouched(results: dict[str, Result]) -> None:
    r = results["save-force-symlink-to-file"]
    assert (r.folder / "real.npz").read_bytes() == b"precious"


# ============================================================================ for real: signals, races, modes


SLOW_SAVE = "run: {batch: 8, seq_len: 512}\n"  # the default block with big intermediates: --save takes a while


# The save writes about 370 MiB; each signal lands at a different point of it, by how much of the
# temporary file is written: as it appears, among the first members, a third and two thirds in.
@pytest.mark.parametrize("signum, code, message, written", [
    (signal.SIGTERM, 143, "terminated by SIGTERM", 0), (signal.SIGHUP, 129, "terminated by SIGHUP", 4 * 2**20),
    (signal.SIGINT, 130, "interrupted", 120 * 2**20),  # Ctrl-C, as before
    (signal.SIGTERM, 143, "terminated by SIGTERM", 240 * 2**20),
], ids=["SIGTERM-at-once", "SIGHUP-early", "SIGINT-a-third-in", "SIGTERM-two-thirds-in"])
def test_signal_during_save_leaves_no_temporary_file(signum: int, code: int, message: str, written: int,
                                                     tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(SLOW_SAVE)
    proc = subprocess.Popen([sys.executable, "-m", "blockcli", "trace", "c.yaml", "--save", "y.npz"], cwd=tmp_path,
                            env=SUBPROCESS_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_signals)  # not ignored, even under `nohup pytest &`
    deadline = time.monotonic() + 120

    def temporary_size() -> int:
        for name in glob.glob(str(tmp_path / ".blockcli-*")):
            try:
                return os.path.getsize(name)
            except OSError:  # renamed or removed since the glob
                pass
        return -1

    while temporary_size() < written and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    assert proc.poll() is None and temporary_size() >= written, "the save finished before the signal"
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, stderr
    assert stderr == f"blockcli: error: {message}\n"
    assert sorted(os.listdir(tmp_path)) == ["c.yaml"]  # no temporary file, no y.npz


def test_a_signal_acted_on_as_the_archive_opens_still_closes_it(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The SIGTERM-at-once case made certain: a signal held through ZipFile's constructor is acted on just
    after it. The archive must be closed while its file is still open, or its finaliser prints
    "Exception ignored ... seek of closed file" after the run's one-line error."""
    import blockcli.inputs

    class Stop(Exception):
        pass

    def stop(signum: int, frame: Any) -> None:
        raise Stop

    real = zipfile.ZipFile

    def opening(*args: Any, **kwargs: Any) -> zipfile.ZipFile:
        archive = real(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)  # lands while the signals are held
        return archive

    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    monkeypatch.setattr(zipfile, "ZipFile", opening)
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        try:
            blockcli.inputs.save_npz(tmp_path / "y.npz", {"x": np.arange(3.0)})
        except Stop:
            stopped = True
        else:
            stopped = False
    finally:
        signal.signal(signal.SIGTERM, previous)
    gc.collect()
    assert stopped, "the held signal was never acted on"
    assert [str(u.exc_value) for u in unraisable] == []
    assert list(tmp_path.iterdir()) == []  # neither the output nor the temporary file


def test_two_concurrent_saves_exactly_one_wins(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(SMALL_YAML.replace("seq_len: 4", "seq_len: 64"))
    procs = [subprocess.Popen([sys.executable, "-m", "blockcli", "trace", "c.yaml", "--save", "y.npz",
                               "--dtype", dtype], cwd=tmp_path, env=SUBPROCESS_ENV, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for dtype in ("float32", "float64")]
    outcomes = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in outcomes)
    assert codes == [0, 2], outcomes
    loser = next(err for code, err in outcomes if code == 2)
    assert loser.count("\n") == 1 and "y.npz" in loser and "exists" in loser, loser
    winner = procs[[code for code, _ in outcomes].index(0)].args[-1]
    assert sorted(os.listdir(tmp_path)) == ["c.yaml", "y.npz"]
    with np.load(tmp_path / "y.npz", allow_pickle=False) as data:
        assert data["y"].dtype == np.dtype(winner)  # the file is wholly the winner's


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_outputs_honour_the_umask(umask: int, tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(SMALL_YAML)
    (tmp_path / "hf.json").write_text(json.dumps(GPT2))
    runs = [["trace", "c.yaml", "--save", "y.npz", "--export-svg", "t.svg", "--export-html", "t.html"],
            ["convert", "hf.json", "--output", "c2.yaml"]]
    for args in runs:
        proc = subprocess.run([sys.executable, "-m", "blockcli", *args], cwd=tmp_path, env=SUBPROCESS_ENV,
                              capture_output=True, text=True, timeout=120, preexec_fn=lambda: os.umask(umask))
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    for name in ("y.npz", "t.svg", "t.html", "c2.yaml"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o666 & ~umask, name


def test_convert_escapes_control_characters_in_the_file_name(tmp_path: Path) -> None:
    name = "we\x07ird\nname.json"
    (tmp_path / name).write_text(json.dumps(GPT2))
    convert = subprocess.run([sys.executable, "-m", "blockcli", "convert", name, "-o", "out.yaml"], cwd=tmp_path,
                             env=SUBPROCESS_ENV, capture_output=True, text=True, timeout=120)
    assert convert.returncode == 0 and convert.stderr == "", convert.stderr
    text = (tmp_path / "out.yaml").read_text()
    assert "\x07" not in text and "we\\x07ird\\nname.json" in text
    count = subprocess.run([sys.executable, "-m", "blockcli", "count", "out.yaml", "--expect", "124439808"],
                           cwd=tmp_path, env=SUBPROCESS_ENV, capture_output=True, text=True, timeout=120)
    assert count.returncode == 0 and count.stderr == "", count.stderr  # GPT-2's published 124,439,808


def test_error_line_escapes_a_newline_in_a_file_name(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "blockcli", "count", "no\nsuch.yaml"], cwd=tmp_path,
                          env=SUBPROCESS_ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "no\\nsuch.yaml" in proc.stderr, proc.stderr


@pytest.mark.parametrize("value, slow", [("0", False), ("", False), ("false", False), ("1", True), ("yes", True)])
def test_blockcli_slow_needs_a_true_value(value: str, slow: bool) -> None:
    code = "import conftest, hypothesis; print(hypothesis.settings().max_examples)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parent, capture_output=True, text=True,
                          env={**SUBPROCESS_ENV, "BLOCKCLI_SLOW": value}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) == (600 if slow else 60)


def can_mount_a_private_tmpfs() -> bool:
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=4k tmpfs /mnt"],
                           capture_output=True, timeout=60) if shutil.which("unshare") else None
    return probe is not None and probe.returncode == 0


@pytest.mark.skipif(not can_mount_a_private_tmpfs(), reason="needs unshare -m and mount (root) for a real full disk")
@pytest.mark.parametrize("option, name", [("--save", "y.npz"), ("--export-svg", "t.svg"), ("--export-html", "t.html")])
def test_full_disk_leaves_nothing_half_written(option: str, name: str, tmp_path: Path) -> None:
    """A real full disk: a 4 KiB tmpfs, mounted in a mount namespace of the run's own, so it vanishes with it."""
    (tmp_path / "cfg.yaml").write_text(SMALL_YAML)
    (tmp_path / "out").mkdir()
    script = ('mount -t tmpfs -o size=4k tmpfs out && cd out && "$@" >/dev/null; code=$?; '
              'ls -A; exit $code')  # the listing is taken inside, before the file system goes away
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", sys.executable, "-m", "blockcli", "trace",
                           "../cfg.yaml", option, name], cwd=tmp_path, env=SUBPROCESS_ENV, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == f"blockcli: error: {name}: cannot write (No space left on device); nothing was written\n"
    assert proc.stdout == "", f"left on the full disk: {proc.stdout}"  # no file, no temporary file
