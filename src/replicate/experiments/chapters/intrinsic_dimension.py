"""Chapter 06, intrinsic dimension during grokking: the tables read off the sweep's finished runs,
the verdict (`judge`) and the figures.

The sweep trains one run per training fraction r (and seed) and estimates, at log-spaced steps, the
intrinsic dimension (ID) of every layer's representation of the training and validation points.
From those runs come three tables, all plain pandas frames:
- `events`: per run its step cap, steps run, t2 (training accuracy first at the threshold),
  t4 (validation accuracy first at the threshold; NaN if the run never got there) and its peak
  and final validation accuracy;
- `ids`: one row per run, checkpoint, split and layer with both estimates (MLE and TwoNN);
- `changes`: for each run that generalised, the ID of each layer and split at t2 and at t4.
`judge` turns them, the synthetic sanity check and the paper's numbers into the checks.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from ... import plotting
from ...measures import intrinsic_dimension as idim
from ...verdict import Check, against_paper, claim, report

LAYERS = ["embedding", "hidden", "logits"]
# The validation points are drawn in the colour the book gives held-out points.
SPLITS = {"train": plotting.SPLIT_COLORS["train"], "val": plotting.SPLIT_COLORS["test"]}
SYNTHETIC_DIMENSIONS = (2, 5, 10)
SYNTHETIC_TOLERANCE = 0.10  # relative error allowed on data of known dimension
MIN_PEARSON = 0.95  # agreement asked of the two estimators (the paper reports a little more)
MIN_R2 = 0.95  # a power law that explains less of t4(r) than this does not fit
MIN_FIT_POINTS = 4  # three parameters need at least four fractions


# --- The sanity check on data of known dimension ---------------------------------------------

def gaussian_on_subspace(n: int, d: int, ambient: int, seed: int) -> torch.Tensor:
    """n Gaussian points on a random d-dimensional linear subspace of R^ambient."""
    gen = torch.Generator().manual_seed(seed)
    basis, _ = torch.linalg.qr(torch.randn(ambient, d, generator=gen, dtype=torch.float64))
    return torch.randn(n, d, generator=gen, dtype=torch.float64) @ basis.T


def synthetic_estimates(p: dict) -> pd.DataFrame:
    """Both estimators, and the MLE with the plain (Levina-Bickel) mean, on 1000 points of each
    known dimension in R^200; one row per true dimension."""
    table = {}
    for d in SYNTHETIC_DIMENSIONS:
        x = gaussian_on_subspace(1000, d, 200, seed=d)
        table[d] = {"MLE (MacKay-Ghahramani)": idim.mle_dimension(x, p["mle_neighbours"]),
                    "TwoNN": idim.twonn_dimension(x, p["twonn_discard"]),
                    "MLE, plain mean (Levina-Bickel)": idim.mle_dimension(
                        x, p["mle_neighbours"], pooling="mean")}
    return pd.DataFrame(table).T.rename_axis("true dimension")


# --- Tables read off the finished runs ---------------------------------------------------------

def first_step(result, curve: str, threshold: float) -> float:
    """The first step at which `curve` reaches `threshold`, NaN if it never does."""
    step = result.first_step_reaching(curve, threshold)
    return np.nan if step is None else step


def events_table(runs: dict, p: dict) -> pd.DataFrame:
    """One row per run {(r, seed): result}: its cap, steps run, t2, t4 and validation accuracy."""
    cap = dict(zip(p["train_fractions"], p["steps"]))
    threshold = p["accuracy_threshold"]
    return pd.DataFrame([{"r": r, "seed": s, "cap": cap[r], "steps": len(res.loss),
                          "t2": first_step(res, "train_acc", threshold),
                          "t4": first_step(res, "val_acc", threshold),
                          "peak val acc": res.val_acc.max(), "final val acc": res.val_acc[-1]}
                         for (r, s), res in runs.items()])


def id_table(runs: dict) -> pd.DataFrame:
    """Every ID estimate of the sweep: one row per run, checkpoint, split and layer."""
    return pd.DataFrame([{"r": r, "seed": s, "step": m["step"], "split": split, "layer": layer,
                          "mle": v["mle"], "twonn": v["twonn"]}
                         for (r, s), res in runs.items() for m in res.measures
                         for split in SPLITS for layer, v in m[split].items()])


def points_per_split(runs: dict, first_seed: int) -> dict:
    """The distinct points per split that entered the estimates, per training fraction (first
    seed, first checkpoint): the validation set shrinks as r grows."""
    return {f"{100 * r:g}%": {split: int(m[split]["embedding"]["distinct"]) for split in SPLITS}
            for (r, s), res in runs.items() if s == first_seed for m in res.measures[:1]}


def trajectory(ids: pd.DataFrame, r: float, s: int, split: str, layer: str) -> pd.DataFrame:
    """The estimates of one layer and split of one run, in step order."""
    rows = ids[(ids.r == r) & (ids.seed == s) & (ids.split == split) & (ids.layer == layer)]
    return rows.sort_values("step")


def id_at(trajectory: pd.DataFrame, step: float, estimator: str = "mle") -> float:
    """The ID at `step`, interpolated between checkpoints in log(1 + step), since the
    checkpoints are log-spaced."""
    return float(np.interp(np.log1p(step), np.log1p(trajectory["step"]), trajectory[estimator]))


def featured_run(events: pd.DataFrame) -> pd.Series:
    """The run shown in detail: the first (smallest fraction) that generalised, where
    memorisation and generalisation lie furthest apart; else the first run."""
    grokked = events.dropna(subset=["t2", "t4"])
    return grokked.iloc[0] if len(grokked) else events.iloc[0]


CHANGE_COLUMNS = ["r", "seed", "split", "layer", "ID at t2", "ID at t4", "change",
                  "largest excursion"]


def id_changes(events: pd.DataFrame, ids: pd.DataFrame) -> pd.DataFrame:
    """For each run that generalised, each split and layer: the ID (MLE) at t2 and at t4, their
    relative change, and the largest relative excursion from the ID at t2 within [t2, t4]."""
    rows = []
    for _, ev in events.dropna(subset=["t2", "t4"]).iterrows():
        for split in SPLITS:
            for layer in LAYERS:
                tr = trajectory(ids, ev.r, ev.seed, split, layer)
                at_t2, at_t4 = id_at(tr, ev.t2), id_at(tr, ev.t4)
                window = tr[(tr.step >= ev.t2) & (tr.step <= ev.t4)].mle.to_numpy() / at_t2 - 1
                rows.append({"r": ev.r, "seed": int(ev.seed), "split": split, "layer": layer,
                             "ID at t2": at_t2, "ID at t4": at_t4, "change": at_t4 / at_t2 - 1,
                             "largest excursion": max(window, key=abs) if len(window)
                             else np.nan})
    return pd.DataFrame(rows, columns=CHANGE_COLUMNS)


def estimator_pearson(ids: pd.DataFrame) -> float:
    """Pearson correlation of the MLE and TwoNN estimates over the whole sweep."""
    return float(np.corrcoef(ids.mle, ids.twonn)[0, 1])


def final_ids(ids: pd.DataFrame) -> pd.Series:
    """The ID (MLE) at each run's last checkpoint, mean over seeds, by split, layer and r."""
    last = ids.loc[ids.groupby(["r", "seed", "split", "layer"]).step.idxmax()]
    return last.groupby(["split", "layer", "r"]).mle.mean()


