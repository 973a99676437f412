"""The command line as a whole: entry points, help, and a README that documents everything that exists."""

import dataclasses
import re
import subprocess
import sys

import typer.main
from typer.testing import CliRunner

import blockcli
from blockcli.cli import app
from blockcli.config import About, BlockConfig, ModelConfig, RunConfig
from conftest import ROOT

runner = CliRunner()
README = (ROOT / "README.md").read_text(encoding="utf-8")


def commands():
    return typer.main.get_command(app).commands


def test_version_and_module_entry_point():
    assert runner.invoke(app, ["--version"]).stdout.strip() == f"blockcli {blockcli.__version__}"
    out = subprocess.run([sys.executable, "-m", "blockcli", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == f"blockcli {blockcli.__version__}"


def test_help_lists_every_command():
    text = runner.invoke(app, ["--help"]).stdout
    for name in commands():
        assert name in text


def test_every_command_and_option_is_in_the_readme():
    for name, command in commands().items():
        assert f"blockcli {name}" in README, f"README never shows 'blockcli {name}'"
        for param in command.params:
            for opt in param.opts:
                if opt.startswith("--") and opt != "--help":
                    assert opt in README, f"README does not document {name} {opt}"


def test_every_config_field_is_in_the_readme():
    for section, cls in (("about", About), ("block", BlockConfig), ("model", ModelConfig), ("run", RunConfig)):
        for field in dataclasses.fields(cls):
            assert re.search(rf"\b{field.name}\b", README), f"README does not document {section}.{field.name}"


def test_every_activation_is_in_the_readmes_table():
    from blockcli.activations import ACTIVATIONS

    table = README[README.index("### Activations"):README.index("### Layers that differ")]
    for activation in ACTIVATIONS.values():
        row = next((line for line in table.splitlines() if line.startswith(f"| `{activation.name}` |")), None)
        assert row is not None, f"README's activation table has no row for {activation.name}"
        assert all(f"`{name}`" in row for name in activation.hf_names), row


def test_every_family_and_preset_is_in_the_readme():
    from blockcli.families import COMPOSITES, FAMILIES

    rows = set(re.findall(r"^\| `([a-z0-9_-]+)`(?:, `([a-z0-9_-]+)`)? \|", README, flags=re.M))
    documented = {name for row in rows for name in row if name}
    for model_type in [*FAMILIES, *COMPOSITES]:
        assert model_type in documented, f"README's families table has no row for model_type {model_type}"
    for preset in (ROOT / "blockcli" / "presets").glob("*.yaml"):
        assert f"| `{preset.stem}` |" in README, f"README's presets table has no row for {preset.stem}"


def test_exit_codes_are_documented():
    for code in ("| 0 |", "| 1 |", "| 2 |", "| 130 |"):
        assert code in README


def test_readme_quickstart_commands_are_the_ci_commands():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install --quiet '.[test]' && pytest -n auto\n" in ci
    assert "$ pip install '.[test]' && pytest -n auto\n" in README
    assert "$ pip install . && blockcli count" in README


def test_convert_prints_yaml_that_counts_the_same(tmp_path):
    # GPT-2 small's published config.json (the fields that matter); 124,439,808 parameters as
    # transformers instantiates GPT2LMHeadModel (tied head counted once)
    src = tmp_path / "config.json"
    src.write_text('{"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024, '
                   '"vocab_size": 50257, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05}')
    out = runner.invoke(app, ["convert", str(src)])
    assert out.exit_code == 0 and out.stdout.startswith("# Converted")
    target = tmp_path / "gpt2.yaml"
    target.write_text(out.stdout)
    assert runner.invoke(app, ["count", str(target), "--expect", "124,439,808"]).exit_code == 0
    written = tmp_path / "written.yaml"
    assert runner.invoke(app, ["convert", str(src), "--output", str(written)]).exit_code == 0
    assert written.read_text() == out.stdout
    refused = runner.invoke(app, ["convert", str(src), "--output", str(written)])
    assert refused.exit_code == 2 and "--force" in refused.stderr
