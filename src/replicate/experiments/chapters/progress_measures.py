"""Chapter 09, progress measures side by side: when each run memorised and generalised, when each
measure made half its move (its onset) and how long before generalisation that was, the local
complexity's second descent on MNIST, the spectral signature of the modular runs, the verdict on
them (`judge`) and the chapter's figures.

Every measure is judged by one rule (`progress.onsets`): its onset is the step at which it has made
`onset_fraction` of its move from t2 (memorised) to the end of the run, and its lead share is
(t4 - onset) / (t4 - t2): above 0 it moved before the network generalised."""
from __future__ import annotations

import itertools

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from replicate import plotting
from replicate.experiments import progress as runs_of
from replicate.measures import predicting
from replicate.measures.local_complexity import lc_phases
from replicate.verdict import claim, report

MEASURE_COLORS = dict(zip(runs_of.MEASURES, plt.cm.tab10(np.arange(len(runs_of.MEASURES)))))
# The share of its peak LC must lose for a second descent: chapter 01's bar, fixed before the runs.
LC_FALL = 0.30


def modular_name(p: dict, r: float) -> str:
    return f"mod {p['p']}, r = {r:g}"


def mnist_name(p: dict) -> str:
    return f"MNIST, init x{p['mnist_init_scale']:g}"


def crossings(p: dict, result) -> tuple[float | None, float | None]:
    """(t2, t4) of a modular run: the first steps at which train and validation accuracy reach
    the accuracy threshold (None if never)."""
    steps = np.arange(1, len(result.loss) + 1)
    return (runs_of.crossing_step(steps, result.train_acc, p["accuracy_threshold"]),
            runs_of.crossing_step(steps, result.val_acc, p["accuracy_threshold"]))


def modular_events(p: dict, modular: dict, controls: dict) -> pd.DataFrame:
    """One row per modular run, those with weight decay and then their controls: steps trained,
    t2, t4, final validation accuracy and the spectral signature of the early loss."""
    rows = []
    for kind, group in (("weight decay", modular), ("control", controls)):
        for r, result in group.items():
            t2, t4 = crossings(p, result)
            rows.append({"run": kind, "r": r, "weight decay": result.weight_decay,
                         "steps trained": len(result.loss), "t2": t2, "t4": t4,
                         "final val acc": float(result.val_acc[-1]),
                         "signature": predicting.spectral_signature(
                             result.loss, p["signature_start"], p["signature_steps"],
                             p["signature_cutoff"], p["signature_degree"])})
    return pd.DataFrame(rows)


def mnist_crossings(p: dict, mnist) -> tuple[float | None, float | None]:
    """(t2, t4) of the MNIST run: train accuracy at the accuracy threshold, held-out accuracy at
    `mnist_generalised`, read between checkpoints."""
    return (runs_of.crossing_step(mnist.steps, mnist.train_acc, p["accuracy_threshold"]),
            runs_of.crossing_step(mnist.steps, mnist.test_acc, p["mnist_generalised"]))


def mnist_summary(p: dict, mnist, t2, t4) -> str:
    return (f"{len(mnist.steps)} checkpoints to step {int(mnist.steps[-1])}: train accuracy "
            f"{p['accuracy_threshold']:.0%} at t2 = {t2 and round(t2)}, held-out accuracy "
            f"{p['mnist_generalised']:.0%} at t4 = {t4 and round(t4)}; final held-out "
            f"accuracy {mnist.test_acc[-1]:.3f}")


def measured_runs(p: dict, modular: dict, mnist, mnist_t2, mnist_t4) -> dict:
    """Run name -> (checkpoint steps, measures, t2, t4), the modular runs with weight decay first
    and then MNIST."""
    found = {modular_name(p, r): (result.steps, result.measures, *crossings(p, result))
             for r, result in modular.items()}
    found[mnist_name(p)] = (mnist.steps, mnist.measures, mnist_t2, mnist_t4)
    return found


