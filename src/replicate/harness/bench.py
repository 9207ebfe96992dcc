"""How fast is this book? `python -m replicate bench [NAME ...]` times each benchmark in a fresh
process into `book/benchmarks.json`. *Seed* is the seeds' reference code on a 2-core CPU (float32,
only `.cuda()` removed), ours the same settings; medians of 3 after a warm-up; ratio > 1: faster."""
import datetime
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..runtime import BOOK_DIR, PROJECT_ROOT
from .scoreboard import BENCHMARKS_FILE as RESULTS_FILE, chapter_rows

BENCHMARKS: dict[str, Callable[[], list[dict]]] = {}
benchmark = lambda fn: BENCHMARKS.setdefault(fn.__name__, fn)  # noqa: E731  (registers fn)
ONE_THREAD = dict(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TQDM_DISABLE="1")
SWEEP_VALUES = (200, 201, 202, 203)  # chapter 07's iterations: four equal tasks, none cached


def median_seconds(fn: Callable[[], object], repeat: int = 3, warmup: int = 1) -> float:
    times = []
    for _ in range(warmup + repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times[warmup:])  # the warm-up calls are timed but not counted


def row(figure: str, ours: float, unit: str, seed: float | None = None,
        higher_is_better: bool = True, target: str = "", met: bool | None = None) -> dict:
    ratio = (ours / seed if higher_is_better else seed / ours) if seed else None
    return {"figure": figure, "ours": ours, "unit": unit, "seed": seed, "ratio": ratio,
            "target": target, "met": met}


