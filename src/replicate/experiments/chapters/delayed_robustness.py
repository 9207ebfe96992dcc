"""Chapter 01, delayed robustness: the verdict on one MNIST run (accuracy curves, adversarial
accuracy and local complexity at each checkpoint) and the chapter's three figures.

Everything here reads arrays the notebook has already measured; indices are checkpoint indices,
turned into optimisation steps only where a check shows them."""
from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np

from ... import plotting
from ...measures.adversarial import first_index_above, settling_index
from ...measures.local_complexity import LCPhases, lc_phases, mean_ci
from ...verdict import claim, report

# The settings that make the MNIST run; chapter 02 trains (reads from the cache) the same run.
TRAINING = ["n_train", "width", "depth", "steps", "lr", "weight_decay", "batch_size", "init_scale",
            "eval_points", "seed"]
SPLIT_NAMES = {"train": "train", "test": "held-out", "random": "random"}


def lc_summary(lc_counts: dict) -> tuple[dict, dict]:
    """Mean LC of the hidden layers and the half-width of its 99% confidence interval, per kind
    of point, as arrays (checkpoints, radii). `lc_counts` holds per-layer counts (checkpoints,
    radii, points, layers); the last layer is the output, whose sign changes around training
    digits say where the logits sit, not where the network bends, so it is left out."""
    hidden = {split: v[..., :-1].sum(-1) for split, v in lc_counts.items()}
    stats = {split: np.array([[mean_ci(v[k, j]) for j in range(v.shape[1])]
                              for k in range(v.shape[0])])
             for split, v in hidden.items()}
    return ({split: s[..., 0] for split, s in stats.items()},
            {split: s[..., 1] for split, s in stats.items()})


@dataclass(frozen=True)
class Milestones:
    """Where the run's phases begin, as checkpoint indices (None: never reached)."""
    settle: int  # held-out accuracy first within 1 point of its final value
    interp: int  # training accuracy first >= 0.99 (the last checkpoint if never)
    phases: LCPhases  # the training-point LC's first minimum and peak
    low: int  # the adversarial accuracy's lowest value after settling
    onset: int | None  # robustness onset: first 5 points above that low
    rise_end: int | None  # the rise reaches 90% of its largest gain


def milestones(p: dict, train_acc, test_acc, adv: dict, lc_mean: dict) -> Milestones:
    """The milestones of a run, read at `check_epsilon` and `check_radius`. The adversarial
    accuracy peaks briefly while the clean accuracy climbs, then collapses, so its delayed rise
    is measured from its lowest value after the held-out accuracy settled."""
    robust = np.asarray(adv[p["check_epsilon"]], dtype=float)
    settle = settling_index(test_acc, 0.01)
    reached = np.flatnonzero(np.asarray(train_acc) >= 0.99)
    interp = int(reached[0]) if reached.size else len(train_acc) - 1
    low = settle + int(np.argmin(robust[settle:]))
    gain = robust[low:].max() - robust[low]
    return Milestones(settle, interp, lc_phases(train_lc(p, lc_mean), interp), low,
                      first_index_above(robust, robust[low] + 0.05, start=low),
                      first_index_above(robust, robust[low] + 0.9 * gain - 1e-12, start=low))


def train_lc(p: dict, lc_mean: dict) -> np.ndarray:
    """The training-point LC at `check_radius`, per checkpoint: the curve the phases come from."""
    return lc_mean["train"][:, p["lc_radii"].index(p["check_radius"])]


