"""Sweeps: every chapter x seed x parameter value as a Ray task, and the verdict across seeds.

    python -m replicate sweep 07_optimizers 03_centroid_ntk --seeds 0-4
    python -m replicate sweep 07_optimizers --seeds 0-2 -p check_lr 1e-2,1e-1
    python -m replicate sweep 07_optimizers --aggregate-only

Each task is one papermill execution of a chapter (`cli.run_chapter`: same staging, same run
cache) into `book/sweeps/<chapter>/<run-id>/` (the executed notebook, its verdict and `task.json`).
A task writes into a hidden sibling folder and renames it into place only when every cell
succeeded, so an interrupted or failed task leaves no run folder; a failed task is retried once,
then recorded in `book/sweeps/<chapter>/<run-id>.failed.json` with its failing cell.

By default the command starts a local Ray (nothing to install or start by hand) with `--workers`
slots and stops it at the end; `--address` joins an existing cluster instead. Every task sets
its OpenMP/MKL/torch threads to its share of the cores before its kernel starts (the kernel
inherits the environment): oversubscribed OpenMP threads spin and run many times slower.

Aggregation (`aggregate`) collects the published run (`book/results/<chapter>.json`, when it was
run at the same preset and parameters) and every sweep run with the same preset and non-seed
parameters, one run per seed (a sweep's own run of a seed replaces the published one), and
writes `book/results/<chapter>.seeds.json`: for every check how many seeds passed (k/n), for
every numeric value the mean, standard deviation and a 95% Student-t interval of the mean.
"""
from __future__ import annotations

import itertools
import json
import math
import os
import re
import shutil
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from . import presets
from ..runtime import BOOK_DIR, PROJECT_ROOT

SWEEPS_DIR = BOOK_DIR / "sweeps"
ROBUST_SHARE = 0.8
ROBUST_RULE = "each claim check passes in at least 80% of seeds"
INTERVAL = "95% Student-t interval of the mean"
THREADS_PER_CHAPTER = 1  # the chapters are calibrated, and fastest on a busy CPU, with one thread
MARKER = "REPLICATE_SWEEP_ID"  # set in every task's environment: finds its kernels after a Ctrl-C
RETRIES = 1


# --------------------------------------------------------------------------------------------
# The cross product and its validation


@dataclass(frozen=True)
class Task:
    chapter: str
    preset: str
    overrides: tuple[tuple[str, Any], ...]  # sorted (name, value), seed included

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.overrides)

    @property
    def seed(self) -> int:
        return int(self.params.get("seed", 0))

    @property
    def run_id(self) -> str:
        return run_id(self.preset, self.params)

    def describe(self) -> str:
        return f"{self.chapter} {self.run_id}"


def parse_seeds(text: str) -> list[int]:
    """`0-4` -> [0, 1, 2, 3, 4]; `0,3,7` -> [0, 3, 7]; `2` -> [2]; ranges and lists mix."""
    seeds: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        match = re.fullmatch(r"(\d+)\s*-\s*(\d+)", part)
        try:
            if match:
                lo, hi = int(match[1]), int(match[2])
                if hi < lo:
                    raise ValueError
                seeds += range(lo, hi + 1)
            else:
                seeds.append(int(part))
        except ValueError:
            raise presets.ConfigError(f"--seeds: cannot read {part!r}; write e.g. 0-4 or 0,3,7") from None
        if seeds and seeds[-1] < 0:
            raise presets.ConfigError("--seeds: seeds are non-negative integers")
    return sorted(set(seeds))


