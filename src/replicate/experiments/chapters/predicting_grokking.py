"""Chapter 08, predicting grokking: the runs' outcomes and signatures as a table, the signature as
a predictor, the stopping rule, the learning-rate threshold per weight decay, the verdict on them
(`judge`) and the chapter's figures.

The order follows the notebook: `describe_runs` labels every run, `signature_separation` scores the
signature, `fit_stopping_rule` fits t4(r) and applies the rule, `lr_thresholds` reads the grid,
and `judge` turns those four into the checks."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from replicate import plotting
from replicate.measures import intrinsic_dimension as idim
from replicate.measures import predicting as pr
from replicate.verdict import claim, report

OUTCOMES = ("grokked", "not grokked", "undecided")
FIT_NEEDS = 4  # points the law t4(r) = a r^-gamma + b needs to be fitted (three free numbers)


def budgets(p: dict) -> dict[float, int]:
    """The step budget of each training fraction."""
    return dict(zip(p["train_fractions"], p["steps"]))


def window_end(p: dict) -> int:
    """The last step of the signature's window."""
    return p["signature_start"] + p["signature_steps"]


def describe_run(p: dict, point: tuple, result) -> dict:
    """One row of the runs' table: the run's point (r, weight decay, lr), its budget, whether it
    belongs to the fit set, its outcome, t4 and spectral signature. A diverged run (a dict with
    the error) has nothing to measure and counts as not grokked."""
    r, wd, lr = point
    row = {"r": r, "weight decay": wd, "lr": lr, "budget": budgets(p)[r],
           "fit set": (wd, lr) == (p["fit_weight_decay"], p["fit_lr"])}
    if isinstance(result, dict):
        return {**row, "outcome": "not grokked", "t4": None, "steps run": None,
                "signature": np.nan, "diverged": True}
    outcome, t4 = pr.label_run(result.val_acc, p["accuracy_threshold"], p["undecided_rise"])
    # A run stops early only once it has generalised: anything else is a bug in the training loop.
    if len(result.val_acc) < budgets(p)[r] and outcome != "grokked":
        raise RuntimeError(f"run {point} stopped early without generalising")
    signature = pr.spectral_signature(result.loss, p["signature_start"], p["signature_steps"],
                                      p["signature_cutoff"], p["signature_degree"])
    return {**row, "outcome": outcome, "t4": t4, "steps run": len(result.loss),
            "signature": signature, "diverged": False}


def describe_runs(p: dict, runs: dict) -> pd.DataFrame:
    return pd.DataFrame([describe_run(p, point, result) for point, result in runs.items()])


def outcome_counts(table: pd.DataFrame) -> dict[str, int]:
    """How many runs grokked, did not, and are undecided, in that order."""
    counts = table.outcome.value_counts().reindex(list(OUTCOMES), fill_value=0)
    return {k: int(v) for k, v in counts.items()}


def labelled(table: pd.DataFrame) -> pd.DataFrame:
    """The runs with a clear outcome and a signature: undecided and diverged runs cannot score
    the predictor."""
    return table[table.outcome.isin(["grokked", "not grokked"]) & table.signature.notna()]


