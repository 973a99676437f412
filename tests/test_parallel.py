"""The threaded, tiled fast path: share_out's contract, and the pass it runs equal to the slow references."""

import threading
import time

import numpy as np
import pytest
from threadpoolctl import threadpool_info

import reference as ref
from blockcli import DecoderBlock, parallel
from test_block_reference import block_dict, make_cfg, maxdiff, random_weights, random_x


def _recording_run(pause_first=0.0):
    """A run that records (thread, tile) in pull order; the first run to start can stall."""
    pulls, runs = [], []
    lock = threading.Lock()

    def run(tiles):
        with lock:
            first = not runs
            runs.append(threading.get_ident())
        for tile in tiles:
            with lock:
                pulls.append((threading.get_ident(), tile))
            if first and pause_first:
                time.sleep(pause_first)
    return run, pulls, runs


def test_share_out_hands_every_tile_once_largest_first(shared_tiles):
    tiles = list(range(20))
    run, pulls, runs = _recording_run()
    parallel.share_out(run, tiles, cost=lambda t: (t * 7) % 20, work=1)
    assert sorted(t for _, t in pulls) == tiles
    for ident in set(runs):  # each worker pulls from one queue ordered by falling cost
        costs = [(t * 7) % 20 for i, t in pulls if i == ident]
        assert costs == sorted(costs, reverse=True)
    assert len(runs) == 3 and threading.get_ident() not in runs


def test_a_stalled_worker_takes_fewer_tiles(shared_tiles):
    run, pulls, runs = _recording_run(pause_first=0.3)
    parallel.share_out(run, list(range(30)), cost=lambda t: 1, work=1)
    stalled = [t for ident, t in pulls if ident == runs[0]]
    assert len(stalled) == 1 and len(pulls) == 30  # the others pulled the rest meanwhile


def test_small_work_stays_on_the_calling_thread(monkeypatch):
    monkeypatch.setattr(parallel, "worker_count", lambda: 3)
    run, pulls, runs = _recording_run()
    parallel.share_out(run, list(range(8)), cost=lambda t: 1, work=parallel.SHARED_WORK - 1)
    assert runs == [threading.get_ident()] and [t for _, t in pulls] == list(range(8))


def test_work_shared_from_inside_a_worker_stays_in_that_worker(shared_tiles):
    inner = []

    def run(tiles):
        for _ in tiles:
            parallel.share_out(lambda sub: inner.append((threading.get_ident(), sub)), [0, 1, 2],
                               cost=lambda t: 1, work=1)
    outer_threads = set()
    parallel.share_out(lambda tiles: (outer_threads.add(threading.get_ident()), run(tiles)), [0, 1, 2],
                       cost=lambda t: 1, work=1)
    assert all(sub == [0, 1, 2] for _, sub in inner) and len(inner) == 3
    assert {ident for ident, _ in inner} <= outer_threads


def test_a_worker_error_reaches_the_caller(shared_tiles):
    def run(tiles):
        if 7 in tiles:
            raise ValueError("tile 7 failed")
    with pytest.raises(ValueError, match="tile 7 failed"):
        parallel.share_out(run, list(range(10)), cost=lambda t: 1, work=1)


def test_workers_follow_the_callers_numpy_error_state(shared_tiles):
    seen = []
    with np.errstate(over="raise", invalid="ignore"):
        parallel.share_out(lambda tiles: seen.append(np.geterr()), list(range(6)), cost=lambda t: 1, work=1)
    assert len(seen) == 3 and all(e["over"] == "raise" and e["invalid"] == "ignore" for e in seen)
    calls = []
    with np.errstate(over="call", call=lambda kind, flag: calls.append(kind)):
        parallel.share_out(lambda tiles: np.exp(np.array([1000.0])), list(range(6)), cost=lambda t: 1, work=1)
    assert calls == ["overflow"] * 3
    with np.errstate(over="raise"), pytest.raises(FloatingPointError):
        parallel.share_out(lambda tiles: np.exp(np.array([1000.0])), list(range(6)), cost=lambda t: 1, work=1)


def _blas_threads():
    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]


FREE_CORES = parallel.free_cores  # the real measurement, for the tests of it


