"""Chapter 10, what changes delayed robustness: the verdict on the first paper's claims about
BatchNorm, the number of training digits, randomly labelled digits, the width and a stronger
attack, and the chapter's figures, from the knob groups `experiments.knobs` trains and measures.

Each run is summarised by chapter 01's milestones (`delayed_robustness.milestones`: where the
held-out accuracy settles, the training-point LC's first minimum and peak, the adversarial
accuracy's low after settling and the onset of its rise), so that "delayed robustness" means the
same here as there.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ... import plotting
from ...verdict import claim, report
from ..knobs import Trajectory
from .delayed_robustness import Milestones, _log_steps, milestones


# --- what a run shows ------------------------------------------------------------------------

def summarise(p: dict, t: Trajectory, curve: str = "pgd") -> Milestones:
    """Chapter 01's milestones of a run, its adversarial curve being `curve` ("pgd" | "apgd")."""
    one_radius = {"check_epsilon": p["check_epsilon"], "lc_radii": [p["check_radius"]],
                  "check_radius": p["check_radius"]}
    return milestones(one_radius, t.train_acc, t.test_acc,
                      {p["check_epsilon"]: getattr(t, curve)}, {"train": t.lc_train[:, None]})


def rise(t: Trajectory, m: Milestones, curve: str = "pgd") -> float:
    """The adversarial accuracy's gain from its low after settling to the end of the run."""
    values = getattr(t, curve)
    return float(values[-1] - values[m.low])


def delayed_rise(t: Trajectory, m: Milestones, min_rise: float) -> bool:
    """Chapter 01's delayed robustness: a rise of at least `min_rise` from the low after the
    held-out accuracy settled, whose onset comes at least 10x later than the settling."""
    return (rise(t, m) >= min_rise and m.onset is not None
            and t.steps[m.onset] >= 10 * t.steps[m.settle])


def step_at(t: Trajectory, index: int | None) -> int | None:
    """The step of checkpoint `index` of a run (None stays None: a milestone not reached)."""
    return None if index is None else int(t.steps[index])


def later(a: int | None, b: int | None) -> bool:
    """Whether step `a` comes at or after step `b`, None meaning "not within the budget" (after
    every step, and tied with another None)."""
    if a is None:
        return True
    return b is not None and a >= b


def ordered_later(steps: list[int | None]) -> bool:
    """Whether each step comes at or after the one before, and the last strictly after the
    first (None: after the budget): a delay along the list, not a tie."""
    return (all(later(b, a) for a, b in zip(steps, steps[1:]))
            and steps[0] is not None and later(steps[-1], steps[0]) and steps[-1] != steps[0])


def out_of_order(what: str, labels: list[str], steps: list[int | None]) -> str | None:
    """Why `ordered_later(steps)` fails, in words (None where it holds): the first run that comes
    before the one ahead of it in the list, or a tie between the ends."""
    def at(i: int) -> str:
        return "not within the budget" if steps[i] is None else f"step {steps[i]:,}"

    if steps[0] is None:
        return f"{what}: {labels[0]} {at(0)}, so nothing can come later"
    for i in range(1, len(steps)):
        if not later(steps[i], steps[i - 1]):
            return f"{what}: {labels[i]} ({at(i)}) comes before {labels[i - 1]} ({at(i - 1)})"
    if steps[-1] == steps[0]:
        return f"{what}: {labels[0]} and {labels[-1]} both at {at(0)}, a tie, not a delay"
    return None


def print_runs(runs: dict[str, dict[str, Trajectory]]) -> None:
    """One line per run: its knob group and label, its steps, its final training and held-out
    accuracy, and how long its measurements took when computed."""
    for knob, group in runs.items():
        for label, t in group.items():
            print(f"{knob:>13} | {label:<15} {int(t.steps[-1]):>7,} steps; accuracy: train "
                  f"{t.train_acc[-1]:.3f}, held-out {t.test_acc[-1]:.3f}; measured in "
                  f"{t.seconds:.0f} s")


# --- the verdict ------------------------------------------------------------------------------