def scores_and_labels(table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(signature, grokked?) of each labelled run."""
    runs = labelled(table)
    return runs.signature.to_numpy(), (runs.outcome == "grokked").to_numpy()


def signature_separation(p: dict, table: pd.DataFrame) -> dict:
    """The signature as a predictor of grokking: its AUROC and 95% bootstrap interval over the
    labelled runs (NaN unless both outcomes occur), how many runs of each kind, and how many of
    the grokked ones generalised only after the signature's window had ended (the ones a
    prediction is worth something for)."""
    s, y = scores_and_labels(table)
    both = bool(y.any() and (~y).any())
    runs = labelled(table)
    after = runs[(runs.outcome == "grokked") & (runs.t4 > window_end(p))]
    return {"both": both, "auroc": pr.auroc(s, y) if both else np.nan,
            "interval": (pr.bootstrap_auroc(s, y, n_boot=p["n_boot"], seed=p["seed"]) if both
                         else (np.nan, np.nan)),
            "grokked": int(y.sum()), "not grokked": int((~y).sum()), "after window": len(after)}


def separation_summary(sep: dict) -> str:
    interval = sep["interval"]
    return (f"AUROC {sep['auroc']:.3f} (95% bootstrap interval {interval[0]:.3f}-"
            f"{interval[1]:.3f}) over {sep['grokked']} grokked and {sep['not grokked']} not "
            f"grokked runs; {sep['after window']} of the {sep['grokked']} grokked runs "
            f"generalised after the window ended")


def fit_stopping_rule(p: dict, table: pd.DataFrame) -> dict:
    """Fit t4(r) on the fit-set runs that grokked (r in percent) and apply the stopping rule
    t4(r) + epsilon to every other run. Returns the law and the rule's account (both None when
    fewer than FIT_NEEDS fit-set runs grokked), how many fit points there were and how many runs
    the rule judged, and the rule's table beside each run's point and outcome."""
    fit_points = table[table["fit set"]].dropna(subset=["t4"])
    others = table[~table["fit set"]]
    fitted = {"fitted": len(fit_points), "others": len(others), "law": None, "rule": None,
              "table": pd.DataFrame()}
    if len(fit_points) < FIT_NEEDS:
        return fitted
    law = idim.fit_power_law(100 * fit_points.r.to_numpy(), fit_points.t4.to_numpy(dtype=float))
    rule = pr.stopping_rule([{"r": 100 * row.r, "t4": None if pd.isna(row.t4) else int(row.t4),
                              "steps": int(row.budget)} for _, row in others.iterrows()],
                            law, epsilon=p["epsilon"], horizon=p["error_horizon"])
    rule_table = pd.DataFrame(rule["runs"]).assign(
        wd=others["weight decay"].to_numpy(), lr=others.lr.to_numpy(),
        outcome=others.outcome.to_numpy())
    shown = rule_table[["r", "wd", "lr", "outcome", "t4", "budget", "stopped", "error", "saved"]]
    return {**fitted, "law": law, "rule": rule, "table": shown.rename(columns={"r": "r (%)"})}


def stopping_summary(stopping: dict) -> str:
    """The fitted law and what the rule did, in two lines (or why there is no fit)."""
    law, rule = stopping["law"], stopping["rule"]
    if law is None:
        return (f"only {stopping['fitted']} of the runs known to grok generalised: no fit "
                f"(it needs {FIT_NEEDS})")
    return (f"t4(r) = {law.a:.3g} r^-{law.gamma:.3g} {'-' if law.b < 0 else '+'} {abs(law.b):.4g} "
            f"(r in %), R2 = {law.r2:.4f}, from {stopping['fitted']} fractions\n"
            f"stopped {rule['stopped']} of {stopping['others']} runs; errors {rule['errors']}, "
            f"unknown {rule['unknown']}; steps saved {rule['steps_saved']} of "
            f"{rule['steps_without_rule']}")


def grid_curves(p: dict, table: pd.DataFrame):
    """Per (r, weight decay) of the grid, in order: the learning rates (increasing) and t4 at
    each (None where the run did not grok within its budget)."""
    grid = table[table.r.isin(p["grid_fractions"])]
    for (r, wd), sub in grid.groupby(["r", "weight decay"]):
        sub = sub.sort_values("lr")
        t4s = [None if pd.isna(v) or o != "grokked" else int(v)
               for v, o in zip(sub.t4, sub.outcome)]
        yield r, wd, list(sub.lr), t4s


def lr_thresholds(p: dict, table: pd.DataFrame) -> dict[str, dict]:
    """Per weight decay (and r, when the grid has several): does t4 fall as the learning rate
    rises, where is it smallest (best_lr), where does it get worse again (threshold), and t4 at
    each learning rate (`predicting.lr_threshold`)."""
    thresholds = {}
    for r, wd, lrs, t4s in grid_curves(p, table):
        label = f"wd={wd:g}" + (f", r={r:g}" if len(p["grid_fractions"]) > 1 else "")
        thresholds[label] = {**pr.lr_threshold(lrs, t4s),
                             "t4": dict(zip([f"{v:g}" for v in lrs], t4s))}
    return thresholds


def _epsilon_words(paper: dict) -> str:
    return f"stopping at t4(r) + {plotting.thousands(paper['stopping-rule'].value)}"


def _signature_check(p: dict, paper: dict, counts: dict, sep: dict):
    name = (f"early-loss signature separates grokking from non-grokking runs with "
            f"AUROC >= {p['auroc_threshold']:g}, its 95% interval above chance (0.5)")
    if not sep["both"]:
        return claim(name, False, f"no AUROC: {counts['grokked']} grokked and "
                     f"{counts['not grokked']} not grokked runs (both kinds needed)",
                     "no number given", inconclusive=True,
                     diagnosis="the runs are all of one kind", id="signature-auroc")
    # A predictor counts only when chance (AUROC 0.5) lies outside its 95% interval.
    above_chance = bool(sep["interval"][0] > 0.5)
    grokked, not_grokked = sep["grokked"], sep["not grokked"]
    return claim(name, sep["auroc"] >= p["auroc_threshold"] and above_chance,
                 {"AUROC": sep["auroc"], "95% bootstrap interval": list(sep["interval"]),
                  "grokked": grokked, "not grokked": not_grokked,
                  "grokked after the window": f"{sep['after window']}/{grokked}"},
                 f"{paper['signature-auroc'].value} (no number given)",
                 diagnosis=None if above_chance else
                 f"the interval reaches {sep['interval'][0]:.2f}, below chance: {grokked} grokked "
                 f"and {not_grokked} not grokked runs are too few to tell",
                 id="signature-auroc")


def _stopping_check(p: dict, paper: dict, stopping: dict):
    name = f"the t4(r) + {p['epsilon']:g} stopping rule saves steps (its error rate stated)"
    rule, law, fitted = stopping["rule"], stopping["law"], stopping["fitted"]
    if rule is None:
        return claim(name, False, f"only {fitted} runs known to grok generalised; the fit needs "
                     f"{FIT_NEEDS}", _epsilon_words(paper), inconclusive=True,
                     diagnosis=f"only {fitted} runs of the fit set grokked within their budgets; "
                               f"the law t4(r) needs {FIT_NEEDS} to be fitted", id="stopping-rule")
    judged = rule["stopped"] - rule["unknown"]
    error_rate = f"{rule['errors']}/{judged}" + (f" = {rule['error_rate']:.2f}" if judged else "")
    return claim(name, rule["steps_saved"] > 0,
                 {"stopped": f"{rule['stopped']}/{stopping['others']}",
                  "steps saved": f"{rule['steps_saved']} of {rule['steps_without_rule']}",
                  f"error rate (grokked within {p['error_horizon']:g}x the budget)": error_rate,
                  "errors unknown (budget too short to tell)": rule["unknown"],
                  "fit": {"a": law.a, "gamma": law.gamma, "b": law.b, "R2": law.r2}},
                 _epsilon_words(paper) + "; may stop runs that would grok later",
                 id="stopping-rule")


def _shape(v: dict) -> str:
    """t4 against the learning rate of one weight decay, in words."""
    if v["falls"] and v["worse_beyond"]:
        return f"falls to lr {v['best_lr']:g}, worse from lr {v['threshold']:g}"
    if v["falls"]:
        return f"falls up to the largest lr {v['best_lr']:g}"
    return "never falls" if v["best_lr"] is not None else "never groks"


def _threshold_checks(p: dict, paper: dict, thresholds: dict) -> list:
    said = paper["lr-threshold"].value
    found = {k: v["threshold"] for k, v in thresholds.items() if v["falls"] and v["worse_beyond"]}
    shapes = {k: _shape(v) for k, v in thresholds.items()}
    exists = claim("for >= 2 weight decays t4 falls as the lr rises, up to a threshold beyond "
                   "which the run groks later or not at all", len(found) >= 2, shapes, said,
                   diagnosis=None if len(found) >= 2 else
                   f"{len(found)} weight decay(s) show the fall and the threshold; "
                   "t4 against the lr: " + "; ".join(f"{k} {v}" for k, v in shapes.items()),
                   id="lr-threshold")
    # A weight decay whose t4 falls all the way up the grid has its threshold beyond the largest
    # rate: that differs from a threshold inside the grid. Two beyond the grid cannot be told apart.
    largest_lr = max(p["learning_rates"])
    beyond = {k: f"beyond {largest_lr:g}" for k, v in thresholds.items()
              if v["falls"] and not v["worse_beyond"]}
    known = {**found, **beyond}
    differ = len({str(v) for v in known.values()}) > 1
    grid_lrs = ", ".join(f"{lr:g}" for lr in p["learning_rates"])
    depends = claim("the learning-rate threshold depends on the weight decay (it differs between "
                    "weight decays whose t4 falls with the lr)", len(known) >= 2 and differ,
                    {**known, "differ": differ} if len(known) >= 2
                    else "fewer than 2 weight decays have t4 falling with the lr",
                    f"yes ({said})", inconclusive=len(known) < 2,
                    diagnosis=None if len(known) >= 2 and differ else
                    f"only {len(known)} weight decay(s) have t4 falling with the lr"
                    if len(known) < 2 else
                    f"every weight decay's t4 still falls at the grid's largest lr {largest_lr:g}"
                    if not found else
                    f"every weight decay first groks later at lr {next(iter(found.values())):g} "
                    f"on the grid {grid_lrs}: a difference within one grid step is not resolved",
                    id="threshold-depends-on-weight-decay")
    return [exists, depends]


def judge(p: dict, paper: dict, counts: dict, separation: dict, stopping: dict,
          thresholds: dict) -> list:
    """The chapter's checks, one per clause of the claim: the runs' outcomes (reported), the
    signature as a predictor, the stopping rule, the learning-rate threshold and its dependence
    on the weight decay. `counts` from `outcome_counts`, `separation` from
    `signature_separation`, `stopping` from `fit_stopping_rule`, `thresholds` from
    `lr_thresholds`; `paper` is the chapter's `paper:` block."""
    outcomes = report("runs: grokked / not grokked / undecided within their budgets",
                      {**counts, "budgets (steps) per r": {f"{r:g}": b
                                                            for r, b in budgets(p).items()}},
                      "not stated", id="run-outcomes")
    return [outcomes, _signature_check(p, paper, counts, separation),
            _stopping_check(p, paper, stopping), *_threshold_checks(p, paper, thresholds)]