def split_values(text: str) -> list[str]:
    """Split `V1,V2,...` at the commas outside brackets: `[1, 2],[3, 4]` is two values."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char in "[{(":
            depth += 1
        elif char in "]})":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    parts.append(current.strip())
    if any(p == "" for p in parts):
        raise presets.ConfigError(f"empty value in {text!r}")
    return parts


def _slug(value: Any) -> str:
    if isinstance(value, list):
        text = "_".join(_slug(v) for v in value)
    elif isinstance(value, float):
        text = repr(value)
    else:
        text = str(value)
    return re.sub(r"[^A-Za-z0-9.+-]", "_", text)


def run_id(preset: str, overrides: dict[str, Any]) -> str:
    """`cpu-seed1`, `cpu-seed1-check_lr0.1`: deterministic from the preset and the overrides."""
    names = sorted(overrides, key=lambda n: (n != "seed", n))
    text = "-".join([preset] + [f"{n}{_slug(overrides[n])}" for n in names])
    if len(text) > 100:  # long lists: keep it readable and unique
        import hashlib

        text = text[:80] + "-" + hashlib.sha256(text.encode()).hexdigest()[:12]
    return text


def group_id(preset: str, overrides: dict[str, Any]) -> str:
    """The run id without the seed: names one set of non-seed parameters."""
    return run_id(preset, {k: v for k, v in overrides.items() if k != "seed"})


def cross_product(chapters: list[str], seeds: list[int], preset: str,
                  params: dict[str, list[Any]] | None = None) -> list[Task]:
    """Every chapter x seed x combination of the listed parameter values, validated up front."""
    from .cli import check_ready

    params = params or {}
    if "seed" in params:
        raise presets.ConfigError("give seeds with --seeds, not -p seed")
    if not seeds:
        raise presets.ConfigError("no seeds to run")
    names = sorted(params)
    tasks: list[Task] = []
    for name in chapters:
        ch = presets.get_chapter(name)
        check_ready(ch, preset, {})
        values = presets.resolve(name, preset)
        for combo in itertools.product(*(params[n] for n in names)):
            for seed in seeds:
                overrides = presets.validate(name, {"seed": seed, **dict(zip(names, combo))})
                check_ready(ch, preset, overrides)
                # a value equal to the preset's is no override: one run, one id
                overrides = {k: v for k, v in overrides.items() if k == "seed" or values[k] != v}
                tasks.append(Task(name, preset, tuple(sorted(overrides.items()))))
    if len({(t.chapter, t.run_id) for t in tasks}) != len(tasks):
        raise presets.ConfigError("the sweep lists the same run twice (repeated values?)")
    return tasks


# --------------------------------------------------------------------------------------------
# One task (runs in a Ray worker)


def _atomic_json(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(record, fh, indent=2)
        fh.write("\n")
    os.replace(tmp, path)


def _incoming(sweeps_dir: Path, task: Task, sweep_id: str) -> Path:
    return Path(sweeps_dir) / task.chapter / f".{task.run_id}.incoming-{sweep_id}"


def execute(task: Task, sweeps_dir: str, threads: int, sweep_id: str) -> dict:
    """Run one task: the chapter executes into a hidden folder renamed into place on success."""
    from . import cli
    # The chapter computes in its kernel, which reads its threads from this environment; the
    # worker only drives papermill and never needs torch (a second to import, on every slot).
    os.environ.update({"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
                       MARKER: sweep_id})
    final = Path(sweeps_dir) / task.chapter / task.run_id
    work = _incoming(Path(sweeps_dir), task, sweep_id)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    started = time.perf_counter()
    # The chapter's staging folder goes inside the hidden one too: a killed task leaves no litter.
    saved_tempdir, tempfile.tempdir = tempfile.tempdir, str(work)
    try:
        ok, message = cli.run_chapter(presets.get_chapter(task.chapter), task.preset, task.params,
                                      claims_dir=work, results_dir=work)
        seconds = round(time.perf_counter() - started, 1)
        if not ok:
            return {"ok": False, "error": message, "duration_s": seconds}
        _atomic_json(work / "task.json", {"chapter": task.chapter, "preset": task.preset,
                                          "overrides": task.params, "seed": task.seed,
                                          "run_id": task.run_id, "threads": threads,
                                          "duration_s": seconds, "host": os.uname().nodename})
        if final.exists():  # a re-run of the same id replaces the old folder
            old = final.with_name(f".{final.name}.old-{sweep_id}")
            os.replace(final, old)
            os.replace(work, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(work, final)
        (final.parent / f"{task.run_id}.failed.json").unlink(missing_ok=True)
        return {"ok": True, "error": None, "duration_s": seconds}
    finally:
        tempfile.tempdir = saved_tempdir
        shutil.rmtree(work, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# The driver


def _kill_marked(sweep_id: str) -> list[int]:
    """Kill (by pid) every process on this machine whose environment carries this sweep's id:
    the kernels of cancelled tasks, whose Ray worker was killed under them."""
    killed = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if f"{MARKER}={sweep_id}".encode() in env.split(b"\0"):
            try:
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
            except OSError:
                pass
    return killed


def _remove_incoming(sweeps_dir: Path, tasks: list[Task], sweep_id: str) -> None:
    for task in tasks:
        shutil.rmtree(_incoming(sweeps_dir, task, sweep_id), ignore_errors=True)


def default_workers() -> int:
    return max(1, (os.cpu_count() or 1) // THREADS_PER_CHAPTER)


RAY_INIT = dict(log_to_driver=False, configure_logging=True, logging_level="ERROR")


def start_local_ray(slots: int) -> Callable[[], None]:
    """Start a Ray on this machine with `slots` CPU slots and connect to it; returns the function
    that stops it.

    `ray.init(num_cpus=...)` also starts three Python processes a sweep on one machine has no
    use for: the autoscaler monitor (nothing to autoscale), the log monitor (the workers' output
    is not forwarded) and, even with `include_dashboard=False`, the API server behind the job
    and state APIs (a sweep submits no jobs and lists no state). `ray.init` waits 1.4 s for
    the API server to import and publish its address before it starts the raylet, and on a
    small machine the monitors compete for the cores with the raylet's agents, which it also
    waits for: together 2.5-3.5 s of a 10 s chapter. With the pinned Ray we start the head node
    without them, through the same `Node` class that `ray.init` uses, and connect to it;
    should that internal API change, plain `ray.init`."""
    import ray

    try:
        from ray._private.node import Node
        from ray._private.parameter import RayParams

        class SweepNode(Node):
            def start_api_server(self, *, include_dashboard, raise_on_failure):
                pass  # see above: no job or state API on a sweep's own Ray

        params = RayParams(num_cpus=slots, include_dashboard=False, no_monitor=True,
                           include_log_monitor=False)
        node = SweepNode(params, head=True, shutdown_at_exit=False, spawn_reaper=True)
    except Exception:  # another Ray version: the documented start
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


def run_sweep(tasks: list[Task], sweeps_dir: Path | str = SWEEPS_DIR, workers: int | None = None,
              address: str | None = None, retries: int = RETRIES, quiet: bool = False,
              threads: int | None = None) -> dict:
    """Run `tasks` on Ray; returns {"done": [...], "failed": [...], "wall_s": ..., ...}.

    Ctrl-C cancels every task, kills their kernels, removes their half-written folders, shuts
    Ray down and re-raises KeyboardInterrupt.
    """
    import ray
    from tqdm.auto import tqdm

    sweeps_dir = Path(sweeps_dir).resolve()  # workers need not share our working directory
    sweep_id = uuid.uuid4().hex[:12]
    if workers is not None and workers < 1:
        raise presets.ConfigError("--workers must be at least 1")
    started = time.perf_counter()
    # Ray workers start from this process's environment: make sure they find this package.
    src = str(Path(__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH", "")
    if src not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = src + (os.pathsep + path if path else "")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage report from a sweep
    if address:
        ray.init(address=address, include_dashboard=False, **RAY_INIT)
        stop_ray = ray.shutdown
    else:
        workers = workers or default_workers()
        stop_ray = start_local_ray(workers)
    ray_started = time.perf_counter() - started
    done: list[dict] = []
    failed: list[dict] = []
    try:
        resources = ray.cluster_resources()
        if address:  # a cluster: each task asks for the threads one chapter uses
            threads = threads or THREADS_PER_CHAPTER
            workers = workers or max(1, int(resources.get("CPU", 1)) // threads)
        else:  # this machine: its cores shared among the slots
            threads = threads or max(1, (os.cpu_count() or 1) // workers)
        gpus = 1 if resources.get("GPU", 0) >= 1 else 0
        remote = ray.remote(execute).options(num_cpus=1 if not address else threads, num_gpus=gpus,
                                             max_retries=0)
        pending: dict[Any, tuple[Task, int, float]] = {}
        queue = list(tasks)

        def submit(task: Task, attempt: int):
            ref = remote.remote(task, str(sweeps_dir), threads, sweep_id)
            pending[ref] = (task, attempt, time.perf_counter())

        # With --address, cap what is in flight at --workers; locally Ray's slots do it.
        limit = workers
        bar = tqdm(total=len(tasks), desc="sweep", unit="task", disable=quiet or None)
        try:
            while queue or pending:
                while queue and len(pending) < limit:
                    submit(queue.pop(0), 0)
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
                for ref in ready:
                    task, attempt, submitted = pending.pop(ref)
                    try:
                        result = ray.get(ref)
                    except Exception as err:  # the worker died, or the task raised
                        result = {"ok": False, "error": f"{task.chapter} failed: "
                                  f"{type(err).__name__}: {str(err).splitlines()[0][:300]}",
                                  "duration_s": round(time.perf_counter() - submitted, 1)}
                    if not result["ok"] and attempt < retries:
                        bar.write(f"retrying {task.describe()}: {result['error']}")
                        submit(task, attempt + 1)
                        continue
                    entry = {"task": task, **result, "attempts": attempt + 1}
                    if result["ok"]:
                        done.append(entry)
                        bar.write(f"[{len(done) + len(failed)}/{len(tasks)}] {task.describe()} done "
                                  f"in {result['duration_s']:.0f} s")
                    else:
                        failed.append(entry)
                        _atomic_json(sweeps_dir / task.chapter / f"{task.run_id}.failed.json",
                                     {"chapter": task.chapter, "preset": task.preset,
                                      "overrides": task.params, "seed": task.seed,
                                      "run_id": task.run_id, "error": result["error"],
                                      "attempts": attempt + 1})
                        bar.write(f"FAILED {task.describe()}: {result['error']}")
                    bar.update(1)
        except KeyboardInterrupt:
            bar.write("interrupted: cancelling the sweep's tasks ...")
            for ref in pending:
                try:
                    ray.cancel(ref, force=True)
                except Exception:
                    pass
            raise
        finally:
            bar.close()
    finally:
        stopping = time.perf_counter()
        try:
            stop_ray()
        finally:
            ray_stopped = time.perf_counter() - stopping
            # Kernels outlive a killed worker for a moment: kill them, then their half-written
            # folders (a kernel still writing would otherwise recreate a file after the removal).
            if not address:
                _kill_marked(sweep_id)
            _remove_incoming(sweeps_dir, tasks, sweep_id)
    return {"done": done, "failed": failed, "ray_start_s": ray_started, "ray_stop_s": ray_stopped,
            "threads": threads, "workers": workers, "wall_s": time.perf_counter() - started}


# --------------------------------------------------------------------------------------------
# Aggregation across seeds


def _base_preset(label: str) -> str:
    return label.split(" + ")[0].strip()


def _non_seed_overrides(record: dict) -> dict[str, Any] | None:
    """The record's parameters that differ from its preset, seed excluded (None: unknown preset)."""
    preset = _base_preset(record.get("preset", ""))
    try:
        values = presets.resolve(record["chapter"], preset)
    except (presets.ConfigError, KeyError):
        return None
    params = record.get("params") or {}
    return {k: v for k, v in params.items() if k != "seed" and values.get(k) != v}