def peak_memory_mb() -> float:
    """Peak resident memory of this process so far (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _mnist(n: int, train: bool = True) -> tuple:
    """(the 4x200 MLP 784-200-200-200-10 seeded with 0; the first n MNIST test images; labels)"""
    from ..data import load_mnist
    from ..models import MLP
    mnist = load_mnist(verbose=False)
    torch.manual_seed(0)
    return MLP(784, 200, 4, 10).train(train), mnist.test_x[:n], mnist.test_y[:n]


@benchmark
def training_loop() -> list[dict]:
    """The shared loop's overhead: a bare AdamW/MSE step on the 4x200 MLP (batch 200, data in
    memory) against the same step driven by `train_loop` with its log-spaced evaluations."""
    from ..training import log_spaced_steps, train_loop
    model, x, y = _mnist(1000)
    targets = torch.nn.functional.one_hot(y, 10).float()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    order, n = torch.randperm(1000), 500
    evals = log_spaced_steps(n, 32)

    def step(t: int) -> float:
        idx = order[(t % 5) * 200:(t % 5 + 1) * 200]
        loss = ((model(x[idx]) - targets[idx]) ** 2).sum(1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()
    bare = median_seconds(lambda: [step(t) for t in range(1, n + 1)]) / n
    looped = median_seconds(lambda: train_loop(step, n, evals, lambda t: {})) / n
    return [row("bare training step (4x200 MLP, batch 200)", bare * 1e3, "ms", 3.7,
                higher_is_better=False),
            row("step inside the shared train_loop", looped * 1e3, "ms", 24.7,
                higher_is_better=False, target="<= 1.15x our bare step", met=looped <= 1.15 * bare)]


@benchmark
def local_complexity() -> list[dict]:
    """LC of 1,000 MNIST points, P = 25 (50 vertices), r = 0.05, on the 4x200 MLP, all layers."""
    from ..measures.local_complexity import local_complexity as lc
    model, x, _ = _mnist(1000, train=False)
    rate = 1000 / median_seconds(lambda: lc(model, x, radius=0.05, n_directions=25))
    memory = peak_memory_mb()
    return [row("local complexity, 1,000 points x 50 vertices", rate, "points/s", 1800,
                target=">= 5,000 points/s", met=rate >= 5000),
            row("local complexity: peak resident memory of the process", memory, "MB",
                target="< 1,024 MB", met=memory < 1024)]


@benchmark
def pgd() -> list[dict]:
    """PGD at eps 0.1, alpha 0.0156, 20 steps, on 500 MNIST points."""
    from ..measures.adversarial import pgd_linf
    model, x, y = _mnist(500, train=False)
    seconds = median_seconds(lambda: pgd_linf(model, x, y, 0.1, 0.0156, 20))
    return [row("PGD, 500 points x 20 steps", seconds, "s", 0.115, higher_is_better=False,
                target="no slower than the seed's", met=seconds <= 0.115)]


@benchmark
def grokalign_step() -> list[dict]:
    """A GrokAlign update per estimator against a plain one (the seed's 4x196 bias-free x8 MLP,
    batch 256, AdamW, MSE, penalty on every point), timed interleaved and compared by the median
    within-round ratio so load weighs on all alike; matrix products show what bounds the ratios."""
    from torch.profiler import ProfilerActivity, profile
    from ..experiments.grokalign import paired_ratios, update_times
    config = dict(n_train=1024, seed=0, width=196, depth=4, bias=False, init_scale=8.0, lr=1e-3,
                  weight_decay=0.01, batch_size=256, loss="mse", projections=1, reg_points=256)
    what = {"input": "input-space probe shared by the batch (chapter's)",
            "output": "signs on the logits, Gram matrix, one backward",
            "vjp": "signs on the logits, double backward (reference)"}
    variants = {"plain": {"lam": 0.0}, **{k: {"lam": 0.1, "estimator": k} for k in what}}
    load, times = os.getloadavg()[0], update_times(config, variants, repeats=300, warmup=20)
    rows = [row(f"plain update (4x196 MLP, batch 256; load average {load:.1f})",
                float(np.median(times["plain"])) * 1e3, "ms")]
    rows += [row(f"GrokAlign update / plain update, {what[k]}, all 256 points", r, "x", 2.8,
                 higher_is_better=False, target="<= 1.5x", met=r <= 1.5)
             for k, r in paired_ratios(times).items() if k in what]
    for k, over in variants.items():
        # The same updates, five of them: what the profiler counts does not depend on the clock.
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            update_times(config, {k: over}, repeats=5, warmup=0)
        calls = sum(e.count for e in prof.key_averages() if e.key in ("aten::mm", "aten::bmm"))
        rows.append(row(f"matrix products per update, {k} (torch.profiler)", calls / 5, "aten::mm"))
    return rows


@benchmark
def partition() -> list[dict]:
    """The exact partition of a slice through three MNIST digits, 4x200 MLP at init."""
    from ..measures import partition as P
    model, x, y = _mnist(200)
    triad = [x[(y == c).nonzero()[0, 0]].numpy() for c in (0, 1, 2)]
    plane = P.plane_through(*triad)
    domain = P.square_around(plane.coords(np.stack(triad)))
    layers, parts = P.linear_layers(model), []
    seconds = median_seconds(lambda: parts.append(P.partition(layers, plane, domain)), warmup=0)
    regions = parts[-1].n_regions
    return [row(f"exact partition, width 200 ({regions} regions)", regions / seconds, "regions/s",
                target=">= 5,000 regions/s", met=regions / seconds >= 5000),
            row("exact partition: peak resident memory of the process", peak_memory_mb(), "MB")]


@benchmark
def hessian_lanczos() -> list[dict]:
    """Lanczos extremes of the full-batch loss Hessian of chapter 05's model (p = 47, r = 0.5)."""
    from ..experiments.algorithmic import modular_arithmetic
    from ..measures.landscape import hessian_extremes
    from ..models import ModularMLP
    data = modular_arithmetic(47, "+", 0.5, seed=0)
    torch.manual_seed(0)
    model, n = ModularMLP(47), 60
    took = median_seconds(lambda: hessian_extremes(model, data.train_x, data.train_y, iterations=n))
    size = sum(p.numel() for p in model.parameters())
    return [row(f"Hessian-vector products ({size} parameters)", n / took, "HVP/s"),
            row(f"lambda_max and lambda_min by Lanczos ({n} HVPs), per eigenpair", took / 2, "s")]


@benchmark
def intrinsic_dimension() -> list[dict]:
    """MLE (k = 2) and TwoNN on 2,000 points in 256 dimensions (a 10-dimensional subspace)."""
    from ..measures.intrinsic_dimension import mle_dimension, twonn_dimension
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2000, 10, generator=gen) @ torch.randn(10, 256, generator=gen)
    return [row("MLE (k = 2), 2,000 x 256", median_seconds(lambda: mle_dimension(x, k=2)), "s"),
            row("TwoNN, 2,000 x 256", median_seconds(lambda: twonn_dimension(x)), "s")]