def judge(p: dict, paper: dict, steps, train_acc, test_acc, adv: dict, lc_mean: dict) -> list:
    """The chapter's checks. `steps`: the step of each checkpoint; `train_acc`, `test_acc`: the
    clean accuracies there; `adv`: {epsilon: adversarial accuracy per checkpoint}; `lc_mean`:
    {"train" | "test" | "random": mean hidden-layer LC (checkpoints, radii)}; `paper`: the
    chapter's paper numbers by check id."""
    steps, test_acc = np.asarray(steps), np.asarray(test_acc)
    m, j = milestones(p, train_acc, test_acc, adv, lc_mean), p["lc_radii"].index(p["check_radius"])
    T, a, phases = int(steps[-1]), adv[p["check_epsilon"]], m.phases
    t = lambda i: None if i is None else int(steps[i])  # noqa: E731
    rise = float(a[-1] - a[m.low])
    end = {split: float(lc_mean[split][-1, j]) for split in ("train", "test")}
    return [
        claim("held-out accuracy settles early (within 1 point of its final value by step T/10)",
              t(m.settle) <= T / 10,
              {"settled at step": t(m.settle), "T": T, "final": float(test_acc[-1])},
              paper["settles-early"].value, id="settles-early"),
        claim("... and then stays put: |final - value at settling| <= 2 points",
              abs(test_acc[-1] - test_acc[m.settle]) <= 0.02,
              {"at settling": float(test_acc[m.settle]), "final": float(test_acc[-1])},
              paper["stays-put"].value, id="stays-put"),
        claim(f"adversarial accuracy at eps {p['check_epsilon']:g} rises by >= 10 points after "
              "that (low after settling -> end)",
              rise >= 0.10, {"low after settling": float(a[m.low]), "at step": t(m.low),
                             "final": float(a[-1]), "rise": rise},
              paper["adversarial-rise"].value, id="adversarial-rise"),
        claim("the rise is delayed: onset >= 10x the settling step",
              m.onset is not None and t(m.onset) >= 10 * t(m.settle),
              {"onset step": t(m.onset), "settling step": t(m.settle)},
              paper["rise-delayed"].value, id="rise-delayed"),
        claim(f"train LC (r = {p['check_radius']:g}) ascends (peak >= 1.5x first minimum), "
              "then falls >= 30%",
              phases.ascent >= 1.5 and phases.second_descent >= 0.30,
              {"first min step": t(phases.first_min), "peak step": t(phases.peak),
               "peak/min": phases.ascent, "fall from peak": phases.second_descent},
              paper["lc-phases"].value, id="lc-phases"),
        claim("the second descent begins before the adversarial rise ends",
              m.rise_end is not None and phases.peak < m.rise_end,
              {"LC peak step": t(phases.peak), "rise ends at step": t(m.rise_end)},
              paper["descent-before-rise-ends"].value, id="descent-before-rise-ends"),
        claim("... and before the robustness onset",
              m.onset is not None and phases.peak < m.onset,
              {"LC peak step": t(phases.peak), "onset step": t(m.onset)},
              paper["descent-before-onset"].value, id="descent-before-onset"),
        claim("at the end, LC around training points is below LC around held-out points",
              end["train"] < end["test"], {"train": end["train"], "held-out": end["test"]},
              paper["train-below-held-out"].value, id="train-below-held-out"),
        report("first descent: train LC at its first minimum / at initialisation",
               phases.first_descent, paper["first-descent"].value, id="first-descent"),
        report("random-point LC at the end / at the train-LC peak",
               float(lc_mean["random"][-1, j] / lc_mean["random"][phases.peak, j]),
               paper["random-lc-falls"].value, id="random-lc-falls"),
        report("adversarial accuracy gain from its low after settling to the end, per eps",
               {f"{e:g}": float(adv[e][-1] - adv[e][m.settle:].min()) for e in p["epsilons"]},
               paper["gain-per-eps"].value, id="gain-per-eps"),
        report("adversarial accuracy at the end minus at the settling step, per eps",
               {f"{e:g}": float(adv[e][-1] - adv[e][m.settle]) for e in p["epsilons"]},
               paper["end-minus-settling-per-eps"].value, id="end-minus-settling-per-eps"),
        report("held-out accuracy range after settling",
               [float(test_acc[m.settle:].min()), float(test_acc[m.settle:].max())],
               paper["held-out-range"].value, id="held-out-range"),
        report("train LC at the smallest radius: peak and final",
               [float(lc_mean["train"][:, 0].max()), float(lc_mean["train"][-1, 0])],
               paper["smallest-radius-lc"].value, id="smallest-radius-lc"),
    ]


