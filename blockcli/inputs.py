"""Reading user input arrays (.npy, .npz) and writing results (.npz, text) safely.

Reading: only regular files (a device or a FIFO is refused before it is read), never unpickling;
an .npz archive's member headers are checked (duplicate names, a declared shape the data cannot
hold, more data than the caller allows) before any array is read.

Writing: through a temporary file in the target folder, then linked into place only if the name is
still free (an exclusive create, so of two concurrent runs exactly one wins) or, with `force`,
renamed over an existing regular file. An interrupted run (Ctrl-C, SIGTERM, SIGHUP) or a full disk
leaves no half-written file; files get the mode the umask gives (0666 & ~umask).
"""

from __future__ import annotations

import errno
import math
import os
import signal
import stat
import tempfile
import threading
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator, Mapping

import numpy as np

from blockcli.config import Config, InputError, file_kind, open_regular, reading
from blockcli.units import human_bytes

NPY_MAGIC = b"\x93NUMPY"


def _load(path: Path, expected: str) -> Any:
    """np.load of a regular file without pickle; every problem becomes one InputError line naming the file."""
    with open_regular(path, expected) as f, reading(path, expected):
        try:
            if f.read(len(NPY_MAGIC)) == NPY_MAGIC:
                f.seek(0)
                _check_npy_header(f, os.fstat(f.fileno()).st_size, path)
            f.seek(0)
            return np.load(f, allow_pickle=False)
        except InputError:
            raise
        except ValueError as exc:
            if "pickle" in str(exc).lower():
                raise InputError(f"{path}: holds pickled object arrays, which blockcli refuses to load") from None
            raise InputError(f"{path}: not a valid {expected} ({exc})") from None
        except (EOFError, zipfile.BadZipFile) as exc:
            raise InputError(f"{path}: not a valid {expected} ({exc})") from None


def load_npz(path: str | Path, limit: int | None = None,
             expected: Mapping[str, tuple[int, ...]] | None = None) -> dict[str, np.ndarray]:
    """Named arrays from an .npz archive (weights); at most `limit` bytes of array data in all, and
    each member named in `expected` of exactly that shape (both checked before any data is read)."""
    path = Path(path)
    with open_regular(path, ".npz archive") as f, reading(path, ".npz archive"):
        if f.read(len(NPY_MAGIC)) == NPY_MAGIC:
            raise InputError(f"{path}: is a single .npy array, expected an .npz archive of named weights")
        f.seek(0)
        try:
            with zipfile.ZipFile(f) as archive:
                return _read_members(archive, path, limit, expected or {})
        except InputError:
            raise
        except (EOFError, zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, ValueError) as exc:
            raise InputError(f"{path}: not a valid .npz archive ({exc})") from None