def _relative(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(PROJECT_ROOT))
    except ValueError:
        return str(path)


def collect_runs(chapter: str, preset: str = "cpu", overrides: dict | None = None,
                 results_dir: Path | str | None = None,
                 sweeps_dir: Path | str | None = None) -> tuple[dict[int, dict], list[dict]]:
    """The runs that enter the aggregate, by seed, and the failures not superseded by a run."""
    results_dir = Path(results_dir or BOOK_DIR / "results")
    sweeps_dir = Path(sweeps_dir or SWEEPS_DIR)
    wanted = presets.validate(chapter, dict(overrides or {}))
    runs: dict[int, dict] = {}

    def matches(record: dict) -> bool:
        return (record.get("chapter") == chapter and _base_preset(record.get("preset", "")) == preset
                and _non_seed_overrides(record) == wanted)

    published = results_dir / f"{chapter}.json"
    if published.exists():
        record = json.loads(published.read_text())
        if matches(record):
            runs[int(record.get("seed", 0))] = {"record": record, "source": _relative(published),
                                                "published": True}
        else:  # say why it is left out rather than dropping it silently
            runs[-1] = {"left_out": {"source": _relative(published), "preset": record.get("preset"),
                                     "why": "another preset or other parameters than this group"}}
    folder = sweeps_dir / chapter
    for path in sorted(folder.glob(f"*/{chapter}.json")) if folder.is_dir() else []:
        if path.parent.name.startswith("."):
            continue
        record = json.loads(path.read_text())
        if matches(record):
            seed = int(record.get("seed", 0))
            if runs.get(seed, {}).get("published"):  # the sweep's own run of that seed counts
                runs[-1] = {"left_out": {"source": runs[seed]["source"], "preset": preset,
                                         "why": f"replaced by the sweep's run of seed {seed}"}}
            runs[seed] = {"record": record, "source": _relative(path)}
    failed = []
    for path in sorted(folder.glob("*.failed.json")) if folder.is_dir() else []:
        record = json.loads(path.read_text())
        non_seed = {k: v for k, v in record.get("overrides", {}).items() if k != "seed"}
        if record.get("preset") != preset or record.get("seed") in runs:
            continue
        try:
            non_seed = {k: v for k, v in non_seed.items() if presets.resolve(chapter, preset).get(k) != v}
        except presets.ConfigError:
            pass
        if non_seed == wanted:
            failed.append({"seed": record.get("seed"), "overrides": record.get("overrides", {}),
                           "error": record.get("error")})
    return dict(sorted(runs.items())), failed


