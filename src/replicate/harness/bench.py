"""How fast is this book? `python -m replicate bench [NAME ...]` times each benchmark in a fresh
process into `book/benchmarks.json` and renders `book/benchmarks.md` from it. Where a peer library
computes the same thing, it is timed beside ours in the same process on the same inputs, the two
taking turns (see `bench_peers`); the authors' local-complexity, training-step and GrokAlign
figures are on no package index and stay as recorded once (`RECORDED`). Every time is the median
of 5 calls after a warm-up, with the fastest and slowest; ratio > 1: ours is faster."""
import datetime
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..runtime import BOOK_DIR, PROJECT_ROOT
from . import bench_peers as peers
from .scoreboard import (BENCHMARKS_FILE as RESULTS_FILE, RECORDED, chapter_rows, upgrade_row,
                         write_benchmarks_page)

BENCHMARKS: dict[str, Callable[[], list[dict]]] = {}
benchmark = lambda fn: BENCHMARKS.setdefault(fn.__name__, fn)  # noqa: E731  (registers fn)
ONE_THREAD = dict(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TQDM_DISABLE="1")
SWEEP_VALUES = (200, 201, 202, 203)  # chapter 07's iterations: four equal tasks, none cached
REPEAT = 5  # timed calls per figure, after the warm-up


@dataclass(frozen=True)
class Timing:
    """Seconds per call over the counted calls: the median, the fastest and the slowest."""
    median: float
    low: float
    high: float

    @classmethod
    def of(cls, seconds: list[float]) -> "Timing":
        return cls(statistics.median(seconds), min(seconds), max(seconds))

    def scaled(self, factor: float) -> "Timing":
        """In other units: `scaled(1e3)` gives ms."""
        return Timing(self.median * factor, self.low * factor, self.high * factor)

    def per(self, n: float) -> "Timing":
        """The time of one of `n` equal pieces of a call (a step, a product)."""
        return self.scaled(1 / n)

    def rate(self, n: float) -> "Timing":
        """`n` items per call as items per second (the slowest call gives the lowest rate)."""
        return Timing(n / self.median, n / self.high, n / self.low)

    @property
    def spread(self) -> list[float]:
        return [self.low, self.high]


def time_calls(fn: Callable[[], object], repeat: int = REPEAT, warmup: int = 1,
               clock: Callable[[], float] = time.perf_counter) -> Timing:
    """`fn` called `warmup + repeat` times; the warm-up calls are timed but not counted."""
    times = []
    for _ in range(warmup + repeat):
        started = clock()
        fn()
        times.append(clock() - started)
    return Timing.of(times[warmup:])


def median_seconds(fn: Callable[[], object], repeat: int = REPEAT, warmup: int = 1) -> float:
    return time_calls(fn, repeat, warmup).median


@dataclass(frozen=True)
class SideBySide:
    """Ours and a peer timed in one run; the results of their last calls, to check they agree."""
    ours: Timing
    peer: Timing | None
    ours_result: object
    peer_result: object = None


def side_by_side(ours: Callable[[], object], peer: Callable[[], object] | None,
                 repeat: int = REPEAT, warmup: int = 1,
                 clock: Callable[[], float] = time.perf_counter) -> SideBySide:
    """Ours and the peer called in turns, `warmup + repeat` times each, in this process. The order
    swaps every round, so that neither always runs on caches the other has just warmed and a change
    of load falls on both. Without a peer (not installed) ours is timed alone."""
    calls = {"ours": ours, "peer": peer} if peer else {"ours": ours}
    times: dict[str, list[float]] = {who: [] for who in calls}
    last: dict[str, object] = {}
    for round_ in range(warmup + repeat):
        for who in (list(calls) if round_ % 2 == 0 else list(calls)[::-1]):
            started = clock()
            last[who] = calls[who]()
            times[who].append(clock() - started)
    timed = {who: Timing.of(t[warmup:]) for who, t in times.items()}
    return SideBySide(timed["ours"], timed.get("peer"), last["ours"], last.get("peer"))


