"""How fast is this book? Benchmarks of the measures, the training loop and the chapters.

`python -m replicate bench [NAME ...]` runs each benchmark in a fresh Python process (so one's
memory peak and thread pool do not colour the next), prints a table (figure, ours, the seed
code's number on the same kind of machine, ratio, target) and writes `book/benchmarks.json`,
which `python -m replicate build` renders as the appendix page "How fast is this book?".

Seed numbers: the seeds' reference code timed on a 2-core CPU in float32, median of 3 after a
warm-up, with only `.cuda()` removed (issue 9). Our numbers: the same settings, median of 3
after a warm-up. Ratios are ours / seed's in the direction where > 1 means we are faster.
"""
from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..runtime import BOOK_DIR, PROJECT_ROOT

BENCHMARKS: dict[str, Callable[[], list[dict]]] = {}
RESULTS_FILE = BOOK_DIR / "benchmarks.json"


def benchmark(fn: Callable[[], list[dict]]) -> Callable[[], list[dict]]:
    BENCHMARKS[fn.__name__] = fn
    return fn


def median_seconds(fn: Callable[[], object], repeat: int = 3, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def row(figure: str, ours: float, unit: str, seed: float | None = None, higher_is_better: bool = True,
        target: str = "", met: bool | None = None) -> dict:
    ratio = None
    if seed:
        ratio = ours / seed if higher_is_better else seed / ours
    return {"figure": figure, "ours": ours, "unit": unit, "seed": seed, "ratio": ratio,
            "target": target, "met": met}


def peak_memory_mb() -> float:
    """Peak resident memory of this process so far (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _mnist_mlp(width: int = 200, depth: int = 4, bias: bool = True):
    from ..models import MLP

    torch.manual_seed(0)
    return MLP(784, width, depth, 10, bias=bias)


def _mnist_points(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    from ..data import load_mnist

    mnist = load_mnist(verbose=False)
    return mnist.test_x[:n], mnist.test_y[:n]


@benchmark
def training_loop() -> list[dict]:
    """The shared loop's overhead: a bare AdamW/MSE step on the 4x200 MLP (batch 200, data in
    memory) against the same step driven by `train_loop` with its log-spaced evaluations."""
    from ..training import log_spaced_steps, train_loop

    x, y = _mnist_points(1000)
    targets = torch.nn.functional.one_hot(y, 10).float()
    model = _mnist_mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    order = torch.randperm(1000)

    def step(t: int) -> float:
        idx = order[(t % 5) * 200:(t % 5 + 1) * 200]
        loss = ((model(x[idx]) - targets[idx]) ** 2).sum(1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    n = 500
    bare = median_seconds(lambda: [step(t) for t in range(1, n + 1)]) / n
    evals = log_spaced_steps(n, 32)
    looped = median_seconds(lambda: train_loop(step, n, evals, lambda t: {})) / n
    return [row("bare training step (4x200 MLP, batch 200)", bare * 1e3, "ms", 3.7, higher_is_better=False),
            row("step inside the shared train_loop", looped * 1e3, "ms", 24.7, higher_is_better=False,
                target="<= 1.15x our bare step", met=looped <= 1.15 * bare)]


@benchmark
def local_complexity() -> list[dict]:
    """LC of 1,000 MNIST points, P = 25 (50 vertices), r = 0.05, on 784-200-200-200-10, all layers."""
    from ..measures.local_complexity import local_complexity as lc

    x, _ = _mnist_points(1000)
    model = _mnist_mlp().eval()
    seconds = median_seconds(lambda: lc(model, x, radius=0.05, n_directions=25))
    rate = 1000 / seconds
    memory = peak_memory_mb()
    return [row("local complexity, 1,000 points x 50 vertices", rate, "points/s", 1800,
                target=">= 5,000 points/s", met=rate >= 5000),
            row("local complexity: peak resident memory of the process", memory, "MB",
                target="< 1,024 MB", met=memory < 1024)]


@benchmark
def pgd() -> list[dict]:
    """PGD at eps 0.1, alpha 0.0156, 20 steps, on 500 MNIST points."""
    from ..measures.adversarial import pgd_linf

    x, y = _mnist_points(500)
    model = _mnist_mlp().eval()
    seconds = median_seconds(lambda: pgd_linf(model, x, y, 0.1, 0.0156, 20))
    return [row("PGD, 500 points x 20 steps", seconds, "s", 0.115, higher_is_better=False,
                target="no slower than the seed's", met=seconds <= 0.115)]


@benchmark
def grokalign_step() -> list[dict]:
    """A GrokAlign update against a plain update on the seed code's 4x196 bias-free MLP at batch
    256, x8 initialisation, AdamW, MSE, the penalty on every point of the batch. The kinds of
    update are timed interleaved in one process (`grokalign.update_times`, 300 rounds, the order
    rotated each round), so machine load weighs on all alike; a kind's cost relative to the plain
    update is the median over rounds of the ratio of the two updates of the same round
    (`grokalign.paired_ratios`). Estimators (`grokalign.objective`): "input" (the chapter's), one
    random-sign probe in input space shared by the batch, pushed through the masked linear
    network stacked with the batch; "output", random signs on the logits through the narrow
    layers and the first layer's Gram matrix (the reference's estimate without a double
    backward); "vjp", the double-backward reference."""
    import os

    from ..experiments.grokalign import paired_ratios, update_times

    config = dict(n_train=1024, seed=0, width=196, depth=4, bias=False, init_scale=8.0, lr=1e-3,
                  weight_decay=0.01, batch_size=256, loss="mse", projections=1, reg_points=256)
    variants = {"plain": {"lam": 0.0}, "input": {"lam": 0.1, "estimator": "input"},
                "output": {"lam": 0.1, "estimator": "output"}, "vjp": {"lam": 0.1, "estimator": "vjp"}}
    load = os.getloadavg()[0]
    times = update_times(config, variants, repeats=300, warmup=20)
    ratio = paired_ratios(times)
    plain = float(np.median(times["plain"]))
    what = {"input": "input-space probe shared by the batch (chapter's)",
            "output": "signs on the logits, Gram matrix, one backward",
            "vjp": "signs on the logits, double backward (reference)"}
    rows = [row(f"plain update (4x196 MLP, batch 256; load average {load:.1f})", plain * 1e3, "ms")]
    for name in ("input", "output", "vjp"):
        rows.append(row(f"GrokAlign update / plain update, {what[name]}, all 256 points", ratio[name],
                        "x", 2.8, higher_is_better=False, target="<= 1.5x", met=ratio[name] <= 1.5))
    # What bounds the ratios: the matrix products each kind of update runs.
    for name, over in variants.items():
        rows.append(row(f"matrix products per update, {name} (torch.profiler)",
                        _matmuls_per_update({**config, **over}), "aten::mm"))
    return rows


def _matmuls_per_update(config: dict, updates: int = 5) -> float:
    from torch.profiler import ProfilerActivity, profile

    from ..experiments.grokalign import objective
    from ..models import MLP

    torch.manual_seed(0)
    model = MLP(784, config["width"], config["depth"], 10, bias=config["bias"], init_scale=config["init_scale"])
    opt = torch.optim.AdamW(model.parameters(), lr=config["lr"])
    x, y = _mnist_points(config["batch_size"])
    gen = torch.Generator().manual_seed(0)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(updates):
            _, loss = objective(model, x, y, config["loss"], config["lam"], config["reg_points"],
                                config["projections"], gen, config.get("estimator", "vjp"))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    calls = sum(e.count for e in prof.key_averages() if e.key in ("aten::mm", "aten::bmm"))
    return calls / updates


@benchmark
def partition() -> list[dict]:
    """The exact partition of a slice through three MNIST digits, 784-200-200-200-10 at init."""
    from ..measures import partition as P
    x, y = _mnist_points(200)
    triad = [x[(y == c).nonzero()[0, 0]].numpy() for c in (0, 1, 2)]
    plane = P.plane_through(*triad)
    domain = P.square_around(plane.coords(np.stack(triad)))
    layers = P.linear_layers(_mnist_mlp())
    parts = []
    seconds = median_seconds(lambda: parts.append(P.partition(layers, plane, domain)), repeat=3, warmup=0)
    regions = parts[-1].n_regions
    memory = peak_memory_mb()
    return [row(f"exact partition, width 200 ({regions} regions)", regions / seconds, "regions/s",
                target=">= 5,000 regions/s", met=regions / seconds >= 5000),
            row("exact partition: peak resident memory of the process", memory, "MB")]


@benchmark
def hessian_lanczos() -> list[dict]:
    """Lanczos extremes of the full-batch loss Hessian of chapter 05's model (p = 47, r = 0.5)."""
    from ..experiments.algorithmic import modular_arithmetic
    from ..measures.landscape import hessian_extremes
    from ..models import ModularMLP

    data = modular_arithmetic(47, "+", 0.5, seed=0)
    torch.manual_seed(0)
    model = ModularMLP(47)
    iterations = 60
    seconds = median_seconds(lambda: hessian_extremes(model, data.train_x, data.train_y, iterations=iterations))
    return [row(f"Hessian-vector products ({sum(p.numel() for p in model.parameters())} parameters)",
                iterations / seconds, "HVP/s"),
            row(f"lambda_max and lambda_min by Lanczos ({iterations} HVPs), per eigenpair", seconds / 2, "s")]


