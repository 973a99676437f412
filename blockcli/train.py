"""Milestone 10 of the reference chapter as a command: shifted targets, cross-entropy, overfit one tiny batch.

`train` runs AdamW (Loshchilov & Hutter; torch.optim.AdamW's update, betas 0.9 and 0.999, ε 1e-8) in NumPy on
`Model.backward_pass`'s gradients, step by step on one batch, reporting each step's loss and gradient norm to a
callback. Weight decay is decoupled and applied to the matrices (2-D and up) only, as nanoGPT and most recipes
do; norms' scales, biases and one-dimensional parameters are not decayed. The batch is random token ids
(seeded) or a text file's UTF-8 bytes, a byte-level vocabulary of 256 ids.

Seeded weights start as a trainer would start them: blockcli's seeded init gives embeddings N(0, 1) (to keep
activations at unit scale for the forward checks), which makes a tied head's first logits huge; here the token
and position embeddings and an untied head are scaled to N(0, 0.02²), GPT-2's initialisation, so the first loss
sits near ln V. A model folder's own weights are used as they are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from blockcli.block import Model, complete_grads
from blockcli.config import InputError
from blockcli.parallel import one_blas_thread_if
from blockcli.shapes import is_buffer

# The model `blockcli train` builds when given none: GPT-2's block, tiny, over a byte vocabulary
DEFAULT_MODEL = {
    "about": {"description": "blockcli train's default: a tiny GPT-2-shaped model over 256 byte ids"},
    "block": {"d_model": 64, "n_heads": 4, "d_ff": 256},
    "model": {"n_layers": 2, "vocab_size": 256, "positions": "learned", "max_positions": 128},
    "run": {"batch": 4, "seq_len": 32, "dtype": "float32", "seed": 0},
}
INIT_STD = 0.02  # the embeddings' (and an untied head's) standard deviation when the weights are seeded
BETAS, EPS = (0.9, 0.999), 1e-8
MAX_STEPS = 1_000_000
# a step's multiply-adds below which BLAS runs on one thread (tokens × parameters; the default model's is 1.3e7)
SMALL_STEP_WORK = 2**27


@dataclass(frozen=True)
class Step:
    step: int  # 1-based: the loss of the batch before this step's update, and the gradient it took
    loss: float
    grad_norm: float  # the L2 norm of every parameter's gradient together


def random_batch(vocab_size: int, batch: int, seq_len: int, seed: int) -> np.ndarray:
    """(B, T) token ids drawn uniformly from the vocabulary."""
    return np.random.default_rng(seed).integers(0, vocab_size, size=(batch, seq_len), dtype=np.int64)


def text_batch(path: Path, batch: int, seq_len: int, vocab_size: int) -> np.ndarray:
    """(B, T) ids: the file's UTF-8 bytes, B consecutive runs of T (the text repeated if it is shorter)."""
    from blockcli.config import read_capped

    if vocab_size < 256:
        raise InputError(f"--text: bytes take 256 ids, but the model's vocabulary is {vocab_size}")
    raw = read_capped(path, "a UTF-8 text file", 64 * 2**20)
    if not raw:
        raise InputError(f"{path}: empty; expected text to train on")
    if b"\x00" in raw:
        raise InputError(f"{path}: binary file, expected UTF-8 text")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    ids = np.frombuffer(raw, dtype=np.uint8).astype(np.int64)
    ids = np.resize(ids, batch * seq_len)  # repeated cyclically if shorter than the batch
    return ids.reshape(batch, seq_len)


def trainer_init(model: Model, seed: int) -> None:
    """Seeded embeddings and head redrawn N(0, INIT_STD²) (see the module docstring)."""
    rng = np.random.default_rng(seed + 1)
    for name in ("wte", "wpe", "lm_head"):
        if name in model.params:
            p = model.params[name]
            p[...] = INIT_STD * rng.standard_normal(p.shape)


def check_hyperparameters(steps: int, lr: float, weight_decay: float) -> None:
    if not 1 <= steps <= MAX_STEPS:
        raise InputError(f"--steps: expected 1..{MAX_STEPS:,}, got {steps}")
    if not (math.isfinite(lr) and lr > 0):
        raise InputError(f"--lr: expected a positive finite learning rate, got {lr}")
    if not (math.isfinite(weight_decay) and weight_decay >= 0):
        raise InputError(f"--weight-decay: expected a finite rate >= 0, got {weight_decay}")


