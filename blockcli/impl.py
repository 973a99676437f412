"""Load a user's own decoder block (`blockcli verify --impl file.py:Name`) and wrap it as a subject.

The contract, documented in the README:

    block = Name(weights, config)      # weights: blockcli keys → float arrays; config: plain dict like the YAML
    module = Name(config)              # or: a torch.nn.Module whose parameters blockcli fills by name
    y = block(x)                       # x (B, T, d) → y (B, T, d); a block written for (T, d) is detected
    y, inter = block(x, return_intermediates=True)   # optional: a mapping of named intermediates
    block.parameters() or block.params # optional: name → array, for the parameter count
    dx, grads = block.backward(dy)     # optional (verify --grad): after a call on x, dy·∂y/∂x and {key: dy·∂y/∂w}

A target that cannot be loaded or built (missing file, syntax error, missing name, wrong
signature, an error or sys.exit while importing or building) is an input error (exit 2). Once
built, anything the user's code does wrong at call time (raises, calls sys.exit, returns the wrong
type or shape, changes its input in place, exceeds the timeout) is a SubjectError: verify reports
it once and marks the checks it prevented ERROR. Whatever the target prints goes to stderr.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import os
import signal
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

import numpy as np

from blockcli.config import Config, InputError
from blockcli.subject import Subject, SubjectError


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
            with stdout_to_stderr():
                loader_spec.loader.exec_module(module)
        except SystemExit as exc:
            raise InputError(f"--impl {spec}: importing {path} called sys.exit({exc.code!r})") from None
        except SyntaxError as exc:
            raise InputError(f"--impl {spec}: syntax error in {exc.filename} at line {exc.lineno}: {exc.msg}") from None
        except Exception as exc:
            raise InputError(f"--impl {spec}: importing {path} raised {type(exc).__name__}: {exc}") from None
        finally:
            sys.path.remove(str(path.resolve().parent))
    else:
        # the working directory first, as `python -m blockcli` has it: the `blockcli` script's sys.path
        # starts at its own folder, so `--impl package.module:Name` would otherwise work under one only
        here = os.getcwd()
        added = here not in sys.path and "" not in sys.path
        if added:
            sys.path.insert(0, here)
        try:
            with stdout_to_stderr():
                module = importlib.import_module(where)
        except SystemExit as exc:
            raise InputError(f"--impl {spec}: importing {where} called sys.exit({exc.code!r})") from None
        except SyntaxError as exc:
            raise InputError(f"--impl {spec}: syntax error in {exc.filename} at line {exc.lineno}: {exc.msg}") from None
        except Exception as exc:
            raise InputError(f"--impl {spec}: cannot import {where} ({type(exc).__name__}: {exc})") from None
        finally:
            if added:
                sys.path.remove(here)
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


@contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send what user code writes to stdout — Python's print and, through file descriptor 1, C code's — to
    stderr, so blockcli's own stdout (a table, JSON) stays clean."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
        os.dup2(2, 1)
    except OSError:  # no file descriptor 1 (an embedded interpreter): Python-level redirection only
        saved = None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if saved is not None:
            _flush_c_stdio()  # C's buffered stdout must drain into stderr, not into stdout later
            os.dup2(saved, 1)
            os.close(saved)


def _flush_c_stdio() -> None:
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):  # no C library to reach (not POSIX)
        pass


@contextmanager
def guarded(what: str, timeout: float) -> Iterator[None]:
    """Run user code: its stdout goes to stderr (so --json stays JSON), and raising, sys.exit or running past
    the timeout becomes a SubjectError naming `what`, with the user's traceback kept for --traceback."""
    try:
        with time_limit(timeout, what), stdout_to_stderr():
            yield
    except (SubjectError, InputError):  # already one clear line (InputError: blockcli's own, e.g. a wrong shape)
        raise
    except SystemExit as exc:
        raise SubjectError(f"{what} called sys.exit({exc.code!r})", _user_traceback(exc)) from None
    except Exception as exc:
        raise SubjectError(f"{what} raised {type(exc).__name__}: {exc}", _user_traceback(exc)) from None


THREAD_GRACE_SECONDS = 5.0  # how long threads a target left running may take to finish after the checks


def threads_left_running(started_before: Iterable[threading.Thread], timeout: float) -> str | None:
    """After the checks: the threads the target started and left running (not daemon threads, which never hold up
    the exit) get up to THREAD_GRACE_SECONDS (or `timeout`, if shorter) to end; a message naming those still
    running then, or None. The interpreter would wait for them at exit forever."""
    from blockcli.parallel import foreign_threads

    grace = min(THREAD_GRACE_SECONDS, timeout)
    deadline = time.monotonic() + grace
    for thread in foreign_threads(started_before):
        thread.join(max(0.0, deadline - time.monotonic()))
    running = foreign_threads(started_before)
    if not running:
        return None
    names = ", ".join(f"'{t.name}'" for t in running[:3]) + (f" and {len(running) - 3} more" if len(running) > 3 else "")
    return (f"the target left {len(running)} non-daemon thread{'s' if len(running) > 1 else ''} running ({names}) "
            f"{grace:g} s after its last call; a process would wait for {'them' if len(running) > 1 else 'it'} at "
            f"exit forever (blockcli exits without waiting): join threads before returning, or make them daemons")