def onset_table(p: dict, settings: dict) -> tuple[pd.DataFrame, list[str]]:
    """Every measure's onset, lead and lead share in every run that both memorised and
    generalised, and the names of the runs that did not (they have no t2 -> t4 to share)."""
    rows, not_generalised = [], []
    for name, (steps, measures, t2, t4) in settings.items():
        if t2 is None or t4 is None or not measures:
            not_generalised.append(name)
            continue
        for row in runs_of.onsets(steps, measures, t2, t4, p):
            rows.append({"run": name, "t2": t2, "t4": t4, **row})
    leads = pd.DataFrame(rows, columns=["run", "t2", "t4", "measure", "onset", "lead",
                                        "lead share", "at t2", "at end"])
    return leads, not_generalised


def lead_shares_at_a_glance(leads: pd.DataFrame, settings: dict) -> pd.DataFrame:
    """The lead shares, one row per measure, one column per run."""
    return (leads.pivot(index="measure", columns="run", values="lead share")
            .reindex(index=[m for m in runs_of.MEASURES if m in set(leads.measure)],
                     columns=[name for name in settings if name in set(leads.run)]).round(2))


def rank_measures(leads: pd.DataFrame) -> pd.DataFrame:
    """The measures by their median lead share over the runs, largest first."""
    return (leads.groupby("measure")
            .agg(**{"median lead share": ("lead share", "median"),
                    "median lead (steps)": ("lead", "median"),
                    "runs where it moved": ("onset", "count"),
                    "runs": ("measure", "size")})
            .sort_values("median lead share", ascending=False))


def lc_second_descent(mnist, mnist_t2) -> dict:
    """Where MNIST's LC peaks (the start of its second descent: `lc_phases`, its first descent
    read up to t2) and the share of the peak it has lost by the end of the run."""
    lc_curve = mnist.measures["local complexity"]
    i_t2 = (int(np.searchsorted(mnist.steps, mnist_t2)) if mnist_t2 is not None
            else len(lc_curve) - 1)
    phases = lc_phases(lc_curve, i_t2)
    return {"peak step": float(mnist.steps[phases.peak]), "fall": phases.second_descent}


def lc_summary(lc: dict, mnist_t4) -> str:
    return (f"LC peak (start of the second descent) at step {lc['peak step']:.0f}; it falls "
            f"{lc['fall']:.0%} from there to the end; t4 = {mnist_t4 and round(mnist_t4)}")


def signature_separation(events: pd.DataFrame) -> dict:
    """The spectral signature's AUROC between the modular runs that generalised and those that
    did not (NaN unless there are both), and how many of each."""
    grokked = events.t4.notna().to_numpy()
    both = bool(grokked.any() and (~grokked).any())
    return {"both": both, "grokked": int(grokked.sum()), "not grokked": int((~grokked).sum()),
            "auroc": (predicting.auroc(events.signature.to_numpy(), grokked) if both
                      else float("nan"))}


# The verdict ------------------------------------------------------------------------------------
# A check that did not pass says why, from the run's numbers; a run that never generalised within
# its steps cannot test a claim about generalisation: INCONCLUSIVE.


def _lc_check(p: dict, paper: dict, lc: dict, mnist_t4):
    lead = None if mnist_t4 is None else mnist_t4 - lc["peak step"]
    passed = lead is not None and lead > 0 and lc["fall"] >= LC_FALL
    return claim(f"MNIST: LC around training points peaks before t4 and then falls by >= "
                 f"{LC_FALL:.0%} (its second descent begins before generalisation)", passed,
                 {"LC peak step": lc["peak step"], "t4": mnist_t4, "lead": lead,
                  "fall from peak": lc["fall"]},
                 paper["lc-second-descent"].value, inconclusive=mnist_t4 is None,
                 diagnosis=None if passed else _mnist_why(p) if mnist_t4 is None else
                 f"LC peaked at step {lc['peak step']:,.0f}, {abs(lead):,.0f} steps "
                 f"{'after' if lead <= 0 else 'before'} t4 = {mnist_t4:,.0f}, and then fell "
                 f"by {lc['fall']:.0%}", id="lc-second-descent-mnist")


def _mnist_why(p: dict) -> str:
    return (f"the MNIST run did not reach {p['mnist_generalised']:g} held-out accuracy within "
            f"{p['mnist_steps']:,} steps")


def _alignment_shares(leads: pd.DataFrame, runs: list[str]) -> np.ndarray:
    sub = leads[(leads.measure == "centroid alignment") & leads.run.isin(runs)]
    return sub["lead share"].to_numpy(dtype=float)