def trend_in_r(values_by_r: pd.Series) -> dict | None:
    """The least-squares slope of values against r, and their Pearson correlation; None for
    fewer than two fractions."""
    rs, values = np.asarray(values_by_r.index, dtype=float), values_by_r.to_numpy()
    if len(rs) < 2:
        return None
    return {"slope per unit r": float(np.polyfit(rs, values, 1)[0]),
            "Pearson": float(np.corrcoef(rs, values)[0, 1])}


def id_at_t4_by_r(changes: pd.DataFrame, split: str, layer: str) -> pd.Series:
    """The ID at t4 of one split and layer, mean over seeds, by r."""
    sub = changes[(changes.split == split) & (changes.layer == layer)]
    return sub.groupby("r")["ID at t4"].mean()


def id_trends(ids: pd.DataFrame, changes: pd.DataFrame) -> tuple[dict, dict]:
    """How the ID at the last step, and at t4, moves with r: `trend_in_r` per "layer/split"
    (the second empty when no run generalised)."""
    final_id = final_ids(ids)
    trend, trend_t4 = {}, {}
    for split in SPLITS:
        for layer in LAYERS:
            trend[f"{layer}/{split}"] = trend_in_r(final_id.loc[split, layer])
            if len(changes):
                trend_t4[f"{layer}/{split}"] = trend_in_r(id_at_t4_by_r(changes, split, layer))
    return trend, trend_t4