def _user_traceback(exc: BaseException) -> str:
    """The traceback from the first frame outside this module: the user's code, not blockcli's plumbing."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def factory_arguments(target: Callable[..., Any], weights: Mapping[str, np.ndarray],
                      config: Config, label: str) -> tuple[Any, ...]:
    """(weights, config) when the target takes two arguments, (config,) when it takes one (a torch module)."""
    plain = config.to_dict()
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return weights, plain
    for args in ((weights, plain), (plain,)):
        try:
            signature.bind(*args)
            return args
        except TypeError:
            continue
    name = label.rpartition(":")[2]
    raise InputError(f"--impl {label}: cannot be called as {name}(weights, config) or {name}(config): "
                     f"its signature is {name}{signature}")


def is_torch_module(obj: Any) -> bool:
    """True for a torch.nn.Module, decided without importing torch."""
    return any(k.__name__ == "Module" and k.__module__.startswith("torch.nn") for k in type(obj).__mro__)


class UserBlock:
    """A user's implementation behind the checks' interface, with errors turned into SubjectError."""

    def __init__(self, target: Callable[..., Any], weights: Mapping[str, np.ndarray], config: Config,
                 timeout: float, label: str, per_sequence: bool | None = None, weights_map: Any = None) -> None:
        self.label, self.timeout = label, timeout
        self.per_sequence = per_sequence  # None: decided by the first call
        self.notes: list[str] = []
        copied = {k: v.copy() for k, v in weights.items()}
        args = factory_arguments(target, copied, config, label)
        try:
            with guarded("building it", timeout):
                obj = target(*args)
        except SubjectError as exc:
            raise InputError(f"--impl {label}: {exc}") from None
        self.torch = is_torch_module(obj)
        if self.torch:
            from blockcli.torch_block import TorchBlock

            try:
                with guarded("filling its parameters", timeout):  # the module's own code runs in .to(), hooks
                    obj = TorchBlock(obj, copied, config.block, weights_map, label)
            except SubjectError as exc:
                raise InputError(f"--impl {label}: {exc}") from None
            self.notes += obj.notes
        elif weights_map is not None:
            raise InputError(f"--weights-map: {label} built a {type(obj).__name__}, not a torch.nn.Module; "
                             f"the map names a module's parameters")
        elif len(args) == 1:
            raise InputError(f"--impl {label}: {label.rpartition(':')[2]}(config) returned "
                             f"{type(obj).__name__}, not a torch.nn.Module; a NumPy block is built as "
                             f"{label.rpartition(':')[2]}(weights, config)")
        if not callable(obj):
            raise InputError(f"--impl {label}: {type(obj).__name__} object returned by the factory is not "
                             f"callable on x")
        self.obj = obj
        try:
            with guarded("inspecting it", timeout):  # a property of the user's object may raise too
                self.unused: dict[str, str] = getattr(obj, "unused", {})
                self.accepts_intermediates = _accepts(obj, "return_intermediates")
        except SubjectError as exc:
            raise InputError(f"--impl {label}: {exc}") from None

    def _call(self, x: np.ndarray, **kwargs: Any) -> Any:
        """One call on a private copy of x; a change to that copy is reported as an in-place update."""
        given = x.copy()
        with guarded(f"calling {self.label}", self.timeout):
            result = self.obj(given, **kwargs)
        if not np.array_equal(given, x, equal_nan=True):
            changed = int(np.sum(~((given == x) | (np.isnan(given) & np.isnan(x)))))
            raise SubjectError(f"{self.label} changed its input x in place ({changed:,} of {x.size:,} entries): "
                               f"a block must leave its argument untouched (copy before updating)")
        return result

    def _each(self, x: np.ndarray, **kwargs: Any) -> list[Any]:
        return [self._call(x[b], **kwargs) for b in range(x.shape[0])]

    def forward(self, x: np.ndarray) -> np.ndarray:
        if self.per_sequence:
            return np.stack([_as_output(y, x[b]) for b, y in enumerate(self._each(x))])
        if self.per_sequence is False:
            return _as_output(self._call(x), x)
        try:  # the first call decides: a block that fails on (B, T, d) but works on (T, d) takes one sequence
            y = _as_output(self._call(x), x)
        except SubjectError as batched:
            if "(--timeout)" in str(batched) or x.ndim != 3:
                raise
            try:
                one = _as_output(self._call(x[0]), x[0])
            except SubjectError:
                raise batched from None
            self.per_sequence = True
            self.notes.append(f"the block takes one sequence (T, d) = {one.shape} (on (B, T, d) it failed: "
                              f"{batched}); it was called once per sequence")
            return np.stack([one] + [_as_output(y, x[b]) for b, y in enumerate(self._each(x[1:]), 1)])
        self.per_sequence = False
        return y

    def intermediates(self, x: np.ndarray) -> dict[str, np.ndarray]:
        results = self._each(x, return_intermediates=True) if self.per_sequence else \
            [self._call(x, return_intermediates=True)]
        for result in results:
            if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], Mapping)):
                raise SubjectError(f"with return_intermediates=True {self.label} must return (y, mapping), "
                                   f"got {type(result).__name__}")
        found = [{str(k): np.asarray(v) for k, v in r[1].items() if _is_array_like(v)} for r in results]
        if not self.per_sequence:
            return found[0]
        # one sequence's intermediates each, stacked along a new batch axis where every sequence has the key
        return {k: np.stack([f[k] for f in found]) for k in found[0]
                if all(k in f and f[k].shape == found[0][k].shape for f in found)}

    @property
    def has_backward(self) -> bool:
        return self.torch or callable(getattr(self.obj, "backward", None))

    def gradients(self, x: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray | None]]:
        """(dx, {weight key: gradient}) at x for the cotangent dy: a torch module's autograd, or a NumPy block's
        forward on x then its backward(dy) → (dx, {weight key: gradient}) (once per sequence for a (T, d)
        block, the weights' gradients summed)."""
        if self.torch:
            with guarded(f"the backward of {self.label}", self.timeout):
                return self.obj.gradients(x, dy)
        if self.per_sequence:
            parts = [self._numpy_gradients(x[b], dy[b]) for b in range(x.shape[0])]
            keys = {k for _, g in parts for k in g}
            summed = {k: None if any(g.get(k) is None for _, g in parts) else sum(g[k] for _, g in parts)
                      for k in keys}
            return np.stack([dx for dx, _ in parts]), summed
        return self._numpy_gradients(x, dy)

    def _numpy_gradients(self, x: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray | None]]:
        self._call(x)
        with guarded(f"{self.label}.backward(dy)", self.timeout):
            result = self.obj.backward(dy.copy())
        if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], Mapping)):
            raise SubjectError(f"{self.label}.backward(dy) must return (dx, {{weight key: gradient}}), got "
                               f"{type(result).__name__}")
        dx, grads = result
        return np.asarray(dx), {str(k): None if v is None else np.asarray(v, dtype=np.float64)
                                for k, v in grads.items()}

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
        raise SubjectError(f"your implementation returned shape {y.shape}, expected {x.shape} (the input's)")
    return y