def _published_note(runs: dict[int, dict]) -> dict | None:
    left_out = runs.pop(-1, None)
    if left_out:
        return {**left_out["left_out"], "included": False}
    for seed, run in runs.items():
        if run.get("published"):
            return {"source": run["source"], "seed": seed, "included": True}
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def summarise(values: list[float]) -> dict:
    """Mean, sample standard deviation and the 95% Student-t interval of the mean; with them the
    median and the range, which is how the papers report a handful of seeds."""
    n = len(values)
    if n == 0:
        return {"n": 0, "mean": None, "sd": None, "ci95": None, "median": None, "range": None}
    mean = sum(values) / n
    ordered = sorted(values)
    half_n = n // 2
    median = ordered[half_n] if n % 2 else (ordered[half_n - 1] + ordered[half_n]) / 2
    spread = {"median": _round(median), "range": [_round(ordered[0]), _round(ordered[-1])]}
    if n < 2:
        return {"n": 1, "mean": _round(mean), "sd": None, "ci95": None, **spread}
    from scipy.stats import t

    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return {"n": n, "mean": _round(mean), "sd": _round(sd),
            "ci95": [_round(mean - half), _round(mean + half)], **spread}


def _round(value: float) -> float:
    return float(f"{value:.6g}")


def aggregate_records(records: dict[int, dict]) -> dict:
    """The across-seed part of a seeds file from {seed: verdict record}."""
    seeds = sorted(records)
    n = len(seeds)
    names: dict[str, dict] = {}  # check name -> {"kind", "per_seed"}
    numbers: dict[tuple[str, str | None], dict[str, float]] = {}
    for seed in seeds:
        for check in records[seed].get("checks", []):
            entry = names.setdefault(check["name"], {"kind": check["kind"], "per_seed": {}})
            entry["per_seed"][str(seed)] = check["passed"] if check["kind"] == "claim" else None
            ours = check.get("ours")
            items = [(None, ours)] if not isinstance(ours, dict) else list(ours.items())
            for key, value in items:
                if _is_number(value) and math.isfinite(value):
                    numbers.setdefault((check["name"], key), {})[str(seed)] = float(value)
    checks, unmatched = [], []
    for name, entry in names.items():
        present = [int(s) for s in entry["per_seed"]]
        if len(present) < n:
            unmatched.append({"name": name, "seeds": present})
        k = None
        if entry["kind"] == "claim":  # a seed that lacks the check counts as not passing it
            k = sum(bool(v) for v in entry["per_seed"].values())
        checks.append({"name": name, "kind": entry["kind"], "k": k, "n": n,
                       "per_seed": entry["per_seed"]})
    values = []
    for (name, key), per_seed in numbers.items():
        stats = summarise(list(per_seed.values()))
        values.append({"check": name, "key": key, **stats, "per_seed": per_seed})
    claims = [c for c in checks if c["kind"] == "claim"]
    robust = None
    if n >= 2:
        robust = bool(claims) and all(c["k"] >= ROBUST_SHARE * n - 1e-9 for c in claims)
    reproduced = sum(bool(records[s].get("reproduced")) for s in seeds)
    return {"seeds": seeds, "n": n, "robust": robust, "robust_rule": ROBUST_RULE,
            "interval": INTERVAL, "reproduced": {"k": reproduced, "n": n}, "checks": checks,
            "values": values, "unmatched": unmatched}