@benchmark
def intrinsic_dimension() -> list[dict]:
    """MLE (k = 2) and TwoNN on 2,000 points in 256 dimensions (a 10-dimensional subspace)."""
    from ..measures.intrinsic_dimension import mle_dimension, twonn_dimension

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2000, 10, generator=gen) @ torch.randn(10, 256, generator=gen)
    return [row("MLE (k = 2), 2,000 x 256", median_seconds(lambda: mle_dimension(x, k=2)), "s"),
            row("TwoNN, 2,000 x 256", median_seconds(lambda: twonn_dimension(x)), "s")]


SWEEP_VALUES = (200, 201, 202, 203)  # chapter 07's iterations: four equal tasks, none cached


def sweep_arm(kind: str, slots: int, folder: str) -> dict:
    """One arm of `sweep_overhead`, run in a fresh process: the four chapter-07 smoke tasks one
    after another (`kind` "sequential", as `run` executes chapters) or as a Ray sweep with
    `slots` slots. Returns what the process spent where (seconds)."""
    import os

    started = time.perf_counter()
    os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TQDM_DISABLE="1",
                      REPLICATE_CACHE_DIR=str(Path(folder) / "cache"))
    from . import presets
    from .cli import run_chapter
    from .sweep import Task, run_sweep

    chapter = presets.get_chapter("07_optimizers")
    tasks = [Task(chapter.name, "smoke", (("iterations", v), ("seed", 0))) for v in SWEEP_VALUES]
    record = {"imports_s": time.perf_counter() - started}
    if kind == "sequential":
        record["tasks_s"] = []
        for task in tasks:
            begun = time.perf_counter()
            ok, message = run_chapter(chapter, "smoke", task.params, Path(folder), Path(folder))
            if not ok:
                raise RuntimeError(message)
            record["tasks_s"].append(time.perf_counter() - begun)
        return record
    begun = time.perf_counter()
    import ray  # noqa: F401  (the sweep command pays this import; so does this arm)

    record["ray_import_s"] = time.perf_counter() - begun
    outcome = run_sweep(tasks, Path(folder), workers=slots, quiet=True, threads=1, retries=0)
    if outcome["failed"]:
        raise RuntimeError(outcome["failed"][0]["error"])
    record.update(tasks_s=[d["duration_s"] for d in outcome["done"]], ray_start_s=outcome["ray_start_s"],
                  ray_stop_s=outcome["ray_stop_s"], sweep_s=outcome["wall_s"])
    return record