def trend_table(ids: pd.DataFrame, changes: pd.DataFrame) -> pd.DataFrame:
    """`id_trends` side by side, for the reader."""
    trend, trend_t4 = id_trends(ids, changes)
    return pd.concat({"last step": pd.DataFrame(trend).T, "at t4": pd.DataFrame(trend_t4).T},
                     axis=1)


# --- The second law: t4 against the training fraction -----------------------------------------

def t4_by_fraction(events: pd.DataFrame) -> pd.Series:
    """t4 per r, mean over seeds; NaN where any seed did not generalise (a mean over the seeds
    that did would be biased low)."""
    return events.groupby("r").t4.agg(lambda v: v.mean() if v.notna().all() else np.nan)


def t4_power_law(events: pd.DataFrame) -> tuple[pd.Series, idim.PowerLaw | None]:
    """The fractions with a t4 (r in percent, as the paper's constants require) and the fit of
    t4 = a r^-gamma + b through them; None for fewer than four fractions."""
    measured = t4_by_fraction(events).dropna()
    measured.index = 100 * measured.index.to_numpy()
    if len(measured) < MIN_FIT_POINTS:
        return measured, None
    return measured, idim.fit_power_law(measured.index.to_numpy(), measured.to_numpy())


def paper_law(paper: dict) -> idim.PowerLaw:
    """The paper's t4(r) for modular addition (r in percent)."""
    return idim.PowerLaw(a=paper["power-law-a"].value, gamma=paper["power-law-gamma"].value,
                         b=paper["power-law-b"].value, r2=float("nan"))


# --- The verdict --------------------------------------------------------------------------------

def why_untested(events: pd.DataFrame) -> str:
    """Which runs reached their cap without generalising, with their peak validation accuracy;
    "" when every run generalised."""
    not_grokked = events[events.t4.isna()]
    if not len(not_grokked):
        return ""
    return f"{len(not_grokked)} of {len(events)} runs did not grok within their cap: " + "; ".join(
        f"r = {ev.r:g}, seed {int(ev.seed)}, {int(ev.cap):,} steps (validation accuracy peaked "
        f"at {ev['peak val acc']:.2f})" for _, ev in not_grokked.iterrows())


def synthetic_check(synthetic: pd.DataFrame) -> Check:
    """Both estimators within SYNTHETIC_TOLERANCE of the true dimension, on every row."""
    estimates = synthetic.iloc[:, :2]
    relative_error = estimates.sub(synthetic.index, axis=0).abs().div(synthetic.index, axis=0)
    worst = float(relative_error.max().max())
    dims = ", ".join(str(d) for d in synthetic.index)
    return claim(f"both estimators recover d in {{{dims}}} on a subspace of R^200 within "
                 f"{SYNTHETIC_TOLERANCE:.0%}",
                 worst <= SYNTHETIC_TOLERANCE,
                 {f"d={d}": [round(v, 2) for v in row] for d, row in estimates.iterrows()},
                 "known answer", id="synthetic-dimension")


def marked_change_checks(p: dict, events: pd.DataFrame, changes: pd.DataFrame) -> list[Check]:
    """Whether in every run some layer's ID moved by at least `marked_change` between t2 and t4,
    and, as a report, in which direction each layer and split moved."""
    name = (f"in every run some layer's ID changes by >= {p['marked_change']:.0%} "
            "between t2 and t4")
    untested = why_untested(events)
    if not len(changes):
        return [claim(name, False, "no run generalised", "the evolution of ID is informative",
                      inconclusive=True, diagnosis=untested or "no run reached both t2 and t4",
                      id="marked-change")]
    per_run = changes.assign(size=changes.change.abs()).groupby(["r", "seed"])["size"].max()
    unmarked = per_run[per_run < p["marked_change"]]
    biggest = changes.loc[changes.change.abs().idxmax()]
    why = ("no marked change in " + ", ".join(f"r = {r:g}, seed {s} (largest {v:.2f})"
                                              for (r, s), v in unmarked.items())
           if len(unmarked) else untested or None)
    marked = claim(name, len(unmarked) == 0 and len(per_run) == len(events),
                   {"runs that generalised": f"{len(per_run)}/{len(events)}",
                    "largest change per run": {f"r={r:g}": float(v)
                                               for (r, _), v in per_run.items()},
                    "largest": f"{biggest.layer}/{biggest.split} at r={biggest.r:g}: "
                               f"{biggest.change:+.2f}"},
                   "the evolution of ID is informative (no direction stated)",
                   inconclusive=bool(untested) and not len(unmarked), diagnosis=why,
                   id="marked-change")
    direction = {}
    for (layer, split), group in changes.groupby(["layer", "split"]):
        median = float(group.change.median())
        rises = int((group.change > 0).sum())
        excursion = float(group["largest excursion"].median())
        direction[f"{layer}/{split}"] = (f"{'rises' if median > 0 else 'falls'} (median "
                                         f"{median:+.2f}; rises in {rises}/{len(group)} runs; "
                                         "median largest excursion within [t2, t4] "
                                         f"{excursion:+.2f})")
    return [marked, report("direction of the ID change from t2 to t4, per layer and split",
                           direction, "not stated", id="change-direction")]