def generalisation_half(p: dict, paper: dict, steps, train_acc, test_acc, adv: dict,
                        lc_mean: dict, min_gain: float = 0.10) -> list:
    """The paper's sentence has two halves: "the second descent always precedes the onset of
    delayed generalization or delayed robustness". `judge` tests the robustness half; this tests
    the other on the same run, with `judge`'s arguments.

    Generalisation is delayed when the held-out accuracy still gains `min_gain` after
    interpolation (from its lowest value at or after the interpolation checkpoint to the end); its
    onset is the first checkpoint 5 points above that low, the robustness onset's rule. A claim
    where the run generalises late; where it does not (this chapter's run: the held-out accuracy
    has settled by interpolation), the half is untested and a report says so, with the numbers
    that show it, so it counts in no ratio."""
    steps, test_acc = np.asarray(steps), np.asarray(test_acc, dtype=float)
    m = milestones(p, train_acc, test_acc, adv, lc_mean)
    low = m.interp + int(np.argmin(test_acc[m.interp:]))
    gain = float(test_acc[-1] - test_acc[low])
    onset = first_index_above(test_acc, test_acc[low] + 0.05, start=low)
    ours = {"interpolation step": int(steps[m.interp]),
            "held-out low after it": float(test_acc[low]), "final": float(test_acc[-1]),
            "gain": gain, "onset step": None if onset is None else int(steps[onset]),
            "LC peak step": int(steps[m.phases.peak])}
    if gain < min_gain:
        return [report("second descent before delayed generalisation: untested, the held-out "
                       f"accuracy gains < {100 * min_gain:g} points after interpolation "
                       "(no delayed generalisation in this run)",
                       ours, paper["generalisation-untested"].value, id="generalisation-untested")]
    return [claim("the second descent begins before the onset of delayed generalisation (held-out "
                  "accuracy 5 points above its low after interpolation)",
                  onset is not None and m.phases.peak < onset, ours,
                  paper["descent-before-generalisation"].value,
                  id="descent-before-generalisation")]


# --- figures ------------------------------------------------------------------------------------

def _mark(ax, steps, m: Milestones, legend: bool = False) -> None:
    """Vertical lines where the held-out accuracy settles, the LC peaks and robustness sets in."""
    marks = {"held-out acc. settled": (m.settle, "0.4", ":"),
             "LC peak (2nd descent starts)": (m.phases.peak, "tab:green", "--"),
             "robustness onset": (m.onset, "tab:red", "--")}
    for label, (i, color, style) in marks.items():
        if i is not None:
            ax.axvline(steps[i], color=color, ls=style, lw=1.2, label=label if legend else None)


def _log_steps(ax, steps) -> None:
    ax.set_xscale("symlog", linthresh=1)  # symlog: step 0 stays on the axis
    ax.set_xlim(0, steps[-1] * 1.3)
    ax.set_xlabel("optimisation step")


def _lc_band(ax, steps, mean, half_width, color, label) -> None:
    ax.plot(steps, mean, color=color, lw=2, label=label)
    ax.fill_between(steps, mean - half_width, mean + half_width, color=color, alpha=0.25, lw=0)


def figure_robustness_lc(run, mlp_run, adv, lc_mean, lc_ci, m: Milestones, attacked: int):
    """The paper's Fig. 2 (left): accuracies above, LC at `check_radius` below."""
    p, steps = run.params, np.array(mlp_run.eval_steps)
    j = p["lc_radii"].index(p["check_radius"])
    shades = plt.cm.Oranges(np.linspace(0.45, 0.95, len(p["epsilons"])))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 8), sharex=True)
    top.plot(steps, mlp_run.train_acc, color=plotting.SPLIT_COLORS["train"], lw=2, label="train")
    top.plot(steps, mlp_run.test_acc, color=plotting.SPLIT_COLORS["test"], lw=2, label="held-out")
    for e, c in zip(p["epsilons"], shades):
        top.plot(steps, adv[e], color=c, lw=1.5, ls="-.", label=f"PGD $\\epsilon$ = {e:g}")
    top.set(ylabel="accuracy", ylim=(-0.02, 1.02), title="Accuracy")
    _mark(top, steps, m, legend=True)
    for split, color in plotting.SPLIT_COLORS.items():
        _lc_band(bottom, steps, lc_mean[split][:, j], lc_ci[split][:, j], color, SPLIT_NAMES[split])
    bottom.set(ylabel=f"LC (hidden layers), r = {p['check_radius']:g}", title="Local complexity")
    _mark(bottom, steps, m)
    _log_steps(bottom, steps)
    plotting.legend_below(fig, ncol=3)
    plotting.show(
        fig, "fig-01-robustness-lc",
        caption="The adversarial accuracy (dash-dotted) climbs again only late in training, long "
                "after the held-out accuracy has settled and after the training-point LC (green, "
                "bottom) has peaked and begun its second descent. Top: accuracy on the training "
                f"digits, the held-out digits and {attacked} held-out digits under "
                f"PGD-{p['pgd_steps']} at each $\\epsilon$ (darker for larger $\\epsilon$); "
                f"bottom: LC of the hidden layers at $r = {p['check_radius']:g}$ "
                f"($P = {p['lc_directions']}$ directions) around training (green), held-out "
                "(orange) and random (blue) points, with 99% confidence bands. Vertical lines: "
                "the held-out accuracy settles (grey, dotted), the training-point LC peaks "
                "(green, dashed), the robustness onset at "
                f"$\\epsilon = {p['check_epsilon']:g}$ (red, dashed); MNIST MLP "
                f"{p['depth']}×{p['width']} on {p['n_train']} digits, {run.caption()}.",
        alt="Two line plots over a shared logarithmic axis of optimisation steps. The top one "
            "shows training, held-out and adversarial accuracy at several attack sizes, the "
            "bottom one local complexity around training, held-out and random points, with "
            "vertical lines where the held-out accuracy settles, the complexity peaks and "
            "robustness sets in.")