# Figures ----------------------------------------------------------------------------------------


def _shown_steps(p: dict) -> int:
    """How many first steps the loss panels show."""
    return min(3 * window_end(p), min(p["steps"]))


def _curves(ax_loss, ax_acc, result, shown: int, color, **acc_style) -> None:
    n = min(shown, len(result.loss))
    ax_loss.plot(np.arange(1, n + 1), result.loss[:n], color=color, lw=1)
    ax_acc.plot(np.arange(1, len(result.val_acc) + 1), result.val_acc, color=color, **acc_style)


def _shade_window(ax, p: dict) -> None:
    ax.axvspan(p["signature_start"] + 1, window_end(p), color="0.85", zorder=0)


def figure_fit_runs(p: dict, runs: dict, table: pd.DataFrame, run_caption: str) -> None:
    """The runs known to grok: the training loss of the first steps beside the validation
    accuracy over the whole run, one colour per training fraction."""
    fit_runs = table[table["fit set"]].sort_values("r")
    colors = dict(zip(fit_runs.r, plt.cm.viridis(np.linspace(0, 0.9, len(fit_runs)))))
    shown = _shown_steps(p)
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.4))
    for _, row in fit_runs.iterrows():
        res = runs[row.r, row["weight decay"], row.lr]
        if isinstance(res, dict):
            continue
        _curves(axes[0], axes[1], res, shown, colors[row.r], label=f"r = {row.r:g}")
        if row.t4 is not None and np.isfinite(row.t4):
            axes[1].plot(row.t4, res.val_acc[int(row.t4) - 1], "o", color=colors[row.r], ms=4)
    _shade_window(axes[0], p)
    axes[0].set(yscale="log", xlabel="step", ylabel="training loss", title="First steps")
    axes[1].set(xscale="log", xlabel="step", ylabel="validation accuracy", title="Whole run")
    axes[0].legend(*axes[1].get_legend_handles_labels(), fontsize="small", loc="upper right")
    plotting.show(
        fig, "fig-08-fit-runs",
        caption=f"Every run known to grok has a bump in its training loss inside the shaded "
                f"window (left), and the smaller the training fraction $r$, the later its "
                f"validation accuracy climbs (right). Left: the training loss (log scale) over the "
                f"first {shown} steps, with the signature's window, steps "
                f"{p['signature_start'] + 1} to {window_end(p)}, shaded; right: the validation "
                f"accuracy over the whole run (log-scaled steps), a dot at $t_4$; one colour per "
                f"$r$, and a line ends where its run stopped. Weight decay "
                f"{p['fit_weight_decay']:g} and learning rate {p['fit_lr']:g} at every $r$, the "
                f"comparison of the paper's Figs 8 and 9; {run_caption}.",
        alt="Two line plots, one line per training fraction. Left: the training loss on a log "
            "scale over the first steps, with the signature's window shaded. Right: the "
            "validation accuracy against the step on a log axis, each line rising from 0 to 1.")