def _timed_arm(kind: str, slots: int, folder: Path) -> dict:
    """Run one arm in a fresh Python process; its wall time is measured from outside, so both
    arms pay the same interpreter start and imports, and the sweep its Ray import, start and
    stop."""
    folder.mkdir(parents=True)
    code = ("import json; from replicate.harness.bench import sweep_arm; "
            f"print(json.dumps(sweep_arm({kind!r}, {slots}, {str(folder)!r})))")
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(f"{kind} arm failed: {result.stderr.strip()[-500:]}")
    return {**json.loads(result.stdout.strip().splitlines()[-1]), "wall_s": wall}


def _timed_commands(commands: list[list[str]], folder: Path) -> float:
    """Run `python -m replicate ...` commands one after another, as a reader types them, one
    thread each, into scratch folders; returns their total wall time."""
    import os

    folder.mkdir(parents=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TQDM_DISABLE="1",
               REPLICATE_CACHE_DIR=str(folder / "cache"), REPLICATE_RUNS_DIR=str(folder / "runs"))
    started = time.perf_counter()
    for args in commands:
        result = subprocess.run([sys.executable, "-m", "replicate", *args], cwd=PROJECT_ROOT, env=env,
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed: {result.stderr.strip()[-500:]}")
    return time.perf_counter() - started


@benchmark
def sweep_overhead() -> list[dict]:
    """Four equal chapter-07 smoke executions (iterations 200-203, so that none comes from the
    run cache), one thread each, every arm timed from outside.

    The target compares the two things a reader can type: four `python -m replicate run`
    commands one after another, and one `python -m replicate sweep ... --workers 2` (Ray's
    import, start and stop, and the across-seed summary, included). A stricter comparison runs
    the four in one Python process that imports everything once, as a loop over `run_chapter`
    (no command can do that; it shows what Ray itself costs): against it, Ray's overhead per
    task = the 1-slot Ray sweep's time outside its tasks' execution, less the loop's, divided
    by 4. Baselines run before and after the sweeps and are averaged, as the machine's load
    drifts."""
    import os
    import tempfile

    values = ",".join(str(v) for v in SWEEP_VALUES)
    run_commands = [["run", "07_optimizers", "--preset", "smoke", "-p", "iterations", str(v), "--allow-dirty"]
                    for v in SWEEP_VALUES]
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="replicate-bench-sweep-") as scratch:
        root = Path(scratch)
        commands_before = _timed_commands(run_commands, root / "commands-before")
        before = _timed_arm("sequential", 1, root / "before")
        one = _timed_arm("sweep", 1, root / "ray1")
        two = _timed_arm("sweep", 2, root / "ray2")
        sweep_command = _timed_commands([["sweep", "07_optimizers", "--preset", "smoke", "--seeds", "0",
                                          "-p", "iterations", values, "--workers", "2",
                                          "--sweeps-dir", str(root / "sweeps"),
                                          "--results-dir", str(root / "results")]], root / "sweep-command")
        after = _timed_arm("sequential", 1, root / "after")
        commands_after = _timed_commands(run_commands, root / "commands-after")
    loads.append(os.getloadavg()[0])
    commands = (commands_before + commands_after) / 2
    sequential = (before["wall_s"] + after["wall_s"]) / 2
    outside = lambda arm: arm["wall_s"] - sum(arm["tasks_s"])  # noqa: E731
    overhead = (outside(one) - (outside(before) + outside(after)) / 2) / len(SWEEP_VALUES)
    ratio = sweep_command / commands
    task_seq = sum(before["tasks_s"] + after["tasks_s"]) / (2 * len(SWEEP_VALUES))
    note = f"load average {loads[0]:.1f} then {loads[1]:.1f} on {os.cpu_count()} cores"
    return [row(f"four chapter-07 smoke `run` commands one after another ({note})", commands, "s"),
            row("one `sweep --workers 2` command of the four", sweep_command, "s"),
            row("2-slot `sweep` command / four `run` commands", ratio, "x", higher_is_better=False,
                target="<= 0.65x", met=ratio <= 0.65),
            row("the four in one process, one after another (no command does this)", sequential, "s"),
            row("Ray overhead per task (1-slot sweep, outside the chapters' execution)", overhead, "s",
                target="<= 5 s", met=overhead <= 5),
            row("1-slot Ray sweep / the four in one process", one["wall_s"] / sequential, "x"),
            row("2-slot Ray sweep / the four in one process", two["wall_s"] / sequential, "x"),
            # Where the 2-slot sweep's time goes, beside one task run on its own.
            row("  one task, in the one-process loop (mean)", task_seq, "s"),
            row("  one task, two side by side in the 2-slot sweep (mean)",
                sum(two["tasks_s"]) / len(two["tasks_s"]), "s"),
            row("  2-slot sweep: import ray", two["ray_import_s"], "s"),
            row("  2-slot sweep: start the local Ray", two["ray_start_s"], "s"),
            row("  2-slot sweep: stop it", two["ray_stop_s"], "s"),
            row("  2-slot sweep: the package's imports", two["imports_s"], "s")]