def row(figure: str, ours: float, unit: str, peer: float | None = None,
        higher_is_better: bool = True, target: str = "", met: bool | None = None,
        peer_name: str = "", ours_spread: list[float] | None = None,
        peer_spread: list[float] | None = None, load: float | None = None) -> dict:
    """One line of the table. `peer` is the same figure for the peer named `peer_name` (timed in
    this run, or `RECORDED`); ratio > 1 means ours is better; spreads are [min, max] of the calls;
    `load` is the 1-minute load average when the figure was timed."""
    ratio = (ours / peer if higher_is_better else peer / ours) if peer else None
    return {"figure": figure, "ours": ours, "ours_spread": ours_spread, "unit": unit,
            "peer": peer, "peer_spread": peer_spread, "peer_name": peer_name, "ratio": ratio,
            "target": target, "met": met, "load": load}


def peer_row(figure: str, timed: SideBySide, peer_name: str, load: float,
             scale: float = 1.0, unit: str = "s") -> dict:
    """Ours beside the peer from one `side_by_side` run, in seconds per call times `scale`. The
    target is the peer itself: ratio (the peer's median over ours) >= 1. A missing peer leaves
    the peer's cells empty and `peer_name` saying what to install."""
    ours, target = timed.ours.scaled(scale), ">= 1x the peer"
    if timed.peer is None:
        return row(figure, ours.median, unit, target=target, peer_name=peer_name,
                   ours_spread=ours.spread, load=load)
    peer = timed.peer.scaled(scale)
    return row(figure, ours.median, unit, peer.median, higher_is_better=False, target=target,
               met=peer.median >= ours.median, peer_name=peer_name, ours_spread=ours.spread,
               peer_spread=peer.spread, load=load)


def load_average() -> float:
    """The 1-minute load average, printed (to stderr: stdout carries the rows) and returned."""
    loads = os.getloadavg()
    print("load average " + " ".join(f"{v:.2f}" for v in loads), file=sys.stderr)
    return loads[0]


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
    bare = time_calls(lambda: [step(t) for t in range(1, n + 1)]).per(n).scaled(1e3)
    looped = time_calls(lambda: train_loop(step, n, evals, lambda t: {})).per(n).scaled(1e3)
    return [row("bare training step (4x200 MLP, batch 200)", bare.median, "ms", 3.7,
                higher_is_better=False, peer_name=RECORDED, ours_spread=bare.spread),
            row("step inside the shared train_loop", looped.median, "ms", 24.7,
                higher_is_better=False, target="<= 1.15x our bare step",
                met=looped.median <= 1.15 * bare.median, peer_name=RECORDED,
                ours_spread=looped.spread)]


