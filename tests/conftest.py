"""Shared test helpers. The suite's hypothesis profile: fast by default, BLOCKCLI_SLOW=1 (or true, yes, on) for more
examples; BLOCKCLI_SLOW=0 or empty keeps it fast."""

import os
import reprlib
import signal
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

from blockcli.config import ConfigError

settings.register_profile("fast", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("slow", max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = os.environ.get("BLOCKCLI_SLOW", "").strip().lower() in ("1", "true", "yes", "on")
settings.load_profile("slow" if SLOW else "fast")

ROOT = Path(__file__).resolve().parent.parent
# the parity fixtures whose backward is refused and whose layers verify has no reference of: Gemma 4's (unified too),
# Gemma 3n's and Dory's (tests/test_gemma4.py, tests/test_gemma3n.py and tests/test_dory.py hold the refusals)
NO_BACKWARD = frozenset({"gemma4_text", "gemma4", "gemma4_unified_text", "gemma4_unified", "gemma3n_text", "gemma3n",
                         "dory"})
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))


def config_error_message(load: Callable[[], Any], what: Any = "") -> str:
    """Run `load`; return its ConfigError message, failing the test on success, on any other
    exception (the bug being tested for), or on a message that is not one line."""
    try:
        load()
    except ConfigError as exc:
        message = str(exc)
    except BaseException as exc:  # noqa: BLE001
        pytest.fail(f"expected ConfigError, got {type(exc).__name__}: {exc}")
    else:
        pytest.fail(f"expected ConfigError for {reprlib.repr(what)}, but it loaded")
    assert "\n" not in message, f"message is not one line: {message!r}"
    assert message.strip(), "empty message"
    return message


SIGNALS_SENT = (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)  # what the tests send to blockcli


def central_differences(loss: Callable[[], float], array: Any, eps: float = 1e-6) -> Any:
    """d loss / d array, entry by entry: each entry of `array` (changed in place, then restored) moved by ±eps."""
    out = array.astype(float, copy=True)
    for idx in np.ndindex(array.shape):
        old = array[idx]
        array[idx] = old + eps
        up = loss()
        array[idx] = old - eps
        down = loss()
        array[idx] = old
        out[idx] = (up - down) / (2 * eps)
    return out


def default_signals() -> None:
    """`preexec_fn` of a child a test signals: SIGINT, SIGHUP and SIGTERM at their default dispositions, whatever
    the test run inherited. `nohup pytest … &` leaves SIGINT and SIGHUP ignored in every child, and blockcli
    rightly keeps an ignored signal ignored, so the child would ignore the test's signal and exit 0."""
    for signum in SIGNALS_SENT:
        signal.signal(signum, signal.SIG_DFL)


@pytest.fixture
def python_sigint():
    """Ctrl-C raising KeyboardInterrupt in this process for the test (as in a foreground run), even when pytest was
    started with SIGINT ignored (a background job); the disposition it found is put back after."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def shared_tiles(monkeypatch):
    """Every linear layer, attention and MLP, however small, cuts its work into tiles of a few rows
    and shares them among 3 threads (whatever this machine's core count), and runs its elementwise
    passes one row at a time: tiny tests take the threaded, tiled path."""
    from blockcli import ops, parallel
    monkeypatch.setattr(parallel, "SHARED_WORK", 0)
    monkeypatch.setattr(parallel, "CONTENDED_WORK", 0)  # every share large enough for every worker
    monkeypatch.setattr(ops, "ROW_TILE", 3)
    monkeypatch.setattr(ops, "SLAB_BYTES", 1)
    monkeypatch.setattr(parallel, "worker_count", lambda: 3)