@benchmark
def refusal() -> list[dict]:
    """`run` refusing bad input (it loads neither torch nor a kernel), beside a bare Python start."""
    bad = [sys.executable, "-m", "replicate", "run", "07_optimizers", "--preset", "nope"]
    took = median_seconds(lambda: subprocess.run(bad, cwd=PROJECT_ROOT, capture_output=True))
    return [row("refusal of a bad preset (`run 07_optimizers --preset nope`)", took, "s",
                target="<= 1 s", met=took <= 1),
            row("  a bare Python start, for scale", median_seconds(lambda: _python(["-c", "pass"])), "s")]


def _python(args: list[str], env: dict | None = None) -> tuple[str, float]:
    """`python ARGS` in a fresh process from the project root: (its last printed line, wall s)."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, *args], cwd=PROJECT_ROOT, env=env, capture_output=True,
                          text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        tail = done.stderr.strip()[-500:] or "?"
        raise RuntimeError(f"python {' '.join(args)[:80]} failed:\n{tail}")
    return (done.stdout.strip().splitlines() or [""])[-1], wall


def sweep_arm(kind: str, slots: int, folder: str) -> dict:
    """One arm of `sweep_overhead`, in its own process: the four tasks one after another (kind
    "sequential", as `run` executes chapters) or a Ray sweep on `slots`; seconds spent where."""
    started = time.perf_counter()
    os.environ.update(ONE_THREAD, REPLICATE_CACHE_DIR=str(Path(folder) / "cache"))
    from ..config import RunSpec
    from .execute import execute
    from .sweep import run_sweep
    specs = [RunSpec.make("07_optimizers", "smoke", {"iterations": v}) for v in SWEEP_VALUES]
    record = {"imports_s": time.perf_counter() - started, "tasks_s": []}
    if kind == "sequential":
        for spec in specs:
            begun = time.perf_counter()
            ok, message = execute(spec, Path(folder), Path(folder))
            if not ok:
                raise RuntimeError(message)
            record["tasks_s"].append(time.perf_counter() - begun)
        return record
    begun = time.perf_counter()
    import ray  # noqa: F401  (the sweep command pays this import; so does this arm)
    record["ray_import_s"] = time.perf_counter() - begun
    outcome = run_sweep(specs, Path(folder), workers=slots, quiet=True, threads=1, retries=0)
    if outcome["failed"]:
        raise RuntimeError(outcome["failed"][0]["error"])
    record.update(tasks_s=[d["duration_s"] for d in outcome["done"]], sweep_s=outcome["wall_s"],
                  ray_start_s=outcome["ray_start_s"], ray_stop_s=outcome["ray_stop_s"])
    return record


@benchmark
def sweep_overhead() -> list[dict]:
    """Four equal chapter-07 smoke tasks, one thread each, timed from outside each process: four
    `run` commands against one `sweep --workers 2` (the target), and Ray's cost per task against a
    one-process loop; baselines run before and after the sweeps and are averaged, as load drifts."""
    def arm(kind: str, slots: int, folder: Path) -> dict:
        folder.mkdir(parents=True)
        code = ("import json; from replicate.harness.bench import sweep_arm; "
                f"print(json.dumps(sweep_arm({kind!r}, {slots}, {str(folder)!r})))")
        printed, wall = _python(["-c", code])
        return {**json.loads(printed), "wall_s": wall}

    def commands(argvs: list[list[str]], folder: Path) -> float:  # as a reader types them
        folder.mkdir(parents=True)
        env = dict(os.environ, **ONE_THREAD, REPLICATE_CACHE_DIR=str(folder / "cache"),
                   REPLICATE_RUNS_DIR=str(folder / "runs"))
        return sum(_python(["-m", "replicate", *argv], env)[1] for argv in argvs)

    runs = [["run", "07_optimizers", "--preset", "smoke", "-p", "iterations", str(v),
             "--allow-dirty"] for v in SWEEP_VALUES]
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="replicate-bench-sweep-") as scratch:
        root = Path(scratch)
        commands_before = commands(runs, root / "commands-before")
        before, one, two = (arm("sequential", 1, root / "before"), arm("sweep", 1, root / "ray1"),
                            arm("sweep", 2, root / "ray2"))
        sweep_command = commands([["sweep", "07_optimizers", "--preset", "smoke", "--seeds", "0",
                                   "-p", "iterations", ",".join(map(str, SWEEP_VALUES)),
                                   "--workers", "2", "--sweeps-dir", str(root / "sweeps"),
                                   "--results-dir", str(root / "results")]], root / "sweep-command")
        after = arm("sequential", 1, root / "after")
        four = (commands_before + commands(runs, root / "commands-after")) / 2
    note = f"load average {load_before:.1f} then {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    sequential = (before["wall_s"] + after["wall_s"]) / 2
    outside = lambda a: a["wall_s"] - sum(a["tasks_s"])  # noqa: E731
    overhead = (outside(one) - (outside(before) + outside(after)) / 2) / len(SWEEP_VALUES)
    ratio = sweep_command / four
    return [
        row(f"four chapter-07 smoke `run` commands one after another ({note})", four, "s"),
        row("one `sweep --workers 2` command of the four", sweep_command, "s"),
        row("2-slot `sweep` command / four `run` commands", ratio, "x", target="<= 0.65x",
            met=ratio <= 0.65),
        row("the four in one process, one after another (no command does this)", sequential, "s"),
        row("Ray overhead per task (1-slot sweep, outside the chapters' execution)", overhead, "s",
            target="<= 5 s", met=overhead <= 5),
        row("1-slot Ray sweep / the four in one process", one["wall_s"] / sequential, "x"),
        row("2-slot Ray sweep / the four in one process", two["wall_s"] / sequential, "x"),
        # Where the 2-slot sweep's time goes, beside one task run on its own.
        row("  one task, in the one-process loop (mean)",
            sum(before["tasks_s"] + after["tasks_s"]) / (2 * len(SWEEP_VALUES)), "s"),
        row("  one task, two side by side in the 2-slot sweep (mean)",
            sum(two["tasks_s"]) / len(two["tasks_s"]), "s"),
    ] + [row(f"  2-slot sweep: {what}", two[key], "s") for what, key in (
        ("import ray", "ray_import_s"), ("start the local Ray", "ray_start_s"),
        ("stop it", "ray_stop_s"), ("the package's imports", "imports_s"))]


def _run_in_child(name: str) -> list[dict]:
    """One benchmark in a fresh process, so one's memory peak and threads do not colour the next."""
    try:
        return json.loads(_python(["-m", "replicate.harness.bench", "--one", name])[0])
    except RuntimeError as failure:
        return [row(f"{name}: failed ({str(failure).splitlines()[-1]})", float("nan"), "")]