@pytest.fixture(autouse=True)
def blas_as_configured(monkeypatch):
    """Each test starts with BLAS at the threads it was configured with, and sees every allowed core
    free: on a busy machine parallel.fit_blas_threads would hold BLAS to fewer, which the tests of
    sharing do not expect (the tests of the measurement call FREE_CORES)."""
    from threadpoolctl import threadpool_limits

    monkeypatch.setattr(parallel, "free_cores", lambda: len(parallel.allowed_cores()))

    ceiling = parallel._blas_ceiling()
    if ceiling:
        threadpool_limits(limits=ceiling, user_api="blas")
    for key in ("fitted", "measured_at", "free", "sample"):
        parallel._state.pop(key, None)
    yield


def test_blas_runs_one_thread_inside_workers_and_gets_its_threads_back(monkeypatch):
    before = _blas_threads()
    if not before:
        pytest.skip("NumPy's BLAS is not one threadpoolctl can see")
    monkeypatch.setattr(parallel, "worker_count", lambda: 2)
    inside = []
    parallel.share_out(lambda tiles: inside.append(_blas_threads()), [0, 1], cost=lambda t: 1,
                       work=parallel.SHARED_WORK)
    assert inside == [[1] * len(before)] * 2
    assert _blas_threads() == before


def test_worker_count_follows_blas_threads():
    from threadpoolctl import threadpool_limits
    with threadpool_limits(limits=1, user_api="blas"):
        assert parallel.worker_count() == 1  # OPENBLAS_NUM_THREADS=1 and friends turn sharing off


def test_free_cores_are_the_allowed_cores_less_what_others_used(monkeypatch):
    # Two allowed cores; between two looks each core ran 100 clock ticks (200 in all), 150 of them busy, and
    # 0.5 s of that (50 ticks at 100 per second) was this process's own: others used (150 − 50) / 100 = 1
    # core, so 1 is free. Then others use 20 ticks of the next 200 and this process 120: 2 free.
    samples = iter([(1000.0, 4000.0), (1150.0, 4200.0), (1290.0, 4400.0)])
    own = iter([10.0, 10.5, 11.7])
    clock = iter([100.0, 101.5, 103.0])
    monkeypatch.setattr(parallel, "_state", {})
    monkeypatch.setattr(parallel, "allowed_cores", lambda: [0, 1])
    monkeypatch.setattr(parallel, "_busy_ticks", lambda cpus: next(samples))
    monkeypatch.setattr(parallel, "_others_running", lambda: 0.0)
    monkeypatch.setattr(parallel.os, "sysconf", lambda name: 100)
    monkeypatch.setattr(time, "process_time", lambda: next(own))
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))
    assert FREE_CORES() == 2  # the first look: nothing else runnable
    assert FREE_CORES() == 1
    assert FREE_CORES() == 2


def test_free_cores_are_measured_again_only_after_a_second(monkeypatch):
    monkeypatch.setattr(parallel, "_state", {"measured_at": 50.0, "free": 1})
    monkeypatch.setattr(time, "monotonic", lambda: 50.5)
    assert FREE_CORES() == 1


def test_blas_holds_the_free_cores_and_blockcli_threads_fixes_the_count(monkeypatch):
    from threadpoolctl import threadpool_limits

    if not _blas_threads() or len(parallel.allowed_cores()) < 2:
        pytest.skip("needs a BLAS threadpoolctl can see and two cores")
    with threadpool_limits(limits=2, user_api="blas"):  # as an unlimited BLAS of two threads; restored after
        monkeypatch.setattr(parallel, "_state", {})
        monkeypatch.setattr(parallel, "free_cores", lambda: 1)
        assert parallel.fit_blas_threads() == 1 and max(_blas_threads()) == 1
        assert parallel.worker_count() == 2  # the pool keeps both cores: its workers pull tiles from a queue
        monkeypatch.setenv("BLOCKCLI_THREADS", "2")
        assert parallel.fit_blas_threads() == 2 == max(_blas_threads()) == parallel.worker_count()


