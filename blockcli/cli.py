"""The `blockcli` command line: parse arguments, call the library, print once, choose the exit code.

Exit codes: 0 all good; 1 a check or an expectation failed; 2 usage or input error; 130 interrupted;
128 + N ended by signal N (SIGHUP 129, SIGTERM 143). Data goes to stdout, diagnostics to stderr as
one line `blockcli: error: …` (or `blockcli: note: …` beside a result).
"""

from __future__ import annotations

import math
import os
import re
import signal
import sys
from dataclasses import replace
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Callable, NoReturn, Optional, Sequence

import typer

from blockcli import __version__
from blockcli.config import Config, InputError, clipped

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
                   help="A YAML config (- for standard input), a Hugging Face config.json, a model folder "
                        "(its config.json, and its safetensors weights where a command reads weights), or a "
                        "preset: its name in any case, or the Hub repository it was transcribed from (see "
                        "`blockcli presets`). Default: the reference chapter's block (d=512, h=8, d_ff=2048)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (same as --format json).")]
AllowFieldOpt = Annotated[Optional[list[str]], typer.Option(
    "--allow-field", metavar="NAME",
    help="Accept this unknown config.json field unchecked, at your own risk (repeatable); a note says so.")]


def loaded(source: Optional[str], allow_field: Optional[list[str]]) -> Any:
    """load_config with --allow-field; its notes go to stderr once the command has run."""
    from blockcli.sources import load_config

    cfg = load_config(source, tuple(allow_field or ()))
    _config_notes.extend(cfg.notes)
    return cfg


# The notes of the configs a command loaded: written after its result, and not at all when an error
# ends it (then the error is the one line on stderr).
_config_notes: list[str] = []


class CountFormat(str, Enum):
    table = "table"
    json = "json"
    markdown = "markdown"
    csv = "csv"


class OutputError(InputError):
    """Standard output cannot be written (closed, a full device, a closed pipe): exit code 2."""


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived: unwind as for Ctrl-C (temporary files are removed), exit 128 + signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def one_line(message: str) -> str:
    """Control characters (a newline in a file name, say) escaped, so a message stays one line."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in message)


def refuse_mamba_backward(configs: list[Config]) -> None:
    """The gradients of a Mamba-1 or Mamba-2 layer are not implemented: the backward's commands say so in one line."""
    from blockcli.mamba import NO_BACKWARD
    from blockcli.short_conv import NO_BACKWARD as NO_CONV_BACKWARD
    from blockcli.lightning import NO_BACKWARD as NO_LIGHTNING_BACKWARD

    for cfg in configs:
        n = cfg.model.n_layers if cfg.model else 1
        if any(cfg.layer_block(i).mamba is not None for i in range(n)):
            raise InputError(f"{cfg.name}: {NO_BACKWARD}")
        if any(cfg.layer_block(i).short_conv is not None for i in range(n)):
            raise InputError(f"{cfg.name}: {NO_CONV_BACKWARD}")
        if any(cfg.layer_block(i).lightning is not None for i in range(n)):
            raise InputError(f"{cfg.name}: {NO_LIGHTNING_BACKWARD}")
        if any(cfg.layer_block(i).ngpt is not None for i in range(n)) or (cfg.model and cfg.model.recurrent_layers):
            from blockcli.block import NGPT_NO_BACKWARD

            raise InputError(f"{cfg.name}: {NGPT_NO_BACKWARD}")


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """The one path for fatal errors: one line on stderr, then exit."""
    sys.stderr.write(f"blockcli: error: {one_line(message)}\n")
    raise typer.Exit(code)


def note(message: str) -> None:
    """A remark beside a result (the exit code is unchanged): one line on stderr."""
    sys.stderr.write(f"blockcli: note: {one_line(message)}\n")


def run_guarded(body: Callable[[], int], sources: Sequence[Any] = ()) -> None:
    """Run a command body, mapping user errors to exit 2 and Ctrl-C to 130, never a traceback.

    `sources` are the command's config arguments: one that named a preset but found a local file of
    that name (which is what was read) earns a note once the command has run.
    """
    _config_notes.clear()
    try:
        code = body()
        for text in dict.fromkeys(_config_notes):
            note(text)
        _note_shadowed_presets(sources)
    except InputError as exc:
        fail(str(exc))
    except Terminated as exc:
        fail(f"terminated by {signal.Signals(exc.signum).name}", 128 + exc.signum)
    except KeyboardInterrupt:
        fail("interrupted", EXIT_INTERRUPTED)
    except MemoryError:
        fail("out of memory; try a smaller --batch or --seq", EXIT_USAGE)
    raise typer.Exit(code)


PIPE_WIDTH = 10_000  # "as wide as the output needs": tables take their natural width, lines are never wrapped


def console(**kwargs: Any):
    """A Rich console. Tables fit its width (render.Fitted): a terminal's, or COLUMNS when set; when
    stdout is not a terminal and COLUMNS is not set, as wide as the output needs, so a pipe or a file
    gets every table whole, one line per row."""
    from rich.console import Console

    out = Console(**kwargs)
    if not out.is_terminal and "width" not in kwargs and not os.environ.get("COLUMNS", "").strip().isdigit():
        out = Console(width=PIPE_WIDTH, **kwargs)
    return out


PROGRESS_DELAY = 1.0  # seconds of work before a progress line appears: a quick command never shows one


class ProgressLine:
    """blockcli.progress's listener on a terminal: once work has run for PROGRESS_DELAY seconds, one
    Rich progress line per task on stderr (what it is on, n of N, the time so far), gone when done."""

    def __init__(self) -> None:
        import threading

        self.tasks: dict[str, tuple[int, Optional[int], str]] = {}
        self.ids: dict[str, Any] = {}
        self.lock = threading.Lock()
        self.bar: Any = None
        self.timer = threading.Timer(PROGRESS_DELAY, self.start)
        self.timer.daemon = True

    def __call__(self, task: str, done: int, total: Optional[int], now: str) -> None:
        with self.lock:
            if not self.timer.is_alive() and self.bar is None and not self.tasks:
                try:
                    self.timer.start()
                except RuntimeError:  # started once already
                    pass
            if total is not None and done >= total:
                self.tasks.pop(task, None)
                if self.bar is not None and task in self.ids:
                    self.bar.remove_task(self.ids.pop(task))
                return
            self.tasks[task] = (done, total, now)
            if self.bar is not None:
                self._show(task)

    def _show(self, task: str) -> None:
        done, total, now = self.tasks[task]
        fields = {"description": f"{task}" + (f": {now}" if now else ""), "completed": done, "total": total,
                  "count": f"{done} of {total}" if total is not None else ""}
        if task in self.ids:
            self.bar.update(self.ids[task], **fields)
        else:
            self.ids[task] = self.bar.add_task(**fields)

    def start(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        with self.lock:
            if self.bar is not None:
                return
            self.bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(bar_width=20),
                                TextColumn("{task.fields[count]}"), TimeElapsedColumn(),
                                console=Console(stderr=True), transient=True, refresh_per_second=4)
            self.bar.start()
            for task in list(self.tasks):
                self._show(task)

    def stop(self) -> None:
        self.timer.cancel()
        with self.lock:
            if self.bar is not None:
                self.bar.stop()


def progress_shown(shown: bool) -> Any:
    """A context where long work shows a progress line: only when `shown` (the table format, not
    --json) and both stdout and stderr are terminals; never in a pipe or a file."""
    from contextlib import contextmanager

    @contextmanager
    def showing() -> Any:
        if not (shown and sys.stdout.isatty() and sys.stderr.isatty()):
            yield
            return
        from blockcli import progress

        line = ProgressLine()
        try:
            with progress.listening(line):
                yield
        finally:
            line.stop()

    return showing()