@benchmark
def modular_step() -> list[dict]:
    """A full-batch AdamW step of the modular MLP (p = 47, r = 0.7: chapter 08's runs; 05, 06 and
    09 train the same model) with the forward the chapters use, which builds two p x hidden
    tables instead of forming each pair's embedding, against the layered forward of the same
    model (`representations`: embeddings formed, then each layer; the chapters' forward until
    2026-12-02), taking turns on one model; each call is 20 steps and the validation accuracy."""
    from ..experiments.algorithmic import modular_arithmetic
    from ..models import ModularMLP
    data = modular_arithmetic(47, "+", 0.7, seed=0)
    torch.manual_seed(0)
    model, steps = ModularMLP(47), 20
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1.0)

    def train(forward: Callable) -> float:
        for _ in range(steps):
            loss = torch.nn.functional.cross_entropy(forward(data.train_x), data.train_y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            with torch.no_grad():
                accuracy = (forward(data.val_x).argmax(1) == data.val_y).float().mean().item()
        return accuracy
    load = load_average()
    timed = side_by_side(lambda: train(model), lambda: train(lambda x: model.representations(x)["logits"]))
    return [peer_row(f"modular MLP training step (p = 47, {len(data.train_y)} pairs, full batch)",
                     timed, "the layered forward", load, scale=1e3 / steps, unit="ms")]


@benchmark
def local_complexity() -> list[dict]:
    """LC of 1,000 MNIST points, P = 25 (50 vertices), r = 0.05, on the 4x200 MLP, all layers."""
    from ..measures.local_complexity import local_complexity as lc
    model, x, _ = _mnist(1000, train=False)
    rate = time_calls(lambda: lc(model, x, radius=0.05, n_directions=25)).rate(1000)
    memory = peak_memory_mb()
    # The authors' code is on no package index: its rate stays as recorded (RECORDED).
    return [row("local complexity, 1,000 points x 50 vertices", rate.median, "points/s", 1800,
                target=">= 5,000 points/s", met=rate.median >= 5000, peer_name=RECORDED,
                ours_spread=rate.spread),
            row("local complexity: peak resident memory of the process", memory, "MB",
                target="< 1,024 MB", met=memory < 1024)]


@benchmark
def pgd() -> list[dict]:
    """PGD at eps 0.1, alpha 0.0156, 20 steps from a random start, on 500 MNIST points: ours
    against torchattacks.PGD at the same settings (its random start is also uniform in the
    eps-ball then clipped to [0, 1]). Two differences leave the steps the same: ours sums the
    cross-entropy where torchattacks averages it (a positive factor, so the same gradient signs),
    and ours draws its start from a seeded generator, torchattacks from the global one. Without
    the random start both should give the same points, which the second row checks: the two
    clip to the eps-ball in different orders, so they may part by rounding, and a gradient
    component near zero can then change sign."""
    from ..measures.adversarial import pgd_linf
    model, x, y = _mnist(500, train=False)
    eps, alpha, steps = 0.1, 0.0156, 20
    torchattacks = peers.TORCHATTACKS.load()
    attack = (torchattacks.PGD(model, eps=eps, alpha=alpha, steps=steps, random_start=True)
              if torchattacks else None)
    load = load_average()
    timed = side_by_side(lambda: pgd_linf(model, x, y, eps, alpha, steps),
                         (lambda: attack(x, y)) if attack else None)
    rows = [peer_row(f"PGD, 500 points x {steps} steps, eps {eps}, alpha {alpha}, random start "
                     "(ours: summed cross-entropy, a seeded start; torchattacks: the mean, a start "
                     "from the global generator; the same sign steps)",
                     timed, peers.TORCHATTACKS.label(), load)]
    if attack is None:
        return rows
    rows.append(robust_accuracy_row(torchattacks, eps, alpha, steps))
    ours = pgd_linf(model, x, y, eps, alpha, steps, random_start=False)
    theirs = torchattacks.PGD(model, eps=eps, alpha=alpha, steps=steps, random_start=False)(x, y)
    gap = (ours - theirs).abs()
    apart = gap > 1e-6
    return rows + [row("  the same without random start: pixels where ours and torchattacks differ "
                       f"by > 1e-6, of {apart.numel():,} (in {int(apart.any(1).sum())} of "
                       f"{len(x)} points; largest difference {float(gap.max()):.3g})",
                       int(apart.sum()), "pixels")]


def robust_accuracy_row(torchattacks, eps: float, alpha: float, steps: int) -> dict:
    """Robust accuracy under PGD, as chapter 01 measures it, on 500 held-out digits of an MLP
    trained briefly (full-batch Adam on 500 other digits) so that it gets most but not all of them
    right: ours attacks only the digits it classifies correctly (the others count as broken
    either way), torchattacks attacks all, then the correct ones are counted; same accuracy."""
    from ..measures.adversarial import robust_accuracy
    model, x, y = _mnist(1000)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(40):
        loss = torch.nn.functional.cross_entropy(model(x[:500]), y[:500])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    x, y = x[500:], y[500:]
    attack = torchattacks.PGD(model, eps=eps, alpha=alpha, steps=steps, random_start=True)

    def theirs() -> float:
        adv = attack(x, y)
        with torch.no_grad():
            return float(((model(adv).argmax(1) == y) & (model(x).argmax(1) == y)).float().mean())
    load = load_average()
    timed = side_by_side(lambda: robust_accuracy(model, x, y, [eps], alpha, steps)[eps], theirs)
    with torch.no_grad():
        clean = float((model(x).argmax(1) == y).float().mean())
    return peer_row(f"  robust accuracy under it on 500 held-out digits of an MLP that gets {clean:.0%} "
                    f"right (ours {timed.ours_result:.3f}, attacking only those; torchattacks "
                    f"{timed.peer_result:.3f}, attacking all)", timed, peers.TORCHATTACKS.label(),
                    load)


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
                 higher_is_better=False, target="<= 1.5x", met=r <= 1.5, peer_name=RECORDED)
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
    timing = time_calls(lambda: parts.append(P.partition(layers, plane, domain)), warmup=0)
    regions = parts[-1].n_regions
    rate = timing.rate(regions)
    return [row(f"exact partition, width 200 ({regions} regions)", rate.median, "regions/s",
                target=">= 5,000 regions/s", met=rate.median >= 5000, ours_spread=rate.spread),
            row("exact partition: peak resident memory of the process", peak_memory_mb(), "MB")]