def figure_grid(p: dict, runs: dict, run_caption: str) -> None:
    """The weight decay x learning rate grid at its first training fraction: one row per weight
    decay, the first steps' loss and the validation accuracy, one colour per learning rate."""
    lr_colors = dict(zip(p["learning_rates"],
                         plt.cm.plasma(np.linspace(0, 0.85, len(p["learning_rates"])))))
    r_show, wds, shown = p["grid_fractions"][0], p["weight_decays"], _shown_steps(p)
    fig, axes = plt.subplots(len(wds), 2, figsize=(8, 2.4 * len(wds)), squeeze=False,
                             sharex="col")
    for i, wd in enumerate(wds):
        for lr in p["learning_rates"]:
            res = runs.get((r_show, wd, lr))
            if res is not None and not isinstance(res, dict):
                _curves(axes[i, 0], axes[i, 1], res, shown, lr_colors[lr], lw=1,
                        label=f"lr {lr:g}")
        _shade_window(axes[i, 0], p)
        axes[i, 0].set(yscale="log", ylabel=f"loss, wd {wd:g}")
        axes[i, 1].set(xscale="log", ylabel=f"val. acc., wd {wd:g}", ylim=(-0.05, 1.05))
    axes[-1, 0].set_xlabel("step")
    axes[-1, 1].set_xlabel("step")
    axes[0, 1].legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1))
    plotting.show(
        fig, "fig-08-grid",
        caption=f"Without weight decay (top row) no run generalises; with weight decay, the "
                f"larger the learning rate the sooner the validation accuracy climbs, up to the "
                f"largest learning rate, where it no longer reaches {p['accuracy_threshold']:g}. "
                f"One row per weight decay: left the training loss (log scale) over the first "
                f"{shown} steps, with the signature's window shaded; right the validation "
                f"accuracy over the run (log-scaled steps); one colour per learning rate. The "
                f"grid at $r = {r_show:g}$; {run_caption}.",
        alt="A grid of line plots, one row per weight decay, one line per learning rate. Left "
            "column: the training loss on a log scale over the first steps, with the "
            "signature's window shaded. Right column: the validation accuracy against the step "
            "on a log axis.")