# The benchmark's three shapes (S, M, L) with their head counts and d_ff = 4·d kept, the head width
# and lengths shrunk; float64, so the threaded tiles must equal the loop reference to 1e-12.
STRUCTURES = {
    "S": dict(block={"d_model": 64, "n_heads": 8, "d_ff": 256}, B=4, T=40),
    "M": dict(block={"d_model": 96, "n_heads": 12, "d_ff": 384}, B=2, T=70),
    "L": dict(block={"d_model": 128, "n_heads": 16, "d_ff": 512}, B=1, T=150),
}


@pytest.mark.parametrize("name", sorted(STRUCTURES))
def test_fast_path_equals_references_at_the_benchmark_structures(name, shared_tiles):
    spec = STRUCTURES[name]
    bd = block_dict(**spec["block"])  # the reference's base block at this size: one dict for both sides
    cfg = make_cfg(bd, batch=spec["B"], seq_len=spec["T"])
    w = random_weights(ref.block_param_shapes(bd), seed=3)
    x = random_x(spec["B"], spec["T"], bd["d_model"], seed=4)
    fast = DecoderBlock.from_config(cfg, weights=w, attention="chunked")
    fast.attn.tile_bytes = 7 * spec["T"] * 8  # 7 query rows of one head per tile: many tiles, three threads
    y = fast(x)
    assert maxdiff(y, ref.block_forward(bd, w, x)) <= 1e-12
    assert maxdiff(y, DecoderBlock.from_config(cfg, weights=w, attention="full")(x)) <= 1e-12


def test_concurrent_callers_leave_blas_as_they_found_it(shared_tiles):
    before = _blas_threads()
    callers = [threading.Thread(target=parallel.share_out, args=(lambda tiles: np.ones((64, 64)) @ np.ones((64, 64)),
                                                                 list(range(12)), lambda t: 1, 1)) for _ in range(4)]
    for c in callers:
        c.start()
    for c in callers:
        c.join()
    assert _blas_threads() == before


def _share_in_child(queue):
    handed = []
    parallel.share_out(lambda tiles: handed.extend(tiles), list(range(9)), cost=lambda t: 1, work=1)
    queue.put(sorted(handed))


def test_a_forked_child_shares_with_threads_of_its_own(shared_tiles):
    import multiprocessing
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    # the parent's pool has its threads (each plan takes long enough that all three start)
    parallel.share_out(lambda tiles: time.sleep(0.05), list(range(9)), cost=lambda t: 1, work=1)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_share_in_child, args=(queue,))
    child.start()
    child.join(timeout=30)
    if child.is_alive():
        child.kill()
    assert child.exitcode == 0, "the child hung or failed sharing out"
    assert queue.get(timeout=5) == list(range(9))


def _counting_run(trigger):
    """A run that calls trigger() on tile 99 (the largest, pulled first), taking 20 ms a tile."""
    done = []

    def run(tiles):
        for tile in tiles:
            if tile == 99:
                trigger()
            time.sleep(0.02)
            done.append(tile)
    return run, done


def test_a_failing_worker_stops_the_others_early(shared_tiles):
    def fail():
        raise ValueError("tile 99 failed")
    run, done = _counting_run(fail)
    with pytest.raises(ValueError, match="tile 99 failed"):
        parallel.share_out(run, list(range(100)), cost=lambda t: t, work=1)
    assert len(done) < 50  # the tiles in hand when the queue closed, not all the other 99


def test_ctrl_c_while_waiting_stops_the_workers_and_reaches_the_caller(shared_tiles, python_sigint):
    import signal
    main = threading.main_thread().ident
    before = _blas_threads()
    run, done = _counting_run(lambda: signal.pthread_kill(main, signal.SIGINT))
    with pytest.raises(KeyboardInterrupt):
        parallel.share_out(run, list(range(100)), cost=lambda t: t, work=1)
    assert len(done) < 50  # noticed within one 0.1 s wake-up, not after all 100 tiles
    assert _blas_threads() == before  # the limit was lifted on the way out