def print_out(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


# What the tables and notes draw outside ASCII, spelled in ASCII for a terminal that lacks them.
ASCII_SPELLING = str.maketrans({
    "█": "#", "▉": "#", "▊": "#", "▋": "#", "▌": "+", "▍": "+", "▎": "+", "▏": "+", "░": ".", "▒": ":",
    "▓": "%", "×": "x", "·": ".", "→": "->", "↓": "v", "ᵀ": "^T", "√": "sqrt", "–": "-", "—": "-",
    "…": "...", "≤": "<=", "≥": ">=", "±": "+-", "²": "^2", "³": "^3", "⁶": "^6", "✗": "X", "─": "-",
    "−": "-", "≈": "~", "≪": "<<", "σ": "sigma", "ε": "eps", "γ": "gamma", "β": "beta", "π": "pi", "μ": "mu",
    "Φ": "Phi",
})


class GuardedStdout:
    """sys.stdout, except that a failed write raises OutputError (exit 2, one line) instead of a
    traceback or a silent exit 0, and text its encoding cannot hold is spelled in ASCII."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        try:
            "█×→".encode(stream.encoding or "ascii")
            self._ascii = False
        except (LookupError, UnicodeEncodeError):
            self._ascii = True

    def write(self, text: str) -> int:
        if self._ascii:
            encoding = self._stream.encoding or "ascii"
            # the rest (a non-ASCII file name, say) as \uXXXX, which a JSON reader also decodes
            text = text.translate(ASCII_SPELLING).encode(encoding, "backslashreplace").decode(encoding)
        raw = getattr(self._stream, "buffer", None)
        if raw is None:
            return self._guard(self._stream.write, text)
        # Write the bytes until all are written: a pipe whose reader leaves mid-write takes part of a large
        # write, and Python's buffered writer reports the part without an error, so the rest would be lost
        # with exit 0; the next write fails (a closed pipe), which is exit 2 with one line.
        self._guard(self._stream.flush)
        data = memoryview(text.encode(self._stream.encoding or "utf-8", self._stream.errors or "strict"))
        while data:
            written = self._guard(raw.write, data)
            if not written:  # a non-blocking stream that takes nothing: waiting would spin
                raise OutputError("standard output: cannot write (it takes no more)")
            data = data[written:]
        return len(text)

    def flush(self) -> None:
        self._guard(self._stream.flush)

    def _guard(self, call: Callable[..., Any], *args: Any) -> Any:
        try:
            return call(*args)
        except OSError as exc:
            try:  # what is still buffered goes nowhere, so the interpreter's exit flush cannot fail again
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, self._stream.fileno())
                os.close(devnull)
            except (OSError, ValueError):
                pass
            raise OutputError(f"standard output: cannot write ({exc.strerror or exc})") from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _note_shadowed_presets(sources: Sequence[Any]) -> None:
    """A local file named like a preset is read instead of the preset (it is a path): say so."""
    from blockcli.config import preset_names

    for source in dict.fromkeys(s for s in sources if isinstance(s, str)):
        if source in preset_names() and os.path.lexists(source):
            note(f"read the local file ./{source}, not the packaged preset '{source}' (rename the file or "
                 f"run elsewhere to use the preset)")


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


class SizeDtype(str, Enum):
    float64 = "float64"
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"
    float8 = "float8"
    int8 = "int8"
    int4 = "int4"


KvDtype = Enum("KvDtype", {name: name for name in (*SizeDtype.__members__, "q8_0", "q4_0")}, type=str)
KvDtype.__doc__ = "A K/V cache dtype: the sizing dtypes, and llama.cpp's block-quantized q8_0 and q4_0."
KV_HELP = ("Dtype of the K/V cache (default: --dtype); q8_0 and q4_0 are llama.cpp's cache types, 34 and 18 bytes "
           "per block of 32 values.")


class Optimizer(str, Enum):
    adamw = "adamw"
    sgd = "sgd"
    sgd_momentum = "sgd-momentum"


class Precision(str, Enum):
    fp32 = "fp32"
    mixed = "mixed"


class Recompute(str, Enum):
    none = "none"
    selective = "selective"
    full = "full"


class Attention(str, Enum):
    megatron = "megatron"
    eager = "eager"
    sdpa = "sdpa"
    blockcli = "blockcli"


class Solve(str, Enum):
    seq = "seq"
    batch = "batch"


class FrozenDtype(str, Enum):
    bf16 = "bf16"
    int8 = "int8"
    nf4 = "nf4"
    int4 = "int4"


@app.command()
def count(
    config: ConfigArg = None,
    json_out: JsonOpt = False,
    fmt: Annotated[CountFormat, typer.Option("--format", "-f", help="Output format.")] = CountFormat.table,
    expect: Annotated[Optional[str], typer.Option(
        help="Exit 1 unless the total equals this (3152384, 3,152,384, or 3.15M to that precision).")] = None,
    max_total: Annotated[Optional[str], typer.Option("--max", help="Exit 1 if the total exceeds this budget.")] = None,
    allow_field: AllowFieldOpt = None,
    seq: Annotated[Optional[int], typer.Option(help="Tokens per sequence T (default: run.seq_len).", min=1)] = None,
    batch: Annotated[Optional[int], typer.Option(
        help="Sequences B (default: run.batch); with --train, the micro-batch per device.", min=1)] = None,
    dtype: Annotated[Optional[SizeDtype], typer.Option(
        help="Dtype of weights and activations for the inference figures (default: run.dtype).")] = None,
    kv_dtype: Annotated[Optional[KvDtype], typer.Option("--kv-dtype", help=KV_HELP)] = None,
    train: Annotated[bool, typer.Option("--train", help="Also size a training step: model states, activations, FLOPs.")] = False,
    optimizer: Annotated[Optional[Optimizer], typer.Option(help="With --train: the optimizer (default adamw).")] = None,
    precision: Annotated[Optional[Precision], typer.Option(
        help="With --train: fp32, or mixed (16-bit weights, gradients and activations, fp32 master and moments; "
             "the default).")] = None,
    dp: Annotated[Optional[int], typer.Option(help="With --train: data-parallel devices (default 1).", min=1)] = None,
    zero: Annotated[Optional[int], typer.Option(
        help="With --train: ZeRO stage 0-3 (partition optimizer states, + gradients, + weights over --dp).",
        min=0, max=3)] = None,
    recompute: Annotated[Optional[Recompute], typer.Option(
        help="With --train: activation recomputation none (default), selective or full.")] = None,
    attention: Annotated[Optional[Attention], typer.Option(
        help="With --train: whose saves the activations are: megatron (default: Korthikanti et al.'s terms for "
             "Megatron-LM's layer), eager or sdpa (transformers' attention implementations, measured), blockcli "
             "(blockcli's own backward).")] = None,
    tp: Annotated[Optional[int], typer.Option(
        help="Tensor-parallel devices: heads, MLP width and vocabulary split over them (Megatron's layout).",
        min=1)] = None,
    pp: Annotated[Optional[int], typer.Option(help="Pipeline stages: the layers split into pp consecutive parts.",
                                              min=1)] = None,
    sp: Annotated[bool, typer.Option("--sp", help="With --train and --tp: sequence parallelism (the d-wide "
                                                  "activations split over the tp devices too).")] = False,
    ep: Annotated[Optional[int], typer.Option(
        help="Expert-parallel devices: a mixture's routed experts split over them (inside --dp when training).",
        min=1)] = None,
    micro_batches: Annotated[Optional[int], typer.Option(
        "--micro-batches", help="With --train: micro-batches per step (of --batch sequences each); 1F1B keeps "
                                "min(pp − stage, m) in flight (default 1).", min=1)] = None,
    vpp: Annotated[Optional[int], typer.Option(
        help="With --train and --pp: model chunks per pipeline device (the interleaved schedule).", min=1)] = None,
    lora_rank: Annotated[Optional[int], typer.Option(
        "--lora-rank", metavar="R",
        help="With --train: fine-tune with LoRA adapters of rank R (only they train).")] = None,
    lora_targets: Annotated[Optional[str], typer.Option(
        "--lora-targets", metavar="ROLES",
        help="With --lora-rank: the matrices adapted, q,k,v,o,gate,up,down,router (comma-separated) or all-linear "
             "(every linear layer but the LM head).")] = None,
    lora_alpha: Annotated[Optional[float], typer.Option(
        "--lora-alpha", metavar="A", help="With --lora-rank: LoRA's alpha (scale alpha/r); changes no memory or "
                                          "FLOPs figure (default 8, as PEFT's).")] = None,
    frozen_dtype: Annotated[Optional[FrozenDtype], typer.Option(
        "--frozen-dtype", help="With --lora-rank: the frozen base weights' storage: bf16 (default), int8 (LLM.int8()), "
                               "nf4 (QLoRA, double-quantized) or int4.")] = None,
    max_memory: Annotated[Optional[str], typer.Option(
        "--max-memory", metavar="SIZE",
        help="Exit 1 if the workload's memory exceeds SIZE (80GiB, 40GB): inference weights + K/V cache + "
             "activations, or with --train the model states + activations per device.")] = None,
    solve: Annotated[Optional[Solve], typer.Option(
        "--solve", help="With --max-memory: the largest --seq (seq) or --batch (batch) whose memory fits, everything "
                        "else fixed; the figures are at that value.")] = None,
    sweep: Annotated[Optional[str], typer.Option(
        "--sweep", metavar="AXIS=V,V,…",
        help="One row per value instead of the breakdown: seq=1k,4k,32k or batch=1,8,64 (k = 1024) or "
             "dtype=float32,bfloat16; the memory --max-memory checks (exit 1 if a row exceeds it), and with --gpu "
             "the times.")] = None,
    gpu: Annotated[Optional[str], typer.Option(
        "--gpu", metavar="NAME|FILE",
        help="Add a roofline on this device: prefill (time to first token), decode time and tokens/s, the bound, "
             "GPUs needed; a catalogue name (H100-SXM, H100-PCIe, H200, B200, A100-40GB, A100-80GB, L40S, L4, "
             "RTX-4090, MI300X) or a device YAML file.")] = None,
    mfu: Annotated[Optional[float], typer.Option(
        "--mfu", metavar="F", help="With --gpu and --train: the model-FLOPs utilisation the step time assumes "
                                   "(default 0.4).")] = None,
) -> None:
    """Exact parameter breakdown per component, and the memory and FLOPs of a workload."""

    def body() -> int:
        from blockcli import render, sizing
        from blockcli.count import count_parameters, fp8_stored_bytes, parse_amount

        expected = parse_amount(expect, "--expect") if expect is not None else None
        budget = parse_amount(max_total, "--max")[0] if max_total is not None else None
        memory_budget = sizing.parse_size(max_memory) if max_memory is not None else None
        if solve is not None and memory_budget is None:
            raise InputError(f"--solve {solve.value} needs --max-memory SIZE (the budget to fill)")
        if solve is not None and (seq if solve is Solve.seq else batch) is not None:
            raise InputError(f"--solve {solve.value} finds --{solve.value} itself; drop --{solve.value}")
        swept = sizing.parse_sweep(sweep, tuple(SizeDtype.__members__)) if sweep is not None else None
        if swept is not None and swept[0] == "dtype" and train:
            raise InputError("--sweep dtype=… sets the inference dtype; a training step's is --precision")
        if swept is not None and solve is not None:
            raise InputError("--sweep and --solve: give one of them")
        if swept is not None and {"seq": seq, "batch": batch, "dtype": dtype}[swept[0]] is not None:
            raise InputError(f"--sweep {swept[0]}=… gives --{swept[0]} itself; drop --{swept[0]}")
        training_only = [o for o, v in (("--optimizer", optimizer), ("--precision", precision), ("--dp", dp),
                                        ("--zero", zero), ("--recompute", recompute), ("--attention", attention),
                                        ("--sp", sp or None),
                                        ("--micro-batches", micro_batches), ("--vpp", vpp)) if v is not None]
        if training_only and not train:
            raise InputError(f"{training_only[0]} sizes a training step; add --train")
        lora_only = [o for o, v in (("--lora-rank", lora_rank), ("--lora-targets", lora_targets),
                                    ("--lora-alpha", lora_alpha), ("--frozen-dtype", frozen_dtype)) if v is not None]
        if lora_only and not train:
            raise InputError(f"{lora_only[0]} sizes a fine-tuning step; add --train")
        if lora_only and lora_rank is None:
            raise InputError(f"{lora_only[0]} needs --lora-rank R (the adapters' rank)")
        if lora_rank is not None and lora_targets is None:
            raise InputError("--lora-rank needs --lora-targets: q,k,v,o,gate,up,down,router (comma-separated) "
                             "or all-linear")
        parallel = any(v is not None for v in (tp, pp, ep, micro_batches, vpp)) or sp
        if parallel and lora_rank is not None:
            raise InputError("--lora-rank with model parallelism (--tp, --pp, --ep …) is not modelled; size LoRA on "
                             "one device with --dp and --zero")
        targets = sizing.parse_lora_targets(lora_targets) if lora_targets is not None else ()
        if mfu is not None and (gpu is None or not train):
            raise InputError("--mfu sets the training step's utilisation on a device; add --gpu NAME and --train")
        device = None
        if gpu is not None:
            from blockcli.hardware import load_gpu

            device = load_gpu(gpu)
        cfg = loaded(config, allow_field)
        T, B = seq or cfg.run.seq_len, batch or cfg.run.batch
        stored = None
        if config and Path(config).exists():  # not a preset's name: checkpoint.py only for a real path
            from blockcli.checkpoint import is_checkpoint_path
            from blockcli.weight_files import checkpoint_sizes

            if is_checkpoint_path(Path(config)):  # reconcile with its tensors' headers (a quantized one's too)
                stored = checkpoint_sizes(Path(config), cfg)
        result = count_parameters(cfg, checkpoint=stored[0] if stored else None,
                                  checkpoint_info=stored[1] if stored else None)
        quantized = stored[1].get("quantized") if stored else None
        weight_bytes = quantized["total_bytes"] if quantized is not None else None  # the weights as stored
        if stored and "gguf" in stored[1]:  # a GGUF file: its weights are held as stored (quantized)
            weight_bytes = stored[1]["gguf"]["bytes"]
        if quantized is None and cfg.quantization is not None and (fp8 := fp8_stored_bytes(result)) is not None:
            rows, cols = cfg.quantization.block or (0, 0)
            _config_notes.append(
                f"{cfg.name}: stored as {cfg.quantization.description}: {render.human_bytes(fp8.bytes)} "
                f"({fp8.bytes:,} bytes): {fp8.quantized:,} weights at 1 byte, {fp8.scales:,} float32 scales (one per "
                f"{rows}x{cols} block), the other {fp8.plain:,} parameters at {cfg.quantization.stored_dtype}")
            weight_bytes = fp8.bytes
        if parallel and kv_dtype is not None and kv_dtype.value in sizing.KV_BLOCKS:
            raise InputError(f"--kv-dtype {kv_dtype.value} with model parallelism (--tp, --pp, --ep …) is not "
                             f"modelled; size it on one device")
        profile = (attention or Attention.megatron).value
        if profile != "megatron" and (parallel or lora_rank is not None):
            raise InputError(f"--attention {profile} sizes one device's full training step; with "
                             f"{'--tp, --pp, --ep or --sp' if parallel else '--lora-rank'} only megatron's terms "
                             f"are modelled")

        def workload(seq_len: int, n_seq: int, at: str | None = None) -> tuple:  # (inference, training, plan)
            inference = sizing.inference(cfg, result.total, seq_len, n_seq, at or (dtype.value if dtype else cfg.run.dtype),
                                         kv_dtype.value if kv_dtype else None, weight_bytes)
            training = None
            if train:
                adapters = None
                if lora_rank is not None:
                    adapters = sizing.lora(cfg, lora_rank, targets, lora_alpha,
                                           (frozen_dtype or FrozenDtype.bf16).value,
                                           _model_type(config) or cfg.about.model_type)
                training = sizing.training(cfg, result.total, result.non_embedding, seq_len, n_seq,
                                           optimizer=(optimizer or Optimizer.adamw).value,
                                           precision=(precision or Precision.mixed).value, dp=dp or 1,
                                           zero=zero or 0, recompute=(recompute or Recompute.none).value,
                                           active_non_embedding=result.active_total - (result.total - result.non_embedding),
                                           lora=adapters, micro_batches=micro_batches or 1,
                                           attention=profile, model_type=_model_type(config) or cfg.about.model_type)
            plan = None
            if parallel:
                from blockcli.ranks import Layout, plan as rank_plan

                layout = Layout(tp or 1, pp or 1, sp, ep or 1, dp or 1, micro_batches or 1, vpp or 1)
                plan = rank_plan(cfg, layout, seq_len, n_seq, training=train,
                                 per=training.per_parameter if training else None, zero=zero or 0,
                                 precision=(precision or Precision.mixed).value,
                                 recompute=(recompute or Recompute.none).value, dtype=inference.dtype,
                                 kv_bits=sizing.DTYPE_BITS[inference.kv_dtype])
            return inference, training, plan

        solved = None
        if solve is not None:
            seq_solve = solve is Solve.seq
            learned = cfg.model is not None and cfg.model.positions == "learned"
            solved = sizing.solve_largest(
                lambda n: _used(*workload(n, B) if seq_solve else workload(T, n)), memory_budget,
                cap=cfg.model.max_positions if seq_solve and learned else None)
            if solved.answer == 0:
                sys.stderr.write(f"blockcli: --solve {solve.value}: nothing fits --max-memory {max_memory} "
                                 f"({memory_budget:,} bytes): --{solve.value} 1 needs "
                                 f"{render.human_bytes(solved.next_memory_bytes)} ({solved.next_memory_bytes:,} bytes)\n")
                return EXIT_FAILED
            T, B = (solved.answer, B) if seq_solve else (T, solved.answer)
        if (past := sizing.check_workload(cfg, T)) is not None:
            _config_notes.append(past)
        inference, training, plan = workload(T, B)

        def roof_of(inference, training, plan):  # the roofline on --gpu (None without it)
            if device is None:
                return None
            from blockcli.roofline import DEFAULT_MFU, roofline

            return roofline(cfg, inference, result.total, result.active_total, device, budget=memory_budget,
                            training=training, mfu=DEFAULT_MFU if mfu is None else mfu,
                            devices=plan.layout.devices if plan else dp or 1)

        roof = roof_of(inference, training, plan)
        chosen = CountFormat.json if json_out else fmt
        if swept is not None:
            axis, values = swept
            rows = []
            for value in values:
                if axis == "seq":
                    sizing.check_workload(cfg, value)
                at = workload(value if axis == "seq" else T, value if axis == "batch" else B,
                              value if axis == "dtype" else None)
                rows.append(render.SweepRow(value, _used(*at), roof_of(*at)))
            print_out({CountFormat.json: render.sweep_json, CountFormat.csv: render.sweep_csv,
                       CountFormat.markdown: render.sweep_markdown}.get(chosen, render.sweep_markdown)(
                axis, rows, memory_budget, bool(plan), bool(training)))
            over = [r for r in rows if memory_budget is not None and r.memory_bytes > memory_budget]
            if over:
                sys.stderr.write(f"blockcli: --sweep {axis}={over[0].value}: {render.human_bytes(over[0].memory_bytes)} "
                                 f"({over[0].memory_bytes:,} bytes) exceeds --max-memory {max_memory} "
                                 f"({memory_budget:,} bytes)\n")
                return EXIT_FAILED
            return EXIT_OK
        if chosen is CountFormat.json:
            data = render.count_json(result, inference, training, memory_budget, plan)
            if roof is not None:
                data["roofline"] = render.roofline_json(roof)
            if solved is not None:
                data["solve"] = {"solve": solve.value, "answer": solved.answer, "memory_bytes": solved.memory_bytes,
                                 "next_memory_bytes": solved.next_memory_bytes, "cap": solved.cap}
            print_out(render.to_json(data))
        elif chosen is CountFormat.markdown:
            print_out(render.count_markdown(result, inference, training, plan)
                      + (render.roofline_markdown(roof) if roof is not None else ""))
        elif chosen is CountFormat.csv:
            print_out(render.count_csv(result))
        else:
            console().print(render.count_table(result, inference, training, plan))
            if roof is not None:
                console().print(render.roofline_table(roof))
        if solved is not None and chosen is not CountFormat.json:  # beside CSV on stderr, to keep it CSV
            line = render.solve_line(solve.value, solved, max_memory)
            print_out(line) if chosen is not CountFormat.csv else sys.stderr.write(line + "\n")
        code = EXIT_OK
        declared = result.config.about.parameters
        if declared is not None and declared != result.total:
            note(f"about.parameters says {declared:,} but the count is {result.total:,} "
                 f"(the exit code does not change; --expect is the gate)")
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
        used = _used(inference, training, plan)
        if memory_budget is not None and used > memory_budget:
            what = ("the most loaded device's " if plan else "") + (
                "training memory per device" if training else "inference memory")
            sys.stderr.write(f"blockcli: {what} {render.human_bytes(used)} ({used:,} bytes) exceeds "
                             f"--max-memory {max_memory} ({memory_budget:,} bytes)\n")
            code = EXIT_FAILED
        return code

    run_guarded(body, [config])


def _used(inference, training, plan) -> int:
    """The memory --max-memory checks: the most loaded rank's with model parallelism, else the training memory
    per device with --train, else the inference memory."""
    return (plan or training or inference).memory_bytes


def _model_type(source: str | None) -> str | None:
    """The model_type of a config.json or model folder `source` (a vision-language one's language model's),
    for its family's module layout; None for a preset, a YAML config or standard input."""
    if not source or source == "-" or not Path(source).exists():
        return None
    from blockcli.sources import model_folder_config

    path = Path(source)
    if path.is_dir() or path.suffix.lower() == ".safetensors":
        path = model_folder_config(path)
    if path.suffix.lower() != ".json":
        return None
    import json

    from blockcli.families import COMPOSITES

    data = json.loads(path.read_text("utf-8"))  # already read and checked by loaded()
    model_type = data.get("model_type")
    composite = COMPOSITES.get(model_type)
    if composite is not None:
        text = data.get("text_config") if isinstance(data.get("text_config"), dict) else data
        model_type = text.get("model_type", composite.text_model_type)
    return model_type if isinstance(model_type, str) else None


# ----------------------------------------------------------------------------- presets


@app.command()
def presets(json_out: JsonOpt = False) -> None:
    """List the packaged model presets, with a one-line description and the source of each."""

    def body() -> int:
        from blockcli.config import preset_names
        from blockcli.sources import load_config

        rows = []
        for name in preset_names():
            about = load_config(name).about
            rows.append((name, about.description, about.source, about.parameters))
        if json_out:
            from blockcli.render import to_json

            from blockcli.config import preset_aliases
            from blockcli.render import versioned

            aliases = preset_aliases()
            print_out(to_json(versioned({"presets": [
                {"name": n, "description": d, "source": s, "parameters": p,
                 "aliases": sorted(a for a, name in aliases.items() if name == n)} for n, d, s, p in rows]})))
        else:
            from blockcli.render import presets_table

            console().print(presets_table(rows))
        return EXIT_OK

    run_guarded(body)


# ----------------------------------------------------------------------------- trace


class TraceFormat(str, Enum):
    table = "table"
    json = "json"
    markdown = "markdown"
    mermaid = "mermaid"


class AttentionMode(str, Enum):
    auto = "auto"
    full = "full"
    chunked = "chunked"


class Dtype(str, Enum):
    float32 = "float32"
    float64 = "float64"


@app.command()
def trace(
    config: ConfigArg = None,
    batch: Annotated[Optional[int], typer.Option(help="Override run.batch.", min=1)] = None,
    seq: Annotated[Optional[int], typer.Option(help="Override run.seq_len.", min=1)] = None,
    dtype: Annotated[Optional[Dtype], typer.Option(help="Override run.dtype.")] = None,
    weights: Annotated[Optional[Path], typer.Option(
        help="Weights: an .npz under blockcli's keys or GPT-2 names (for a model: the model's keys), or a "
             "Hugging Face model folder or .safetensors file. Default for a model folder: its own weights.")] = None,
    layer: Annotated[Optional[int], typer.Option(
        help="Trace only block N of the model, with that layer's weights.", min=0)] = None,
    input_file: Annotated[Optional[Path], typer.Option(
        "--input", help="Input .npy: (B, T, d) floats for a block, (B, T) token ids for a model.")] = None,
    save: Annotated[Optional[str], typer.Option(help="Write y and every intermediate to this .npz.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Allow --save/--export-* to overwrite an existing file.")] = False,
    shapes_only: Annotated[bool, typer.Option("--shapes-only", help="Report the rows analytically; allocate nothing.")] = False,
    attention: Annotated[AttentionMode, typer.Option(
        help="full: the whole (B, h, T, T) table; chunked: tiles of query rows, never the whole table; "
             "auto: the whole table up to 64 MiB."
    )] = AttentionMode.auto,
    all_layers: Annotated[bool, typer.Option("--all-layers", help="For a model, list every layer instead of one ×N group.")] = False,
    backward: Annotated[bool, typer.Option(
        "--backward", help="Also the backward: its rows in the order they run, gradient shapes and FLOPs, and what "
                           "the forward saved for it, measured against its closed form and count --train's figure."
    )] = False,
    show_attention: Annotated[Optional[str], typer.Option(
        metavar="[LAYER:]HEAD", help="Draw this head's attention weights for the first sequence; layers and "
                                     "heads count from 0 (2:5 is the sixth head of the third layer).")] = None,
    json_out: JsonOpt = False,
    fmt: Annotated[TraceFormat, typer.Option("--format", "-f", help="Output format.")] = TraceFormat.table,
    export_svg: Annotated[Optional[str], typer.Option(help="Also write the rendered table as SVG.")] = None,
    export_html: Annotated[Optional[str], typer.Option(help="Also write the rendered table as HTML.")] = None,
    allow_field: AllowFieldOpt = None,
    gpu: Annotated[Optional[str], typer.Option(
        "--gpu", metavar="NAME|FILE", help="Also a roofline per operation on this device (see count --gpu): bytes "
                                           "read and written, FLOP/byte, bound, time.")] = None,
) -> None:
    """Per-operation shape table of a real forward pass, with FLOPs and memory."""

    def body() -> int:
        from blockcli import render
        from blockcli.inputs import check_in_range, check_outputs, load_input, save_npz, save_text
        from blockcli.trace import (analytic_trace, available_bytes, collapse_layers, forward_bytes_estimate,
                                    run_trace, with_run)

        chosen = TraceFormat.json if json_out else fmt
        drawn = [o for o, v in (("--export-svg", export_svg), ("--export-html", export_html),
                                ("--show-attention", show_attention)) if v]
        if drawn and chosen is not TraceFormat.table:
            raise InputError(f"{drawn[0]} draws the table; it cannot be combined with --format {chosen.value}")
        if show_attention and (shapes_only or attention is AttentionMode.chunked):
            raise InputError("--show-attention needs the attention weights of a real full-table pass; "
                             "drop --shapes-only and --attention chunked")
        check_outputs({"--save": save, "--export-svg": export_svg, "--export-html": export_html}, force)
        fixed = [o for o, v in (("--batch", batch), ("--seq", seq)) if v is not None]
        if input_file is not None and fixed:
            raise InputError(f"{fixed[0]} cannot be combined with --input: the input's shape (B, T, …) "
                             f"fixes the batch and the sequence length")
        cfg = loaded(config, allow_field)
        model_cfg = None  # with --layer: the model whose weights the block takes
        chosen_weights, implicit = own_weights(config, weights)
        notes = []
        picked = layer  # the block of the weights to take (None: not picking from a model's weights)
        if config and weights is None and not implicit and Path(config).is_dir():
            notes.append(f"{config} holds no weights: seeded ones (run.seed {cfg.run.seed})")
        if layer is not None:
            if cfg.model is None and chosen_weights is None:
                raise InputError("--layer picks one block of a model; this config has no model section")
            if cfg.model is not None:
                if layer >= cfg.model.n_layers:
                    raise InputError(f"--layer {layer}: the model has layers 0..{cfg.model.n_layers - 1}")
                if cfg.layers_differ:
                    notes.append(f"layer {layer}'s block: {cfg.group_of(layer).describe()}")
                # one block, that layer's: residual stream in, residual stream out
                model_cfg, cfg = cfg, replace(cfg.for_layer(layer), model=None)
                if chosen_weights is None and model_cfg.layers_differ:
                    picked = None  # it picks the layer's block config; there are no weights to pick from
        x = load_input(input_file, cfg) if input_file is not None else None
        if x is not None:
            batch_, seq_ = x.shape[0], x.shape[1]
        else:
            batch_, seq_ = batch, seq
        cfg = with_run(cfg, batch_, seq_, dtype.value if dtype else None)
        if cfg.model is not None:
            from blockcli.sizing import check_workload

            if (past := check_workload(cfg, cfg.run.seq_len)) is not None:
                _config_notes.append(past)
        if x is not None and cfg.model is None:
            check_in_range(x, cfg.run.dtype, str(input_file))
        head = _parse_head(show_attention, cfg) if show_attention else None
        mode = attention.value
        if (save or head) and mode == "auto":
            mode = "full"  # the intermediates to save or draw exist only when the whole table is built
        demanded = weights is not None or x is not None or save is not None
        estimate = forward_bytes_estimate(cfg, mode)
        if shapes_only and not demanded:
            result = analytic_trace(cfg, mode)
        elif estimate > available_bytes():
            if demanded or head:
                raise InputError(
                    f"a real forward pass needs about {render.human_bytes(estimate)} but "
                    f"{render.human_bytes(available_bytes())} is available; try a smaller --seq or --batch, "
                    f"--attention chunked, or --shapes-only")
            result = analytic_trace(cfg, mode)
            notes.append(f"a real pass would need about {render.human_bytes(estimate)}, more than is available: "
                         f"rows are analytic (shapes only)")
        elif not (demanded or head) and (seconds := forward_seconds_estimate(cfg)) > UNASKED_PASS_SECONDS:
            result = analytic_trace(cfg, mode)
            notes.append(f"a real pass would take about {_duration(seconds)} (over {UNASKED_PASS_SECONDS} s): rows "
                         f"are analytic (shapes only); --input, --weights or --save run it anyway")
        else:
            with progress_shown(chosen is TraceFormat.table):
                result = run_trace(cfg, weights=chosen_weights, x=x, attention=mode, keep=bool(save or head),
                                   layer=picked, model_config=model_cfg)
        if implicit and result.mode == "executed":
            notes.insert(0, f"weights: the {'GGUF file' if str(config).lower().endswith('.gguf') else 'model folder'}'s "
                            f"own ({config})")
        result.notes.extend(notes)
        if shapes_only and demanded:
            result.notes.append("--shapes-only ignored: --weights/--input/--save need a real pass")
        rows = result.rows
        if cfg.model and not all_layers:
            rows = collapse_layers(rows, cfg.model.n_layers, [g.layers for g in cfg.layer_groups()])
        timed = device = None
        if gpu is not None:
            from blockcli.hardware import load_gpu

            if chosen not in (TraceFormat.table, TraceFormat.json):
                raise InputError(f"--gpu adds a table or JSON key; use --format table or json, not {chosen.value}")
            device = load_gpu(gpu)
            timed = render.trace_roofline_rows(rows, device, cfg.run.dtype, 8 if cfg.run.dtype == "float64" else 4)
        if backward and chosen is TraceFormat.mermaid:
            raise InputError("--backward has no Mermaid form; use --format table, markdown or json")
        grads = None
        if backward:
            from blockcli.trace import backward_report

            grads = backward_report(result, rows, chosen_weights, x)

        if chosen is TraceFormat.json:
            data = render.trace_json(result, rows)
            if grads is not None:
                data["backward"] = render.backward_json(grads)
            if timed is not None:
                data["roofline"] = render.trace_roofline_json(timed, device, cfg.run.dtype)
            print_out(render.to_json(data))
        elif chosen is TraceFormat.markdown:
            print_out(render.trace_markdown(result, rows) + (render.backward_markdown(grads) if grads else ""))
        elif chosen is TraceFormat.mermaid:
            print_out(render.trace_mermaid(result, rows))
        else:
            out = console(record=bool(export_svg or export_html))
            out.print(render.trace_table(result, rows))
            if grads is not None:
                out.print(render.backward_table(grads))
            if timed is not None:
                out.print(render.trace_roofline_table(timed, device, cfg.run.dtype))
            if head is not None:
                head_layer, index = head
                key = f"blocks.{head_layer}.attn_weights" if cfg.model else "attn_weights"
                out.print(render.attention_heatmap(result.arrays[key][0, index],
                                                   f"attention weights, head {index}"
                                                   + (f" of layer {head_layer}" if cfg.model else "")
                                                   + ", first sequence"))
            if export_svg:
                save_text(export_svg, out.export_svg(title="blockcli trace", clear=False), force)
            if export_html:
                save_text(export_html, out.export_html(clear=False), force)
        if save is not None:
            save_npz(save, {"y": result.output, **result.arrays}, force)
        return EXIT_OK

    run_guarded(body, [config])


def own_weights(config: Optional[str], weights: Optional[Path]) -> tuple[Optional[Path], bool]:
    """The weights to use, and whether they are a model folder's own: a folder (or .safetensors
    file) given as the config brings its weights unless --weights names others."""
    if weights is not None or config is None:
        return weights, False
    from blockcli.checkpoint import is_checkpoint_path, weight_files

    path = Path(config)
    if is_checkpoint_path(path) and weight_files(path):
        return path, True
    return None, False


def _parse_head(spec: str, cfg: Any) -> tuple[int, int]:
    """'HEAD' or 'LAYER:HEAD' → (layer, head), checked against the config."""
    layer_text, _, head_text = spec.rpartition(":")
    try:
        layer, head = int(layer_text or 0), int(head_text)
    except ValueError:
        raise InputError(f"--show-attention: expected HEAD or LAYER:HEAD as integers, got '{clipped(spec)}'") from None
    layers = cfg.model.n_layers if cfg.model else 1
    if not 0 <= layer < layers:
        raise InputError(f"--show-attention: layer {layer} is out of range 0..{layers - 1}")
    if not 0 <= head < cfg.block.n_heads:
        raise InputError(f"--show-attention: head {head} is out of range 0..{cfg.block.n_heads - 1}")
    return layer, head


UNASKED_PASS_SECONDS = 30  # a pass estimated to take longer is replaced by shapes unless asked for
DRAW_SECONDS_PER_WEIGHT = 1e-8  # NumPy's seeded normal draws run at about 10⁸ a second on one core
ASSUMED_FLOPS_PER_SECOND = 5e10  # a third of what a traced pass sustained here (1.5e11/s at T=4096), so it errs long


def forward_seconds_estimate(cfg: Any) -> float:
    """A real traced pass's time, roughly: its matmul FLOPs at ASSUMED_FLOPS_PER_SECOND, and drawing
    its seeded weights at DRAW_SECONDS_PER_WEIGHT (for a model of billions of weights, the larger part).

    2·(parameters)·B·T for the projections (every weight meets every token once) plus
    4·L·B·h·T²·d_h for the full score table and its mixing with V.
    """
    from blockcli.shapes import block_parameter_shapes, model_parameter_shapes

    b, run = cfg.block, cfg.run
    shapes = model_parameter_shapes(cfg) if cfg.model else block_parameter_shapes(b)
    params = sum(math.prod(s) for s in shapes.values())
    layers = cfg.model.n_layers if cfg.model else 1
    tokens = run.batch * run.seq_len
    flops = 2 * params * tokens + 4 * layers * tokens * run.seq_len * b.n_heads * b.head_dim
    return flops / ASSUMED_FLOPS_PER_SECOND + params * DRAW_SECONDS_PER_WEIGHT


def _duration(seconds: float) -> str:
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


# ----------------------------------------------------------------------------- verify


@app.command()
def verify(
    configs: Annotated[Optional[list[str]], typer.Argument(
        metavar="[CONFIG_OR_PRESET]...", help="One or more configs or presets (default: the built-in block).")] = None,
    only: Annotated[Optional[str], typer.Option(help="Run only these checks, e.g. 4,8.")] = None,
    skip: Annotated[Optional[str], typer.Option(help="Skip these checks, e.g. 12,13.")] = None,
    weights: Annotated[Optional[Path], typer.Option(
        help="Weights to verify instead of seeded ones: one block's .npz, or a model's (.npz, Hugging Face model "
             "folder or .safetensors file) with --layer. Default for a model folder: its own weights.")] = None,
    layer: Annotated[Optional[int], typer.Option(
        help="Which block of a model's weights to verify (default for a model folder: 0).", min=0)] = None,
    inject: Annotated[Optional[str], typer.Option(metavar="NAME",
                                                  help="Run the checklist on a seeded bug (exits 1).")] = None,
    mutants: Annotated[bool, typer.Option("--mutants", help="Run every seeded bug; print the bug × check matrix.")] = False,
    grad: Annotated[bool, typer.Option(
        "--grad", help="Also check the backward (items 20-24): gradients against finite differences and blockcli's "
                       "backward, no gradient to later positions, no dead parameter, a model's loss gradients; with "
                       "--mutants, also the backward's seeded bugs.")] = False,
    list_mutants: Annotated[bool, typer.Option("--list-mutants", help="List the seeded bugs and exit.")] = False,
    impl: Annotated[Optional[str], typer.Option(
        metavar="FILE.py:Name", help="Check your own block: Name(weights, config), or Name(config) returning a "
                                     "torch.nn.Module, called on x (B, T, d).")] = None,
    timeout: Annotated[float, typer.Option(
        help="Seconds each call of an --impl target may take (Python code only: a call stuck inside C code "
             "is interrupted when it returns).", min=0)] = 60.0,
    rtol: Annotated[Optional[float], typer.Option(
        help="Relative tolerance of item 12: it passes when max|y - ref| <= atol + rtol * max(1, max|ref|) "
             "[default: 1e-9]. Given, --rtol/--atol also loosen (never tighten) items 2, 3, 5, 6, 8 and 15.",
        min=0)] = None,
    atol: Annotated[Optional[float], typer.Option(help="Absolute tolerance added to --rtol's [default: 0].",
                                                  min=0)] = None,
    per_sequence: Annotated[bool, typer.Option(
        "--per-sequence", help="The --impl block takes one sequence (T, d): call it once per sequence "
                               "(detected when the block fails on (B, T, d) but works on (T, d)).")] = False,
    weights_map: Annotated[Optional[Path], typer.Option(
        metavar="FILE.yaml", help="For a torch.nn.Module target: parameter name (or dotted suffix) -> blockcli "
                                  "key, or a list of keys concatenated along the output axis.")] = None,
    show_traceback: Annotated[bool, typer.Option(
        "--traceback", help="Also print the traceback of each error of an --impl target to stderr.")] = False,
    json_out: JsonOpt = False,
    allow_field: AllowFieldOpt = None,
) -> None:
    """The ten-item implementation checklist as behavioural checks, with exit codes for CI."""

    def body() -> int:
        from blockcli import render
        from blockcli.mutants import MUTANTS, find_mutant, run_mutants
        from blockcli.verify import CHECKS, GRAD_CHECKS, layers_to_verify, parse_selection, unverified_layers_note
        from blockcli.verify import verify as run_checks

        if list_mutants:
            if json_out:
                print_out(render.to_json(render.list_mutants_json(MUTANTS)))
            else:
                width = max(len(m.name) for m in MUTANTS)
                print_out("\n".join(f"{m.name:<{width}}  {'(backward, --grad) ' if m.backward else ''}{m.description}"
                                    for m in MUTANTS))
            return EXIT_OK
        if impl and (inject or mutants):
            raise InputError("--impl checks your block; --inject and --mutants check blockcli's seeded bugs")
        if inject and mutants:
            raise InputError("--inject runs one seeded bug and --mutants all of them; choose one")
        if not (math.isfinite(timeout) and timeout > 0):
            raise InputError(f"--timeout: expected a positive number of seconds, got {timeout}")
        chosen_only, chosen_skip = parse_selection(only, "--only"), parse_selection(skip, "--skip")
        offered = set(CHECKS) if grad else set(CHECKS) - set(GRAD_CHECKS)  # the gradient checks: with --grad
        if not (chosen_only or offered) - (chosen_skip or set()):
            given = " ".join(f"{o} {v}" for o, v in (("--only", only), ("--skip", skip)) if v is not None)
            raise InputError(f"{given}: selects no check, so nothing would be verified")
        sources = configs or [None]
        if mutants and len(sources) > 1:
            raise InputError("--mutants runs on one config at a time")
        mutant = find_mutant(inject) if inject else None
        extra: dict[str, Any] = {"ops": mutant.ops, "formula": mutant.formula} if mutant else {}
        if (per_sequence or weights_map) and not impl:
            raise InputError(f"{'--per-sequence' if per_sequence else '--weights-map'} applies to an --impl target")
        if impl:
            from blockcli.config import read_yaml

            mapping = read_yaml(weights_map, "a weights map (YAML)") if weights_map is not None else None
            extra.update(impl=impl, timeout=timeout, per_sequence=per_sequence, weights_map=mapping)
        configs_ = [loaded(s, allow_field) for s in sources]  # every config is checked before any runs
        if mutant is not None:
            from blockcli.mutants import preset_it_shows_on, why_not

            for source, cfg in zip(sources, configs_):
                kinds = [layer] if layer is not None else layers_to_verify(cfg)
                if all(why_not(mutant, cfg, k, grad) for k in kinds):
                    why = why_not(mutant, cfg, kinds[0], grad)
                    where = preset_it_shows_on(mutant) if not (mutant.backward and not grad) else None
                    raise InputError(f"--inject {inject}: cannot show on {cfg.name} ({why})"
                                     + (f"; it shows on the preset {where}" if where else ""))
        plans = []  # per config: its weights and the layers to verify (None: verify picks, saying so)
        for source, cfg in zip(sources, configs_):
            chosen, implicit = own_weights(source, weights)
            if layer is not None:
                layers: list[Optional[int]] = [layer]
            elif impl or (chosen is not None and not implicit):  # one block: yours, or the weights given
                layers = [0 if implicit else None]
            else:  # one layer of each kind, with its own weights when the model folder has them
                layers = [0 if implicit and k is None else k for k in layers_to_verify(cfg)]
                if (aside := unverified_layers_note(cfg)) is not None:
                    _config_notes.append(aside)
            plans.append((cfg, chosen, layers))
        if grad or (chosen_only and chosen_only & set(GRAD_CHECKS)):
            refuse_mamba_backward([cfg for cfg, _, _ in plans])
        with progress_shown(not json_out):  # verify's output has no other format
            if mutants:
                cfg, chosen, layers = plans[0]
                matrices = [(which, *run_mutants(cfg, grad, weights=chosen, layer=which, only=chosen_only,
                                                 skip=chosen_skip)) for which in layers]
            else:
                grouped = [[run_checks(cfg, weights=w, layer=which, only=chosen_only, skip=chosen_skip, rtol=rtol,
                                       atol=atol, grad=grad, **extra) for which in layers] for cfg, w, layers in plans]
        if mutants:
            escaped = any(r.passed for _, rows, _ in matrices for _, r in rows)
            if json_out:
                print_out(render.to_json(render.mutants_json(matrices, plans[0][0])))
            else:
                console().print(render.mutants_matrices(matrices, plans[0][0]))
            return EXIT_FAILED if escaped else EXIT_OK
        reports = [r for group in grouped for r in group]
        if show_traceback:
            for report in reports:
                for n, text in enumerate(report.tracebacks, 1):
                    if text:
                        sys.stderr.write(f"blockcli: traceback of error {n}:\n{text}")
        if json_out:
            print_out(render.to_json(render.verify_json(grouped)))
        elif len(grouped) == 1:
            what = (f" with seeded bug '{inject}'" if inject else "") + (f" on {impl}" if impl else "")
            console().print(render.verify_tables(grouped[0], what))
        else:
            console().print(render.verify_summaries(reports))
        return EXIT_OK if all(r.passed for r in reports) else EXIT_FAILED

    run_guarded(body, configs or [])


# ----------------------------------------------------------------------------- report


@app.command()
def report(
    configs: Annotated[Optional[list[str]], typer.Argument(
        metavar="[CONFIG_OR_DIR] [OTHER]",
        help="A config, preset or model folder (default: the built-in block); a second one puts the two side "
             "by side with their differences highlighted.")] = None,
    output: Annotated[str, typer.Option(
        "--output", "-o", metavar="FILE.html", help="Where to write the page; - for standard output.")] = "report.html",
    force: Annotated[bool, typer.Option("--force", help="Allow --output to overwrite an existing file.")] = False,
    seq: Annotated[Optional[int], typer.Option(
        help="Tokens per sequence T of the workload (default: run.seq_len).", min=1)] = None,
    batch: Annotated[Optional[int], typer.Option(help="Sequences B of the workload (default: run.batch).", min=1)] = None,
    dtype: Annotated[Optional[SizeDtype], typer.Option(
        help="Dtype of weights and activations for the memory figures (default: run.dtype).")] = None,
    kv_dtype: Annotated[Optional[KvDtype], typer.Option("--kv-dtype", help=KV_HELP)] = None,
    train_log: Annotated[Optional[Path], typer.Option(
        "--train-log", metavar="FILE.json",
        help='Draw a training run\'s loss and gradient norm: {"steps": [{"step", "loss", "grad_norm"}, ...]}, '
             "as `blockcli train --json` writes.")] = None,
    allow_field: AllowFieldOpt = None,
) -> None:
    """One self-contained HTML page of a model: overview, diagram, parameters, shapes, attention maps, cost, checklist."""

    def body() -> int:
        from blockcli import report as pages
        from blockcli.inputs import save_text

        sources = configs or [None]
        if len(sources) > 2:
            raise InputError(f"report takes one config, or two to compare; got {len(sources)}")
        if output != "-":
            from blockcli.inputs import check_writable

            check_writable(output, force, "--output")
        loaded_configs = [loaded(s, allow_field) for s in sources]  # every config is read before any work
        reports = []
        for source, cfg in zip(sources, loaded_configs):
            chosen, _ = own_weights(source, None)
            reports.append(pages.build(cfg, source or "", weights=chosen, seq=seq, batch=batch,
                                       dtype=dtype.value if dtype else None,
                                       kv_dtype=kv_dtype.value if kv_dtype else None, train_log=train_log))
        # the command that makes this page, where it is written left out: the same page from any -o
        workload = [f"{o} {v}" for o, v in (("--seq", seq), ("--batch", batch), ("--dtype", dtype and dtype.value),
                                             ("--kv-dtype", kv_dtype and kv_dtype.value),
                                             ("--train-log", train_log)) if v is not None]
        command = " ".join(["blockcli report", *(one_line(s) for s in configs or []), *workload])
        text = pages.page(reports[0], command) if len(reports) == 1 else pages.compare_page(*reports, command)
        if output == "-":
            print_out(text)
        else:
            save_text(output, text, force)
            print_out(f"wrote {one_line(output)} ({render_size(len(text.encode('utf-8')))})")
        return EXIT_FAILED if any(r.failed for r in reports) else EXIT_OK

    run_guarded(body, configs or [])


@app.command()
def train(
    config: Annotated[Optional[str], typer.Argument(
        metavar="[CONFIG_OR_DIR]", help="A config with a model section, a preset or a model folder (its own weights "
                                        "are trained). Default: a tiny GPT-2-shaped model over 256 byte ids.")] = None,
    batch: Annotated[Optional[int], typer.Option(help="Sequences B in the batch (default: run.batch).", min=1)] = None,
    seq: Annotated[Optional[int], typer.Option(help="Tokens T per sequence (default: run.seq_len).", min=2)] = None,
    text: Annotated[Optional[Path], typer.Option(
        "--text", metavar="FILE", help="Train on this file's UTF-8 bytes (ids 0..255) instead of random ids.")] = None,
    steps: Annotated[int, typer.Option(help="AdamW steps on the one batch.")] = 100,
    lr: Annotated[float, typer.Option(help="Learning rate.")] = 1e-2,
    weight_decay: Annotated[float, typer.Option(
        "--weight-decay", help="Decoupled weight decay, on the matrices only.")] = 0.0,
    seed: Annotated[Optional[int], typer.Option(
        help="Seed of the weights and the random batch (default: run.seed).", min=0)] = None,
    dtype: Annotated[Optional[Dtype], typer.Option(help="float32 or float64 (default: run.dtype).")] = None,
    expect_loss: Annotated[Optional[float], typer.Option(
        "--expect-loss", metavar="X", help="Exit 1 unless the final loss is below X (a CI gate: the model can learn).")
    ] = None,
    save: Annotated[Optional[Path], typer.Option(
        "--save", metavar="DIR", help="Write the trained model as a Hugging Face folder (config.json + "
                                      "model.safetensors) that blockcli and transformers load.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Allow --save to replace the files of an existing folder.")
    ] = False,
    json_out: JsonOpt = False,
    allow_field: AllowFieldOpt = None,
) -> None:
    """Overfit one tiny batch with AdamW: the reference chapter's last milestone, the model learning."""

    def body() -> int:
        import math as _math
        from dataclasses import replace

        from blockcli import render
        from blockcli import train as training
        from blockcli.block import Model
        from blockcli.config import parse_config

        if expect_loss is not None and not _math.isfinite(expect_loss):
            raise InputError(f"--expect-loss: expected a finite number, got {expect_loss}")
        training.check_hyperparameters(steps, lr, weight_decay)
        cfg = loaded(config, allow_field) if config is not None else parse_config(training.DEFAULT_MODEL,
                                                                                  name="default tiny model")
        if cfg.model is None:
            raise InputError(f"{cfg.name}: a single block; training needs a model (a 'model' section with n_layers "
                             f"and vocab_size)")
        run = cfg.run
        B, T, seed_ = batch or run.batch, seq or run.seq_len, run.seed if seed is None else seed
        if cfg.model.positions == "learned" and T > cfg.model.max_positions:
            raise InputError(f"--seq {T}: the model's learned positions stop at {cfg.model.max_positions}")
        weights, folder = own_weights(config, None)
        model = Model.from_config(replace(cfg, run=replace(run, seed=seed_)), weights=weights,
                                  dtype=dtype.value if dtype else None)
        if weights is None:
            training.trainer_init(model, seed_)
        ids = (training.text_batch(text, B, T, cfg.model.vocab_size) if text is not None
               else training.random_batch(cfg.model.vocab_size, B, T, seed_))
        if save is not None and save.exists() and not save.is_dir():
            raise InputError(f"--save {save}: exists and is not a folder")
        history = _train_with_progress(training, model, ids, steps, lr, weight_decay, show=not json_out)
        written = ([str(p) for p in training.save_folder(model, save, force, Path(config) / "config.json"
                                                          if model.stored else None)]
                   if save is not None else [])
        passed = expect_loss is None or history[-1].loss < expect_loss
        if json_out:
            print_out(render.to_json(render.train_json(cfg.name, history, cfg.model.vocab_size, expect_loss, written)))
        else:
            console().print(render.train_table(cfg.name, history, cfg.model.vocab_size, expect_loss))
            for path in written:
                print_out(f"wrote {one_line(path)}")
        return EXIT_OK if passed else EXIT_FAILED

    run_guarded(body, [config] if config else [])


def _train_with_progress(training: Any, model: Any, ids: Any, steps: int, lr: float, weight_decay: float,
                         show: bool) -> list[Any]:
    """The training loop, with a Rich progress bar and the latest loss on a terminal (none in a pipe or with --json)."""
    out = console(stderr=True)
    if not show or not out.is_terminal or not sys.stdout.isatty():
        return training.train(model, ids, steps, lr, weight_decay)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("training"), BarColumn(), MofNCompleteColumn(), TextColumn("loss {task.fields[loss]}"),
                  TimeRemainingColumn(), console=out, transient=True) as progress:
        task = progress.add_task("train", total=steps, loss="…")
        return training.train(model, ids, steps, lr, weight_decay,
                              on_step=lambda s: progress.update(task, advance=1, loss=f"{s.loss:.4f}"))