# Matched accuracy for the Hessian: the top eigenvalue within this share of a long reference run.
HESSIAN_ACCURACY = 1e-3
PYHESSIAN_TOLS = (1e-3, 1e-4, 1e-5, 1e-6)  # its stopping tolerances tried, loosest first
ARPACK_TOLS = (1e-1, 1e-2, 1e-3, 1e-4)  # ARPACK's relative accuracy of the Ritz values, likewise


def relative_error(value: float, reference: float) -> float:
    return abs(value - reference) / max(abs(reference), 1e-30)


def loosest_pyhessian_tol(pyhessian, model, x, y, reference: float,
                          accuracy: float = HESSIAN_ACCURACY) -> float | None:
    """The loosest of PYHESSIAN_TOLS at which PyHessian's top eigenvalue lands within `accuracy`
    of `reference` (untimed runs), or None. Its tolerance bounds the change between two
    successive power-iteration estimates, not the error, so the error has to be looked at."""
    for tol in PYHESSIAN_TOLS:
        top = peers.pyhessian_top_eigenvalue(pyhessian, model, x, y, tol=tol, max_iter=1000)
        if relative_error(top, reference) <= accuracy:
            return tol
    return None


@benchmark
def hessian_lanczos() -> list[dict]:
    """The full-batch loss Hessian of chapter 05's model at initialisation (p = 47, r = 0.5).
    At the chapter's setting: our Lanczos (60 products, then one each for the residuals of the two
    extremes) against PyHessian's power iteration at its defaults (maxIter 100, tol 1e-3), which
    finds only the eigenvalue of largest magnitude and stops when two successive estimates agree
    to 1e-3; whole calls, then per product, and ours against its products alone. At matched
    accuracy (`matched_accuracy_rows`): each to within HESSIAN_ACCURACY of a long Lanczos
    reference run (up to 250 products), ours stopping on that relative residual, PyHessian at
    the loosest of its tolerances that gets there; total time to reach that accuracy."""
    from ..experiments.algorithmic import modular_arithmetic
    from ..measures.landscape import hessian_extremes, hvp_operator
    from ..models import ModularMLP
    data = modular_arithmetic(47, "+", 0.5, seed=0)
    torch.manual_seed(0)
    model, n = ModularMLP(47), 60
    x, y = data.train_x, data.train_y
    size = sum(p.numel() for p in model.parameters())
    pyhessian = peers.PYHESSIAN.load()
    load = load_average()
    vector = torch.randn(size, generator=torch.Generator().manual_seed(0))

    def bare_products() -> None:  # what Lanczos costs at least: its operator and its products
        hvp = hvp_operator(model, x, y)
        for _ in range(n + 2):
            hvp(vector)
    # Interleaved with the Lanczos run, so that the ratio of the two is not one of two loads.
    against_bare = side_by_side(lambda: hessian_extremes(model, x, y, iterations=n),
                                bare_products)
    bare = against_bare.peer.per(n + 2).scaled(1e3)
    theirs = ((lambda: peers.pyhessian_top_eigenvalue(pyhessian, model, x, y))
              if pyhessian else None)
    timed = side_by_side(lambda: hessian_extremes(model, x, y, iterations=n), theirs)
    ours = timed.ours_result
    figure = (f"Hessian extremes ({size} parameters): ours, Lanczos with {n} + 2 products, "
              f"lambda_max {ours.lambda_max:.4g}, lambda_min {ours.lambda_min:.4g}")
    products = timed.ours.rate(n + 2)
    overhead = against_bare.ours.median / against_bare.peer.median
    rows = [row(f"Hessian-vector products ({size} parameters)", products.median, "HVP/s",
                ours_spread=products.spread),
            row("  a bare Hessian-vector product", bare.median, "ms", ours_spread=bare.spread,
                load=load),
            row(f"  Lanczos at the chapter's setting / its {n + 2} products alone (the same run)",
                overhead, "x", target="<= 1.25x", met=overhead <= 1.25, load=load)]
    if pyhessian is None:
        return rows + [peer_row(figure, timed, peers.PYHESSIAN.label(), load)]
    count = peers.pyhessian_products(pyhessian, model, x, y)
    figure += (f"; PyHessian, power iteration, {count} products, "
               f"top eigenvalue {timed.peer_result:.4g}")
    # The two make different numbers of products: per product is the like-for-like comparison.
    each = SideBySide(timed.ours.per(n + 2), timed.peer.per(count), None)
    rows += [peer_row(figure, timed, peers.PYHESSIAN.label(), load),
             peer_row("  the same, per Hessian-vector product", each, peers.PYHESSIAN.label(),
                      load, scale=1e3, unit="ms")]
    return rows + matched_accuracy_rows(model, x, y, pyhessian, size)


