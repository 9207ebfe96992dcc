"""Sweeps on Ray: every chapter x seed x parameter value as one task, one `execute.execute`
in a hidden folder under `book/sweeps/<chapter>/`, renamed to `<run-id>/` only when every cell
succeeded; a failed task is retried once, then recorded in `<run-id>.failed.json`.

`run_in_lanes` uses the same local Ray for `run` with several chapters (`make book`): each chapter
in a lane of its own, one thread each, published as a run on its own would be.
"""
from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import socket
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from ..config import ConfigError, RunSpec, get_chapter
from ..runtime import BOOK_DIR, atomic_write
from . import execute as ex

SWEEPS_DIR = BOOK_DIR / "sweeps"
THREADS_PER_CHAPTER = 1  # the chapters are calibrated, and fastest on a busy CPU, with one thread
MARKER = "REPLICATE_SWEEP_ID"  # set in every task's environment: finds its kernels after a Ctrl-C
RETRIES = 1
RAY_INIT = dict(log_to_driver=False, configure_logging=True, logging_level="ERROR")


def cross_product(chapters: list[str], seeds: list[int], preset: str,
                  values: dict[str, list[Any]] | None = None) -> list[RunSpec]:
    """Every chapter x seed x combination of the listed values, each resolved and checked."""
    values = values or {}
    if "seed" in values:
        raise ConfigError("give seeds with --seeds, not -p seed")
    if not seeds:
        raise ConfigError("no seeds to run")
    names = sorted(values)
    specs = []
    for chapter in chapters:
        for combo in itertools.product(*(values[n] for n in names)):
            chosen = dict(zip(names, combo))
            ex.check_ready(RunSpec.make(chapter, preset, chosen))
            specs += [RunSpec.make(chapter, preset, {**chosen, "seed": s}) for s in seeds]
    if len({(s.chapter, s.run_id()) for s in specs}) != len(specs):
        raise ConfigError("the sweep lists the same run twice (repeated values?)")
    return specs


def _incoming(sweeps_dir: Path, spec: RunSpec, sweep_id: str) -> Path:
    return Path(sweeps_dir) / spec.chapter / f".{spec.run_id()}.incoming-{sweep_id}"


def run_task(spec: RunSpec, sweeps_dir: str, threads: int, sweep_id: str) -> dict:
    """Run one task in a Ray worker: the chapter executes in a hidden folder renamed on success."""
    # Its kernel inherits this environment: oversubscribed OpenMP threads spin, many times slower.
    os.environ.update({"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
                       MARKER: sweep_id})
    final = Path(sweeps_dir) / spec.chapter / spec.run_id()
    work = _incoming(Path(sweeps_dir), spec, sweep_id)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    started = time.perf_counter()
    try:
        ok, message = ex.execute(spec, work, work, staging_root=work / ".staging")
        seconds = round(time.perf_counter() - started, 1)
        if not ok:
            return {"ok": False, "error": message, "duration_s": seconds}
        atomic_write(work / "task.json", json.dumps(task_record(spec) | {"threads": threads,
                     "duration_s": seconds, "host": os.uname().nodename}, indent=2) + "\n")
        old = final.with_name(f".{final.name}.old-{sweep_id}")
        if final.exists():  # a re-run of the same id replaces the old folder
            os.replace(final, old)
        os.replace(work, final)
        shutil.rmtree(old, ignore_errors=True)
        (final.parent / f"{spec.run_id()}.failed.json").unlink(missing_ok=True)
        return {"ok": True, "error": None, "duration_s": seconds}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def task_record(spec: RunSpec) -> dict:
    """What names a task in its task.json and failed.json."""
    return {**spec.as_parameter(), "chapter": spec.chapter, "seed": spec.seed,
            "run_id": spec.run_id()}