def lc_claim(name: str, holds: bool, ours, paper, check_id: str, group: dict[str, Trajectory],
             ascents: dict[str, Milestones] | None = None, why_not: str | None = None):
    """A claim on LC phases, INCONCLUSIVE where a run of `group` never interpolated (training
    accuracy >= 0.99): its phases are then undefined, the first descent being read up to
    interpolation (`lc_phases`). With `ascents` (the runs' milestones), also where a run has no
    ascent, its LC only falling after its first minimum: a claim on the ascent's peak has
    nothing to read there. `why_not`: the diagnosis where the check fails."""
    short = [label for label, t in group.items() if not np.any(np.asarray(t.train_acc) >= 0.99)]
    flat = [label for label, m in (ascents or {}).items()
            if label not in short and m.phases.peak == m.phases.first_min]
    reasons = []
    if short:
        reasons.append(f"{', '.join(short)}: training accuracy never reached 0.99 within the "
                       f"budget ({int(group[short[0]].steps[-1])} steps), so the LC's phases are "
                       "not defined")
    if flat:
        reasons.append(f"{', '.join(flat)}: no ascent, the LC only falls after its first minimum "
                       "(at interpolation), so there is no peak of an ascent to compare")
    return claim(name, holds and not reasons, ours, paper, inconclusive=bool(reasons),
                 diagnosis="; ".join(reasons) or (None if holds else why_not), id=check_id)


def judge(p: dict, paper: dict, runs: dict[str, dict[str, Trajectory]]) -> list:
    """The chapter's checks, on the knob groups of `all_trajectories` (labels as `variants`
    makes them); `paper`: the chapter's paper numbers by check id."""
    marks = {knob: {label: summarise(p, t) for label, t in group.items()}
             for knob, group in runs.items()}
    knob, label = p["apgd_run"].split(": ", 1)
    return (_batchnorm(p, paper, runs["batchnorm"], marks["batchnorm"])
            + _train_size(p, paper, runs["train_size"], marks["train_size"])
            + _random_labels(p, paper, runs["random_labels"], marks["random_labels"])
            + _width(p, paper, runs["width"], marks["width"])
            + _stronger_attack(p, paper, runs[knob][label], marks[knob][label]))


def _batchnorm(p, paper, group, marks) -> list:
    plain, bn = group["plain"], group["BatchNorm"]
    mp, mb = marks["plain"], marks["BatchNorm"]
    rise_plain, rise_bn = rise(plain, mp), rise(bn, mb)
    delayed_bn = delayed_rise(bn, mb, p["min_rise"])
    first_descent = mb.phases.first_descent
    return [
        claim("with BatchNorm there is no delayed robustness (chapter 01's rule: a rise of >= "
              f"{p['min_rise']:.0%} from the low after settling, onset >= 10x the settling step), "
              "or its rise is under half the plain network's",
              not delayed_bn or rise_bn < 0.5 * rise_plain,
              {"BatchNorm": {"rise": rise_bn, "delayed": delayed_bn,
                             "onset step": step_at(bn, mb.onset)},
               "plain": {"rise": rise_plain, "onset step": step_at(plain, mp.onset),
                         "delayed": delayed_rise(plain, mp, p["min_rise"])}},
              paper["bn-no-delayed-robustness"].value,
              diagnosis=f"with BatchNorm the adversarial accuracy still rises by {rise_bn:.3f} "
                        f"from step {step_at(bn, mb.onset):,}, at least half the plain network's "
                        f"{rise_plain:.3f}" if delayed_bn and rise_bn >= 0.5 * rise_plain
                        else None,
              id="bn-no-delayed-robustness"),
        claim("with BatchNorm the LC around training digits is higher at the end of training",
              bn.lc_train[-1] > plain.lc_train[-1],
              {"BatchNorm": float(bn.lc_train[-1]), "plain": float(plain.lc_train[-1])},
              paper["bn-higher-lc"].value,
              diagnosis=None if bn.lc_train[-1] > plain.lc_train[-1] else
              f"BatchNorm's final LC {bn.lc_train[-1]:.3f} is not above the plain network's "
              f"{plain.lc_train[-1]:.3f}", id="bn-higher-lc"),
        lc_claim(f"with BatchNorm there is no first descent (the LC never falls below "
                 f"{1 - p['first_descent_margin']:.0%} of its value at initialisation before it "
                 "interpolates)",
                 first_descent >= 1 - p["first_descent_margin"],
                 {"BatchNorm first minimum / initial": mb.phases.first_descent,
                  "plain first minimum / initial": mp.phases.first_descent},
                 paper["bn-no-first-descent"].value, "bn-no-first-descent", group,
                 why_not=f"with BatchNorm the LC falls to {first_descent:.2f} of its initial value "
                         f"by step {step_at(bn, mb.phases.first_min):,}, before interpolating"),
    ]