def _modular_alignment_check(paper: dict, leads: pd.DataFrame, names: list[str]):
    shares = _alignment_shares(leads, names)
    median = float(np.median(shares)) if len(shares) and not np.isnan(shares).all() else None
    passed = median is not None and median > 0
    return claim("modular addition: the centroid alignment moves, with its onset before t4, "
                 "in the median run (median lead share > 0)", passed,
                 {"lead share per run": [None if np.isnan(v) else float(v) for v in shares],
                  "median": median, "runs that generalised": len(names)},
                 paper["centroid-alignment"].value, inconclusive=not names,
                 diagnosis=None if passed else
                 "no modular run both memorised and generalised" if not names else
                 "the alignment reached no onset in any run" if median is None
                 else f"the median run's alignment reached its onset {abs(median):.2f} x "
                      f"(t4 - t2) after t4 (lead shares "
                      + ", ".join("none" if np.isnan(v) else f"{v:+.2f}" for v in shares) + ")",
                 id="alignment-onset-modular")


def _mnist_alignment_check(p: dict, paper: dict, leads: pd.DataFrame, mnist_t4):
    shares = _alignment_shares(leads, [mnist_name(p)])
    share = float(shares[0]) if len(shares) and not np.isnan(shares[0]) else None
    passed = share is not None and share > 0
    return claim("MNIST: the centroid alignment moves, with its onset before t4 (lead > 0)",
                 passed, {"lead share": share}, paper["centroid-alignment"].value,
                 inconclusive=mnist_t4 is None,
                 diagnosis=None if passed else _mnist_why(p) if mnist_t4 is None else
                 "the alignment reached no onset" if share is None else
                 f"the alignment reached its onset {abs(share):.2f} x (t4 - t2) "
                 f"{'after' if share <= 0 else 'before'} t4 = {mnist_t4:,.0f}",
                 id="alignment-onset-mnist")


def _signature_checks(p: dict, paper: dict, events: pd.DataFrame) -> list:
    sep = signature_separation(events)
    grokked, not_grokked = sep["grokked"], sep["not grokked"]
    passed = bool(sep["both"] and sep["auroc"] >= p["auroc_threshold"])
    separates = claim(f"the spectral signature separates the runs that grok from those that do "
                      f"not (AUROC >= {p['auroc_threshold']:g})", passed,
                      {"AUROC": sep["auroc"] if sep["both"] else "needs runs of both kinds",
                       "grokked": grokked, "not grokked": not_grokked},
                      paper["signature-auroc"].value, inconclusive=not sep["both"],
                      diagnosis=None if passed else
                      f"needs runs that grok and runs that do not; {grokked} grokked, "
                      f"{not_grokked} did not" if not sep["both"] else
                      f"AUROC {sep['auroc']:.2f} over {grokked} runs that grokked and "
                      f"{not_grokked} that did not", id="signature-auroc")
    pairs = {}
    for r in p["train_fractions"]:
        pair = events[events.r == r].set_index("run").signature
        pairs[f"r = {r:g}"] = ("weight decay" if pair["weight decay"] > pair["control"]
                               else "control")
    larger = report("within each training fraction, the run with the larger signature", pairs,
                    paper["larger-signature"].value, id="larger-signature-per-fraction")
    return [separates, larger]


def _ranking_reports(leads: pd.DataFrame) -> list:
    ranking = rank_measures(leads)
    # In a fixed order, so that what validate compares does not hang on a tie (the ranked table is
    # shown in the chapter, outside the compared cell).
    medians = report("median lead share of each measure over the runs, and in how many runs it "
                     "moved (ranked in the table above)",
                     {m: {"median lead share": float(ranking.loc[m, "median lead share"]),
                          "moved in": f"{int(ranking.loc[m, 'runs where it moved'])}"
                                      f"/{int(ranking.loc[m, 'runs'])} runs"}
                      for m in runs_of.MEASURES if m in ranking.index},
                     "not compared in any of the papers", id="median-lead-shares")
    spread = {}
    for name, group in leads.groupby("run"):
        shares = group["lead share"].dropna()
        if len(shares) >= 2:
            spread[name] = float(np.subtract(*np.percentile(shares, [75, 25])))
    agree = report("do the onsets agree? interquartile range of the lead shares across "
                   "measures, per run (0: all at once; 1: spread over t2 -> t4)",
                   spread, "not stated", id="onset-spread")
    return [medians, agree]


