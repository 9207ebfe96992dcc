"""Chapter 03: does the centroid's inner product with its point move exactly while the NTK moves?

`judge` reads the two runs of `experiments.centroid_ntk.run_centroid_ntk`, the rich one (the
network itself) and the lazy control (the same network behind F = s (f - f0)). In both, the
centroid statistics are arrays with one row per checkpoint and one column per tracked training
point, x0 first; `ntk_change` has one value per checkpoint. Every check is judged at x0 from the
first checkpoint (step 0) to the last; the other tracked points are only reported.

The thresholds are ours: the paper argues the link from theory and shows one figure, without a
number to hold a run to. The rich and the lazy ones leave a gap between them, so a run between the
regimes passes neither (the lazy run at s = 10 of the chapter's first exercise: NTK change 0.96).
What the paper says for each check is in the chapter's `paper:` block, under the check's id.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ... import plotting
from ...verdict import claim, report
from ..centroid_ntk import movement_window, spearman

# |<c(x), x> - f(x)| is round-off only: the gap allowed in float64 and in float32.
EULER_TOLERANCE = {True: 1e-6, False: 1e-3}
RICH_MIN_NTK_CHANGE = 1  # the NTK moved at least by its own size
RICH_MIN_COSINE_CHANGE = 0.2  # the alignment moved by a fifth of its range [-1, 1]
LAZY_MAX_NTK_CHANGE = 0.5
LAZY_MAX_COSINE_CHANGE = 0.05
LAZY_MAX_INNER_SHARE = 0.05  # the lazy run's inner product moves at most 5% of the rich run's
MIN_SPEARMAN = 0.9
MIN_NORM_GROWTH = 2  # the centroid norm at least doubles ...
MAX_ABS_COSINE = 0.9  # ... while the alignment never comes near +-1


def change_at_x0(run: dict, key: str) -> float:
    """How far a centroid statistic of x0 moved from step 0 to the last checkpoint (signed)."""
    return float(run[key][-1, 0] - run[key][0, 0])


def judge(p: dict, paper: dict, rich: dict, lazy: dict) -> list:
    """The checks of the claim from the rich and the lazy run, then what is only reported."""
    said = {key: number.value for key, number in paper.items()}
    euler_gap = float(max(np.abs(r["inner"] - r["output"]).max() for r in (rich, lazy)))
    euler_tol = EULER_TOLERANCE[bool(p["float64"])]
    rich_dk, lazy_dk = float(rich["ntk_change"][-1]), float(lazy["ntk_change"][-1])
    rich_dcos, lazy_dcos = abs(change_at_x0(rich, "cosine")), abs(change_at_x0(lazy, "cosine"))
    rich_di, lazy_di = abs(change_at_x0(rich, "inner")), abs(change_at_x0(lazy, "inner"))
    rho = spearman(np.abs(rich["inner"][:, 0] - rich["inner"][0, 0]), rich["ntk_change"])
    growth = float(rich["norm"][-1, 0] / rich["norm"][0, 0])
    max_cos = float(np.abs(rich["cosine"][:, 0]).max())
    return [
        claim(f"Euler: <c(x), x> = f(x) for the bias-free ReLU net (max gap < {euler_tol:g})",
              euler_gap < euler_tol, euler_gap, said["euler-identity"], id="euler-identity"),
        claim(f"rich run: the NTK moves (relative change >= {RICH_MIN_NTK_CHANGE:g}) and the "
              f"alignment moves (|dcos| >= {RICH_MIN_COSINE_CHANGE:g})",
              rich_dk >= RICH_MIN_NTK_CHANGE and rich_dcos >= RICH_MIN_COSINE_CHANGE,
              {"NTK change": rich_dk, "|dcos|": rich_dcos}, said["rich-run-moves"],
              id="rich-run-moves"),
        claim(f"lazy run: the NTK stays (change <= {LAZY_MAX_NTK_CHANGE:g}) and so does the "
              f"alignment (|dcos| <= {LAZY_MAX_COSINE_CHANGE:g})",
              lazy_dk <= LAZY_MAX_NTK_CHANGE and lazy_dcos <= LAZY_MAX_COSINE_CHANGE,
              {"NTK change": lazy_dk, "|dcos|": lazy_dcos}, said["lazy-run-stays"],
              id="lazy-run-stays"),
        claim(f"lazy run: the inner product moves <= {LAZY_MAX_INNER_SHARE:.0%} of the rich run's "
              "movement", lazy_di <= LAZY_MAX_INNER_SHARE * rich_di,
              {"lazy": lazy_di, "rich": rich_di}, said["lazy-inner-product-stays"],
              id="lazy-inner-product-stays"),
        claim("rich run: |<c,x>_t - <c,x>_0| and the NTK change are rank-correlated (Spearman >= "
              f"{MIN_SPEARMAN:g})", rho >= MIN_SPEARMAN, rho, said["inner-product-tracks-ntk"],
              id="inner-product-tracks-ntk"),
        claim(f"rich run: the centroid norm grows >= {MIN_NORM_GROWTH:g}x while |cos| stays < "
              f"{MAX_ABS_COSINE:g}", growth >= MIN_NORM_GROWTH and max_cos < MAX_ABS_COSINE,
              {"norm growth": growth, "max |cos|": max_cos}, said["norm-holds-alignment-back"],
              id="norm-holds-alignment-back"),
        report("final accuracies (train / held-out), rich and lazy",
               {"rich": [float(rich["train_acc"][-1]), float(rich["test_acc"][-1])],
                "lazy": [float(lazy["train_acc"][-1]), float(lazy["test_acc"][-1])]},
               said["final-accuracies"], id="final-accuracies"),
        report("median |dcos| over the tracked training points, rich / lazy",
               [float(np.median(np.abs(r["cosine"][-1] - r["cosine"][0]))) for r in (rich, lazy)],
               said["tracked-points-cosine-change"], id="tracked-points-cosine-change"),
        report("lazy model F = s(f - f0): its own <c_F(x0), x0> moves by F(x0)'s change",
               change_at_x0(lazy, "model_inner"), said["lazy-model-inner-product"],
               id="lazy-model-inner-product"),
        report("architecture",
               f"{p['depth']} Linear layers ({p['depth'] - 1} hidden), width {p['width']}, no bias",
               said["architecture"], id="architecture"),
    ]


def checkpoint_steps(run: dict) -> np.ndarray:
    """The checkpoints' steps for a log axis, step 0 drawn at 1."""
    return np.maximum(run["eval_steps"], 1)