def render_size(n: int) -> str:
    from blockcli.units import human_bytes

    return human_bytes(n)


# ----------------------------------------------------------------------------- convert


@app.command()
def convert(
    hf_config: Annotated[Path, typer.Argument(metavar="CONFIG_JSON",
                                              help="A Hugging Face config.json, or a model folder holding one.")],
    output: Annotated[Optional[str], typer.Option("--output", "-o", help="Write the YAML here instead of stdout.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Allow --output to overwrite an existing file.")] = False,
    allow_field: AllowFieldOpt = None,
) -> None:
    """Print the blockcli YAML equivalent of a Hugging Face config.json."""

    def body() -> int:
        from blockcli.count import count_parameters
        from blockcli.hf import read_hf, to_yaml

        if output is not None:
            from blockcli.inputs import check_writable

            check_writable(output, force, "--output")
        source, tensors = hf_config, False
        if source.is_dir() or source.suffix.lower() == ".safetensors":
            from blockcli.sources import holds_tensors, model_folder_config

            source, tensors = model_folder_config(source), holds_tensors(source)
        if source.suffix.lower() == ".gguf":
            from blockcli.gguf_file import read_gguf_config

            mapping, cfg = read_gguf_config(source)
        else:
            mapping, cfg = read_hf(source, tuple(allow_field or ()), tensors_beside=tensors)
        _config_notes.extend(cfg.notes)
        total = count_parameters(cfg).total
        mapping["about"]["parameters"] = total
        text = to_yaml(mapping, f"Converted by `blockcli convert {one_line(hf_config.name)}`.\n"
                                f"Expected parameters: {total:,}.")
        if output is None:
            print_out(text)
        else:
            from blockcli.inputs import save_text

            save_text(output, text, force)
        return EXIT_OK

    run_guarded(body)