def describe_trend(table: dict) -> dict | str:
    """Each `trend_in_r` in words: the sign of the slope, the slope and the Pearson."""
    return {k: f"{'increases' if v['slope per unit r'] > 0 else 'decreases'} with r "
               f"(slope {v['slope per unit r']:.3g}, Pearson {v['Pearson']:.2f})"
            for k, v in table.items() if v is not None} or "fewer than 2 fractions"


def by_percent(values_by_r: pd.Series) -> dict:
    """{"40%": value or None} from a series indexed by the fraction r."""
    return {f"{100 * r:g}%": (None if np.isnan(v) else float(v)) for r, v in values_by_r.items()}


def t4_checks(paper: dict, events: pd.DataFrame) -> list[Check]:
    """t4 falls strictly with r, and t4(r) = a r^-gamma + b fits it (R2 and gamma > 1), with our
    gamma beside the paper's."""
    untested = why_untested(events)
    t4 = t4_by_fraction(events)
    rises = [f"t4 rises from r = {a:g} to {b:g} ({t4[a]:.0f} to {t4[b]:.0f} steps)"
             for a, b in zip(t4.index[:-1], t4.index[1:]) if t4[b] >= t4[a]]
    checks = [claim("t4 decreases strictly with r (every fraction generalises within its "
                    "budget)", not untested and not rises, by_percent(t4),
                    "t2(r), t4(r) decreasing", inconclusive=bool(untested),
                    diagnosis=untested or "; ".join(rises) or None, id="t4-decreases")]
    name = ("the power law t4 = a r^-gamma + b (r in %) fits with R2 >= "
            f"{MIN_R2:.2f} and gamma > 1")
    gamma = paper["power-law-gamma"]
    measured, fit = t4_power_law(events)
    if fit is not None:
        checks.append(claim(name, fit.r2 >= MIN_R2 and fit.gamma > 1,
                            {"R2": fit.r2, "gamma": fit.gamma, "a": fit.a, "b": fit.b,
                             "fractions fitted": len(measured),
                             "gamma beside the paper's": against_paper((fit.gamma,) * 2,
                                                                       gamma.band)},
                            {"gamma": gamma.value, "a": paper["power-law-a"].value,
                             "b": paper["power-law-b"].value}, id="power-law"))
    else:
        checks.append(claim(name, False, f"only {len(measured)} fractions generalised; a fit "
                            f"needs {MIN_FIT_POINTS}", {"gamma": gamma.value},
                            inconclusive=bool(untested),
                            diagnosis=untested or f"t4 undefined at {len(t4) - len(measured)}"
                                                  " fractions", id="power-law"))
    return checks