def judge(p: dict, paper: dict, *, lc: dict, mnist_t4, t2_t4: dict,
          not_generalised: list, leads: pd.DataFrame, events: pd.DataFrame) -> list:
    """The chapter's checks: LC's second descent on MNIST, the centroid alignment's onset in the
    modular runs and on MNIST, the spectral signature's separation (claims), then which run of
    each pair has the larger signature, the measures' median lead shares, how far the onsets
    agree and t2 / t4 per run (reports).

    `lc` from `lc_second_descent`; `mnist_t4` None when MNIST never generalised; `t2_t4`
    maps each run's name to (t2, t4), modular runs first; `not_generalised` names the runs
    without both; `leads` from `onset_table`; `events` from `modular_events`; `paper` is the
    chapter's `paper:` block."""
    modular = [n for n in t2_t4 if n.startswith("mod") and n not in not_generalised]
    return [_lc_check(p, paper, lc, mnist_t4),
            _modular_alignment_check(paper, leads, modular),
            _mnist_alignment_check(p, paper, leads, mnist_t4),
            *_signature_checks(p, paper, events),
            *_ranking_reports(leads),
            report("t2 and t4 per run (steps)",
                   {name: [None if t2 is None else round(t2), None if t4 is None else round(t4)]
                    for name, (t2, t4) in t2_t4.items()}, "not stated", id="crossing-steps")]


# Figures ----------------------------------------------------------------------------------------


def figure_progress(p: dict, settings: dict, leads: pd.DataFrame, not_generalised: list,
                    run_caption: str) -> None:
    """Each measure's progress from t2 (0) to the end of the run (1), one panel per run that
    memorised and generalised."""
    shown = [name for name in settings if name not in not_generalised]
    fig, axes = plotting.panel_grid(max(len(shown), 1), ncols=2, row_height=3.4)
    for ax, name in zip(axes, shown):
        steps, measures, t2, t4 = settings[name]
        for measure, values in measures.items():
            row = leads[(leads.run == name) & (leads.measure == measure)].iloc[0]
            if not np.isfinite(row["at end"] - row["at t2"]) or row["at end"] == row["at t2"]:
                continue
            progress_of = (values - row["at t2"]) / (row["at end"] - row["at t2"])
            moved = row["onset"] == row["onset"] and row["onset"] is not None  # not NaN or None
            ax.plot(steps[steps > 0], progress_of[steps > 0], color=MEASURE_COLORS[measure],
                    lw=1.6, ls="-" if moved else ":", label=measure)
        ax.axhline(0.5, color="0.5", ls="--", lw=0.8)
        ax.axvline(t2, color="0.3", ls=":", lw=1.2, label="t2 (memorised)")
        ax.axvline(t4, color="0.1", ls="-.", lw=1.2, label="t4 (generalised)")
        ax.set(xscale="log", ylim=(-0.6, 1.6), title=name, xlabel="step",
               ylabel="progress (0 at t2, 1 at the end)")
    plotting.legend_below(fig, ncol=3)
    plotting.show(
        fig, "fig-09-progress",
        caption=rf"The measures make half their move (the dashed line) at very different steps: "
                rf"the Hessian's $\lambda_{{\max}}$ soon after memorisation, most others between "
                rf"memorisation and generalisation, and the centroid alignment in some runs only "
                rf"after generalisation. Each measure is drawn as its progress, 0 at its value at "
                rf"$t_2$ and 1 at its value at the end of the run, cut to the range −0.6 to 1.6; "
                rf"a dotted measure moved less than {p['min_relative_move']:.0%} of its size (no "
                rf"onset). The vertical lines mark $t_2$ (memorised, dotted) and $t_4$ "
                rf"(generalised, dash-dotted), and steps are on a log axis; {run_caption}.",
        alt="One panel per run that memorised and generalised (modular addition at each training "
            "fraction, and MNIST). Each plots the progress of the seven measures against the step "
            "on a log axis, with vertical lines at memorisation and generalisation and a dashed "
            "horizontal line at one half.")


