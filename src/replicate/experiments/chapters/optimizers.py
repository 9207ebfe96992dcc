"""Chapter 07: six optimisers on log-scale Rosenbrock and Rastrigin.

`judge` reads the final distances to each global minimum, `{objective: {optimiser: array}}` with
one value per learning rate of `p["learning_rates"]`, the (optimiser, learning rate) pairs whose
distance curve on log-Rosenbrock shows a double descent (`objectives.double_descent`), momentum's
best final distance with the offset c = 1, and the gradient of Rosenbrock at (-1, 1).

The paper gives no tolerance for "reaching" a minimum nor for "coming close"; the two distances
below are ours, as is the largest learning rate at which the Rastrigin claim is judged: at larger
rates a step can jump from the start's basin straight into the global minimum's.
What the paper says for each check is in the chapter's `paper:` block.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ... import plotting
from ...measures import objectives as obj
from ...verdict import claim, report

REACHED = 0.05  # a final distance at most this far from the minimum reaches it
CLOSE = 0.5  # ... and at most this far comes close to it
RASTRIGIN_MAX_LR = 0.3  # the Rastrigin claim is judged at learning rates up to this one
ADAPTIVE = ["rmsprop", "rprop", "adam", "adamax"]  # the methods the paper says reach the minimum


def check_index(p: dict) -> int:
    """The position of the check learning rate in the grid."""
    return list(p["learning_rates"]).index(p["check_lr"])


def judge(p: dict, paper: dict, final: dict, double: dict, momentum_flat_best: float,
          gradient_at_minus_one) -> list:
    """The checks of the claim, one per clause and per adaptive method, then the reports."""
    said = {key: number.value for key, number in paper.items()}
    ros, ras = final["rosenbrock"], final["rastrigin"]
    lrs, i_check = np.array(p["learning_rates"]), check_index(p)
    checks = [claim(f"{o} reaches the Rosenbrock minimum at lr {p['check_lr']:g} (distance <= "
                    f"{REACHED:g})", ros[o][i_check] <= REACHED, float(ros[o][i_check]),
                    said["adaptive-methods-reach-rosenbrock"], id=f"{o}-reaches-rosenbrock")
              for o in ADAPTIVE if o in ros]
    if "momentum" in ros:
        best = float(ros["momentum"].min())
        checks.append(claim(f"momentum comes close without reaching it (best over grid in "
                            f"({REACHED:g}, {CLOSE:g}])", REACHED < best <= CLOSE, best,
                            said["momentum-comes-close"], id="momentum-comes-close"))
    if "sgd" in ros:
        best = float(ros["sgd"].min())
        checks.append(claim(f"SGD does not reach it (best over grid > {CLOSE:g})", best > CLOSE,
                            best, said["sgd-does-not-reach"], id="sgd-does-not-reach"))
    small = lrs <= RASTRIGIN_MAX_LR
    closest = {o: float(d[small].min()) for o, d in ras.items()}
    checks.append(claim(f"no method reaches the Rastrigin minimum (all > {CLOSE:g} at lr <= "
                        f"{RASTRIGIN_MAX_LR:g})", min(closest.values()) > CLOSE, closest,
                        said["no-method-reaches-rastrigin"], id="no-method-reaches-rastrigin"))
    checks.append(claim("some (optimiser, lr) shows a double descent of the distance on "
                        "log-Rosenbrock", bool(double),
                        [f"{o}@{lr:g}" for o, lr in sorted(double)] or "none",
                        said["double-descent"], id="double-descent"))
    large = {f"{o}@{lr:g}": float(d[i]) for o, d in ras.items() for i, lr in enumerate(lrs)
             if lr > RASTRIGIN_MAX_LR and d[i] <= REACHED}
    checks.append(report(f"Rastrigin runs that do reach the minimum at lr > {RASTRIGIN_MAX_LR:g}",
                         large or "none", said["no-method-reaches-rastrigin"],
                         id="rastrigin-reached-at-large-lr"))
    checks.append(report("momentum's best distance with c = 1 instead of 1e-8",
                         float(momentum_flat_best), said["momentum-with-offset-one"],
                         id="momentum-with-offset-one"))
    checks.append(report("Rosenbrock gradient at (-1, 1)",
                         [float(g) for g in gradient_at_minus_one],
                         said["rosenbrock-gradient-at-minus-one-one"],
                         id="rosenbrock-gradient-at-minus-one-one"))
    return checks


def figure_landscapes(run, rosenbrock, rastrigin) -> None:
    """Both log-scale objectives as filled contours, with the global minimum and the start."""
    p = run.params
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.9))
    plotting.contour(axes[0], rosenbrock, (-2.5, 2.5), (-1.5, 4.0))
    axes[0].plot(*obj.MINIMA["rosenbrock"], "r*", ms=12, label="global minimum")
    axes[0].plot(*p["rosenbrock_start"], "o", mfc="white", mec="k", label="start")
    axes[0].set_title(f"log(Rosenbrock + {p['log_offset']:g})")
    plotting.contour(axes[1], rastrigin, (-4.0, 4.0), (-4.0, 4.0))
    axes[1].plot(*obj.MINIMA["rastrigin"], "r*", ms=12, label="global minimum")
    axes[1].plot(*p["rastrigin_start"], "o", mfc="white", mec="k", label="start")
    axes[1].set_title(f"log(Rastrigin + {p['log_offset']:g}), a = {p['rastrigin_a']:g}")
    plotting.legend_below(fig, ncol=2)
    plotting.show(
        fig, "fig-07-landscapes",
        caption="Log-Rosenbrock has its only minimum (star) at the end of a long curved valley, "
                "while log-Rastrigin has its global minimum (star) in a lattice of local minima. "
                rf"Filled contours of $\log(g(x) + c)$ with $c$ = {p['log_offset']:g}: Rosenbrock "
                rf"(minimum at (1, 1)) and Rastrigin with $a$ = {p['rastrigin_a']:g} (minimum at "
                "(0, 0)); white circles mark the starting points. The grid misses the exact "
                r"minima, so the colour scales stop well above $\log c$; cf. the paper's Figs. 25 "
                f"and 28; {run.caption()}.",
        alt="Two filled contour maps over the plane of x1 and x2: log-Rosenbrock with a curved "
            "valley, and log-Rastrigin with a regular grid of wells; each marks the global "
            "minimum with a star and the starting point with a circle.")


def figure_distance(run, distance: dict) -> None:
    """The distance to the minimum over the iterations at the check learning rate, and at the end
    over the whole grid; one row per objective."""
    p, i_check = run.params, check_index(run.params)
    fig, axes = plt.subplots(2, 2, figsize=(8, 7.4))
    for row, f in enumerate(["rosenbrock", "rastrigin"]):
        for o, d in distance[f].items():
            axes[row, 0].plot(np.arange(len(d)), d[:, i_check], label=o)
            axes[row, 1].plot(np.array(p["learning_rates"]), d[-1], "o-", label=o)
        axes[row, 0].set(xscale="log", yscale="log", xlabel="iteration",
                         ylabel="distance to minimum", title=f"log-{f}, lr = {p['check_lr']:g}")
        axes[row, 1].set(xscale="log", yscale="log", xlabel="learning rate",
                         ylabel=f"after {p['iterations']} iterations", title=f"log-{f}: final")
        axes[row, 1].axhline(REACHED, color="0.4", ls="--", lw=1)
    plotting.legend_below(fig, ncol=6)
    plotting.show(
        fig, "fig-07-distance",
        caption=f"At learning rate {p['check_lr']:g} RMSprop, Rprop, Adam and Adamax end below "
                "the dashed line on log-Rosenbrock while SGD and momentum stay above it at every "
                "learning rate, and on log-Rastrigin every method ends far from the minimum "
                "except at the largest learning rates. Left: distance to the global minimum over "
                f"the iterations at learning rate {p['check_lr']:g}; right: the distance after "
                f"{p['iterations']} iterations at every learning rate of the grid; top row "
                "log-Rosenbrock, bottom row log-Rastrigin, one colour per optimiser. The dashed "
                f"line at {REACHED:g} is the 'reached the minimum' threshold; cf. the paper's "
                f"Figs. 26-27 and 29-30; {run.caption()}.",
        alt="Four line plots on log-log axes, one row per objective (log-Rosenbrock, "
            "log-Rastrigin), one line per optimiser: the distance to the minimum against the "
            "iteration at one learning rate, and the final distance against the learning rate, "
            "with a dashed threshold line.")


def figure_paths(run, paths: dict, rosenbrock, rastrigin) -> None:
    """Each optimiser's path at the check learning rate over its objective's contours."""
    p, i_check = run.params, check_index(run.params)
    boxes = {"rosenbrock": ((-2.5, 2.5), (-1.5, 4.0)), "rastrigin": ((-3.0, 1.0), (-1.0, 4.5))}
    n_opt = len(p["optimizers"])
    fig, axes = plotting.panel_grid(2 * n_opt, row_height=2.6)
    for k, (f, objective) in enumerate([("rosenbrock", rosenbrock), ("rastrigin", rastrigin)]):
        for ax, (o, path) in zip(axes[k * n_opt:(k + 1) * n_opt], paths[f].items()):
            plotting.contour(ax, objective, *boxes[f], resolution=150, colorbar=False)
            xy = path[:, i_check]
            ax.plot(xy[:, 0], xy[:, 1], color="white", lw=1.0)
            # The end point on top of the star, smaller, so that both stay visible when they meet.
            ax.plot(*obj.MINIMA[f], "*", color="gold", ms=14)
            ax.plot(*xy[-1], "o", color="tab:red", ms=4)
            ax.set(xlim=boxes[f][0], ylim=boxes[f][1], title=f"{o}, {f}")
    plotting.show(
        fig, "fig-07-paths",
        caption="On log-Rosenbrock the adaptive methods run down the valley to the minimum, SGD "
                "creeps along the valley floor and momentum swings far out of it; on "
                "log-Rastrigin every method stops in the local minimum next to its start. One "
                "panel per optimiser and objective at learning rate "
                f"{p['check_lr']:g}: the path in white, its end point in red, the global minimum "
                "as a gold star, over the objective's contours. Cf. the paper's Figs. 26 and 29; "
                f"{run.caption()}.",
        alt="Grid of contour maps, one per optimiser on log-Rosenbrock and one per optimiser on "
            "log-Rastrigin, each with the optimiser's path drawn as a white line, its end point "
            "as a red dot and the global minimum as a star.")


def figure_double_descent(run, distance: dict, double: dict) -> None:
    """One double descent on log-Rosenbrock: at the check learning rate if a pair there shows one
    (the setting of the other figures), the one whose rise is largest relative to its first
    minimum m1. Drawn even when no pair shows one, since the text refers to it by number."""
    p = run.params
    if not double:
        fig, ax = plt.subplots(figsize=(8, 1.2))
        ax.text(0.5, 0.5, "no (optimiser, learning rate) pair shows a double descent in this run",
                ha="center", va="center")
        ax.set_axis_off()
        plotting.show(fig, "fig-07-double-descent",
                      caption=f"No pair shows a double descent in this run; {run.caption()}.",
                      alt="An empty panel: no run shows a double descent.")
        return
    pool = {k: v for k, v in double.items() if k[1] == p["check_lr"]} or double
    (o, lr), dd = max(pool.items(), key=lambda kv: (kv[1]["peak"] - kv[1]["m1"]) / kv[1]["m1"])
    d = distance["rosenbrock"][o][:, list(p["learning_rates"]).index(lr)]
    # The detector reads the mean over 5 iterations: drawn in purple, its steps centred (+ 2).
    mean5 = np.convolve(d, np.ones(5) / 5, mode="valid")
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(np.arange(len(d)), d, color="0.7", lw=0.6, label="distance")
    ax.plot(np.arange(len(mean5)) + 2, mean5, color="tab:purple", lw=1.2,
            label="mean over 5 iterations")
    ax.plot(dd["m1_step"] + 2, dd["m1"], "v", color="k", ms=8, label="first minimum $m_1$")
    ax.plot(dd["peak_step"] + 2, dd["peak"], "^", color="tab:red", ms=8,
            label="highest point after $m_1$")
    ax.set(yscale="log", xlabel="iteration", ylabel="distance to (1, 1)",
           title=f"Double descent: {o} at lr {lr:g} on log-Rosenbrock")
    plotting.legend_below(fig, ncol=2)
    plotting.show(
        fig, "fig-07-double-descent",
        caption=f"The distance of {o} at learning rate {lr:g} falls to a first minimum $m_1$, "
                "rises again and ends below it: what the detector counts as a double descent, "
                "produced here by an iterate that oscillates after its first approach. Grey: the "
                "distance at every iteration; purple: its mean over 5 iterations, which the "
                "detector reads; black triangle: $m_1$; red triangle: the highest point after "
                "it. "
                f"The list printed above gives all {len(double)} (optimiser, learning rate) pairs "
                f"that show one; {run.caption()}.",
        alt="Line plot of the distance to the minimum (log scale) against the iteration for "
            "one optimiser and learning rate on log-Rosenbrock, raw and averaged over 5 "
            "iterations, with triangles at the first minimum and at the highest point after "
            "it.")
