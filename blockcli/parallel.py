"""Sharing a forward pass's heavy tiles among the CPU cores.

BLAS spreads each matrix product over every core, but NumPy's elementwise passes (the softmax's
exp and reductions, the norms, the activation) run on one, and BLAS's idle threads spin for a
while after each product, slowing whatever runs next. So the attention kernel and the row-wise
layers (linear, norms, MLP) cut their work into independent tiles and hand them to one Python
thread per core (NumPy releases the GIL inside its loops), while BLAS is held to one thread.
threadpoolctl does the holding for whichever BLAS NumPy was built with; it is imported only
when a pass is big enough to share out, so `blockcli count` never pays for it.
"""

from __future__ import annotations

import math
import os
import threading
import weakref
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

import numpy as np

Tile = TypeVar("Tile")
# Work below this many multiply-adds (about 50 µs on one core) stays on the calling thread, where
# handing it out would cost more than it saves.
SHARED_WORK = 2**22
# The threadpoolctl controller, the thread pool and its size, and the BLAS limit while one is held
_state: dict[str, Any] = {}
_local = threading.local()  # .worker is True in the pool's threads: work they share out stays with them
# One sharing at a time: two callers' BLAS limits would otherwise restore each other's settings
# out of order (and they would only compete for the same cores).
_sharing = threading.Lock()


def _after_fork_in_child() -> None:
    """A forked child has none of the pool's threads, no thread to release a held lock, and no
    sharing in progress that would lift a BLAS limit it inherited."""
    global _sharing
    if "held" in _state:
        _state["held"].restore_original_limits()
    _state.clear()  # the child measures its own free cores (its BLAS keeps the limit it inherited)
    _sharing = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _mark_worker() -> None:
    _local.worker = True
    _workers.add(threading.current_thread())


_workers: weakref.WeakSet[threading.Thread] = weakref.WeakSet()  # the pool's threads, which foreign_threads leaves out


def foreign_threads(known: Iterable[threading.Thread] = ()) -> list[threading.Thread]:
    """Live non-daemon threads other than the main thread, blockcli's own workers (idle between calls, they end
    with the interpreter) and `known`: the interpreter would wait for each of them at exit."""
    skip = {threading.main_thread(), *known}
    return [t for t in threading.enumerate() if t.is_alive() and not t.daemon and t not in skip and t not in _workers]


def _controller() -> Any:
    if "controller" not in _state:
        from threadpoolctl import ThreadpoolController
        _state["controller"] = ThreadpoolController()
    return _state["controller"]


REFIT_SECONDS = 1.0  # how often the free cores are measured again during long work
# A share of fewer multiply-adds (about 10 ms on one core) goes to the free cores only: its workers all
# finish within a few of the scheduler's time slices, so one on a busy core holds up the rest (verify's
# small blocks); a larger share goes to every allowed core, each worker pulling tiles as it can.
CONTENDED_WORK = 2**28