def figure_lead_shares(settings: dict, leads: pd.DataFrame, run_caption: str) -> None:
    """Every measure's lead share in every run, a black bar at its median."""
    fig, ax = plt.subplots(figsize=(8, 3.8))
    order = list(runs_of.MEASURES)
    markers = dict(zip(settings, itertools.cycle("osD^v<>ph")))  # paper: five fractions + MNIST
    for i, measure in enumerate(order):
        sub = leads[(leads.measure == measure) & leads["lead share"].notna()]
        for j, (_, row) in enumerate(sub.iterrows()):
            ax.plot(i + 0.08 * (j - len(sub) / 2), row["lead share"], markers[row.run],
                    color=MEASURE_COLORS[measure], alpha=0.8, label=row.run)
        if len(sub):
            ax.plot([i - 0.3, i + 0.3], [sub["lead share"].median()] * 2, color="k", lw=2)
    ax.axhline(0, color="0.3", lw=1)
    ax.set_xticks(range(len(order)), [m.replace(" ", "\n", 1) for m in order], fontsize="small")
    ax.set(ylabel="lead / (t4 - t2)")
    # One grey marker per run in the legend: the colours belong to the measures.
    handles = {}
    for h, label in zip(*ax.get_legend_handles_labels()):
        handles.setdefault(label, plt.Line2D([], [], marker=h.get_marker(), ls="", color="0.3"))
    if handles:
        fig.legend(handles.values(), handles.keys(), loc="upper center", bbox_to_anchor=(0.5, 0),
                   ncol=2)
    plotting.show(
        fig, "fig-09-lead-shares",
        caption=rf"The Hessian's $\lambda_{{\max}}$ has the largest median lead and the centroid "
                rf"alignment the smallest, its runs scattered from well before generalisation to "
                rf"well after it. Each dot is one run (colour: the measure, marker: the run) at "
                rf"the measure's lead $t_4 - \text{{onset}}$ as a share of $t_4 - t_2$: above 0 "
                rf"the measure made half its move before the network generalised, at 1 it did so "
                rf"at memorisation. Black bars: the median over runs; a measure without an onset "
                rf"in a run has no dot for it; {run_caption}.",
        alt="A strip plot of the lead share, the lead divided by t4 minus t2, for each of the "
            "seven measures along the horizontal axis, one marker shape per run, with a black bar "
            "at each measure's median and a horizontal line at zero.")


def figure_lc_mnist(p: dict, mnist, mnist_t4, lc: dict, run_caption: str) -> None:
    """MNIST's accuracies beside its local complexity, the LC peak and t4 marked."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3.4))
    for curve, split, label in ((mnist.train_acc, "train", "train"),
                                (mnist.test_acc, "test", "held-out")):
        left.plot(mnist.steps[1:], curve[1:], color=plotting.SPLIT_COLORS[split], label=label)
    left.set(xscale="log", xlabel="step", ylabel="accuracy", title=mnist_name(p))
    lc_color = MEASURE_COLORS["local complexity"]
    right.plot(mnist.steps[1:], mnist.measures["local complexity"][1:], color=lc_color,
               label="LC, training points")
    right.axvline(lc["peak step"], color=lc_color, ls="--", lw=1.2, label="LC peak")
    right.set(xscale="log", xlabel="step", ylabel="LC (hidden layers)", title="Local complexity")
    for ax in (left, right):
        if mnist_t4 is not None:
            ax.axvline(mnist_t4, color="0.1", ls="-.", lw=1.2, label="t4 (generalised)")
    plotting.legend_below(fig, ncol=3)
    plotting.show(
        fig, "fig-09-lc-mnist",
        caption=f"On MNIST the local complexity keeps rising through memorisation and "
                f"generalisation and peaks only after $t_4$, so its second descent begins after "
                f"the network has generalised. Left: train and held-out accuracy; right: LC "
                f"around training points, its peak dashed; in both the dash-dotted line is $t_4$, "
                f"where held-out accuracy reaches {p['mnist_generalised']:.0%}, and steps are on "
                f"a log axis. LC with $P = {p['lc_directions']}$ directions at radius "
                f"{p['lc_radius_mnist']:g} around {p['lc_points']} training digits; "
                f"{run_caption}.",
        alt="Two line plots of the MNIST run against the step on a log axis. Left: train and "
            "held-out accuracy. Right: the local complexity around training points, with "
            "vertical lines at its peak and at generalisation.")