def _run_in_child(name: str) -> list[dict]:
    result = subprocess.run([sys.executable, "-m", "replicate.harness.bench", "--one", name], cwd=PROJECT_ROOT,
                            capture_output=True, text=True)
    if result.returncode != 0:
        return [row(f"{name}: failed ({result.stderr.strip().splitlines()[-1] if result.stderr else '?'})",
                    float("nan"), "")]
    return json.loads(result.stdout.strip().splitlines()[-1])


def chapter_rows(results_dir: Path) -> list[dict]:
    """End-to-end chapter times, as the chapters themselves recorded them at their last run."""
    from .scoreboard import load_results  # the published verdicts, not the across-seed files

    rows, total = [], 0.0
    for record in load_results(results_dir):
        total += record["duration_s"]
        reused = (record.get("runs") or {}).get("reused", 0)
        note = f" ({reused} runs reused from the cache)" if reused else ""
        rows.append(row(f"chapter {record['chapter']} at preset {record['preset']}{note}",
                        record["duration_s"] / 60, "min", target="<= 12 min"))
    if rows:
        rows.append(row("whole book, all chapters", total / 60, "min", target="<= 45 min",
                        met=total <= 45 * 60))
    return rows


def format_table(rows: list[dict]) -> str:
    def num(v):
        return "" if v is None else f"{v:.3g}"
    lines = [f"{'figure':58s} {'ours':>10s} {'unit':9s} {'seed':>8s} {'ratio':>7s}  target"]
    for r in rows:
        met = "" if r["met"] is None else ("  [met]" if r["met"] else "  [MISSED]")
        lines.append(f"{r['figure'][:58]:58s} {num(r['ours']):>10s} {r['unit']:9s} {num(r['seed']):>8s} "
                     f"{num(r['ratio']):>7s}  {r['target']}{met}")
    return "\n".join(lines)