INTERRUPTED_WHILE_STARTING = """
import signal, threading, time
from blockcli import parallel
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a foreground run, whatever this one inherited
parallel.SHARED_WORK, parallel.worker_count = 0, lambda: 3
main = threading.main_thread().ident

def run(tiles):
    for tile in tiles:
        if tile == 99:  # the first tile pulled, while the caller is still starting the other workers
            signal.pthread_kill(main, signal.SIGINT)
        time.sleep(0.02)

try:
    parallel.share_out(run, list(range(100)), cost=lambda t: t, work=1)
except KeyboardInterrupt:
    print("interrupted")
"""


def test_ctrl_c_while_the_pool_starts_its_workers_lets_the_process_exit():
    """A fresh process, so the pool is built in this very call: the interrupt lands while submit() starts a worker,
    which concurrent.futures then never registers, and the interpreter used to wait for that thread at exit
    forever (this test's own process hung after passing, run alone)."""
    import subprocess
    import sys

    from conftest import ROOT, default_signals

    for _ in range(3):  # where the interrupt lands varies from run to run
        proc = subprocess.run([sys.executable, "-c", INTERRUPTED_WHILE_STARTING], capture_output=True, text=True,
                              timeout=60, cwd=ROOT, preexec_fn=default_signals)
        assert proc.returncode == 0 and proc.stdout == "interrupted\n", proc.stderr


def test_a_child_forked_during_sharing_gets_blas_threads_back(shared_tiles):
    import multiprocessing
    if "fork" not in multiprocessing.get_all_start_methods() or not _blas_threads():
        pytest.skip("needs fork and a BLAS threadpoolctl can see")
    before = _blas_threads()
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()

    def fork_from_a_worker(tiles):
        for tile in tiles:
            if tile == 0:  # BLAS is held to one thread right now
                child = ctx.Process(target=lambda: queue.put(_blas_threads()))
                child.start()
                child.join(timeout=30)
    parallel.share_out(fork_from_a_worker, [0, 1, 2], cost=lambda t: 1, work=1)
    assert queue.get(timeout=5) == before


def test_a_caller_waiting_for_another_gets_every_worker(monkeypatch):
    if not _blas_threads() or max(_blas_threads()) < 2:
        pytest.skip("needs a BLAS with two threads or more")
    monkeypatch.setattr(parallel, "SHARED_WORK", 0)
    release = threading.Event()
    seen = []

    def slow(tiles):
        for _ in tiles:
            release.wait(5)

    first = threading.Thread(target=parallel.share_out, args=(slow, [0, 1], lambda t: 1, 1))
    first.start()
    time.sleep(0.2)  # the first caller now holds BLAS at one thread
    second = threading.Thread(target=lambda: parallel.share_out(
        lambda tiles: seen.append(threading.get_ident()), [0, 1], cost=lambda t: 1, work=1))
    second.start()
    time.sleep(0.2)
    release.set()
    first.join()
    second.join()
    assert len(seen) == 2  # shared among the workers, not run alone on the caller's thread


def test_fewer_tiles_than_workers_reuse_the_pool(shared_tiles):
    parallel.share_out(lambda tiles: list(tiles), list(range(6)), cost=lambda t: 1, work=1)
    pool = parallel._state["pool"]
    parallel.share_out(lambda tiles: list(tiles), [0, 1], cost=lambda t: 1, work=1)
    assert parallel._state["pool"] is pool


def test_a_short_share_on_busy_cores_goes_to_the_free_ones_a_long_one_to_all(monkeypatch):
    if not _blas_threads() or len(parallel.allowed_cores()) < 2:
        pytest.skip("needs a BLAS threadpoolctl can see and two cores")
    monkeypatch.setattr(parallel, "free_cores", lambda: 1)  # another process busy on the other core
    monkeypatch.setattr(parallel, "worker_count", lambda: 2)
    for work, threads in ((parallel.CONTENDED_WORK - 1, 1), (parallel.CONTENDED_WORK, 2)):
        seen, gate = set(), threading.Barrier(threads, timeout=5)

        def run(tiles):
            for _ in tiles:
                seen.add(threading.get_ident())
                if threads == 2:
                    gate.wait()  # each of the two workers holds a tile until the other has one

        parallel.share_out(run, [0, 1], cost=lambda t: 1, work=work)
        assert len(seen) == threads, (work, seen)