def figure_lc_radii(run, steps, lc_mean, lc_ci, m: Milestones):
    """The LC curves at every radius measured, one panel each."""
    p = run.params
    fig, axes = plotting.panel_grid(len(p["lc_radii"]), row_height=3.2)
    for j, (ax, r) in enumerate(zip(axes, p["lc_radii"])):
        for split, color in plotting.SPLIT_COLORS.items():
            _lc_band(ax, steps, lc_mean[split][:, j], lc_ci[split][:, j], color,
                     f"{SPLIT_NAMES[split]} points")
        _mark(ax, steps, m, legend=True)
        _log_steps(ax, steps)
        ax.set(title=f"r = {r:g}", ylabel="LC (hidden layers)")
    plotting.legend_below(fig, ncol=3)
    plotting.show(
        fig, "fig-01-lc-radii",
        caption="At every radius the LC around training points falls, rises and falls again; the "
                "radius sets the scale of the counts more than the shape of the curves. Mean LC "
                "of the hidden layers around training (green), held-out (orange) and random "
                "(blue) points, one panel per radius $r$, with 99% confidence bands. Vertical "
                "lines: the held-out accuracy settles (grey, dotted), the training-point LC at "
                f"$r = {p['check_radius']:g}$ peaks (green, dashed), the robustness onset (red, "
                f"dashed); {run.caption()}.",
        alt="One line plot per neighbourhood radius, side by side, of local complexity against "
            "optimisation step on a logarithmic axis for training, held-out and random points, "
            "with vertical lines where the held-out accuracy settles, the complexity peaks and "
            "robustness sets in.")


def figure_lc_layers(run, steps, lc_counts: dict, m: Milestones):
    """The mean LC of each layer at `check_radius`, one panel per kind of point; the output
    layer dashed."""
    p = run.params
    j, n_layers = p["lc_radii"].index(p["check_radius"]), lc_counts["train"].shape[-1]
    fig, axes = plotting.panel_grid(3, row_height=3.4, sharey=True)
    layer_colors = plt.cm.viridis(np.linspace(0, 0.85, n_layers))
    for ax, (split, v) in zip(axes, lc_counts.items()):
        per_layer = v[:, j].mean(axis=1)  # (checkpoints, layers)
        for layer in range(n_layers):
            last = layer == n_layers - 1
            ax.plot(steps, per_layer[:, layer], color=layer_colors[layer], lw=2,
                    ls="--" if last else "-",
                    label="output" if last else f"hidden layer {layer + 1}")
        _mark(ax, steps, m, legend=True)
        _log_steps(ax, steps)
        ax.set(title=f"{SPLIT_NAMES[split]} points")
    axes[0].set_ylabel("mean LC of the layer")
    plotting.legend_below(fig, ncol=3)
    plotting.show(
        fig, "fig-01-lc-layers",
        caption="Around training points the output layer's count (dashed) rises above every "
                "hidden layer's after the LC peak, which it does not do around held-out or random "
                f"points. Mean LC per layer at $r = {p['check_radius']:g}$, one panel per kind "
                "of point: hidden layers solid, from dark (first) to light (last), the output "
                "layer dashed. Vertical lines: the held-out accuracy settles (grey, dotted), the "
                "training-point LC peaks (green, dashed), the robustness onset (red, dashed); "
                f"{run.caption()}.",
        alt="Three line plots side by side, for training, held-out and random points, of the "
            "mean local complexity of each layer against optimisation step on a logarithmic "
            "axis: one solid line per hidden layer and a dashed line for the output layer, with "
            "three vertical marker lines.")