def matched_accuracy_rows(model, x, y, pyhessian, size: int) -> list[dict]:
    """`hessian_lanczos`'s comparisons at matched accuracy (see its docstring): ours stopping when
    the largest Ritz pair, then both extremes, reach a relative residual of HESSIAN_ACCURACY
    (which bounds lambda_max's error by that share), against PyHessian at the loosest tolerance
    whose top eigenvalue lands as close; then the chapter's 60 products against PyHessian at its
    tightest tolerance tried, still short of our accuracy. The products are float32, so errors
    below ~1e-7 (the reference's own relative residual) are rounding, not convergence."""
    from ..measures.landscape import hessian_extremes
    # Another start vector (seed 1) than the runs compared: not a prefix of the same Krylov run.
    reference = hessian_extremes(model, x, y, iterations=250, seed=1, tolerance=1e-7)
    tol = loosest_pyhessian_tol(pyhessian, model, x, y, reference.lambda_max)
    if tol is None:
        return [row(f"Hessian at matched accuracy: PyHessian did not reach {HESSIAN_ACCURACY:g} "
                    f"at tol {PYHESSIAN_TOLS[-1]:g}", float("nan"), "")]

    def errors(result) -> str:
        return (f"lambda_max off by {relative_error(result.lambda_max, reference.lambda_max):.1e}"
                f", lambda_min by {relative_error(result.lambda_min, reference.lambda_min):.1e}")

    def pyhessian_at(tol_: float) -> tuple[Callable[[], float], int]:
        count = peers.pyhessian_products(pyhessian, model, x, y, tol=tol_, max_iter=1000)
        return (lambda: peers.pyhessian_top_eigenvalue(pyhessian, model, x, y, tol=tol_,
                                                       max_iter=1000)), count

    theirs, count = pyhessian_at(tol)
    rows = []
    for which, what in (("largest", "the largest pair reaches"),
                        ("both", "both extreme pairs reach")):
        load = load_average()
        timed = side_by_side(lambda: hessian_extremes(model, x, y, iterations=250,
                                                      tolerance=HESSIAN_ACCURACY, which=which),
                             theirs)
        ours = timed.ours_result
        rows.append(peer_row(
            f"Hessian ({size} parameters) to within {HESSIAN_ACCURACY:g} of a "
            f"{reference.iterations}-product Lanczos reference: ours, Lanczos until {what} "
            f"a relative residual {HESSIAN_ACCURACY:g}, {ours.iterations} + 2 products, "
            f"{errors(ours)}; PyHessian at tol {tol:g}, {count} products, top eigenvalue off by "
            f"{relative_error(timed.peer_result, reference.lambda_max):.1e}", timed,
            peers.PYHESSIAN.label(), load))
    # Both extremes against a peer that computes both: ARPACK on the same products, at the
    # loosest of its tolerances whose two eigenvalues both land within HESSIAN_ACCURACY.
    arpack_tol = next((t for t in ARPACK_TOLS if max(
        relative_error(value, exact) for value, exact in zip(
            peers.arpack_extremes(model, x, y, t)[:2],
            (reference.lambda_max, reference.lambda_min))) <= HESSIAN_ACCURACY), ARPACK_TOLS[-1])
    load = load_average()
    timed = side_by_side(lambda: hessian_extremes(model, x, y, iterations=250,
                                                  tolerance=HESSIAN_ACCURACY, which="both"),
                         lambda: peers.arpack_extremes(model, x, y, arpack_tol))
    ours, (top, bottom, products) = timed.ours_result, timed.peer_result
    rows.append(peer_row(
        f"Hessian extremes ({size} parameters), both to within {HESSIAN_ACCURACY:g} of the "
        f"reference: ours {ours.iterations} + 2 products, {errors(ours)}; ARPACK (scipy eigsh, "
        f"which='BE', the same products) at tol {arpack_tol:g}, {products} products, lambda_max "
        f"off by {relative_error(top, reference.lambda_max):.1e}, lambda_min by "
        f"{relative_error(bottom, reference.lambda_min):.1e}", timed, "scipy.sparse.linalg.eigsh",
        load))
    tightest, count = pyhessian_at(PYHESSIAN_TOLS[-1])
    load = load_average()
    timed = side_by_side(lambda: hessian_extremes(model, x, y, iterations=60), tightest)
    rows.append(peer_row(
        f"  at the chapter's accuracy: ours, 60 + 2 products, {errors(timed.ours_result)}; "
        f"PyHessian at tol {PYHESSIAN_TOLS[-1]:g}, {count} products, top eigenvalue off by "
        f"{relative_error(timed.peer_result, reference.lambda_max):.1e}", timed,
        peers.PYHESSIAN.label(), load))
    return rows