def allowed_cores() -> list[int]:
    """The CPUs this process may run on (its affinity), as many as a cgroup CPU quota allows."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            cpus = cpus[:max(1, -(-int(quota) // int(period)))]
    except (OSError, ValueError):
        pass
    return cpus


def _busy_ticks(cpus: Sequence[int]) -> tuple[float, float] | None:
    """(busy, total) clock ticks of `cpus` since boot, from /proc/stat; None where there is none."""
    try:
        with open("/proc/stat") as f:
            lines = [line.split() for line in f if line.startswith("cpu") and line[3:4].isdigit()]
    except OSError:
        return None
    busy = total = 0.0
    for fields in lines:
        if int(fields[0][3:]) in cpus:
            ticks = [float(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
            total += sum(ticks)
            busy += sum(ticks) - ticks[3] - ticks[4]
    return (busy, total) if total else None


def _others_running() -> float:
    """How many runnable threads other than this one the system has right now (/proc/loadavg)."""
    try:
        with open("/proc/loadavg") as f:
            return max(0.0, float(f.read().split()[3].split("/")[0]) - 1)
    except (OSError, ValueError, IndexError):
        return 0.0


def free_cores() -> int:
    """The allowed cores other processes are not busy on: measured over the time since the last call
    (the cores' busy time from /proc/stat less this process's own CPU time), or on a first call from
    the threads runnable right now; at least 1. Measured again at most every REFIT_SECONDS."""
    import time

    now = time.monotonic()
    if now - _state.get("measured_at", -math.inf) < REFIT_SECONDS:
        return _state["free"]
    cpus = allowed_cores()
    ticks, own = _busy_ticks(cpus), time.process_time()
    last = _state.get("sample")
    if ticks is not None and last is not None and ticks[1] > last[0][1]:
        wall = (ticks[1] - last[0][1]) / len(cpus)  # ticks of one core over the interval
        others = max(0.0, (ticks[0] - last[0][0]) - (own - last[1]) * os.sysconf("SC_CLK_TCK")) / wall
    else:
        others = _others_running()
    _state.update(sample=(ticks, own) if ticks is not None else None, measured_at=now,
                  free=max(1, min(len(cpus), round(len(cpus) - others))))
    return _state["free"]


def _blas_ceiling() -> int:
    """The BLAS threads NumPy's BLAS was set to use (OPENBLAS_NUM_THREADS and the like), not counting a
    limit fit_blas_threads set itself; 0 if no BLAS can be held."""
    blas = _controller().select(user_api="blas").info()
    if not blas:
        return 0
    current = max(lib["num_threads"] for lib in blas)
    if "blas_max" not in _state or current != _state.get("fitted"):  # someone else set it: follow them
        _state["blas_max"] = current
    return _state["blas_max"]


def _fixed_threads() -> int:
    """BLOCKCLI_THREADS, when set to a positive number (at most the allowed cores); else 0."""
    fixed = os.environ.get("BLOCKCLI_THREADS", "").strip()
    return min(int(fixed), len(allowed_cores())) if fixed.isdigit() and int(fixed) > 0 else 0


def worker_count() -> int:
    """Threads to share tiles among: BLOCKCLI_THREADS when set; else as many as BLAS may use (so
    OPENBLAS_NUM_THREADS=1 and the like turn sharing off), at most the cores this process may run on;
    1 if no BLAS can be held. share_out gives a large share all of them even when other processes are
    busy: the workers pull their tiles from one queue, so a slowed core takes fewer
    (benchmarks/bench_contention.py measured one worker slower under load, 0.64 s against 0.45 s for a
    forward pass with both cores busy elsewhere); a share under CONTENDED_WORK, the free cores only."""
    ceiling = _blas_ceiling()
    if not ceiling:
        return 1
    return _fixed_threads() or max(1, min(ceiling, len(allowed_cores())))


def blas_threads() -> int:
    """Threads for the matrix products outside the shared tiles: BLOCKCLI_THREADS when set; else as
    many as BLAS may use, at most the cores free of other processes' work (free_cores). BLAS splits
    each product among its threads and waits for all of them, so a thread on a busy core stalls the
    rest: `verify --mutants` with both cores busy took 41 s with BLAS's two threads, 6.8 s with one."""
    ceiling = _blas_ceiling()
    if not ceiling:
        return 1
    return _fixed_threads() or max(1, min(ceiling, free_cores()))


def fit_blas_threads() -> int:
    """Hold BLAS to blas_threads() for the products outside shared tiles (re-measured at most every
    REFIT_SECONDS); returns that count."""
    threads = blas_threads()
    if _blas_ceiling() and _state.get("fitted") != threads:
        _controller().limit(limits=threads, user_api="blas")  # kept until the process ends or refits
        _state["fitted"] = threads
    return threads


def _pool(workers: int) -> Any:
    if _state.get("workers") != workers:
        from concurrent.futures import ThreadPoolExecutor
        if "pool" in _state:
            _state["pool"].shutdown()
        _state["pool"] = ThreadPoolExecutor(workers, thread_name_prefix="blockcli", initializer=_mark_worker)
        _state["workers"] = workers
    return _state["pool"]