def judge(p: dict, paper: dict, synthetic: pd.DataFrame, events: pd.DataFrame,
          ids: pd.DataFrame, changes: pd.DataFrame, points: dict) -> list[Check]:
    """The chapter's checks, from the parameters `p`, the paper's numbers (`run.paper`), the
    estimators on synthetic data (`synthetic_estimates`), the sweep's `events`, `ids` and
    `changes` tables and the points per split (`points_per_split`).

    A run stopped by its cap before it generalised cannot test the checks that need its t4: they
    read INCONCLUSIVE, with the runs named in the diagnosis, and count as not passed."""
    pearson = estimator_pearson(ids)
    trend, trend_t4 = id_trends(ids, changes)
    trend_source = "figures 22-23, direction not stated in the text"
    return [
        synthetic_check(synthetic),
        claim(f"MLE (k = 2) and TwoNN correlate with Pearson >= {MIN_PEARSON:.2f} over layers, "
              "splits, steps and r", pearson >= MIN_PEARSON, pearson,
              paper["estimators-pearson"].value, id="estimators-correlate"),
        *marked_change_checks(p, events, changes),
        report("final ID (last step) against training fraction: sign of the slope per unit r, "
               "and Pearson", describe_trend(trend), trend_source, id="final-id-trend"),
        report("ID at t4 against training fraction: sign of the slope per unit r, and Pearson",
               describe_trend(trend_t4), trend_source, id="t4-id-trend"),
        report("distinct points per split entering the ID estimates (the validation set "
               "shrinks as r grows)", points, "not stated", id="points-per-split"),
        *t4_checks(paper, events),
        report("t2 (first step with train accuracy >= threshold) per r",
               by_percent(events.groupby("r").t2.mean()), "t2(r) decreasing",
               id="t2-by-fraction"),
    ]


# --- Figures --------------------------------------------------------------------------------------

def fraction_colors(fractions: list[float]) -> dict:
    """One colour per training fraction, light to dark along viridis."""
    return dict(zip(fractions, plt.cm.viridis(np.linspace(0, 0.9, len(fractions)))))


def figure_accuracy(p: dict, runs: dict, provenance: str) -> None:
    """Training (dashed) and validation (solid) accuracy of every run, a dot at t4."""
    colors, first_seed = fraction_colors(p["train_fractions"]), p["seed"]
    fig, ax = plt.subplots(figsize=(8, 4.4))
    for (r, s), res in runs.items():
        t = np.arange(1, len(res.loss) + 1)
        ax.plot(t, res.train_acc, ls="--", color=colors[r], lw=1)
        ax.plot(t, res.val_acc, color=colors[r], lw=1.5,
                label=f"r = {r:g}" if s == first_seed else None)
        t4 = first_step(res, "val_acc", p["accuracy_threshold"])
        if np.isfinite(t4):
            ax.plot(t4, res.val_acc[int(t4) - 1], "o", color=colors[r])
    ax.set(xscale="log", xlabel="step", ylabel="accuracy",
           title=f"Modular addition mod {p['p']}: train (dashed) and validation (solid)")
    plotting.legend_below(fig, ncol=6)
    plotting.show(
        fig, "fig-06-accuracy",
        caption="Every training fraction fits its training set within a few dozen steps but "
                "reaches full validation accuracy only hundreds to thousands of steps later, the "
                "later the smaller the fraction. Dashed: training accuracy; solid: validation "
                r"accuracy; one colour per training fraction $r$; dots mark $t_4$, the first step "
                rf"with validation accuracy $\ge$ {p['accuracy_threshold']:g}. The step axis is "
                f"logarithmic; {provenance}.",
        alt="Line plot of accuracy against the training step on a log scale, with a dashed "
            "training-accuracy line and a solid validation-accuracy line for each training "
            "fraction, and a dot where each validation line reaches the threshold.")


def figure_one_run(ids: pd.DataFrame, featured: pd.Series, label: str) -> None:
    """The ID of every layer over training in one run (`featured_run`), both estimators and
    both splits, with t2 and t4 marked; `label` is the run's preset."""
    fig, axes = plotting.panel_grid(len(LAYERS), row_height=3.4)
    for ax, layer in zip(axes, LAYERS):
        for split, color in SPLITS.items():
            tr = trajectory(ids, featured.r, featured.seed, split, layer)
            ax.plot(tr.step, tr.mle, color=color, label=f"{split}, MLE")
            ax.plot(tr.step, tr.twonn, color=color, ls="--", lw=1, label=f"{split}, TwoNN")
        for name, style in (("t2", ":"), ("t4", "-.")):
            if np.isfinite(featured[name]):
                ax.axvline(featured[name], color="0.3", ls=style, lw=1.2, label=name)
        ax.set_xscale("symlog", linthresh=1.0)  # a log scale that still shows step 0
        ax.set(xlim=(0, None), xlabel="step", title=layer)
    axes[0].set_ylabel("intrinsic dimension")
    plotting.legend_below(fig, ncol=3)
    plotting.show(
        fig, "fig-06-one-run",
        caption="Between memorisation and generalisation the ID of the embedding grows "
                "several-fold and that of the hidden layer grows too, while the ID of the logits "
                "rises and falls back. One panel per layer; MLE solid, TwoNN dashed; training "
                r"points green, validation points orange; dotted line: $t_2$ (memorisation), "
                r"dash-dotted: $t_4$ (generalisation); the step axis is logarithmic but shows "
                f"step 0. Training fraction $r$ = {featured.r:g}, preset {label}, seed "
                f"{int(featured.seed)}.",
        alt="Three line plots, one per layer (embedding, hidden, logits), of the intrinsic "
            "dimension against the training step, with MLE and TwoNN estimates for the training "
            "and the validation points and vertical lines at t2 and t4.")


