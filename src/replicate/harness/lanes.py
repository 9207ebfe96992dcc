"""The book's parallel lanes: `run` with several chapters (`make book`) executes each chapter in
a lane of its own on a local Ray, or on a Ray cluster (`run --address`), one thread each, the
longest first, a chapter that reuses another's runs after that one, and each published exactly as
a run on its own would be. On a cluster every node must see the project's folders at the same
path (a shared file system), as for `sweep --address`."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable

from ..config import RunSpec, get_chapter
from . import execute as ex
from .ray_tasks import MARKER, failure_text, ray_session, run_tasks, start_local_ray


def cold_seconds(chapter: str, results_dir: Path) -> float:
    """How long the chapter takes with nothing in the run cache: the larger of its last published
    duration and the cold time measured into its chapter.yaml (`cpu_cold_s`), since a chapter
    published from the cache records seconds where it would take minutes. A chapter with neither
    counts as endless: it may be the longest."""
    recorded = get_chapter(chapter).get("cpu_cold_s")
    try:
        published = float(json.loads((Path(results_dir) / f"{chapter}.json").read_text())["duration_s"])
    except (OSError, ValueError, KeyError, TypeError):
        published = None
    known = [float(t) for t in (recorded, published) if t is not None]
    return max(known) if known else float("inf")


def longest_first(specs: list[RunSpec], results_dir: Path) -> list[RunSpec]:
    """The specs longest first, so that no long chapter starts last: by `cold_seconds`, a chapter
    that others run after (`runs_after`) counting theirs too, since they can only start once it
    has finished (chapter 01 goes early: chapter 02 follows it)."""
    own = {s.chapter: cold_seconds(s.chapter, results_dir) for s in specs}

    def chain(spec: RunSpec) -> float:
        return own[spec.chapter] + sum(own[s.chapter] for s in specs
                                       if get_chapter(s.chapter).get("runs_after") == spec.chapter)
    return sorted(specs, key=chain, reverse=True)  # stable: ties keep their order


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


def execute_in_lane(spec: RunSpec, claims_dir: str, results_dir: str, session_id: str) -> dict:
    """One chapter in a Ray worker, on one thread: its kernel inherits this environment."""
    os.environ.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", MARKER: session_id})
    started = time.perf_counter()
    ok, message = ex.execute(spec, Path(claims_dir), Path(results_dir))
    return {"ok": ok, "message": message, "duration_s": round(time.perf_counter() - started, 1)}


def run_in_lanes(jobs: list[tuple[RunSpec, Path, Path]], lanes: int, quiet: bool = False,
                 start: Callable[[int], Callable] = start_local_ray,
                 address: str | None = None) -> list[dict]:
    """Execute chapters, each (spec, claims dir, results dir), in `lanes` parallel lanes on a
    local Ray (or on the cluster at `address`), one thread each, in the order given, except that
    a chapter declared to run after another waits for it (`next_ready`). A chapter that fails is
    not run again: it failed as it would on its own. Returns {"spec", "ok", "message",
    "duration_s"} per chapter, in the order they finished. Raises ConfigError (one line) when Ray
    cannot start or connect; Ctrl-C kills the lanes' kernels."""
    import ray
    from tqdm.auto import tqdm
    lanes, finished = max(1, min(lanes, len(jobs))), []
    where = {spec.chapter: (str(Path(c).resolve()), str(Path(r).resolve())) for spec, c, r in jobs}
    bar = tqdm(total=len(jobs), desc="chapters", unit="chapter", disable=quiet or None)

    def done(spec: RunSpec, result: Any, seconds: float) -> None:
        if isinstance(result, BaseException):  # the worker died
            result = {"ok": False, "message": failure_text(result, spec.chapter),
                      "duration_s": round(seconds, 1)}
        finished.append({"spec": spec, **result})
        bar.write(f"[{len(finished)}/{len(jobs)}] {spec.chapter} "
                  f"{'done' if result['ok'] else 'FAILED'} in {result['duration_s']:.0f} s")
        bar.update(1)

    try:
        with ray_session(address, lanes, start_local=start) as session:
            remote = ray.remote(execute_in_lane).options(num_cpus=1, max_retries=0)
            try:
                run_tasks([spec for spec, _, _ in jobs], lanes, lambda spec: remote.remote(
                    spec, *where[spec.chapter], session.id), done, choose=next_ready)
            except KeyboardInterrupt:
                bar.write("interrupted: the lanes are stopped")
                raise
    finally:
        bar.close()
    return finished