def aggregate(chapter: str, preset: str = "cpu", overrides: dict | None = None,
              results_dir: Path | str | None = None, sweeps_dir: Path | str | None = None) -> dict:
    """The seeds file's content for one chapter, preset and set of non-seed parameters."""
    values = presets.resolve(chapter, preset)
    overrides = presets.validate(chapter, dict(overrides or {}))
    if "seed" in overrides:
        raise presets.ConfigError("aggregate over seeds: do not fix the seed")
    overrides = {k: v for k, v in overrides.items() if values.get(k) != v}
    runs, failed = collect_runs(chapter, preset, overrides, results_dir, sweeps_dir)
    published = _published_note(runs)
    body = aggregate_records({seed: run["record"] for seed, run in runs.items()})
    return {"chapter": chapter, "preset": preset, "overrides": overrides, **body,
            "runs": [{"seed": seed, "source": run["source"],
                      "reproduced": bool(run["record"].get("reproduced")),
                      "duration_s": run["record"].get("duration_s")} for seed, run in runs.items()],
            "failed": failed, "published": published}


def seeds_path(chapter: str, preset: str, overrides: dict, results_dir: Path | str | None = None,
               sweeps_dir: Path | str | None = None) -> Path:
    """`book/results/<chapter>.seeds.json` for the preset's own parameters; a sweep over other
    values of a parameter gets `book/sweeps/<chapter>/<preset>-<values>.seeds.json` per value."""
    if not overrides:
        return Path(results_dir or BOOK_DIR / "results") / f"{chapter}.seeds.json"
    return Path(sweeps_dir or SWEEPS_DIR) / chapter / f"{group_id(preset, overrides)}.seeds.json"