def _train_size(p, paper, group, marks) -> list:
    labels = list(group)  # in the order of train_sizes: ascending is the preset's rule
    onsets = [step_at(group[k], marks[k].onset) for k in labels]
    peaks = [step_at(group[k], marks[k].phases.peak) for k in labels]
    return [
        claim("with more training digits the adversarial rise sets in earlier (its onset, "
              "chapter 01's rule, at or before the smaller set's, the largest set's within the "
              "budget and before the smallest's)",
              ordered_later(onsets[::-1]),
              dict(zip(labels, onsets)), paper["size-onset-earlier"].value,
              diagnosis=out_of_order("onset", labels[::-1], onsets[::-1]),
              id="size-onset-earlier"),
        lc_claim("with more training digits the LC's second descent (its peak) begins earlier "
                 "(at or before the smaller set's, and before the smallest set's)",
                 ordered_later(peaks[::-1]), dict(zip(labels, peaks)),
                 paper["size-descent-earlier"].value, "size-descent-earlier", group,
                 why_not=out_of_order("LC peak", labels[::-1], peaks[::-1])),
    ]


def _random_labels(p, paper, group, marks) -> list:
    labels = list(group)  # ascending numbers of random-label digits
    peaks = [step_at(group[k], marks[k].phases.peak) for k in labels]
    return [
        lc_claim("with more randomly labelled digits to memorise, the LC's ascent lasts longer "
                 "(its peak at or after the smaller set's, and later for the largest set than "
                 "for the smallest)",
                 ordered_later(peaks), dict(zip(labels, peaks)),
                 paper["labels-ascent-delayed"].value, "labels-ascent-delayed", group,
                 why_not=out_of_order("LC peak", labels, peaks)),
        report("training accuracy at the end, per set (how much of the random labelling is "
               "memorised)", {k: float(group[k].train_acc[-1]) for k in labels},
               paper["labels-memorised"].value, id="labels-memorised"),
    ]


def _width(p, paper, group, marks) -> list:
    widths = list(p["widths"])
    peak = {w: float(group[f"width {w}"].lc_train[marks[f"width {w}"].phases.peak]) for w in widths}
    upto = [w for w in widths if w <= 1000]
    runs_upto = {f"width {w}": group[f"width {w}"] for w in upto}
    peak_steps = [step_at(group[f"width {w}"], marks[f"width {w}"].phases.peak) for w in widths]
    falls = [f"the peak falls from width {a} ({peak[a]:.2f}) to width {b} ({peak[b]:.2f})"
             for a, b in zip(upto, upto[1:]) if peak[b] <= peak[a]]
    checks = [lc_claim("the peak LC of the ascent rises with the width, from 20 up to 1,000",
                       len(upto) >= 2 and not falls,
                       {f"width {w}": peak[w] for w in upto}, paper["width-peak-rises"].value,
                       "width-peak-rises", runs_upto, {k: marks[k] for k in runs_upto},
                       why_not="; ".join(falls) or "fewer than two widths up to 1,000")]
    checks.append(lc_claim("wider networks begin the second descent earlier (the LC's peak at or "
                           "before the narrower network's, and before the narrowest's)",
                           ordered_later(peak_steps[::-1]),
                           {f"width {w}": s for w, s in zip(widths, peak_steps)},
                           paper["width-migration-earlier"].value, "width-migration-earlier",
                           group, why_not=out_of_order("LC peak", list(group)[::-1],
                                                       peak_steps[::-1])))
    if 2000 in widths and 1000 in widths:
        largest = {f"width {w}": group[f"width {w}"] for w in (1000, 2000)}
        checks.append(lc_claim("... and falls again at width 2,000", peak[2000] < peak[1000],
                               {"width 1000": peak[1000], "width 2000": peak[2000]},
                               paper["width-peak-falls"].value, "width-peak-falls", largest,
                               {k: marks[k] for k in largest},
                               why_not=f"the peak at width 2,000 ({peak[2000]:.2f}) is not below "
                                       f"width 1,000's ({peak[1000]:.2f})"))
    else:
        checks.append(report("the fall of the peak at width 2,000: not tested at this preset "
                             "(widths 1,000 and 2,000 are the paper preset's)",
                             {f"width {w}": peak[w] for w in widths if w > 1000} or None,
                             paper["width-peak-falls"].value, id="width-peak-falls"))
    return checks


