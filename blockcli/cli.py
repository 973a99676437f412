"""The `blockcli` command line: parse arguments, call the library, print once, choose the exit code.

Exit codes: 0 all good; 1 a check or an expectation failed; 2 usage or input error; 130 interrupted.
Data goes to stdout, diagnostics to stderr as one line `blockcli: error: …`.
"""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Callable, NoReturn, Optional

import typer

from blockcli import __version__
from blockcli.config import InputError

app = typer.Typer(
    name="blockcli",
    help="Shape and parameter inspector for the transformer decoder block: count, trace, verify.",
    add_completion=False,
    no_args_is_help=False,
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

ConfigArg = Annotated[
    Optional[str],
    typer.Argument(metavar="[CONFIG_OR_PRESET]",
                   help="A YAML config, a Hugging Face config.json, or a preset name (see `blockcli presets`). "
                        "Default: the reference chapter's block (d=512, h=8, d_ff=2048)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (same as --format json).")]


class CountFormat(str, Enum):
    table = "table"
    json = "json"
    markdown = "markdown"
    csv = "csv"


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """The one path for fatal errors: one line on stderr, then exit."""
    sys.stderr.write(f"blockcli: error: {message}\n")
    raise typer.Exit(code)


def run_guarded(body: Callable[[], int]) -> None:
    """Run a command body, mapping user errors to exit 2 and Ctrl-C to 130, never a traceback."""
    try:
        code = body()
    except InputError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        fail("interrupted", EXIT_INTERRUPTED)
    except MemoryError:
        fail("out of memory; try a smaller --batch or --seq", EXIT_USAGE)
    raise typer.Exit(code)


def console(**kwargs: Any):
    """A Rich console; when stdout is not a terminal, wide enough that piped tables are not cut."""
    from rich.console import Console

    out = Console(**kwargs)
    if not out.is_terminal and "width" not in kwargs:
        out = Console(width=max(out.width, 160), **kwargs)
    return out


def print_out(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


def _version(value: bool) -> None:
    if value:
        print_out(f"blockcli {__version__}")
        raise typer.Exit(0)


@app.callback()
def main_callback(
    version: Annotated[bool, typer.Option("--version", "-V", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Shape and parameter inspector for the transformer decoder block.

    Exit codes: 0 all good, 1 a check or expectation failed, 2 usage or input error.
    """


# ----------------------------------------------------------------------------- count


@app.command()
def count(
    config: ConfigArg = None,
    json_out: JsonOpt = False,
    fmt: Annotated[CountFormat, typer.Option("--format", "-f", help="Output format.")] = CountFormat.table,
    expect: Annotated[Optional[str], typer.Option(
        help="Exit 1 unless the total equals this (3152384, 3,152,384, or 3.15M to that precision).")] = None,
    max_total: Annotated[Optional[str], typer.Option("--max", help="Exit 1 if the total exceeds this budget.")] = None,
) -> None:
    """Exact parameter breakdown per component, for one block and for whole models."""

    def body() -> int:
        from blockcli import render
        from blockcli.config import load_config
        from blockcli.count import count_parameters, parse_amount

        expected = parse_amount(expect) if expect is not None else None
        budget = parse_amount(max_total)[0] if max_total is not None else None
        result = count_parameters(load_config(config))
        chosen = CountFormat.json if json_out else fmt
        if chosen is CountFormat.json:
            print_out(render.to_json(render.count_json(result)))
        elif chosen is CountFormat.markdown:
            print_out(render.count_markdown(result))
        elif chosen is CountFormat.csv:
            print_out(render.count_csv(result))
        else:
            console().print(render.count_table(result))
        code = EXIT_OK
        if not result.reconciled.match:
            sys.stderr.write("blockcli: formula and arrays disagree: "
                             + "; ".join(result.reconciled.mismatches) + "\n")
            code = EXIT_FAILED
        if expected is not None and abs(result.total - expected[0]) > expected[1]:
            sys.stderr.write(f"blockcli: expected {expect} parameters, counted {result.total:,}\n")
            code = EXIT_FAILED
        if budget is not None and result.total > budget:
            sys.stderr.write(f"blockcli: {result.total:,} parameters exceed the budget of {budget:,}\n")
            code = EXIT_FAILED
        return code

    run_guarded(body)


# ----------------------------------------------------------------------------- presets


@app.command()
def presets(json_out: JsonOpt = False) -> None:
    """List the packaged model presets, with a one-line description and the source of each."""

    def body() -> int:
        from blockcli.config import load_config, preset_names

        rows = []
        for name in preset_names():
            about = load_config(name).about
            rows.append((name, about.description, about.source, about.parameters))
        if json_out:
            from blockcli.render import to_json

            print_out(to_json([{"name": n, "description": d, "source": s, "parameters": p} for n, d, s, p in rows]))
        else:
            from blockcli.render import presets_table

            console().print(presets_table(rows))
        return EXIT_OK

    run_guarded(body)


def main() -> None:
    """Entry point of the `blockcli` script and `python -m blockcli`."""
    app()