def write_seeds(chapter: str, preset: str = "cpu", overrides: dict | None = None,
                results_dir: Path | str | None = None, sweeps_dir: Path | str | None = None) -> Path:
    record = aggregate(chapter, preset, overrides, results_dir, sweeps_dir)
    path = seeds_path(chapter, preset, record["overrides"], results_dir, sweeps_dir)
    _atomic_json(path, record)
    return path


def load_seeds(chapter: str, results_dir: Path | str | None = None) -> dict | None:
    """The chapter's seeds file, or None when no sweep has been aggregated for it."""
    path = Path(results_dir or BOOK_DIR / "results") / f"{chapter}.seeds.json"
    return json.loads(path.read_text()) if path.exists() else None


def describe(record: dict) -> str:
    robust = {True: "robust", False: "NOT robust", None: "too few seeds to say"}[record["robust"]]
    claims = [c for c in record["checks"] if c["kind"] == "claim"]
    weak = [f"{c['name']} ({c['k']}/{c['n']})" for c in claims if c["k"] < c["n"]]
    lines = [f"{record['chapter']} at {record['preset']}: reproduced in "
             f"{record['reproduced']['k']}/{record['reproduced']['n']} seeds {record['seeds']}; {robust}"]
    lines += [f"    not every seed: {w}" for w in weak]
    lines += [f"    failed seed {f['seed']}: {f['error']}" for f in record["failed"]]
    lines += [f"    check not matched across seeds: {u['name']} (seeds {u['seeds']})"
              for u in record.get("unmatched", [])]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# The command