class _Pull:
    """A thread-safe iterator over tiles: each worker pulls its next tile when it is free, so a
    core that another process slows down simply takes fewer tiles. Once closed, it is exhausted."""

    def __init__(self, tiles: Iterable[Tile]) -> None:
        self._tiles = iter(tiles)
        self._lock = threading.Lock()

    def __iter__(self) -> Iterator[Tile]:
        return self

    def __next__(self) -> Tile:
        with self._lock:
            return next(self._tiles)

    def close(self) -> None:
        with self._lock:
            self._tiles = iter(())


def share_out(run: Callable[[Iterable[Tile]], None], tiles: Sequence[Tile], cost: Callable[[Tile], float],
              work: float) -> None:
    """Have one `run` per worker pull tiles, largest `cost` first, until every tile is done.

    `run` must write only the outputs of the tiles it pulls; it is called once per worker, so
    it can allocate its scratch buffers once. `work` is the multiply-adds of all the tiles:
    below SHARED_WORK, in a worker already, or with one worker, `run` gets every tile here, on
    the calling thread. If a worker fails, or the caller is interrupted (Ctrl-C), the others
    finish the tile in hand and stop; the first failure is raised here.
    """
    if work < SHARED_WORK or len(tiles) < 2 or getattr(_local, "worker", False):
        run(tiles)
        return
    with _sharing:
        free = fit_blas_threads()  # the limit restored after the tiles: the free cores, measured now
        workers = worker_count()  # read inside the lock: another caller's limit is lifted by now
        if work < CONTENDED_WORK:  # a short share waits for its slowest worker: only the free cores
            workers = min(workers, free)
        if workers == 1:
            run(tiles)
            return
        queue = _Pull(sorted(tiles, key=cost, reverse=True))
        errors, call = np.geterr(), np.geterrcall()  # NumPy's error state is per thread

        def in_worker() -> None:
            try:
                with np.errstate(call=call, **errors):
                    run(queue)
            except BaseException:
                queue.close()
                raise

        futures: list[Any] = []
        with _controller().limit(limits=1, user_api="blas") as _state["held"]:
            try:
                futures += [_pool(workers).submit(in_worker) for _ in range(min(workers, len(tiles)))]
                _wait(futures)
            except BaseException:  # interrupted (Ctrl-C) while handing out or waiting
                queue.close()
                _wait(futures)
                _retire_pool()
                raise
            finally:
                del _state["held"]
    for future in futures:
        if future.exception() is not None:
            raise future.exception()


def _retire_pool() -> None:
    """Shut the pool down without waiting (its workers end once idle) and forget it; the next call builds another.

    An interrupt that lands while submit() starts a worker thread can leave that thread running but unregistered
    with concurrent.futures, which wakes only registered threads at interpreter exit: the process would then wait
    for it forever. The shutdown's wake-up goes through the queue the workers share, so it reaches that one too.
    """
    pool = _state.pop("pool", None)
    _state.pop("workers", None)
    if pool is not None:
        pool.shutdown(wait=False)


def _wait(futures: list[Any]) -> None:
    """Wait until every future is done, waking every 0.1 s: a Ctrl-C that arrives just before a
    blocking wait would otherwise be noticed only when that wait ends."""
    from concurrent.futures import wait
    while futures:
        _, futures = wait(futures, timeout=0.1)


@contextmanager
def one_blas_thread_if(small: bool) -> Iterator[None]:
    """BLAS held to one thread meanwhile when `small`: a tiny model's many small GEMMs gain nothing from
    BLAS's threads and, on a busy machine, lose much to waking them (a 2-layer d = 64 model's training
    step took 1.2 s with two threads under load, 30 ms with one)."""
    if not small:
        yield
        return
    with _controller().limit(limits=1, user_api="blas"):
        yield