def figure_all_runs(p: dict, events: pd.DataFrame, ids: pd.DataFrame, provenance: str) -> None:
    """The ID (MLE) of every run that generalised against step / t4, per layer and split."""
    colors, first_seed = fraction_colors(p["train_fractions"]), p["seed"]
    t4_of = events.set_index(["r", "seed"]).t4
    fig, axes = plt.subplots(2, 3, figsize=(8, 6.4), sharex=True)
    for row, split in enumerate(SPLITS):
        for ax, layer in zip(axes[row], LAYERS):
            for (r, s), t4 in t4_of.items():
                if not np.isfinite(t4):
                    continue
                tr = trajectory(ids, r, s, split, layer).query("step > 0")
                ax.plot(tr.step / t4, tr.mle, color=colors[r],
                        label=f"r = {r:g}" if s == first_seed else None)
            ax.axvline(1.0, color="0.3", ls="-.", lw=1)
            ax.set(xscale="log", xlabel="step / t4" if row else None, title=f"{layer}, {split}")
        axes[row, 0].set_ylabel(f"ID ({split} points)")
    plotting.legend_below(fig, axes=[axes[0, 0]], ncol=6)
    plotting.show(
        fig, "fig-06-all-runs",
        caption="At every training fraction the ID of the embedding climbs steeply towards "
                "$t_4$, while the ID of the logits peaks before $t_4$ and falls. Top row: ID of "
                "the training points; bottom row: of the validation points; one column per "
                r"layer and one colour per training fraction; the step axis is divided by each "
                f"run's $t_4$, so the dash-dotted line at 1 marks generalisation. MLE with $k$ = "
                f"{p['mle_neighbours']}; runs that did not generalise are left out; "
                f"{provenance}.",
        alt="Grid of six line plots, training points in the top row and validation points in "
            "the bottom row, one column per layer (embedding, hidden, logits): the intrinsic "
            "dimension against the step divided by t4 on a log scale, one line per training "
            "fraction.")


def figure_estimators(p: dict, paper: dict, ids: pd.DataFrame, provenance: str) -> None:
    """Every estimate of the sweep, MLE against TwoNN, by layer."""
    pearson = estimator_pearson(ids)
    fig, ax = plt.subplots(figsize=(6, 6))
    # Colours of their own: green and orange stand for training and validation points here.
    for layer, marker, color in zip(LAYERS, "os^", ["tab:blue", "tab:purple", "tab:brown"]):
        sub = ids[ids.layer == layer]
        ax.scatter(sub.twonn, sub.mle, s=8, alpha=0.5, marker=marker, color=color, label=layer)
    lims = [ids[["mle", "twonn"]].min().min() * 0.9, ids[["mle", "twonn"]].max().max() * 1.1]
    ax.plot(lims, lims, color="0.4", lw=1, ls="--", label="equal")
    ax.set(xscale="log", yscale="log", xlabel="TwoNN", ylabel=f"MLE (k = {p['mle_neighbours']})",
           title=f"Pearson {pearson:.4f} over {len(ids)} estimates")
    plotting.legend_below(fig, ncol=4)
    plotting.show(
        fig, "fig-06-estimators",
        caption="MLE and TwoNN give almost the same estimate everywhere: the points lie on the "
                f"diagonal across an order of magnitude of ID (Pearson {pearson:.4f}; the paper "
                f"reports about {paper['estimators-pearson'].value:g}). One point per estimate "
                "(every layer, split, checkpoint and training fraction), marker and colour by "
                f"layer; dashed: equal estimates; both axes logarithmic; {provenance}.",
        alt="Scatter plot on log-log axes of the MLE estimate against the TwoNN estimate of "
            "intrinsic dimension, one marker shape per layer, with a dashed diagonal line of "
            "equal estimates.")