def main_sweep(args) -> int:
    results_dir, sweeps_dir = Path(args.results_dir), Path(args.sweeps_dir)
    params = {name: [presets.parse_value(v) for v in split_values(text)] for name, text in (args.param or [])}
    if args.aggregate_only:
        for chapter in args.chapters:
            if any(len(v) > 1 for v in params.values()):
                raise presets.ConfigError("--aggregate-only takes one value per parameter")
            overrides = {k: v[0] for k, v in params.items()}
            path = write_seeds(chapter, args.preset, overrides, results_dir, sweeps_dir)
            print(describe(json.loads(path.read_text())))
            print(f"    -> {_relative(path)}")
        return 0
    tasks = cross_product(args.chapters, parse_seeds(args.seeds), args.preset, params)
    if args.workers is not None and args.workers < 1:
        raise presets.ConfigError("--workers must be at least 1")
    print(f"sweep: {len(tasks)} tasks ({', '.join(args.chapters)} at preset {args.preset}, seeds "
          f"{args.seeds}{', ' + str(params) if params else ''}) -> {_relative(sweeps_dir)}", flush=True)
    try:
        outcome = run_sweep(tasks, sweeps_dir, args.workers, args.address)
    except KeyboardInterrupt:
        print("sweep interrupted: tasks cancelled, no run folder half-written", file=sys.stderr)
        return 130
    print(f"{len(outcome['done'])} tasks done, {len(outcome['failed'])} failed, in "
          f"{outcome['wall_s']:.0f} s ({outcome['workers']} slots, {outcome['threads']} thread(s) each)")
    groups = {(t["task"].chapter, t["task"].preset,
               tuple((k, json.dumps(v)) for k, v in t["task"].overrides if k != "seed"))
              for t in outcome["done"] + outcome["failed"]}
    for chapter, preset, non_seed in sorted(groups):
        overrides = {k: json.loads(v) for k, v in non_seed}
        path = write_seeds(chapter, preset, overrides, results_dir, sweeps_dir)
        print(describe(json.loads(path.read_text())))
        print(f"    -> {_relative(path)}")
    for entry in outcome["failed"]:
        print(f"error: {entry['task'].describe()} failed after {entry['attempts']} attempts: "
              f"{entry['error']}", file=sys.stderr)
    return 1 if outcome["failed"] else 0