def train(model: Model, ids: np.ndarray, steps: int, lr: float, weight_decay: float,
          on_step: Callable[[Step], None] | None = None) -> list[Step]:
    """`steps` AdamW updates of the model's parameters (in place) on the batch `ids` (B, T), predicting each
    next id; returns every step's loss and gradient norm (the loss before that step's update)."""
    check_hyperparameters(steps, lr, weight_decay)
    params = {k: v for k, v in model.params.items() if not is_buffer(k)}  # a buffer is not trained
    small = ids.size * sum(v.size for v in params.values()) < SMALL_STEP_WORK
    # a diverging run (too large an --lr) is refused by its non-finite loss in one line, without NumPy's warnings
    with one_blas_thread_if(small), np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return _steps(model, params, ids, steps, lr, weight_decay, on_step)


def _steps(model: Model, params: dict[str, np.ndarray], ids: np.ndarray, steps: int, lr: float,
           weight_decay: float, on_step: Callable[[Step], None] | None) -> list[Step]:
    moments = {k: (np.zeros_like(v), np.zeros_like(v)) for k, v in params.items()}
    (beta1, beta2), history = BETAS, []
    for t in range(1, steps + 1):
        loss, tape = model.backward_pass(ids)
        grads = complete_grads(tape.grads, model.params)
        norm = math.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in grads.values()))
        if not (math.isfinite(loss) and math.isfinite(norm)):
            raise InputError(f"step {t}: the loss or the gradient is no longer finite (loss {loss}); "
                             f"try a smaller --lr")
        record = Step(t, float(loss), norm)
        history.append(record)
        if on_step is not None:
            on_step(record)
        for k, p in params.items():  # torch.optim.AdamW: decoupled decay, then the bias-corrected step
            g, (m, v) = grads[k], moments[k]
            if weight_decay and p.ndim >= 2:
                p *= 1.0 - lr * weight_decay
            m *= beta1
            m += (1.0 - beta1) * g
            v *= beta2
            v += (1.0 - beta2) * g * g
            p -= (lr / (1.0 - beta1 ** t)) * m / (np.sqrt(v / (1.0 - beta2 ** t)) + EPS)
    return history


def sparkline(values: list[float], width: int = 60) -> str:
    """The curve in block characters, one per bucket of steps (its mean), lowest ▁ to highest █."""
    bars = "▁▂▃▄▅▆▇█"
    if not values:
        return ""
    buckets = [values[i * len(values) // width:(i + 1) * len(values) // width] or [values[min(i, len(values) - 1)]]
               for i in range(min(width, len(values)))]
    means = [sum(b) / len(b) for b in buckets]
    low, high = min(means), max(means)
    return "".join(bars[0 if high == low else int((x - low) / (high - low) * (len(bars) - 1))] for x in means)


def save_folder(model: Model, folder: Path, force: bool, config_json: Path | None = None) -> list[Path]:
    """Write the model as a Hugging Face folder, config.json + model.safetensors, each atomically: a model read
    from a folder under that folder's config.json and its tensors' names and layouts; a seeded one as GPT-2 or
    Llama (hf.to_hf, which refuses any other shape). Existing files are replaced only with `force`."""
    import json

    from safetensors.numpy import save

    from blockcli.checkpoint import SINGLE, layout_of, to_stored
    from blockcli.hf import to_hf
    from blockcli.inputs import write_atomically

    if model.stored:
        assert config_json is not None, "a model read from a folder is saved under that folder's config.json"
        config_text = config_json.read_text("utf-8")
        if "text_config" in json.loads(config_text):
            raise InputError(f"--save: {config_json.parent} is a vision-language model; blockcli holds only its "
                             f"language model, so it cannot write the whole folder back")
        matches = model.stored
    else:
        data = to_hf(model.config)
        config_text = json.dumps(data, indent=2) + "\n"
        matches = layout_of(model.config, data["model_type"])
    tensors = to_stored(matches, model.params, model.config.block.n_heads, buffers=True, config=model.config)
    # ascontiguousarray makes a 0-dimensional tensor (xIELU's β, ε) (1,): its shape is put back
    blob = save({k: np.ascontiguousarray(v).reshape(v.shape) for k, v in tensors.items()}, metadata={"format": "pt"})
    if folder.exists() and not folder.is_dir():
        raise InputError(f"--save {folder}: exists and is not a folder")
    folder.mkdir(parents=True, exist_ok=True)
    written = [folder / "config.json", folder / SINGLE]
    for path, content in zip(written, (config_text.encode("utf-8"), blob)):
        write_atomically(path, lambda f, content=content: f.write(content), force)
    return written