def figure_time_axis(run, rich: dict, lazy: dict) -> None:
    """x0's inner product, alignment, centroid norm and the NTK's change against the step, the
    rich run on the left, the lazy one on the right; shaded where the rich run's NTK moves."""
    p, steps = run.params, checkpoint_steps(rich)
    window = movement_window(rich["eval_steps"], rich["ntk_change"])
    fig, axes = plt.subplots(4, 2, figsize=(8, 10), sharex=True)
    rows = [("inner", r"$\langle c(x_0), x_0\rangle$"), ("cosine", r"$\cos(c(x_0), x_0)$"),
            ("norm", r"$\|c(x_0)\|$"), ("ntk_change", r"$\|K_t - K_0\|_F / \|K_0\|_F$")]
    columns = [("rich (s = 1)", rich), (f"lazy (s = {p['output_scale']:g})", lazy)]
    for col, (name, r) in enumerate(columns):
        for row, (key, label) in enumerate(rows):
            ax = axes[row, col]
            values = r[key] if key == "ntk_change" else r[key][:, 0]
            ax.plot(steps, values, "o-", ms=3, color=f"C{row}")
            ax.axvspan(*window, color="0.85", zorder=0)
            ax.set(xscale="log", ylabel=label)
            if row == 0:
                ax.set_title(name)
        axes[3, col].set_xlabel("SGD step")
    moved = {"lazy": abs(change_at_x0(lazy, "inner")), "rich": abs(change_at_x0(rich, "inner"))}
    plotting.show(
        fig, "fig-03-time-axis",
        caption="In the rich run the inner product keeps moving for as long as the NTK moves, "
                "while the alignment levels off and the centroid norm keeps growing; in the lazy "
                "run all four barely move (note the right column's own y-scales). Rows: the inner "
                "product $\\langle c(x_0), x_0\\rangle$, which equals the logit $f(x_0)$; the "
                "alignment $\\cos(c(x_0), x_0)$; the centroid norm $\\|c(x_0)\\|$; the NTK's "
                "relative change $\\|K_t - K_0\\|_F / \\|K_0\\|_F$. Left: the rich run ($s = 1$); "
                f"right: the lazy run ($s = {p['output_scale']:g}$), whose inner product moves by "
                f"{moved['lazy']:.2g} against {moved['rich']:.2g} in the rich run; grey band: 10% "
                f"to 90% of the rich run's NTK movement; {run.caption()}.",
        alt="A grid of line plots, four rows by two columns, against SGD step on a logarithmic "
            "axis. The rows show, for one training digit, the inner product of its centroid with "
            "the digit, their alignment, the centroid norm and the relative change of the NTK; "
            "the left column is the rich run, the right the lazy run, with a grey band where the "
            "rich run's NTK moves most.")