def main() -> None:
    """Entry point of the `blockcli` script and `python -m blockcli`.

    Runs the app outside Click's standalone mode so that a usage error (unknown option, bad
    choice) is reported like every other input error: one line on stderr, exit code 2.
    """
    if sys.stdout is None:  # started with stdout closed (`>&-`): a result would vanish without a trace
        sys.stderr.write("blockcli: error: standard output is closed; nothing to write the result to\n")
        sys.exit(EXIT_USAGE)
    sys.stdout = GuardedStdout(sys.stdout)
    for signum in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if signum is not None and signal.getsignal(signum) is signal.SIG_DFL:
            signal.signal(signum, _terminate)
    if hasattr(signal, "SIGXFSZ"):  # past a file-size limit a write fails with EFBIG instead of killing us
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        code = app_for(sys.argv[1:])(standalone_mode=False)
        sys.stdout.flush()
    except OutputError as exc:
        sys.stderr.write(f"blockcli: error: {exc}\n")
        sys.exit(EXIT_USAGE)
    except Exception as exc:
        if not any(cls.__name__ == "UsageError" for cls in type(exc).__mro__):
            raise
        where = f"{exc.ctx.command_path}: " if getattr(exc, "ctx", None) is not None else ""
        message = " ".join(exc.format_message().split())
        message = re.sub(r"'([^']{61,})'", lambda quoted: f"'{clipped(quoted[1])}'", message)  # a 5,000-digit --seq
        sys.stderr.write(f"blockcli: error: {where}{message} (see --help)\n")
        sys.exit(EXIT_USAGE)
    except Terminated as exc:
        sys.stderr.write(f"blockcli: error: terminated by {signal.Signals(exc.signum).name}\n")
        sys.exit(128 + exc.signum)
    except KeyboardInterrupt:
        sys.stderr.write("blockcli: error: interrupted\n")
        _exit(EXIT_INTERRUPTED)
    _exit(code if isinstance(code, int) else EXIT_OK)


def _exit(code: int) -> NoReturn:
    """sys.exit, unless an --impl target left a non-daemon thread running (verify has waited for it and said so):
    the interpreter would join it forever, so the process ends at once, its output flushed."""
    import threading

    if threading.active_count() > 1:
        from blockcli.parallel import foreign_threads

        if foreign_threads():
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            os._exit(code)
    sys.exit(code)


def app_for(args: Sequence[str]) -> typer.Typer:
    """The app with only the command `args` start with, when they name one: Typer builds every
    command's options at each start, and building the ones not run took 13 ms of `count`'s start-up
    here. The whole app for anything else (--help, --version, a mistyped command)."""
    import copy

    chosen = [c for c in app.registered_commands
              if args and (c.name or typer.main.get_command_name(c.callback.__name__)) == args[0]]
    if not chosen:
        return app
    only = copy.copy(app)
    only.registered_commands = chosen
    return only


def _terminate(signum: int, _frame: Any) -> None:
    """SIGTERM/SIGHUP: raise Terminated once; a second signal during the clean-up is ignored."""
    for other in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if other is not None:
            signal.signal(other, signal.SIG_IGN)
    raise Terminated(signum)