def _read_members(archive: zipfile.ZipFile, path: Path, limit: int | None,
                  expected: Mapping[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """Check every member's header against what it holds, `limit` and `expected`, then read the arrays."""
    infos = archive.infolist()
    seen: set[str] = set()
    for info in infos:
        if info.filename in seen:
            raise InputError(f"{path}: holds two members named '{info.filename}'; each weight must appear once")
        seen.add(info.filename)
    unpacked = sum(info.file_size for info in infos)
    if limit is not None and unpacked > limit:
        largest = max(infos, key=lambda i: i.file_size)
        raise InputError(f"{path}: unpacks to {human_bytes(unpacked)} ('{largest.filename}' alone "
                         f"{human_bytes(largest.file_size)}), more than the {human_bytes(limit)} this config's "
                         f"weights can take; refused before reading")
    for info in infos:
        key = info.filename.removesuffix(".npy")
        with archive.open(info) as member:
            if member.read(len(NPY_MAGIC)) != NPY_MAGIC:
                raise InputError(f"{path}: member '{info.filename}' is not a .npy array")
            member.seek(0)
            shape = _check_npy_header(member, info.file_size, path, f" member '{key}'")
        if key in expected and shape != tuple(expected[key]):
            raise InputError(f"{path}: weight '{key}' has shape {shape}, expected {tuple(expected[key])}")
    out = {}
    for info in infos:
        with archive.open(info) as member:
            out[info.filename.removesuffix(".npy")] = np.lib.format.read_array(member, allow_pickle=False)
    return out


def _check_npy_header(fp: Any, size: int, path: Path, member: str = "") -> tuple[int, ...]:
    """A .npy header (at `fp`, in a file or archive member of `size` bytes) must declare no objects and
    exactly the data that follows it: a header claiming a (10⁶, 10⁶) array is refused before anything
    is allocated."""
    version = np.lib.format.read_magic(fp)
    reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, _, dtype = reader(fp)
    if dtype.hasobject:
        raise InputError(f"{path}: holds pickled object arrays, which blockcli refuses to load")
    declared, held = math.prod(shape) * dtype.itemsize, size - fp.tell()
    if declared != held:
        raise InputError(f"{path}:{member} its header declares a {dtype} array of shape {shape} "
                         f"({human_bytes(declared)}) but {human_bytes(max(held, 0))} of data follow")
    return shape


def check_in_range(values: np.ndarray, dtype: str, source: str) -> None:
    """Finite float64 values beyond `dtype`'s range (1e39 in a float32 run) are refused, naming `source`."""
    if values.dtype.kind != "f" or np.dtype(dtype).itemsize >= values.dtype.itemsize or not values.size:
        return
    peak = float(np.max(np.abs(values)))
    top = float(np.finfo(dtype).max)
    if peak > top:
        raise InputError(f"{source}: holds {peak:.3g}, out of {dtype} range (±{top:.3g}); "
                         f"use --dtype float64 or smaller values")


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


def save_npz(path: str | Path, arrays: Mapping[str, Any], force: bool = False) -> None:
    """Write arrays to `path` atomically; refuse to replace an existing file unless `force`."""
    write_atomically(path, lambda f: _write_npz(f, arrays), force)


def _write_npz(f: BinaryIO, arrays: Mapping[str, Any]) -> None:
    """What np.savez writes (one stored `KEY.npy` member per array), with signals held while a member is
    written: a signal inside ZipFile's bookkeeping would leave a member open, and the archive's
    finaliser would print a traceback after the run was cleaned up. So Ctrl-C, SIGTERM and SIGHUP are
    acted on between arrays (the largest intermediate here takes a fraction of a second). The archive is
    opened and closed with them held too: one landing inside ZipFile's constructor leaves a half-built
    object whose finaliser fails on the missing attributes, and one acted on just after it must still
    close the archive while `f` is open (else the finaliser seeks in a closed file)."""
    archive = None
    try:
        with _signals_held():
            archive = zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True)
        for key, value in arrays.items():
            with _signals_held(), archive.open(f"{key}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)
    finally:
        if archive is not None:
            with _signals_held():
                archive.close()


def save_text(path: str | Path, text: str, force: bool = False) -> None:
    write_atomically(path, lambda f: f.write(text.encode("utf-8")), force)


def check_writable(path: str | Path, force: bool = False, label: str = "") -> None:
    """An output must name a file (no trailing slash) in an existing folder, and must not exist,
    unless `force`, which replaces only a regular file (never a device, FIFO, link or folder)."""
    text = str(path)
    where = f"{label} {text}" if label else text
    if text.endswith(("/", os.sep)):
        raise InputError(f"{where}: a trailing slash names a folder; expected a file name")
    path = Path(text)
    folder = path.parent if str(path.parent) else Path(".")
    try:
        folder_mode = os.stat(folder).st_mode
    except FileNotFoundError:
        raise InputError(f"{where}: folder {folder} does not exist") from None
    except OSError as exc:
        if exc.errno == errno.ENOTDIR:
            raise InputError(f"{where}: {_first_file(folder)} is a file, not a folder") from None
        raise InputError(f"{where}: cannot reach folder {folder} ({exc.strerror or exc})") from None
    if not stat.S_ISDIR(folder_mode):
        raise InputError(f"{where}: {folder} is {file_kind(folder_mode)}, not a folder")
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        raise InputError(f"{where}: is a directory")
    if not stat.S_ISREG(mode):
        raise InputError(f"{where}: exists and is {file_kind(mode)}; blockcli writes only to a new file "
                         f"or, with --force, over a regular file")
    if not force:
        raise InputError(f"{where}: file exists; pass --force to overwrite it")


def _first_file(folder: Path) -> Path:
    """The first component of `folder` that exists and is not a folder (for `c.yaml/y.npz`)."""
    for part in reversed((folder, *folder.parents)):
        if part.exists() and not part.is_dir():
            return part
    return folder


def check_outputs(outputs: Mapping[str, str | Path | None], force: bool = False) -> None:
    """Every output writable (see check_writable), and no two naming the same file, before anything is written."""
    given = {label: str(path) for label, path in outputs.items() if path is not None}
    for label, path in given.items():
        check_writable(path, force, label)
    seen: dict[str, str] = {}
    for label, path in given.items():
        real = os.path.realpath(path)
        if real in seen:
            raise InputError(f"{seen[real]} and {label} both name {path}; give each output its own file")
        seen[real] = label


def _umask() -> int:
    """The process's umask (reading it means setting it, so it is set straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomically(path: str | Path, write: Callable[[BinaryIO], Any], force: bool = False) -> None:
    """Write through a temporary file in the target folder, then put it in place.

    Without `force` the temporary file is hard-linked to the name, which fails if the name exists:
    an exclusive create, so a concurrent writer cannot be overwritten. With `force` it is renamed
    over the existing regular file. The file's mode is 0666 & ~umask, as for any new file.
    """
    check_writable(path, force)
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    tmp = ""
    try:
        with _signals_held():  # a signal now would leave a file nobody knows the name of
            try:
                fd, tmp = tempfile.mkstemp(prefix=".blockcli-", suffix=path.suffix, dir=folder)
            except OSError as exc:
                raise InputError(f"{path}: cannot write here ({exc.strerror or exc})") from None
        try:
            with os.fdopen(fd, "wb") as f:
                os.fchmod(fd, 0o666 & ~_umask())
                write(f)
        except OSError as exc:  # a full disk (ENOSPC), a file-size limit (EFBIG), an I/O error
            raise InputError(f"{path}: cannot write ({exc.strerror or exc}); nothing was written") from None
        if force:
            check_writable(path, force)  # still a regular file (or absent) just before it is replaced
            os.replace(tmp, path)
        else:
            _link_exclusively(tmp, path)
    finally:
        with _signals_held():  # nor may a signal interrupt the clean-up
            if tmp:
                Path(tmp).unlink(missing_ok=True)


@contextmanager
def _signals_held() -> Iterator[None]:
    """Hold Ctrl-C, SIGTERM and SIGHUP back for a moment; one that arrived meanwhile is acted on at the end.

    Python handlers, not the signal mask: the kernel hands a process's signal to any thread that does
    not block it (BLAS's, say), and Python then runs the handler in the main thread regardless.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    held = [s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None]
    previous = {s: signal.getsignal(s) for s in held}
    for s, handler in previous.items():
        if callable(handler):
            signal.signal(s, lambda signum, _frame: pending.append(signum))
    try:
        yield
    finally:
        for s, handler in previous.items():
            if callable(handler):
                signal.signal(s, handler)
        if pending:
            previous[pending[0]](pending[0], None)


def _taken(path: Path) -> InputError:
    return InputError(f"{path}: file exists (it appeared while this run worked); pass --force to overwrite it")


def _link_exclusively(tmp: str, path: Path) -> None:
    """Give the written file its name only if nobody holds that name yet."""
    try:
        os.link(tmp, path)
        return
    except FileExistsError:
        raise _taken(path) from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise InputError(f"{path}: cannot write ({exc.strerror or exc})") from None
    # no hard links on this file system: claim the name with an exclusive create, then rename over it
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        raise _taken(path) from None
    os.replace(tmp, path)