def figure_final_id(ids: pd.DataFrame, changes: pd.DataFrame, provenance: str) -> None:
    """The ID at each run's last step and at its t4 against r, per layer and split."""
    final_id = final_ids(ids)
    fig, axes = plotting.panel_grid(len(LAYERS), row_height=3.4)
    for ax, layer in zip(axes, LAYERS):
        for split, color in SPLITS.items():
            series = final_id.loc[split, layer]
            ax.plot(series.index, series.to_numpy(), "o-", color=color, label=f"{split}, last step")
            if len(changes):
                at_t4 = id_at_t4_by_r(changes, split, layer)
                ax.plot(at_t4.index, at_t4.to_numpy(), "s--", color=color, ms=4, lw=1,
                        label=f"{split}, at t4")
        ax.set(xlabel="training fraction r", title=layer)
    axes[0].set_ylabel("ID (MLE)")
    plotting.legend_below(fig, ncol=4)
    plotting.show(
        fig, "fig-06-final-id",
        caption="At $t_4$ the ID of the validation points falls as the training fraction grows, "
                "in every layer, while that of the training points follows no common trend; part "
                "of the fall may come from the validation set shrinking as $r$ grows. Solid lines "
                "with dots: ID (MLE) at each run's last step; dashed lines with squares: at its "
                "$t_4$; green: training points, orange: validation points; one panel per layer. "
                f"{provenance[0].upper() + provenance[1:]}.",
        alt="Three line plots, one per layer (embedding, hidden, logits), of the intrinsic "
            "dimension against the training fraction, for training and validation points, each "
            "at the run's last step and at t4.")


def figure_power_law(paper: dict, events: pd.DataFrame, provenance: str) -> None:
    """Our t4(r) with its power-law fit; beside it, on a log scale, the paper's law."""
    measured, fit = t4_power_law(events)
    r_percent, law = measured.index.to_numpy(), paper_law(paper)
    fig, axes = plt.subplots(1, 2, figsize=(8, 4.2))
    grid = np.linspace(min(r_percent.min(), 20) if len(r_percent) else 20, 90, 200)
    axes[0].plot(r_percent, measured.to_numpy(), "o", color="k", label="our t4")
    if fit is not None:
        inside = grid[grid >= r_percent.min()]
        axes[0].plot(inside, fit(inside), color="tab:purple",
                     label=f"our fit: a = {fit.a:.3g}, gamma = {fit.gamma:.3g}, b = {fit.b:.4g} "
                           f"(R2 = {fit.r2:.4f})")
    axes[0].set(xlabel="training fraction r (%)", ylabel="t4 (steps)", title="Our sweep")
    axes[1].plot(grid, law(grid), color="tab:red", label=f"paper's law (gamma = {law.gamma:g})")
    if fit is not None:
        axes[1].plot(grid, fit(grid), color="tab:purple", ls="--",
                     label="our fit, extrapolated below our data")
    axes[1].plot(r_percent, measured.to_numpy(), "o", color="k", label="our t4")
    axes[1].set(yscale="log", xlabel="training fraction r (%)", ylabel="t4 (steps)",
                title="Beside the paper's law")
    plotting.legend_below(fig, ncol=1)
    fit_words = (rf"fits it with $\gamma$ = {fit.gamma:.2f} and a floor $b$ = {fit.b:.0f} steps "
                 rf"($R^2$ = {fit.r2:.4f}), against the paper's $\gamma$ = {law.gamma:g} and "
                 f"$b$ = {law.b:.0f}"
                 if fit is not None else "cannot be fitted: fewer than four fractions generalised")
    mantissa, exponent = f"{law.a:.2e}".split("e")
    plotting.show(
        fig, "fig-06-power-law",
        caption=r"$t_4$ falls steeply as the training fraction grows, and $t_4(r) = a r^{-\gamma}"
                rf" + b$ {fit_words}. Left: our $t_4$ (dots, mean over seeds) with the "
                "least-squares fit; right: the same on a log scale beside the paper's law, "
                rf"$(\gamma, a, b) = ({law.gamma:g}, {mantissa} \times 10^{{{int(exponent)}}}, "
                rf"{law.b:g})$ for modular addition (its Fig. 7b), with our fit extrapolated "
                f"below our smallest fraction. {provenance[0].upper() + provenance[1:]}.",
        alt="Two plots of t4 against the training fraction in percent. Left: our t4 as dots with "
            "the fitted power-law curve. Right: the same on a log scale together with the paper's "
            "power law and our fit extended to a 20 percent training fraction.")