@benchmark
def intrinsic_dimension() -> list[dict]:
    """MLE (k = 2, inverse-mean pooling) and TwoNN (10% discarded, line through the origin) on
    2,000 points in 256 dimensions (a 10-dimensional subspace), against scikit-dimension's
    estimators set up the same way (see `bench_peers`), with both estimates in the figure; then
    how far our neighbour distances (float32 candidates, exact float64 re-ranking) are from a
    dense float64 matrix of the norms of p_i - p_j."""
    from ..measures.intrinsic_dimension import (mle_dimension, neighbour_distances,
                                                twonn_dimension, unique_points)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2000, 10, generator=gen) @ torch.randn(10, 256, generator=gen)
    points, skdim = x.numpy(), peers.SKDIM.load()
    rows = []
    estimators = {"MLE (k = 2)": (lambda: mle_dimension(x, k=2),
                                  lambda: peers.skdim_mle(skdim, points, k=2)),
                  "TwoNN": (lambda: twonn_dimension(x), lambda: peers.skdim_twonn(skdim, points))}
    for name, (ours, theirs) in estimators.items():
        load = load_average()
        timed = side_by_side(ours, theirs if skdim else None)
        estimates = f"ours {timed.ours_result:.4f}" + (
            f", scikit-dimension {timed.peer_result:.4f}" if skdim else "")
        rows.append(peer_row(f"{name}, 2,000 x 256: {estimates}", timed, peers.SKDIM.label(),
                             load))
    distinct = unique_points(x).double()
    dense = torch.cdist(distinct, distinct, compute_mode="donot_use_mm_for_euclid_dist")
    dense.fill_diagonal_(float("inf"))
    expected = dense.topk(2, dim=1, largest=False).values
    gap = float(((neighbour_distances(x, 2) - expected).abs() / expected).max())
    return rows + [row("  the two nearest distances of each point: largest relative difference "
                       "from a dense float64 matrix of the norms of p_i - p_j", gap, "")]