def _stronger_attack(p, paper, t: Trajectory, m_pgd: Milestones) -> list:
    """APGD on the run `apgd_run` names ("knob: run label"), beside PGD on the same run."""
    m_apgd = summarise(p, t, "apgd")
    gain = rise(t, m_apgd, "apgd")
    excess = float(np.max(t.apgd - t.pgd))
    worst = int(np.argmax(t.apgd - t.pgd))
    return [
        claim(f"under APGD too the accuracy rises after the held-out accuracy settled "
              f"(by >= {p['min_rise_apgd']:.0%}, {p['apgd_run']})", gain >= p["min_rise_apgd"],
              {"low after settling": float(t.apgd[m_apgd.low]), "final": float(t.apgd[-1]),
               "rise": gain, "PGD rise": rise(t, m_pgd)},
              paper["apgd-rises"].value,
              diagnosis=None if gain >= p["min_rise_apgd"] else
              f"under APGD the accuracy rises by only {gain:.3f} after settling (under PGD by "
              f"{rise(t, m_pgd):.3f})", id="apgd-rises"),
        claim(f"APGD, the stronger attack, leaves at most PGD's accuracy at every checkpoint "
              f"(within {p['attack_slack']:.0%}: a check of the attacks, {p['apgd_run']})",
              excess <= p["attack_slack"],
              {"largest APGD - PGD": excess, "checkpoints": len(t.apgd)},
              paper["apgd-below-pgd"].value,
              diagnosis=None if excess <= p["attack_slack"] else
              f"APGD leaves {excess:.3f} more accuracy than PGD at step {int(t.steps[worst]):,}",
              id="apgd-below-pgd"),
    ]


# --- figures ------------------------------------------------------------------------------------

# Per knob group: what the paper shows for it, the caption's first sentence (what to look at)
# and the legend's title.
KNOB_FIGURES = {
    "batchnorm": ("Fig. 12 (a CNN on CIFAR-10) and §4",
                  "The plain network (grey) against the same network with BatchNorm after each "
                  "hidden layer (orange): does the adversarial accuracy still climb late, does "
                  "the LC still dip first, and where does it end?", "network"),
    "train_size": ("Figs 28, 32 and 33",
                   "The same network on more or fewer training digits (darker: more): where the "
                   "adversarial accuracy sets off, and where the LC peaks.", "training digits"),
    "random_labels": ("Figs 13 and 31",
                      "Every training label random, more or fewer digits to memorise (darker: "
                      "more): how long the LC's ascent lasts.", "random-label digits"),
    "width": ("Fig. 14", "Wider networks (darker: wider): how high the LC's ascent peaks.",
              "width"),
}