def figure_signature(p: dict, table: pd.DataFrame, separation: dict, run_caption: str) -> None:
    """The signature of every run by outcome, and the ROC curve of the rule
    signature >= threshold => will grok."""
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.5))
    # A diverged run has no signature (NaN) and no place on the log axis: the legend counts the
    # dots drawn, and the caption the runs left out.
    drawn = table[np.isfinite(table.signature.astype(float)) & (table.signature > 0)]
    for outcome, color, x in (("grokked", "tab:green", 1), ("not grokked", "tab:red", 0),
                              ("undecided", "tab:gray", 0.5)):
        sub = drawn[drawn.outcome == outcome]
        jitter = np.linspace(-0.15, 0.15, len(sub)) if len(sub) > 1 else np.zeros(len(sub))
        axes[0].scatter(x + jitter, sub.signature, color=color, s=18,
                        marker="x" if outcome == "undecided" else "o",
                        label=f"{outcome} ({len(sub)})")
    left_out = len(table) - len(drawn)
    left_out_diverged = left_out and bool(table.drop(drawn.index).diverged.all())
    axes[0].set(yscale="log", xticks=[0, 0.5, 1],
                xticklabels=["not grokked", "undecided", "grokked"],
                ylabel="spectral signature", title="Signature of every run")
    auc = separation["auroc"]
    if separation["both"]:
        fpr, tpr, _ = pr.roc_curve(*scores_and_labels(table))
        axes[1].plot(fpr, tpr, "o-", color="tab:blue", ms=3, label=f"AUROC {auc:.2f}")
    axes[1].plot([0, 1], [0, 1], color="0.6", ls="--", lw=1, label="chance")
    axes[1].set(xlabel="false-positive rate", ylabel="true-positive rate", title="ROC curve",
                xlim=(-0.02, 1.02), ylim=(-0.02, 1.02), aspect="equal")
    axes[1].legend(fontsize="small", loc="lower right")
    axes[0].legend(fontsize="x-small", loc="lower center")
    finding = (f"The runs that grokked mostly have larger signatures than those that did not, so "
               f"the ROC curve runs well above the diagonal of chance (AUROC {auc:.2f}). "
               if separation["both"] else
               "The labelled runs all have the same outcome, so there is no ROC curve to draw. ")
    plotting.show(
        fig, "fig-08-signature",
        caption=finding
        + f"Left: the signature of every run (log scale) by outcome, spread sideways so that the "
          f"dots do not overlap, crosses for undecided runs"
        + (f" ({left_out} of {len(table)} runs, "
           + ("whose loss diverged and which count as not grokked, have" if left_out_diverged
              else "without a finite, positive signature, are")
           + " not drawn)" if left_out else "")
        + f"; right: the ROC curve of the rule "
          f"*signature ≥ threshold ⇒ will grok*, one point per threshold, and chance as the "
          f"dashed diagonal. The signature is read from steps {p['signature_start'] + 1} to "
          f"{window_end(p)}, frequencies up to {p['signature_cutoff']:g} cycles per step; "
          f"{run_caption}.",
        alt="Two panels. Left: a strip plot of the spectral signature on a log axis for the runs "
            "that did not grok, were undecided and grokked. Right: the ROC curve, true-positive "
            "rate against false-positive rate, with the diagonal of chance.")


