"""The package's import structure, read from the source: imports flow one way and the heavy or
optional libraries stay where the architecture puts them.

Every import statement counts, including those inside functions (lazy imports still make a
dependency); only `if TYPE_CHECKING:` blocks, which never run, are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "blockcli"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Top-level names of everything `path` imports (blockcli modules by their full dotted name)."""
    tree = ast.parse(path.read_text("utf-8"))
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for n in ast.walk(node))
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            if node.module == "blockcli" or node.module == "blockcli.families":
                found.update(f"{node.module}.{a.name}" for a in node.names
                             if (PACKAGE.parent / node.module.replace(".", "/") / f"{a.name}.py").exists())
    return found


MODULES = {_module_name(p): _imports(p) for p in PACKAGE.rglob("*.py")}


def _internal(name: str) -> set[str]:
    return {m for m in MODULES[name] if m in MODULES and m != name}


def test_the_package_modules_were_found():
    assert {"blockcli.cli", "blockcli.config", "blockcli.hf", "blockcli.families.llama"} <= set(MODULES)


def test_no_import_cycles():
    graph = {m: _internal(m) for m in MODULES}
    graph["blockcli"] = set()  # the package's lazy __getattr__ names modules as strings, not imports
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycle = path[path.index(nxt):] + [nxt] if nxt in path else [node, nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_config_is_at_the_bottom():
    """Beneath config only the activation registry, plain data that imports nothing at all."""
    assert _internal("blockcli.config") <= {"blockcli.activations"}
    assert MODULES["blockcli.activations"] <= {"__future__", "dataclasses"}


def test_only_cli_imports_typer_only_render_and_cli_import_rich_only_config_imports_yaml():
    def importers(library: str) -> set[str]:
        return {m for m, names in MODULES.items() if any(n == library or n.startswith(library + ".") for n in names)}

    assert importers("typer") == {"blockcli.cli"}
    assert importers("rich") <= {"blockcli.cli", "blockcli.render"}
    assert importers("yaml") == {"blockcli.config"}
    assert importers("torch") == {"blockcli.torch_block"}


def test_computation_never_imports_the_presentation_layers():
    for module, names in MODULES.items():
        if module not in ("blockcli.cli", "blockcli.render", "blockcli.__main__"):
            assert not {"blockcli.cli", "blockcli.render"} & names, module


def test_the_block_and_its_ops_never_import_what_is_built_on_them():
    above_block = {f"blockcli.{m}" for m in ("count", "trace", "verify", "sizing", "mutants", "impl", "render", "cli")}
    assert not _internal("blockcli.block") & above_block
    assert not _internal("blockcli.ops") & (above_block | {"blockcli.block"})


def test_every_package_is_installed():
    """pyproject.toml lists packages by name: a subpackage left out works from a checkout and breaks once
    installed."""
    import tomllib

    listed = set(tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text("utf-8"))["tool"]["setuptools"]["packages"])
    with_code = {_module_name(p.parent / "__init__.py") for p in PACKAGE.rglob("*.py")}
    assert with_code <= listed, sorted(with_code - listed)
