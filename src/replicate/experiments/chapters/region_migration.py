"""Chapter 02, region migration: which checkpoints to compare, the verdict on the exact partitions
of one plane at those checkpoints, and the chapter's figures.

Checkpoints are indices into chapter 01's run; the measures of the early and the late one are
dicts keyed by those indices, as the notebook computes them."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import LogNorm
from matplotlib.patches import Rectangle

from ... import plotting
from ...measures import partition as P
from ...verdict import claim, report
from .delayed_robustness import TRAINING  # noqa: F401  (the same run as chapter 01)


def checkpoints_compared(train_acc) -> tuple[int, int]:
    """(early, late): the first checkpoint at which the training accuracy reaches 99% (the
    paper: the local complexity "keeps ascending until training interpolation is reached"; the
    most accurate one if none does), and the end of training."""
    train_acc = np.asarray(train_acc)
    reached = np.flatnonzero(train_acc >= 0.99)
    early = int(reached[0]) if len(reached) else int(np.argmax(train_acc))
    return early, len(train_acc) - 1


def panel_checkpoints(steps, panels: int, early: int, late: int) -> list[int]:
    """About `panels` checkpoints evenly spaced in log step, plus the early and late ones."""
    wanted = np.geomspace(max(steps[1], 1), steps[-1], panels)
    log_at = np.log(np.maximum(steps, 1))
    return sorted({int(np.argmin(np.abs(log_at - np.log(s)))) for s in wanted} | {early, late})


def count_peak(counts, early: int) -> int:
    """The checkpoint of the largest region count after interpolation: where the second descent
    begins on the slice."""
    return early + int(np.argmax(counts[early:]))


def square_ratio(squares: dict) -> float:
    """Mean region count of the squares on the boundary over that of the squares away from it;
    NaN where either kind found no place in the domain."""
    if not squares["near_counts"] or not squares["away_counts"]:
        return float("nan")
    return float(np.mean(squares["near_counts"]) / np.mean(squares["away_counts"]))


def judge(p: dict, paper: dict, steps, counts, early: int, late: int, *, grid_counts: dict,
          squares: dict, concentration: dict, point_areas: dict, late_area: float,
          side: float) -> list:
    """The chapter's checks. `counts`: the exact region count at every checkpoint; keyed by the
    early and late checkpoints: `grid_counts` (distinct activation patterns on a grid),
    `squares` (the near/away square counts), `concentration` (`partition.boundary_concentration`)
    and `point_areas` (the area of each training digit's region); `late_area`: the late
    regions' total area, to compare with the square domain of side `side`."""
    ratio_early, ratio_late = square_ratio(squares[early]), square_ratio(squares[late])
    share = {i: concentration[i]["edge_share"] for i in (early, late)}
    count = {i: int(counts[i]) for i in (early, late)}
    total_area = {i: float(point_areas[i].sum()) for i in (early, late)}
    peak = count_peak(counts, early)
    return [
        claim("exactness: region areas sum to the domain's area and the exact count >= the grid "
              "count",
              abs(late_area - side ** 2) <= 1e-6 * side ** 2 and count[late] >= grid_counts[late],
              {"area / domain area": late_area / side ** 2, "exact": count[late],
               "grid": grid_counts[late]},
              paper["exact-partition"].value, id="exact-partition"),
        claim("late: squares on the boundary hold >= 1.5x the regions of equal squares away from "
              "it",
              ratio_late >= 1.5,
              {"on": squares[late]["near_counts"], "away": squares[late]["away_counts"],
               "ratio": ratio_late},
              paper["late-square-ratio"].value, id="late-square-ratio"),
        claim("that ratio is higher late than early", ratio_late > ratio_early,
              {"early": ratio_early, "late": ratio_late}, paper["square-ratio-grows"].value,
              id="square-ratio-grows"),
        claim("the regions holding the three training digits are larger late than early (total "
              "area)",
              total_area[late] > total_area[early],
              {"early": total_area[early], "late": total_area[late]},
              paper["digit-regions-grow"].value, id="digit-regions-grow"),
        claim("the share of region-edge length within the band around the boundary grows",
              share[late] > share[early], {"early": share[early], "late": share[late]},
              paper["edge-share-grows"].value, id="edge-share-grows"),
        claim("the region count on the slice falls in the second descent "
              "(late <= 0.75 x its peak after interpolation)",
              count[late] <= 0.75 * counts[peak],
              {"peak": int(counts[peak]), "peak step": int(steps[peak]), "late": count[late],
               "late / peak": count[late] / counts[peak]},
              paper["count-falls"].value, id="count-falls"),
        report("region count, early (interpolation) -> late",
               [count[early], count[late], count[late] / count[early]],
               paper["region-count"].value, id="region-count"),
        report("training-digit region areas, early -> late (per class)",
               {str(c): [float(point_areas[early][j]), float(point_areas[late][j])]
                for j, c in enumerate(p["triad_classes"])},
               paper["digit-region-areas"].value, id="digit-region-areas"),
        report("edge concentration (edge share / band area share), early -> late",
               [concentration[early]["edge_concentration"],
                concentration[late]["edge_concentration"]],
               paper["edge-concentration"].value, id="edge-concentration"),
        report("region density in the band / outside it (rho), early -> late",
               [concentration[early]["region_density_ratio"],
                concentration[late]["region_density_ratio"]],
               paper["band-density"].value, id="band-density"),
        report("checkpoints compared (steps)",
               {"early": int(steps[early]), "late": int(steps[late])},
               paper["checkpoints-compared"].value, id="checkpoints-compared"),
    ]


# --- figures ------------------------------------------------------------------------------------

def figure_accuracy(run, mlp, early: int, late: int):
    """The run's accuracy curves with the two compared checkpoints marked."""
    steps = np.array(mlp.eval_steps)
    shown = steps > 0  # a log axis has no step 0
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.plot(steps[shown], mlp.train_acc[shown], color=plotting.SPLIT_COLORS["train"],
            label="train")
    ax.plot(steps[shown], mlp.test_acc[shown], color=plotting.SPLIT_COLORS["test"],
            label="held-out")
    for i, name in [(early, "early"), (late, "late")]:
        ax.axvline(steps[i], color="0.3", ls="--", lw=1)
        ax.text(steps[i], 0.05, f" {name}", color="0.3")
    ax.set(xscale="log", xlabel="optimisation step", ylabel="accuracy", ylim=(0, 1.02),
           title="MNIST MLP (chapter 01's run)")
    ax.legend(loc="center right")
    plotting.show(
        fig, "fig-02-accuracy",
        caption="The early checkpoint is where the network first fits 99% of its training digits, "
                "the late one is the end of training, long after both accuracies have stopped "
                "moving. Training accuracy green, held-out accuracy orange; dashed lines: the two "
                f"checkpoints compared in this chapter. Chapter 01's run of the MNIST MLP, "
                f"{run.caption()}.",
        alt="Line plot of training and held-out accuracy against optimisation step on a "
            "logarithmic axis, with dashed vertical lines labelled early and late at the two "
            "checkpoints compared in the chapter.")


def figure_digits(run, triad, side: float):
    """The three training digits the plane passes through."""
    fig, axes = plt.subplots(1, 3, figsize=(6, 2.6))
    for ax, img, c in zip(axes, triad, run.params["triad_classes"]):
        ax.imshow(img.reshape(28, 28), cmap="gray_r")
        ax.set(title=f"class {c}", xticks=[], yticks=[])
    classes = ", ".join(str(c) for c in run.params["triad_classes"])
    plotting.show(
        fig, "fig-02-digits",
        caption=f"The slice is the plane through these three training digits, of classes "
                f"{classes}. The square domain around them on that plane has side {side:.1f} in "
                f"pixel units (Euclidean length in the {triad.shape[1]}-dimensional input "
                f"space); {run.caption()}.",
        alt=f"Three handwritten MNIST training digits side by side, of classes {classes}, in "
            "greyscale.")


def region_norm(parts: dict, selected) -> LogNorm:
    """One log colour scale of the regions' slope norms for the partitions `selected`."""
    values = np.concatenate([parts[i].slope_norms() for i in selected])
    return LogNorm(vmin=max(np.percentile(values, 1), 1e-6), vmax=np.percentile(values, 99.9))


def figure_partition(run, steps, parts: dict, early: int, late: int, triad_uv):
    """The early and the late partition side by side (the paper's Fig. 2, middle and right)."""
    norm = region_norm(parts, [early, late])
    fig, axes = plt.subplots(1, 2, figsize=(8, 5.2))
    for ax, i, name in [(axes[0], early, "early (interpolation)"), (axes[1], late, "late (end)")]:
        fill = P.draw_partition(ax, parts[i], points=triad_uv, norm=norm)
        ax.set(title=f"{name}\nstep {steps[i]}, {parts[i].n_regions} regions",
               xlabel="$u$", ylabel="$v$")
    fig.colorbar(fill, ax=axes, orientation="horizontal", shrink=0.6,
                 label="slope norm $\\|A_\\omega\\|$ on the slice")
    plotting.show(
        fig, "fig-02-partition",
        caption="By the end of training the region edges (black) have left the three training "
                "digits and run in bands along the decision boundary (red); at interpolation they "
                "cover the whole slice, densest where the boundaries meet. Each region is "
                "coloured by the norm of the network's slope $\\|A_\\omega\\|$ on the slice (log "
                "scale, one scale for both panels); white dots: the three training digits; cf. "
                "the paper's Fig. 2 (middle and right). Exact partition of the plane through the "
                f"three digits, {run.caption()}.",
        alt="Two square maps of the plane through three training digits, at interpolation and at "
            "the end of training, divided into linear regions coloured by slope norm, with black "
            "region edges, a red decision boundary and three white dots for the digits. A colour "
            "bar below gives the slope norm on a log scale.")


def figure_partition_steps(run, steps, parts: dict, panel_idx, triad_uv):
    """The partition at each kept checkpoint: a still of the paper's animation."""
    norm = region_norm(parts, panel_idx)
    fig, axes = plotting.panel_grid(len(panel_idx), row_height=3.0)
    for ax, i in zip(axes, panel_idx):
        fill = P.draw_partition(ax, parts[i], points=triad_uv, norm=norm, edge_width=0.1)
        ax.set_title(f"step {steps[i]}\n{parts[i].n_regions} regions")
    fig.colorbar(fill, ax=axes, shrink=0.8, label="slope norm")
    plotting.show(
        fig, "fig-02-partition-steps",
        caption="The edges stay spread over the slice, densest where the boundaries meet, until "
                "late in training, when they leave the digits and gather in bands along the "
                "decision boundary. Partitions at log-spaced checkpoints and at the early and "
                "late ones, titled with the step and the region count; regions coloured by slope "
                "norm on one log scale for all panels, edges black, decision boundary red, "
                "training digits white. A still version of the paper's animation "
                f"(<https://bit.ly/grok-splinecam>); {run.caption()}.",
        alt="A grid of square maps of the same plane at increasing training steps, each divided "
            "into linear regions coloured by slope norm, with black region edges, the red "
            "decision boundary and three white dots for the training digits; a colour bar on "
            "the right.")


def figure_region_count(run, steps, counts, grid_counts: dict, early: int, late: int):
    """The exact region count at every checkpoint, its peak after interpolation and the grid's
    lower bound at the early and late checkpoints."""
    steps, shown = np.asarray(steps), np.asarray(steps) > 0
    peak, resolution = count_peak(counts, early), run.params["grid_resolution"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(steps[shown], counts[shown], "o-", ms=3, color="k", label="exact count")
    ax.plot(steps[[early, late]], [grid_counts[early], grid_counts[late]], "s", color="0.5",
            label=f"distinct patterns on a {resolution}$^2$ grid (lower bound)")
    ax.plot(steps[peak], counts[peak], "v", ms=10, color="tab:red",
            label="peak after interpolation")
    for i in (early, late):
        ax.axvline(steps[i], color="0.3", ls="--", lw=1)
    ax.set(xscale="log", xlabel="optimisation step", ylabel="regions on the slice", ylim=(0, None))
    plotting.legend_below(fig, ncol=2)
    plotting.show(
        fig, "fig-02-region-count",
        caption="The region count on the slice falls, climbs to a peak after interpolation (red "
                "triangle) and falls again by the end of training, the double descent of the "
                "local complexity. Black: the exact count at every checkpoint; grey squares: the "
                f"distinct activation patterns on a grid of {resolution}$^2$ points at the early "
                "and late checkpoints, a lower bound; dashed lines: the early and late "
                f"checkpoints; {run.caption()}.",
        alt="Line plot of the number of linear regions on the slice against optimisation step on "
            "a logarithmic axis, with a red triangle at the peak after interpolation, grey "
            "squares for a grid-based lower bound at two checkpoints, and dashed vertical lines "
            "at the early and late checkpoints.")


def figure_layer_cuts(run, step: int, part, triad_uv):
    """The cuts each hidden layer's neurons make in the partition `part` (at `step`)."""
    fig, axes = plotting.panel_grid(run.params["depth"] - 1, row_height=3.1)
    for layer, ax in enumerate(axes):
        P.draw_partition(ax, part, points=triad_uv, layer=layer, edge_width=0.15)
        cuts = int((part.chord_layer == layer).sum())
        ax.set_title(f"hidden layer {layer + 1}\n{cuts} cuts")
    plotting.show(
        fig, "fig-02-layer-cuts",
        caption="At the end of training the last hidden layer makes most of the cuts, and they "
                "follow the decision boundary; the first layer's cuts are straight lines across "
                "the slice. Each panel draws the cuts made by one hidden layer's neurons at step "
                f"{step}, with their number in the title; decision boundary red, training digits "
                f"as circles; {run.caption()}.",
        alt="One square map of the plane per hidden layer, side by side, each showing as thin "
            "black lines the region edges made by that layer's neurons, with the red decision "
            "boundary and three circles for the training digits.")


def _draw_squares(ax, squares: dict, square_side: float) -> None:
    """Each square outlined (red on the boundary, blue away from it) and labelled with its count."""
    for kind, colour in [("near", "red"), ("away", "deepskyblue")]:
        for c, n in zip(squares[kind], squares[f"{kind}_counts"]):
            ax.add_patch(Rectangle(c - square_side / 2, square_side, square_side, fill=False,
                                   ec=colour, lw=2.2))
            ax.text(c[0], c[1] + 0.45 * square_side, f"{n}", color=colour, ha="center",
                    va="top", fontweight="bold",
                    bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.8))


def figure_squares(run, steps, parts: dict, squares: dict, early: int, late: int, triad_uv,
                   square_side: float):
    """The equal squares on and away from the boundary over the early and late partitions (cf.
    the paper's Fig. 26)."""
    fig, axes = plt.subplots(1, 2, figsize=(8, 4.8))
    norm = region_norm(parts, [early, late])
    for ax, i, name in [(axes[0], early, "early"), (axes[1], late, "late")]:
        P.draw_partition(ax, parts[i], points=triad_uv, norm=norm, edge_width=0.1)
        _draw_squares(ax, squares[i], square_side)
        ax.set(title=f"{name}: step {steps[i]}\nnear/away ratio {square_ratio(squares[i]):.2f}",
               xlabel="$u$", ylabel="$v$")
    plotting.show(
        fig, "fig-02-squares",
        caption="Late in training the squares on the decision boundary hold far more regions than "
                "equal squares away from it, and the ratio of their counts is larger than at "
                f"interpolation. Squares of side {run.params['square_fraction']:g} × the domain "
                "side, centred on the decision boundary (red) or as far from it as the domain "
                "allows (blue), each labelled with its exact region count and drawn over the "
                "early and late partitions; panel titles give the ratio of the mean counts. Cf. "
                f"the paper's Fig. 26; {run.caption()}.",
        alt="Two square maps of the plane, early and late, showing the partition with red squares "
            "on the decision boundary and blue squares away from it, each square labelled with "
            "the number of regions inside it.")


def figure_migration(run, squares: dict, concentration: dict, point_areas: dict, early: int,
                     late: int):
    """The three measures of migration, early against late."""
    p, pair, x = run.params, (early, late), np.arange(2)
    fig, axes = plotting.panel_grid(3, row_height=3.9)
    for k, kind in enumerate(["near", "away"]):
        means = [np.mean(squares[i][f"{kind}_counts"] or [np.nan]) for i in pair]
        axes[0].bar(x + (k - 0.5) * 0.35, means, 0.35,
                    label="on the boundary" if kind == "near" else "away from it")
    axes[0].set(xticks=x, xticklabels=["early", "late"], ylabel="regions per square (mean)",
                yscale="log", title="equal squares")
    axes[1].bar(x - 0.175, [concentration[i]["edge_share"] for i in pair], 0.35,
                label="edge length")
    axes[1].bar(x + 0.175, [concentration[i]["band_area_share"] for i in pair], 0.35,
                label="area")
    axes[1].set(xticks=x, xticklabels=["early", "late"], ylabel="share inside the band",
                title="band at the boundary")
    for j in range(3):
        axes[2].plot(x, [point_areas[i][j] for i in pair], "o-",
                     label=f"class {p['triad_classes'][j]}")
    axes[2].set(xticks=x, xticklabels=["early", "late"], yscale="log",
                ylabel="area of the digit's region", title="training digits")
    for ax in axes:
        ax.set_xlim(-0.5, 1.5)  # keep the end points and labels inside
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12))
    plotting.show(
        fig, "fig-02-migration",
        caption="From early to late all three measures move as region migration says they "
                "should: squares away from the boundary lose regions relative to squares on it, "
                "the band around the boundary holds a larger share of the region-edge length, "
                "and the regions holding the three training digits grow. Left: mean region count "
                "per square on and away from the boundary (log scale); middle: the shares of edge "
                f"length and of area inside the band of half-width {p['band_fraction']:g} × the "
                "domain side around the boundary; right: the area of the region containing each "
                f"training digit (log scale); {run.caption()}.",
        alt="Three panels comparing the early and late checkpoints: bars for the mean region "
            "count in squares on and away from the decision boundary, bars for the shares of "
            "edge length and of area inside the band around the boundary, and lines for the "
            "area of the region holding each of the three training digits.")