@benchmark
def ntk() -> list[dict]:
    """The empirical NTK of chapter 03's network at initialisation (784-64-64-1, no biases,
    float64) on 129 of its normalised MNIST training points: `empirical_ntk` against the
    torch.func recipe that contracts each parameter's Jacobian separately (`bench_peers`)."""
    from ..experiments.centroid_ntk import binary_mnist
    from ..measures.ntk import empirical_ntk
    from ..models import MLP
    x = binary_mnist(500)[0][:129].double()
    torch.manual_seed(0)
    model = MLP(784, 64, 3, 1, bias=False).double()
    load = load_average()
    timed = side_by_side(lambda: empirical_ntk(model, x), lambda: peers.torch_func_ntk(model, x))
    ours, theirs = timed.ours_result, timed.peer_result
    gap = float((ours - theirs).norm() / theirs.norm())
    return [peer_row(f"empirical NTK, 129 points, {sum(p.numel() for p in model.parameters())} "
                     f"parameters, float64 (relative Frobenius difference {gap:.1e})", timed,
                     f"torch.func {torch.__version__.split('+')[0]}", load)]


@benchmark
def optimizer_grid() -> list[dict]:
    """Chapter 07's race at its cpu grid (Adam, nine learning rates, log-scaled Rosenbrock from
    its start), 1,000 steps: the grid as rows of one tensor (`optimizer_race`) against torch.optim
    run on each learning rate alone, as the chapter ran before; the paths compared bit for bit."""
    from ..config import load_preset
    from ..measures import objectives
    p = load_preset("07_optimizers", "cpu")
    f = objectives.log_scale(objectives.rosenbrock, p["log_offset"])
    args = (f, p["rosenbrock_start"], "adam", p["learning_rates"], 1000)
    load = load_average()
    timed = side_by_side(lambda: objectives.optimizer_race(*args),
                         lambda: peers.torch_optim_race(*args))
    same = np.array_equal(timed.ours_result, timed.peer_result, equal_nan=True)
    return [peer_row(f"chapter 07's grid, Adam at {len(p['learning_rates'])} learning rates x "
                     f"1,000 steps: ours as rows of one tensor; the peer one rate at a time "
                     f"(paths {'bit for bit equal' if same else 'DIFFERENT'})", timed,
                     f"torch.optim {torch.__version__.split('+')[0]}", load)]