def impl_subject(spec: str, weights: Mapping[str, np.ndarray], config: Config, timeout: float,
                 per_sequence: bool = False, weights_map: Any = None) -> Subject:
    """Load, build (in float64, and in float32 for check 13) and wrap a user's implementation."""
    _check_weights_map(weights_map, weights)
    target = load_target(spec)
    declared = True if per_sequence else None
    user = UserBlock(target, weights, config, timeout, spec, declared, weights_map)
    single = UserBlock(target, {k: v.astype(np.float32) for k, v in weights.items()}, config, timeout, spec,
                       declared, weights_map)
    try:
        with guarded("listing its parameters", timeout):  # its own code (parameters(), a torch module's tensors)
            exposed = user.parameters()
    except SubjectError as exc:
        raise InputError(f"--impl {spec}: {exc}") from None
    notes = user.notes  # the same list: the first call adds to it when it detects a (T, d) block
    if per_sequence:
        notes.append("--per-sequence: the block is called once per sequence on (T, d)")

    def forward32(x: np.ndarray) -> np.ndarray:
        single.per_sequence = user.per_sequence
        return single.forward(x)

    def rebuild(changed: dict[str, np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
        try:
            other = UserBlock(target, changed, config, timeout, spec, user.per_sequence, weights_map)
        except InputError as exc:  # it built before: a failure now is the target's, at check time
            raise SubjectError(str(exc)) from None
        return other.forward

    return Subject(
        forward=user.forward,
        weights=dict(weights),
        intermediates=user.intermediates if user.accepts_intermediates else None,
        parameters=(lambda: exposed) if exposed is not None else None,
        forward32=forward32,
        rebuild=rebuild,
        notes=notes,
        torch=user.torch,
        unused=user.unused,
        gradients=user.gradients if user.has_backward else None,
    )


def _check_weights_map(mapping: Any, weights: Mapping[str, np.ndarray]) -> None:
    """--weights-map: parameter name (or dotted suffix) → a blockcli key or a list of keys."""
    if mapping is None:
        return
    if not isinstance(mapping, Mapping) or not mapping:
        raise InputError("--weights-map: expected a mapping of parameter name → blockcli key (or list of keys)")
    for name, keys in mapping.items():
        listed = [keys] if isinstance(keys, str) else keys
        if not isinstance(name, str) or not isinstance(listed, list) or not listed \
                or not all(isinstance(k, str) for k in listed):
            raise InputError(f"--weights-map: {name}: expected a blockcli key or a list of keys, got {keys!r}")
        unknown = [k for k in listed if k not in weights]
        if unknown:
            raise InputError(f"--weights-map: {name}: no weight '{unknown[0]}' in this config "
                             f"(keys: {', '.join(sorted(weights))})")