def figure_lr_threshold(p: dict, table: pd.DataFrame, run_caption: str) -> None:
    """t4 of the grid's runs against the learning rate, one line per weight decay; a run that did
    not generalise is a cross at its budget."""
    budget = budgets(p)
    fig, ax = plt.subplots(figsize=(6, 3.8))
    wd_colors = dict(zip(p["weight_decays"],
                         plt.cm.cividis(np.linspace(0, 0.85, len(p["weight_decays"])))))
    r_styles = {r: ("-", "--", "-.")[i % 3] for i, r in enumerate(p["grid_fractions"])}
    for r, wd, lrs, t4s in grid_curves(p, table):
        ax.plot(lrs, [t if t is not None else budget[r] for t in t4s], marker="o",
                ls=r_styles[r], color=wd_colors[wd], label=f"wd {wd:g}, r {r:g}")
        missed = [lr for lr, t in zip(lrs, t4s) if t is None]
        ax.plot(missed, [budget[r]] * len(missed), "x", color=wd_colors[wd], ms=9)
    for r in p["grid_fractions"]:
        ax.axhline(budget[r], color="0.5", ls=":", lw=1)
    ax.set(xscale="log", yscale="log", xlabel="learning rate", ylabel="$t_4$ (steps)",
           title="Generalisation step over learning rate")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    several = len(p["grid_fractions"]) > 1
    plotting.show(
        fig, "fig-08-lr-threshold",
        caption=f"For each weight decay above zero, $t_4$ falls as the learning rate rises, up to "
                f"a threshold beyond which the run generalises later or not at all; without "
                f"weight decay no run generalises within its budget. One line per weight decay"
                + (" (line style: the training fraction)" if several else "")
                + f"; a cross on the dotted line at the top is a run that did not generalise "
                  f"within its budget of steps, drawn at the budget; {run_caption}.",
        alt="A line plot of the generalisation step t4 against the learning rate, both on log "
            "axes, one line per weight decay. Runs that did not generalise are crosses at the "
            "step budget, a dotted horizontal line.")
