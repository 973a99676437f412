"""Load a user's own decoder block (`blockcli verify --impl file.py:Name`) and wrap it as a subject.

The contract, documented in the README:

    block = Name(weights, config)      # weights: blockcli keys → float arrays; config: plain dict like the YAML
    y = block(x)                       # x (B, T, d) → y (B, T, d)
    y, inter = block(x, return_intermediates=True)   # optional: a mapping of named intermediates
    block.parameters() or block.params # optional: name → array, for the parameter count

A target that cannot be loaded or built (missing file, syntax error, missing name, wrong
signature, an error while building) is an input error (exit 2). Once built, anything the user's
code does wrong at call time (raises, returns the wrong type or shape, exceeds the timeout)
fails the check that called it, with the user's own message.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import signal
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from blockcli.config import Config, InputError
from blockcli.verify import Subject, SubjectError


def load_target(spec: str) -> Callable[..., Any]:
    """'path/to/file.py:Name' or 'package.module:Name' → the named class or factory."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name.isidentifier():
        raise InputError(f"--impl {spec}: expected FILE.py:Name or package.module:Name")
    if where.endswith(".py") or "/" in where:
        path = Path(where)
        if not path.is_file():
            raise InputError(f"--impl {spec}: file {path} not found")
        module_name = f"blockcli_impl_{abs(hash(str(path.resolve())))}"
        loader_spec = importlib.util.spec_from_file_location(module_name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise InputError(f"--impl {spec}: cannot load {path} as a Python module")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[module_name] = module
        sys.path.insert(0, str(path.resolve().parent))  # let the file import its neighbours
        try:
            loader_spec.loader.exec_module(module)
        except SyntaxError as exc:
            raise InputError(f"--impl {spec}: syntax error in {exc.filename} at line {exc.lineno}: {exc.msg}") from None
        except Exception as exc:
            raise InputError(f"--impl {spec}: importing {path} raised {type(exc).__name__}: {exc}") from None
        finally:
            sys.path.remove(str(path.resolve().parent))
    else:
        try:
            module = importlib.import_module(where)
        except SyntaxError as exc:
            raise InputError(f"--impl {spec}: syntax error in {exc.filename} at line {exc.lineno}: {exc.msg}") from None
        except Exception as exc:
            raise InputError(f"--impl {spec}: cannot import {where} ({type(exc).__name__}: {exc})") from None
    target = getattr(module, name, None)
    if target is None:
        available = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise InputError(f"--impl {spec}: no name '{name}' in {where}"
                         + (f" (it defines: {', '.join(available[:8])})" if available else ""))
    if not callable(target):
        raise InputError(f"--impl {spec}: '{name}' is not a class or function")
    return target


@contextmanager
def time_limit(seconds: float, what: str) -> Iterator[None]:
    """Raise SubjectError if the body runs longer than `seconds` (POSIX main thread; else no limit)."""
    usable = seconds > 0 and hasattr(signal, "setitimer") and _in_main_thread()

    def expire(_signum: int, _frame: Any) -> None:
        raise SubjectError(f"{what} took longer than {seconds:g} s (--timeout)")

    if not usable:
        yield
        return
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


class UserBlock:
    """A user's implementation behind the checks' interface, with errors turned into SubjectError."""

    def __init__(self, target: Callable[..., Any], weights: Mapping[str, np.ndarray], config: Config,
                 timeout: float, label: str) -> None:
        self.label, self.timeout = label, timeout
        try:
            with time_limit(timeout, f"building {label}"):
                self.obj = target({k: v.copy() for k, v in weights.items()}, config.to_dict())
        except SubjectError as exc:
            raise InputError(f"--impl {label}: {exc}") from None
        except TypeError as exc:
            raise InputError(f"--impl {label}: cannot be called as {label.rpartition(':')[2]}(weights, config): "
                             f"{exc}") from None
        except Exception as exc:
            raise InputError(f"--impl {label}: building it raised {type(exc).__name__}: {exc}") from None
        if not callable(self.obj):
            raise InputError(f"--impl {label}: {type(self.obj).__name__} object returned by the factory is not "
                             f"callable on x")
        self.accepts_intermediates = _accepts(self.obj, "return_intermediates")

    def _call(self, x: np.ndarray, **kwargs: Any) -> Any:
        try:
            with time_limit(self.timeout, f"calling {self.label}"):
                return self.obj(x, **kwargs)
        except SubjectError:
            raise
        except Exception as exc:
            raise SubjectError(f"your implementation raised {type(exc).__name__}: {exc}") from None

    def forward(self, x: np.ndarray) -> np.ndarray:
        return _as_output(self._call(x), x)

    def intermediates(self, x: np.ndarray) -> dict[str, np.ndarray]:
        result = self._call(x, return_intermediates=True)
        if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], Mapping)):
            raise SubjectError("with return_intermediates=True your implementation must return (y, mapping), "
                               f"got {type(result).__name__}")
        return {str(k): np.asarray(v) for k, v in result[1].items() if _is_array_like(v)}

    def parameters(self) -> dict[str, np.ndarray] | None:
        source = getattr(self.obj, "parameters", None)
        params = source() if callable(source) else getattr(self.obj, "params", None)
        if isinstance(params, Mapping):
            return {str(k): np.asarray(v) for k, v in params.items()}
        return None


def _accepts(fn: Any, keyword: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return keyword in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _is_array_like(value: Any) -> bool:
    return isinstance(value, (np.ndarray, list, tuple, float, int)) or hasattr(value, "__array__")


def _as_output(y: Any, x: np.ndarray) -> np.ndarray:
    if isinstance(y, tuple) and len(y) == 2 and isinstance(y[1], Mapping):
        y = y[0]
    if not isinstance(y, np.ndarray):
        if hasattr(y, "__array__"):
            y = np.asarray(y)
        else:
            raise SubjectError(f"your implementation returned {type(y).__name__}, expected a NumPy array "
                               f"of shape {x.shape}")
    if y.shape != x.shape:
        raise SubjectError(f"your implementation returned shape {y.shape}, expected {x.shape} (B, T, d)")
    return y


def impl_subject(spec: str, weights: Mapping[str, np.ndarray], config: Config, timeout: float) -> Subject:
    """Load, build (in float64, and in float32 for check 13) and wrap a user's implementation."""
    target = load_target(spec)
    user = UserBlock(target, weights, config, timeout, spec)
    single = UserBlock(target, {k: v.astype(np.float32) for k, v in weights.items()}, config, timeout, spec)
    exposed = user.parameters()
    return Subject(
        forward=user.forward,
        weights=dict(weights),
        intermediates=user.intermediates if user.accepts_intermediates else None,
        parameters=(lambda: exposed) if exposed is not None else None,
        forward32=single.forward,
    )