@benchmark
def make_book() -> list[dict]:
    """`make book` as a fresh machine runs it, in one go (a quarter of an hour on two cores):
    every chapter at `cpu` from an empty run cache in two lanes of one thread each, published
    into a scratch folder (not the book), then the HTML build. Also compares each verdict with
    the book's published one (`drift.compare`, the chapters' tolerances), as `validate` does."""
    import contextlib
    from ..config import chapters
    from .validate import compare_chapter
    cores, load = os.cpu_count(), os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="replicate-bench-book-") as scratch:
        root = Path(scratch)
        env = dict(os.environ, **ONE_THREAD, REPLICATE_CACHE_DIR=str(root / "cache"),
                   REPLICATE_RUNS_DIR=str(root / "runs"))
        _, chapters_s = _python(["-m", "replicate", "run", "--preset", "cpu", "--lanes", "2",
                                 "--allow-dirty", "--claims-dir", str(root),
                                 "--results-dir", str(root)], env)
        records = {c: json.loads((root / f"{c}.json").read_text()) for c in chapters()}
        with contextlib.redirect_stdout(sys.stderr):  # stdout carries the rows
            same = sum(compare_chapter(c, BOOK_DIR / "results", root) for c in records)
    _, build_s = _python(["-m", "replicate", "build"])
    total, summed = (chapters_s + build_s) / 60, sum(r["duration_s"] for r in records.values())
    slowest = max(records.values(), key=lambda r: r["duration_s"])
    note = (f"load average {load:.1f} before, {os.getloadavg()[0]:.1f} after, {cores} cores; "
            f"{same} of {len(records)} verdicts as published, within their tolerances")
    return [row(f"make book, cold, 2 lanes: every chapter at cpu from an empty run cache, then "
                f"the build ({note})", total, "min", target="<= 20 min", met=total <= 20,
                load=load),
            row("  the chapters' own times, summed", summed, "s", target="<= 2,400 s",
                met=summed <= 2400),
            row(f"  the slowest chapter ({slowest['chapter']})", slowest["duration_s"], "s"),
            row("  the HTML build", build_s, "s")]


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
    """The rows as a terminal table: ours and the peer as median [min-max], the ratio (> 1: ours
    better), the peer's name, the target, and the load average when the figure was timed."""
    def timed(value, spread) -> str:
        if value is None:
            return ""
        return f"{value:.3g}" + (f" [{spread[0]:.3g}-{spread[1]:.3g}]" if spread else "")
    lines = [f"{'figure':50s} {'ours':>26s} {'peer':>26s} {'ratio':>6s} {'unit':8s} peer / target"]
    for r in map(upgrade_row, rows):
        met = "" if r["met"] is None else (" [met]" if r["met"] else " [MISSED]")
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.3g}"
        load = "" if r.get("load") is None else f" (load {r['load']:.1f})"
        lines.append(f"{r['figure'][:50]:50s} {timed(r['ours'], r.get('ours_spread')):>26s} "
                     f"{timed(r['peer'], r.get('peer_spread')):>26s} {ratio:>6s} {r['unit']:8s} "
                     f"{r['peer_name']}{' / ' if r['peer_name'] and r['target'] else ''}"
                     f"{r['target']}{met}{load}")
    return "\n".join(lines)


def run_benchmarks(names: list[str] | None = None, results_file: Path = RESULTS_FILE,
                   runner: Callable[[str], list[dict]] = _run_in_child) -> list[dict]:
    """Run the named benchmarks (all by default) and update `results_file` and the page beside it
    (`.md`): the rows of those run now replace their old ones and the others keep theirs with the
    date they were measured, so timing one benchmark again never drops the rest from the page."""
    names = names or list(BENCHMARKS)
    if unknown := [n for n in names if n not in BENCHMARKS]:
        raise ValueError(f"unknown benchmark(s) {', '.join(unknown)}; "
                         f"valid: {', '.join(BENCHMARKS)}")
    old = json.loads(results_file.read_text()) if results_file.exists() else {}
    measured = dict(old.get("measured", {}))
    # Threads per benchmark: a re-run with other threads must not relabel the rows kept.
    threads = dict(old.get("threads_by_benchmark") or {n: old["threads"] for n in measured})
    by_name = {n: [upgrade_row(r) for r in old.get("rows", []) if r.get("benchmark") == n]
               for n in BENCHMARKS}
    for name in names:
        loads = " ".join(f"{v:.2f}" for v in os.getloadavg())
        print(f"benchmark {name} (load average {loads}) ...", flush=True)
        by_name[name] = [{**r, "benchmark": name} for r in runner(name)]
        measured[name] = datetime.date.today().isoformat()
        threads[name] = torch.get_num_threads()  # the children inherit this process's settings
    rows = [r for n in BENCHMARKS for r in by_name[n]]
    record = {"threads": torch.get_num_threads(), "threads_by_benchmark": threads,
              "measured": measured, "rows": rows}
    results_file.write_text(json.dumps(record, indent=2) + "\n")
    # The page beside it, so that it never lags the file (`build` writes it again, the same way).
    page = write_benchmarks_page(results_file, BOOK_DIR / "results")
    print(format_table(rows + chapter_rows(BOOK_DIR / "results")))
    print(f"written to {results_file} and {page.name}")
    return rows


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(BENCHMARKS[sys.argv[2]]()))
    else:
        run_benchmarks(sys.argv[1:] or None)