def check_address(address: str) -> None:
    """`auto`, `ray://HOST:PORT` or `HOST:PORT` where something answers, within seconds."""
    if address == "auto":
        return
    match = re.fullmatch(r"(?:ray://)?([A-Za-z0-9._-]+|\[[0-9a-fA-F:]+\]):(\d{1,5})", address)
    if not match:
        raise ConfigError(f"--address {address!r}: write auto, HOST:PORT or ray://HOST:PORT")
    try:
        socket.create_connection((match[1].strip("[]"), int(match[2])), timeout=10).close()
    except OSError as err:
        why = err.strerror or err
        raise ConfigError(f"--address {address}: nothing answers there ({why}); start a cluster "
                          "with `ray start --head`, or leave out --address") from None


def start_local_ray(slots: int) -> Callable[[], None]:
    """Start a Ray here with `slots` CPU slots and return its stop function. Ray's own `Node`
    without the monitors and API server that a sweep has no use for and `ray.init` waits for."""
    import ray
    try:
        from ray._private.node import Node
        from ray._private.parameter import RayParams

        class SweepNode(Node):
            def start_api_server(self, *, include_dashboard, raise_on_failure):
                pass  # no job or state API on a sweep's own Ray

            def start_ray_processes(self):  # Node's fixed 30 s for the raylet: too few under load
                super().start_ray_processes()
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline:
                    with contextlib.suppress(RuntimeError):
                        return ray._private.services.get_node(self.gcs_address, self._node_id)
                    time.sleep(0.5)
        params = RayParams(num_cpus=slots, include_dashboard=False, no_monitor=True,
                           include_log_monitor=False)
        node = SweepNode(params, head=True, shutdown_at_exit=False, spawn_reaper=True)
    except ImportError:  # another Ray version: the documented, slower start
        ray.init(num_cpus=slots, include_dashboard=False, **RAY_INIT)
        return ray.shutdown
    try:
        ray.init(address=node.address, **RAY_INIT)
    except BaseException:
        node.kill_all_processes(check_alive=False, allow_graceful=False)
        raise

    def stop() -> None:
        try:
            ray.shutdown()
        finally:
            node.kill_all_processes(check_alive=False, allow_graceful=True)
    return stop


def start_ray(address: str | None, slots: int,
              start_local: Callable[[int], Callable] = start_local_ray):
    """Join `address`, or start a local Ray, retried once (a loaded machine can time out its
    start). Raises ConfigError with one line when it cannot."""
    import ray
    if address:
        check_address(address)
        try:
            ray.init(address=address, include_dashboard=False, **RAY_INIT)
        except Exception as err:  # noqa: BLE001 - Ray raises many kinds; the user needs one line
            first = (str(err).strip() or type(err).__name__).splitlines()[0][:200]
            raise ConfigError(f"--address {address}: Ray could not connect ({first})") from None
        return ray.shutdown
    for _ in range(2):
        try:
            return start_local(slots)
        except Exception as err:  # noqa: BLE001
            first = (str(err).strip() or type(err).__name__).splitlines()[0][:200]
            ray.shutdown()  # a half-made connection must not stop the retry
    raise ConfigError(f"the local Ray did not start, twice ({first}); its logs are in "
                      "/tmp/ray/session_latest/logs. Try again when the machine is less loaded, or "
                      "start Ray with `ray start --head` and pass --address auto")