def figure_all_points(run, rich: dict, lazy: dict) -> None:
    """Over every tracked point: the inner product's mean change against the NTK's change, and
    the label-signed alignment against the step."""
    steps = checkpoint_steps(rich)
    fig, axes = plt.subplots(1, 2, figsize=(8, 4))
    for r, name, marker in [(rich, "rich", "o"), (lazy, "lazy", "s")]:
        moved = np.abs(r["inner"] - r["inner"][0]).mean(1)
        # from the first checkpoint after step 0: step 0 is (0, 0), off a log-log plot
        axes[0].plot(r["ntk_change"][1:], moved[1:], marker + "-", ms=4, label=name)
        signed = r["cosine"] * r["tracked_sign"]
        axes[1].plot(steps, signed.mean(1), marker + "-", ms=3, label=name)
        axes[1].fill_between(steps, signed.min(1), signed.max(1), alpha=0.2)
    axes[0].set(xscale="log", yscale="log", xlabel=r"NTK change $\|K_t - K_0\|_F / \|K_0\|_F$",
                ylabel=r"mean $|\langle c, x\rangle_t - \langle c, x\rangle_0|$",
                title="inner product vs NTK")
    axes[1].set(xscale="log", xlabel="SGD step", ylabel=r"$y \cos(c(x), x)$",
                title="label-signed alignment")
    plotting.legend_below(fig, ncol=2)
    plotting.show(
        fig, "fig-03-all-points",
        caption="Over all tracked training points the inner product moves as the NTK moves, along "
                "one increasing curve on which the lazy run stays at the small end, and only the "
                "rich run's alignment grows. Left: the mean change of the inner product, "
                "$|\\langle c, x\\rangle_t - \\langle c, x\\rangle_0|$, against the NTK's relative "
                "change, one marker per checkpoint (log-log); right: the mean label-signed "
                "alignment $y\\cos(c(x), x)$ against SGD step, with a band from the smallest to "
                "the largest value over the points. Rich run: blue circles; lazy run: orange "
                f"squares; means over {signed.shape[1]} tracked training points, {run.caption()}.",
        alt="Two panels for the rich and the lazy run. Left, a log-log plot of the mean change of "
            "the inner product against the relative change of the NTK, one point per checkpoint; "
            "right, the mean label-signed centroid alignment against SGD step on a logarithmic "
            "axis, with shaded bands from the smallest to the largest value over the points.")


def figure_centroid_images(run, rich: dict, lazy: dict) -> None:
    """The digit x0, and its centroid as an image at step 0, in the middle of the NTK's movement
    (the checkpoint nearest the geometric mean of its 10% and 90% steps) and at the end."""
    steps = checkpoint_steps(rich)
    window = movement_window(rich["eval_steps"], rich["ntk_change"])
    mid = int(np.argmin(np.abs(np.log(steps) - np.log(np.sqrt(window[0] * window[1])))))
    picks = [0, mid, len(steps) - 1]
    fig, axes = plt.subplots(3, 3, figsize=(8, 8.6))
    axes[0, 0].imshow(rich["x0"].reshape(28, 28), cmap="gray")
    axes[0, 0].set_title("the digit $x_0$")
    for ax in axes[0, 1:]:
        ax.set_visible(False)
    for row, (name, r) in enumerate([("rich", rich), ("lazy", lazy)], start=1):
        for col, i in enumerate(picks):
            image = r["centroid_x0"][i].reshape(28, 28)
            bound = np.abs(image).max()
            axes[row, col].imshow(image, cmap="RdBu_r", vmin=-bound, vmax=bound)
            axes[row, col].set_title(f"{name}, step {r['eval_steps'][i]}\n"
                                     f"cos {r['cosine'][i, 0]:+.2f}, norm {r['norm'][i, 0]:.2g}")
    for ax in axes.flat:
        ax.set(xticks=[], yticks=[])
    plotting.show(
        fig, "fig-03-centroid-images",
        caption="Under the rich run the centroid of $x_0$ takes on the shape of the digit, with "
                "the sign of its label (blue, negative, along the zero's stroke), while under the "
                "lazy run it stays the random-looking gradient of initialisation. Top: the digit "
                "$x_0$; middle row: the rich run's centroid $c(x_0)$ at initialisation, in the "
                "middle of the NTK's movement and at the end; bottom row: the same for the lazy "
                "run; titles give the alignment and the norm. Red positive, blue negative, each "
                f"image on its own symmetric scale; {run.caption()}.",
        alt="A grid of 28 by 28 pixel images: the digit x0, a handwritten zero, at the top, then "
            "its centroid at three training steps for the rich run in the middle row and for the "
            "lazy run in the bottom row, in a red and blue colour map.")