def knob_figure(run, knob: str, group: dict[str, Trajectory]) -> tuple:
    """(figure, caption, alt text) for one knob group: the accuracy under PGD at
    `check_epsilon` and the held-out accuracy (top), the training-point LC (bottom, its peak
    marked), a colour per run."""
    p = run.params
    where, what, legend_title = KNOB_FIGURES[knob]
    colours = (["0.45", "tab:orange"] if knob == "batchnorm"
               else plt.cm.viridis(np.linspace(0.85, 0.15, len(group))))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7.5), sharex=True)
    for (label, t), colour in zip(group.items(), colours):
        top.plot(t.steps, t.pgd, color=colour, lw=2, label=label)
        top.plot(t.steps, t.test_acc, color=colour, lw=1, ls=":")
        bottom.plot(t.steps, t.lc_train, color=colour, lw=2)
        peak = summarise(p, t).phases.peak
        bottom.plot(t.steps[peak], t.lc_train[peak], "o", color=colour, ms=7)
    top.set(ylabel="accuracy", ylim=(-0.02, 1.02),
            title=f"Accuracy under PGD-{p['pgd_steps']} at $\\epsilon$ = {p['check_epsilon']:g} "
                  "(solid) and held-out accuracy (dotted)")
    bottom.set(ylabel=f"LC (hidden layers), r = {p['check_radius']:g}",
               title="Local complexity around training digits (dot: its peak)")
    _log_steps(bottom, next(iter(group.values())).steps)
    plotting.legend_below(fig, ncol=4, title=legend_title)
    steps = int(next(iter(group.values())).steps[-1])
    caption = (f"{what} Top: accuracy under PGD-{p['pgd_steps']} at "
               f"$\\epsilon = {p['check_epsilon']:g}$ on {p['pgd_points']} held-out digits "
               "(solid) and on all held-out digits (dotted); bottom: LC of the hidden layers at "
               f"$r = {p['check_radius']:g}$ ($P = {p['lc_directions']}$) around "
               f"{p['lc_points']} training digits (all of them, where a run has fewer), a dot at "
               f"its peak. The paper's {where}. "
               f"MNIST MLP {p['depth']}×{p['width']} on {p['n_train']} digits unless the knob "
               f"changes it, {steps:,} steps, {run.caption()}.")
    alt = (f"Two line plots over a logarithmic axis of optimisation steps, one line per "
           f"{legend_title} setting: adversarial and held-out accuracy above, the local "
           "complexity around training digits below with a dot at each curve's peak.")
    return fig, caption, alt


def figure_batchnorm(run, group: dict[str, Trajectory]) -> None:
    fig, caption, alt = knob_figure(run, "batchnorm", group)
    plotting.show(fig, "fig-10-batchnorm", caption=caption, alt=alt)


def figure_train_size(run, group: dict[str, Trajectory]) -> None:
    fig, caption, alt = knob_figure(run, "train_size", group)
    plotting.show(fig, "fig-10-train-size", caption=caption, alt=alt)


def figure_random_labels(run, group: dict[str, Trajectory]) -> None:
    fig, caption, alt = knob_figure(run, "random_labels", group)
    plotting.show(fig, "fig-10-random-labels", caption=caption, alt=alt)


def figure_width(run, group: dict[str, Trajectory]) -> None:
    fig, caption, alt = knob_figure(run, "width", group)
    plotting.show(fig, "fig-10-width", caption=caption, alt=alt)


def figure_attacks(run, label: str, t: Trajectory) -> None:
    """APGD against PGD on one run, at `check_epsilon` (the paper's Fig. 18)."""
    p = run.params
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(t.steps, t.test_acc, color="0.45", lw=1, ls=":", label="held-out (clean)")
    ax.plot(t.steps, t.pgd, color="tab:orange", lw=2, label=f"PGD-{p['pgd_steps']}")
    ax.plot(t.steps, t.apgd, color="tab:red", lw=2, ls="--", label=f"APGD-CE, {p['apgd_steps']} "
                                                                   "iterations")
    ax.set(ylabel="accuracy", ylim=(-0.02, 1.02))
    _log_steps(ax, t.steps)
    plotting.legend_below(fig, ncol=3)
    plotting.show(
        fig, "fig-10-attacks",
        caption="A stronger attack on the same checkpoints: APGD's accuracy (red, dashed) should "
                "never exceed PGD's (orange), and the question is whether it too climbs late. "
                f"Both at $\\epsilon = {p['check_epsilon']:g}$ on the same {p['pgd_points']} "
                f"held-out digits, run {label}. The paper's Fig. 18 (AutoAttack). "
                f"{run.caption()}.",
        alt="A line plot over a logarithmic axis of optimisation steps: held-out accuracy, and "
            "the accuracy under PGD and under APGD at one attack size.")