def _kill_marked(sweep_id: str) -> None:
    """Kill this sweep's processes here: a cancelled task's kernel outlives its killed worker."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):  # gone already, or not ours to read
                if f"{MARKER}={sweep_id}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                    os.kill(int(entry.name), signal.SIGKILL)


def _prepare_worker_environment() -> None:
    """Ray workers start from this process's environment: make sure they find this package, and
    send no usage report."""
    src, path = str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")
    if src not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = src + (os.pathsep + path if path else "")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def run_sweep(specs: list[RunSpec], sweeps_dir: Path | str = SWEEPS_DIR,
              workers: int | None = None, address: str | None = None, retries: int = RETRIES,
              quiet: bool = False, threads: int | None = None) -> dict:
    """Run the specs on Ray; returns {"done": [...], "failed": [...], "wall_s": ..., ...}. Ctrl-C
    cancels every task, kills their kernels, removes their half-written folders (their staging
    folders inside them), shuts Ray down and re-raises KeyboardInterrupt."""
    import ray
    from tqdm.auto import tqdm
    sweeps_dir = Path(sweeps_dir).resolve()  # workers need not share our working directory
    sweep_id, started, cpus = uuid.uuid4().hex[:12], time.perf_counter(), os.cpu_count() or 1
    _prepare_worker_environment()
    workers = workers or (None if address else max(1, cpus // THREADS_PER_CHAPTER))
    stop_ray = start_ray(address, workers or 1)
    ray_started = time.perf_counter() - started
    done, failed, queue, pending = [], [], list(specs), {}  # pending: ref -> (spec, attempt, sent)
    bar = tqdm(total=len(specs), desc="sweep", unit="task", disable=quiet or None)
    try:
        resources = ray.cluster_resources()
        if address:  # a cluster: each task asks for the threads one chapter uses
            threads = threads or THREADS_PER_CHAPTER
            workers = workers or max(1, int(resources.get("CPU", 1)) // threads)
        else:  # this machine: its cores shared among the slots
            threads = threads or max(1, cpus // workers)
        remote = ray.remote(run_task).options(num_cpus=threads if address else 1, max_retries=0,
                                              num_gpus=1 if resources.get("GPU", 0) >= 1 else 0)

        def submit(spec: RunSpec, attempt: int) -> None:
            pending[remote.remote(spec, str(sweeps_dir), threads, sweep_id)] = (
                spec, attempt, time.perf_counter())
        while queue or pending:
            while queue and len(pending) < workers:  # with --address, at most --workers in flight
                submit(queue.pop(0), 0)
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
            for ref in ready:
                spec, attempt, sent = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except Exception as err:  # the worker died, or the task raised
                    result = {"ok": False, "error": f"{spec.chapter} failed: {type(err).__name__}: "
                              f"{str(err).splitlines()[0][:300]}",
                              "duration_s": round(time.perf_counter() - sent, 1)}
                name = f"{spec.chapter} {spec.run_id()}"
                if not result["ok"] and attempt < retries:
                    bar.write(f"retrying {name}: {result['error']}")
                    submit(spec, attempt + 1)
                    continue
                (done if result["ok"] else failed).append(
                    {"spec": spec, **result, "attempts": attempt + 1})
                if result["ok"]:
                    bar.write(f"[{len(done) + len(failed)}/{len(specs)}] {name} done in "
                              f"{result['duration_s']:.0f} s")
                else:
                    record = task_record(spec) | {"error": result["error"], "attempts": attempt + 1}
                    atomic_write(sweeps_dir / spec.chapter / f"{spec.run_id()}.failed.json",
                                 json.dumps(record, indent=2) + "\n")
                    bar.write(f"FAILED {name}: {result['error']}")
                bar.update(1)
    except KeyboardInterrupt:
        bar.write("interrupted: cancelling the sweep's tasks ...")
        for ref in pending:
            with contextlib.suppress(Exception):  # a task that already ended
                ray.cancel(ref, force=True)
        raise
    finally:
        bar.close()
        stopping = time.perf_counter()
        try:
            stop_ray()
        finally:
            ray_stopped = time.perf_counter() - stopping
            # The kernels first: one still writing would recreate a file in a removed folder.
            if not address:
                _kill_marked(sweep_id)
            for spec in specs:
                shutil.rmtree(_incoming(sweeps_dir, spec, sweep_id), ignore_errors=True)
    return {"done": done, "failed": failed, "ray_start_s": ray_started, "ray_stop_s": ray_stopped,
            "threads": threads, "workers": workers, "wall_s": time.perf_counter() - started}


def longest_first(specs: list[RunSpec], results_dir: Path) -> list[RunSpec]:
    """The specs by the time their chapter took when last published, longest first (a chapter
    never run comes first: it may be the longest), so that no long chapter starts last."""
    def last_duration(spec: RunSpec) -> float:
        path = Path(results_dir) / f"{spec.chapter}.json"
        try:
            return float(json.loads(path.read_text())["duration_s"])
        except (OSError, ValueError, KeyError, TypeError):
            return float("inf")
    return sorted(specs, key=last_duration, reverse=True)  # stable: ties keep their order


def next_ready(queue: list[RunSpec], running: list[RunSpec]) -> int | None:
    """The index in `queue` of the first chapter free to start: one whose `runs_after` chapter
    (chapter.yaml: it trains the same runs, and finds them in the run cache once that chapter has
    finished) is neither running nor still queued. None while every queued chapter waits for a
    running one; with nothing running, the first in the queue, so that no declaration can stall
    the book."""
    busy = {s.chapter for s in queue} | {s.chapter for s in running}
    for i, spec in enumerate(queue):
        if get_chapter(spec.chapter).get("runs_after") not in busy:
            return i
    return 0 if queue and not running else None


def _execute_in_lane(spec: RunSpec, claims_dir: str, results_dir: str, lane_id: str) -> dict:
    """One chapter in a Ray worker, on one thread: its kernel inherits this environment."""
    os.environ.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", MARKER: lane_id})
    started = time.perf_counter()
    ok, message = ex.execute(spec, Path(claims_dir), Path(results_dir))
    return {"ok": ok, "message": message, "duration_s": round(time.perf_counter() - started, 1)}


def run_in_lanes(jobs: list[tuple[RunSpec, Path, Path]], lanes: int, quiet: bool = False,
                 start: Callable[[int], Callable] = start_local_ray) -> list[dict]:
    """Execute chapters, each (spec, claims dir, results dir), in `lanes` parallel lanes on a
    local Ray, one thread each, in the order given, except that a chapter declared to run after
    another waits for it (`next_ready`); each publishes as a run on its own would.
    Returns {"spec", "ok", "message", "duration_s"} per chapter, in the order they finished.
    Raises ConfigError (one line) when Ray cannot start; Ctrl-C kills the lanes' kernels."""
    import ray
    from tqdm.auto import tqdm
    _prepare_worker_environment()
    lane_id, lanes = uuid.uuid4().hex[:12], max(1, min(lanes, len(jobs)))
    stop_ray = start_ray(None, lanes, start_local=start)
    remote = ray.remote(_execute_in_lane).options(num_cpus=1, max_retries=0)
    queue, pending, finished = list(jobs), {}, []
    bar = tqdm(total=len(jobs), desc="chapters", unit="chapter", disable=quiet or None)
    try:
        while queue or pending:
            while queue and len(pending) < lanes:
                ready = next_ready([job[0] for job in queue], [s for s, _ in pending.values()])
                if ready is None:
                    break
                spec, claims_dir, results_dir = queue.pop(ready)
                ref = remote.remote(spec, str(Path(claims_dir).resolve()),
                                    str(Path(results_dir).resolve()), lane_id)
                pending[ref] = (spec, time.perf_counter())
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
            for ref in ready:
                spec, sent = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except Exception as err:  # the worker died
                    result = {"ok": False, "message": f"{spec.chapter} failed: "
                              f"{type(err).__name__}: {str(err).splitlines()[0][:300]}",
                              "duration_s": round(time.perf_counter() - sent, 1)}
                finished.append({"spec": spec, **result})
                bar.write(f"[{len(finished)}/{len(jobs)}] {spec.chapter} "
                          f"{'done' if result['ok'] else 'FAILED'} in {result['duration_s']:.0f} s")
                bar.update(1)
    except KeyboardInterrupt:
        bar.write("interrupted: stopping the lanes ...")
        for ref in pending:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        raise
    finally:
        bar.close()
        try:
            stop_ray()
        finally:
            _kill_marked(lane_id)
    return finished