def run_benchmarks(names: list[str] | None = None, results_file: Path = RESULTS_FILE,
                   runner: Callable[[str], list[dict]] = _run_in_child) -> list[dict]:
    """Run the named benchmarks (all by default) and update `results_file`: the rows of the
    benchmarks run now replace their old ones, the others keep theirs with the date they were
    measured, so timing one benchmark again never drops the rest from the page."""
    import datetime

    names = names or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise ValueError(f"unknown benchmark(s) {', '.join(unknown)}; valid: {', '.join(BENCHMARKS)}")
    old = json.loads(results_file.read_text()) if results_file.exists() else {}
    measured = dict(old.get("measured", {}))
    by_name = {n: [r for r in old.get("rows", []) if r.get("benchmark") == n] for n in BENCHMARKS}
    today = datetime.date.today().isoformat()
    for name in names:
        print(f"benchmark {name} ...", flush=True)
        by_name[name] = [{**r, "benchmark": name} for r in runner(name)]
        measured[name] = today
    rows = [r for n in BENCHMARKS for r in by_name[n]]
    record = {"threads": torch.get_num_threads(), "measured": measured, "rows": rows}
    results_file.write_text(json.dumps(record, indent=2) + "\n")
    print(format_table(rows + chapter_rows(BOOK_DIR / "results")))
    print(f"written to {results_file}")
    return rows


def with_current_chapters(record: dict, results_dir: Path) -> dict:
    """The benchmarks' rows followed by the chapters' times as their results say now (read at
    build, so a chapter re-executed after the benchmarks shows its new time)."""
    measured = [r for r in record["rows"] if r.get("benchmark")]
    return {**record, "rows": measured + chapter_rows(results_dir)}


def render_page(record: dict) -> str:
    def num(v):
        return "" if v is None else f"{v:.3g}"
    measured = record.get("measured", {})
    lines = ["# How fast is this book?", "",
             "Each figure was measured by `python -m replicate bench` on the machine that built this",
             f"book ({record['threads']} CPU threads), each benchmark in a fresh process, median of 3",
             "after a warm-up, on the date in the last column. *Seed* is the seeds' reference code at",
             "the same settings on the same kind of machine (2 cores, float32); *ratio* > 1 means we",
             "are faster. Chapter times are the durations the chapters recorded at their last run.", "",
             "| Figure | Ours | Unit | Seed | Ratio | Target | Met | Measured |",
             "|---|---|---|---|---|---|---|---|"]
    for r in record["rows"]:
        met = "" if r["met"] is None else ("yes" if r["met"] else "**no**")
        lines.append(f"| {r['figure']} | {num(r['ours'])} | {r['unit']} | {num(r['seed'])} | "
                     f"{num(r['ratio'])} | {r['target']} | {met} | {measured.get(r.get('benchmark'), '')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(BENCHMARKS[sys.argv[2]]()))
    else:
        run_benchmarks(sys.argv[1:] or None)
