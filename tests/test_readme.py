"""The README's pasted outputs are what the commands print: every ```console block is run again and
compared, with the figures that depend on the machine masked.

A console block is a list of `$ command` lines, each followed by what it prints: its standard output,
then its standard error (blockcli writes notes after the result). The commands run in a shell in the
repository's root, with this interpreter's `blockcli` first on PATH and COLUMNS unset, as a pipe sees
them. A line `…` in the README stands for any number of lines. Masked on both sides before comparing:
floating-point figures below 1e-4 written in exponent form (rounding differs between CPUs and BLAS
builds), the measured peak of a real pass, and the width of table columns (a masked figure one
character longer widens its column).

`python tests/test_readme.py` rewrites the README's console blocks from the commands (keeping `…`
elisions where they are), so they cannot go stale.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BLOCK = re.compile(r"```console\n(.*?)```", re.S)
NEEDS_TRANSFORMERS = ("examples/llama_layer.py",)


def blocks(text: str) -> list[str]:
    return BLOCK.findall(text)


def commands(block: str) -> list[tuple[str, list[str]]]:
    """[(command, the lines the README shows it printing)]."""
    out: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            out.append((line[2:], []))
        else:
            assert out, f"a console block must start with a `$ ` command line: {line!r}"
            out[-1][1].append(line)
    return out


def run(command: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    # the quickstart's install is done: what is left of it is the command it runs
    command = command.removeprefix("pip install . && ")
    if not (Path(sys.executable).parent / "blockcli").exists():  # an interpreter without the script: the module
        command = f'blockcli() {{ "{sys.executable}" -m blockcli "$@"; }}; ' + command
    before = set(ROOT.iterdir())
    try:
        proc = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    finally:  # what a command wrote (report's pages) goes, so the checkout stays as it was
        for path in set(ROOT.iterdir()) - before:
            if path.is_file():
                path.unlink()
    return (proc.stdout + proc.stderr).rstrip("\n").split("\n") if proc.stdout + proc.stderr else []


def masked(line: str) -> str:
    line = re.sub(r"\d+(?:\.\d+)?e-(?:0[5-9]|[1-9]\d)", "<small>", line)  # rounding-level figures
    line = re.sub(r"[\d.]+ (?:B|KiB|MiB|GiB) \(measured\)", "<peak> (measured)", line)
    line = re.sub(r"^(wrote \S+) \(\d+ KiB\)", r"\1 (<size>)", line)  # a page's size moves with its text
    line = re.sub(r"[━─═]+", "─", line)  # column widths
    return re.sub(r" +", " ", line).rstrip()


def matches(expected: list[str], got: list[str]) -> bool:
    """`expected`, whose `…` lines stand for any run of lines, against `got`, line by line once masked."""
    pattern = "".join(r"(?:.*\n)*?" if line.strip() == "…" else re.escape(masked(line) + "\n") for line in expected)
    return re.fullmatch(pattern, "".join(masked(line) + "\n" for line in got)) is not None


CASES = [(i, command, shown) for i, block in enumerate(blocks(README.read_text(encoding="utf-8")))
         for command, shown in commands(block) if command != "echo $?"]  # exit codes: the test after


@pytest.mark.parametrize("index, command, shown", CASES, ids=[f"{i}:{c[:60]}" for i, c, _ in CASES])
def test_readme_console_block_prints_what_it_shows(index, command, shown):
    bare = re.sub(r"^(?:[A-Z_]+=\S* )+", "", command.removeprefix("pip install . && "))  # COLUMNS=80 blockcli ...
    assert bare.startswith(("blockcli ", "echo ", "for ", "sed ")) or bare == "blockcli", \
        f"not a blockcli command, so not a console block to re-run: {command}"
    if any(name in command for name in NEEDS_TRANSFORMERS):
        pytest.importorskip("transformers")
    got = run(command)
    assert matches(shown, got), "README shows:\n" + "\n".join(shown) + "\n\nthe command prints:\n" + "\n".join(got)


def test_exit_codes_the_readme_shows_are_the_commands():
    text = README.read_text(encoding="utf-8")
    for block in blocks(text):
        steps = commands(block)
        for (command, _), (after, shown) in zip(steps, steps[1:]):
            if after == "echo $?":
                env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]}
                code = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True).returncode
                assert [str(code)] == shown, f"{command}: exit {code}, the README shows {shown}"


def update() -> None:
    """Rewrite every console block from its commands; a README `…` line keeps its place (the lines it stood
    for stay out), the rest is what the command prints now."""
    text = README.read_text(encoding="utf-8")

    def regenerate(match: re.Match) -> str:
        out = []
        for command, shown in commands(match.group(1)):
            got = [] if command == "echo $?" else run(command)
            if command == "echo $?":
                got = shown
            elif "…" in [line.strip() for line in shown]:
                got = shown if matches(shown, got) else got
            out += [f"$ {command}", *got]
        return "```console\n" + "\n".join(out) + "\n```"

    new = BLOCK.sub(regenerate, text)
    tmp = README.with_suffix(".md.tmp")
    tmp.write_text(new, encoding="utf-8")
    tmp.replace(README)


if __name__ == "__main__":
    update()
