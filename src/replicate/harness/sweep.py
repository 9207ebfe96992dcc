"""Sweeps on Ray: every chapter x seed x parameter value as one task, one `execute.execute`
in a hidden folder under `book/sweeps/<chapter>/`, renamed to `<run-id>/` only when every cell
succeeded. A failed task raises, Ray runs it once more (`max_retries`, `retry_exceptions`), and
one that fails again is recorded in `<run-id>.failed.json`. Ray itself (its start, the loop over
the tasks, Ctrl-C) is `ray_tasks`.
"""
from __future__ import annotations

import itertools
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from ..config import ConfigError, RunSpec
from ..runtime import BOOK_DIR, atomic_write
from . import execute as ex
from .ray_tasks import MARKER, failure_text, ray_session, run_tasks

SWEEPS_DIR = BOOK_DIR / "sweeps"
THREADS_PER_CHAPTER = 1  # the chapters are calibrated, and fastest on a busy CPU, with one thread
RETRIES = 1


class TaskFailed(Exception):
    """A sweep task whose chapter did not execute: its message names the failing cell. Raised,
    so that Ray retries the task."""


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
    """Run one task in a Ray worker: the chapter executes in a hidden folder renamed on success;
    a failed execution raises TaskFailed. Returns {"duration_s"}."""
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
            raise TaskFailed(message)
        atomic_write(work / "task.json", json.dumps(task_record(spec) | {"threads": threads,
                     "duration_s": seconds, "host": os.uname().nodename}, indent=2) + "\n")
        old = final.with_name(f".{final.name}.old-{sweep_id}")
        if final.exists():  # a re-run of the same id replaces the old folder
            os.replace(final, old)
        os.replace(work, final)
        shutil.rmtree(old, ignore_errors=True)
        (final.parent / f"{spec.run_id()}.failed.json").unlink(missing_ok=True)
        return {"duration_s": seconds}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def asked_threads() -> int | None:
    """The threads per task that $OMP_NUM_THREADS asks for, or None where it is unset or not a
    positive whole number."""
    text = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


def task_record(spec: RunSpec) -> dict:
    """What names a task in its task.json and failed.json."""
    return {**spec.as_parameter(), "chapter": spec.chapter, "seed": spec.seed,
            "run_id": spec.run_id()}


def run_sweep(specs: list[RunSpec], sweeps_dir: Path | str = SWEEPS_DIR,
              workers: int | None = None, address: str | None = None, retries: int = RETRIES,
              quiet: bool = False, threads: int | None = None) -> dict:
    """Run the specs on Ray, each failed task `retries` more times; returns {"done": [...],
    "failed": [...], "wall_s": ..., ...}. Ctrl-C cancels every task, kills their kernels, removes
    their half-written folders (their staging folders inside them), shuts Ray down and re-raises
    KeyboardInterrupt."""
    import ray
    from tqdm.auto import tqdm
    sweeps_dir = Path(sweeps_dir).resolve()  # workers need not share our working directory
    started, cpus = time.perf_counter(), os.cpu_count() or 1
    workers = workers or (None if address else max(1, cpus // THREADS_PER_CHAPTER))
    done, failed = [], []
    bar = tqdm(total=len(specs), desc="sweep", unit="task", disable=quiet or None)
    session = None
    try:
        with ray_session(address, workers or 1) as session:
            resources = ray.cluster_resources()
            if address:  # a cluster: each task asks for the threads one chapter uses
                threads = threads or THREADS_PER_CHAPTER
                workers = workers or max(1, int(resources.get("CPU", 1)) // threads)
            else:  # this machine: its cores shared among the slots, unless OMP_NUM_THREADS
                # says otherwise (a machine busy with other runs: one thread each spins least)
                threads = threads or asked_threads() or max(1, cpus // workers)
            remote = ray.remote(run_task).options(
                num_cpus=threads if address else 1, max_retries=retries, retry_exceptions=True,
                num_gpus=1 if resources.get("GPU", 0) >= 1 else 0)

            def finished(spec: RunSpec, result: Any, seconds: float) -> None:
                name = f"{spec.chapter} {spec.run_id()}"
                if isinstance(result, BaseException):
                    # Ray ran it 1 + retries times: a task that raised, or a worker that died.
                    error = (str(result.cause) if isinstance(result, TaskFailed)
                             else failure_text(result, spec.chapter))
                    failed.append({"spec": spec, "ok": False, "error": error,
                                   "duration_s": round(seconds, 1), "attempts": retries + 1})
                    record = task_record(spec) | {"error": error, "attempts": retries + 1}
                    atomic_write(sweeps_dir / spec.chapter / f"{spec.run_id()}.failed.json",
                                 json.dumps(record, indent=2) + "\n")
                    bar.write(f"FAILED {name}: {error}")
                else:
                    done.append({"spec": spec, "ok": True, "error": None, **result})
                    bar.write(f"[{len(done) + len(failed)}/{len(specs)}] {name} done in "
                              f"{result['duration_s']:.0f} s")
                bar.update(1)

            try:  # with --address, at most --workers in flight
                run_tasks(specs, workers, lambda spec: remote.remote(
                    spec, str(sweeps_dir), threads, session.id), finished)
            except KeyboardInterrupt:
                bar.write("interrupted: the sweep's tasks are cancelled")
                raise
    finally:
        bar.close()
        if session is not None:  # after Ray and the kernels have stopped
            for spec in specs:
                shutil.rmtree(_incoming(sweeps_dir, spec, session.id), ignore_errors=True)
    return {"done": done, "failed": failed, "ray_start_s": session.start_s,
            "ray_stop_s": session.stop_s, "threads": threads, "workers": workers,
            "wall_s": time.perf_counter() - started}