def format_table(rows: list[dict]) -> str:
    num = lambda v: "" if v is None else f"{v:.3g}"  # noqa: E731
    # "authors": the papers' own code at the same settings (the rows' `seed` field).
    lines = [f"{'figure':58s} {'ours':>10s} {'unit':9s} {'authors':>8s} {'ratio':>7s}  target"]
    for r in rows:
        met = "" if r["met"] is None else ("  [met]" if r["met"] else "  [MISSED]")
        lines.append(f"{r['figure'][:58]:58s} {num(r['ours']):>10s} {r['unit']:9s} "
                     f"{num(r['seed']):>8s} {num(r['ratio']):>7s}  {r['target']}{met}")
    return "\n".join(lines)


def run_benchmarks(names: list[str] | None = None, results_file: Path = RESULTS_FILE,
                   runner: Callable[[str], list[dict]] = _run_in_child) -> list[dict]:
    """Run the named benchmarks (all by default) and update `results_file`: the rows of those run
    now replace their old ones and the others keep theirs with the date they were measured, so
    timing one benchmark again never drops the rest from the page."""
    names = names or list(BENCHMARKS)
    if unknown := [n for n in names if n not in BENCHMARKS]:
        raise ValueError(f"unknown benchmark(s) {', '.join(unknown)}; "
                         f"valid: {', '.join(BENCHMARKS)}")
    old = json.loads(results_file.read_text()) if results_file.exists() else {}
    measured = dict(old.get("measured", {}))
    by_name = {n: [r for r in old.get("rows", []) if r.get("benchmark") == n] for n in BENCHMARKS}
    for name in names:
        print(f"benchmark {name} ...", flush=True)
        by_name[name] = [{**r, "benchmark": name} for r in runner(name)]
        measured[name] = datetime.date.today().isoformat()
    rows = [r for n in BENCHMARKS for r in by_name[n]]
    record = {"threads": torch.get_num_threads(), "measured": measured, "rows": rows}
    results_file.write_text(json.dumps(record, indent=2) + "\n")
    print(format_table(rows + chapter_rows(BOOK_DIR / "results")))
    print(f"written to {results_file}")
    return rows


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(BENCHMARKS[sys.argv[2]]()))
    else:
        run_benchmarks(sys.argv[1:] or None)
