"""Reading user input arrays (.npy) and writing results (.npz) safely.

Never unpickles; validates rank, dtype and finiteness; writes through a temporary file in the
target folder and renames it into place, so an interrupted run leaves no half-written file and
an existing file is replaced only when the caller was told to force it.
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any, BinaryIO, Callable, Mapping

import numpy as np

from blockcli.config import Config, InputError, reading


def _load(path: Path, expected: str) -> Any:
    """np.load without pickle; every problem becomes one InputError line naming the file."""
    with reading(path, expected):
        try:
            return np.load(path, allow_pickle=False)
        except ValueError as exc:
            if "pickle" in str(exc).lower():
                raise InputError(f"{path}: holds pickled object arrays, which blockcli refuses to load") from None
            raise InputError(f"{path}: not a valid {expected} ({exc})") from None
        except (EOFError, zipfile.BadZipFile) as exc:
            raise InputError(f"{path}: not a valid {expected} ({exc})") from None
        except OSError as exc:
            if isinstance(exc, (FileNotFoundError, IsADirectoryError, PermissionError)):
                raise
            raise InputError(f"{path}: not a valid {expected} ({exc})") from None


def load_npz(path: str | Path) -> dict[str, np.ndarray]:
    """Named arrays from an .npz archive (weights)."""
    path = Path(path)
    data = _load(path, ".npz archive")
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise InputError(f"{path}: is a single .npy array, expected an .npz archive of named weights")
    with data:
        try:
            return {key: data[key] for key in data.files}
        except ValueError as exc:  # a member holding pickled objects is refused when it is read
            raise InputError(f"{path}: holds pickled object arrays, which blockcli refuses to load"
                             if "pickle" in str(exc).lower() else f"{path}: not a valid .npz archive ({exc})") from None
        except (EOFError, OSError, zipfile.BadZipFile) as exc:
            raise InputError(f"{path}: not a valid .npz archive ({exc})") from None


def load_input(path: Path, config: Config) -> np.ndarray:
    """(B, T, d) floats for a block, (B, T) integer token ids for a model."""
    x = _load(path, ".npy file")
    if not isinstance(x, np.ndarray):
        x.close()
        raise InputError(f"{path}: is an .npz archive, expected a single .npy array")
    if config.model is not None:
        check_token_ids(x, config.model.vocab_size, str(path))
    else:
        d = config.block.d_model
        if x.ndim != 3 or x.shape[-1] != d:
            raise InputError(f"{path}: expected shape (B, T, d={d}), got {x.shape}")
        if x.dtype.kind not in "fiu":
            raise InputError(f"{path}: expected real numbers, got dtype {x.dtype}")
        if not np.all(np.isfinite(x)):
            raise InputError(f"{path}: contains NaN or Inf")
    if 0 in x.shape:
        raise InputError(f"{path}: is empty (shape {x.shape})")
    return x


def check_token_ids(ids: Any, vocab_size: int, source: str = "input") -> None:
    """Token ids must be an integer (B, T) array with every id in [0, vocab_size)."""
    if not isinstance(ids, np.ndarray) or ids.ndim != 2 or ids.dtype.kind not in "iu" or 0 in ids.shape:
        shape = getattr(ids, "shape", type(ids).__name__)
        raise InputError(f"{source}: expected integer token ids of shape (B, T) with B, T >= 1, got "
                         f"{getattr(ids, 'dtype', '')} {shape}")
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        raise InputError(f"{source}: token ids must lie in [0, {vocab_size}), found {ids.min()}..{ids.max()}")


def save_npz(path: Path, arrays: Mapping[str, Any], force: bool = False) -> None:
    """Write arrays to `path` atomically; refuse to replace an existing file unless `force`."""
    write_atomically(path, lambda f: np.savez(f, **arrays), force)


def save_text(path: Path, text: str, force: bool = False) -> None:
    write_atomically(path, lambda f: f.write(text.encode("utf-8")), force)


def check_writable(path: Path, force: bool = False, label: str = "") -> None:
    """An output file must not exist (unless forced), must not be a directory, and its folder must exist."""
    where = f"{label} {path}" if label else str(path)
    if path.is_dir():
        raise InputError(f"{where}: is a directory")
    if path.exists() and not force:
        raise InputError(f"{where}: file exists; pass --force to overwrite it")
    if not (path.parent if str(path.parent) else Path(".")).is_dir():
        raise InputError(f"{where}: folder {path.parent} does not exist")


def write_atomically(path: Path, write: Callable[[BinaryIO], Any], force: bool = False) -> None:
    """Write through a temporary file in the target folder, then rename it into place."""
    check_writable(path, force)
    folder = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".blockcli-", suffix=path.suffix, dir=folder)
    except OSError as exc:
        raise InputError(f"{path}: cannot write here ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
