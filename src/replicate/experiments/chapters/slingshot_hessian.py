"""Chapter 05, slingshots and the Hessian along a grokking run: what the chapter reads off its
runs (the spikes and the steps between them, the Hessian's extremes at its checkpoints, the
trajectory's principal directions, the clipped runs), its acceptance checks (`judge`) and its
figures.

The runs come from `experiments.slingshot` (cached); everything here reads them and trains
nothing. Step convention as there: step k is the k-th entry of a curve, at position k - 1.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ... import plotting
from ...measures import landscape as ls
from ...models import algorithmic_model
from ...verdict import Check, claim, report
from .. import slingshot as sl

# "Between spikes" leaves out [s - 10, s + 50] of every spike s: the jump and most of its decay.
QUIET_BEFORE, QUIET_AFTER = 10, 50
# A spike's neighbourhood for its gradient-norm and cosine peaks: 10 steps either side.
HOOD = 10
# Hessian checkpoints 0-20 steps after a spike are "at" it; the between-spike ones start 20 steps
# before the first spike, so that the quiet stretch before it counts too.
AT_SPIKE, BEFORE_FIRST = 20, 20
# How long after a spike its peak loss is looked for.
PEAK_WITHIN = 50


# --- The run and its spikes ---------------------------------------------------------------------

def spike_settings(p: dict) -> dict:
    """The spike detector's settings, as `landscape.find_spikes` takes them."""
    return dict(factor=p["spike_factor"], window=p["spike_window"], floor=p["spike_floor"],
                gap=p["spike_gap"])


def describe_task(p: dict, data) -> str:
    """The split and the model, in one line."""
    model = algorithmic_model(p["model"], data.p, p["embed_dim"], p["hidden"])
    n_params = sum(q.numel() for q in model.parameters())
    return (f"{len(data.train_y)} training and {len(data.val_y)} validation pairs of "
            f"a {p['operation']} b ({data.p} classes); {p['model']} with {n_params} parameters")


def between_spike_steps(n_steps: int, t2: int | None, spikes: list[int]) -> np.ndarray:
    """The steps "between spikes": after memorisation (t2) and outside [s - 10, s + 50] of every
    spike s. None in a run that never memorised."""
    def quiet(k):
        return all(not (s - QUIET_BEFORE <= k <= s + QUIET_AFTER) for s in spikes)

    return np.array([k for k in range(1, n_steps + 1) if t2 and k > t2 and quiet(k)], dtype=int)


def peak_loss(loss: np.ndarray, spikes: list[int]) -> list[float]:
    """Each spike's peak: the largest loss from its detection step over the next 50 steps."""
    return [float(loss[s - 1:s + PEAK_WITHIN].max()) for s in spikes]


def slingshots(p: dict, sling: sl.SlingshotRun) -> dict:
    """The run's curves (loss, accuracies, gradient norm, 1 - cos of consecutive weights), its
    memorisation and grokking steps t2 and t4 (accuracy >= 0.99; None if never), the spikes
    after t2 (those found in the finished curve, and those detected while training, around
    which the weights were kept) and the steps between spikes."""
    curves = sling.run
    loss = curves.loss
    t2, t4 = curves.first_step_reaching("train_acc"), curves.first_step_reaching("val_acc")
    spikes = ls.find_spikes(loss, start=t2 or len(loss), **spike_settings(p))
    return {"loss": loss, "train_acc": curves.train_acc, "val_acc": curves.val_acc,
            "grad_norm": curves.grad_norm, "one_minus_cos": 1 - sling.cos_prev, "t2": t2,
            "t4": t4, "spikes": spikes, "online_spikes": sling.online_spikes,
            "between_steps": between_spike_steps(len(loss), t2, spikes)}


def not_grokked(cap: int, val_acc: np.ndarray) -> str:
    """Why a run that reached its cap cannot test a claim about a grokking run."""
    return (f"did not grok within its cap of {cap:,} steps (validation accuracy peaked at "
            f"{val_acc.max():.2f})")


def print_run(p: dict, run: dict) -> None:
    loss, spikes = run["loss"], run["spikes"]
    print(f"t2 (train acc >= 0.99) = {run['t2']}, t4 (val acc >= 0.99) = {run['t4']}; the run "
          f"stopped after {len(loss):,} steps"
          + ("" if run["t4"] is not None else f": it {not_grokked(p['cap'], run['val_acc'])}"))
    print(f"spikes after t2: {spikes}")
    print(f"detected during training: {run['online_spikes']}")
    print("loss at the spikes' peaks (max over the next 50 steps):\n ",
          [f"{peak:.3g}" for peak in peak_loss(loss, spikes)])


# --- The Hessian along the run ------------------------------------------------------------------

def hessian_along(checkpoints: list[int], hess: dict[int, dict]) -> dict:
    """λ_max, λ_min, their Lanczos residuals ‖Hy − θy‖ and the seconds each Lanczos run took,
    as arrays over the checkpoints."""
    return {"steps": np.array(checkpoints),
            **{key: np.array([hess[k][key] for k in checkpoints])
               for key in ("lambda_max", "lambda_min", "residual_max", "residual_min",
                           "seconds")}}


def within_residuals(values: np.ndarray, residuals: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Where each eigenvalue may lie, given its Lanczos estimate θ and residual r = ‖Hy − θy‖:
    a symmetric matrix has an eigenvalue within r of θ, so [θ − r, θ + r]. (That it is the
    extreme one, λ_max or λ_min, is what Lanczos converging on the extremes gives; the residual
    says how far the reported value may be from it.)"""
    return values - residuals, values + residuals


def magnitude_range(values: np.ndarray, residuals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The least and the largest |λ| over [θ − r, θ + r] (the least is 0 when it spans 0)."""
    return np.maximum(np.abs(values) - residuals, 0.0), np.abs(values) + residuals


def _near(k: int, spikes: list[int], lo: int, hi: int) -> bool:
    return any(lo <= k - s <= hi for s in spikes)


def at_spike(steps: np.ndarray, spikes: list[int]) -> np.ndarray:
    """Which checkpoints lie 0-20 steps after a spike."""
    return np.array([_near(k, spikes, 0, AT_SPIKE) for k in steps], dtype=bool)


def between_spikes(steps: np.ndarray, spikes: list[int]) -> np.ndarray:
    """Which checkpoints lie between spikes: from 20 steps before the first spike on, and
    outside [s - 10, s + 50] of every spike s. None in a run without spikes."""
    return np.array([bool(spikes) and k >= spikes[0] - BEFORE_FIRST
                     and not _near(k, spikes, -QUIET_BEFORE, QUIET_AFTER) for k in steps],
                    dtype=bool)


def print_hessians(p: dict, hessian: dict, regular: set, windowed: set, residual: dict) -> None:
    print(f"{len(hessian['steps'])} Hessian checkpoints ({len(regular)} on the grid, "
          f"{len(windowed)} around spikes)")
    print(f"Lanczos residual ||Hy - theta y|| / ||H||, largest over the checkpoints "
          f"({p['lanczos_iterations']} iterations): {residual['lambda_max']:.1e} for lambda_max, "
          f"{residual['lambda_min']:.1e} for lambda_min")


def print_hessian_cost(p: dict, hessian: dict) -> None:
    seconds, hvps = hessian["seconds"], p["lanczos_iterations"]
    print(f"Hessian cost per checkpoint: {hvps} HVPs, "
          f"median {np.median(seconds):.2f} s (range {seconds.min():.2f}-{seconds.max():.2f} s),\n"
          f"{seconds.sum():.0f} s for all {len(seconds)}; "
          f"{1000 * np.median(seconds) / hvps:.0f} ms per HVP")


# --- The trajectory -----------------------------------------------------------------------------

def trajectory(p: dict, sling: sl.SlingshotRun) -> dict:
    """The PCA of M = [θ_t - θ_T] over the regular snapshots, uncentred as the paper writes it
    and centred: the rows' steps (the last is T), θ_T, both PCAs and the share of the variance
    in PC1 + PC2 (and PC1 alone)."""
    rows = sl.pca_rows(p, sling)
    final = sling.snapshots[rows[-1]]
    thetas = np.stack([sling.snapshots[k] for k in rows[:-1]])
    pca = ls.trajectory_pca(thetas, final, centred=False)
    pca_centred = ls.trajectory_pca(thetas, final, centred=True)
    return {"rows": rows, "final": final, "pca": pca, "pca_centred": pca_centred,
            "share": float(pca.variance_ratio[:2].sum()),
            "share_centred": float(pca_centred.variance_ratio[:2].sum()),
            "pc1": float(pca.variance_ratio[0])}


def print_trajectory(traj: dict) -> None:
    print(f"PC1 + PC2 share of the variance: {traj['share']:.4f} (uncentred, as the paper writes "
          f"M), {traj['share_centred']:.4f} (centred);\nPC1 alone: {traj['pc1']:.4f}")


# --- Clipping -----------------------------------------------------------------------------------

def clipping_row(p: dict, curves) -> dict:
    """One run of the ablation: t2, t4, its spikes after t2 and the largest one's peak loss."""
    t2, t4 = curves.first_step_reaching("train_acc"), curves.first_step_reaching("val_acc")
    spikes = ls.find_spikes(curves.loss, start=t2 or len(curves.loss), **spike_settings(p))
    return {"t2": t2, "t4": t4, "spikes": len(spikes),
            "largest spike loss": max(peak_loss(curves.loss, spikes), default=0.0)}


def clipping_ablation(p: dict, unclipped, clipped: dict) -> dict:
    """The rows of the ablation: "none" for the unclipped run, then one per threshold η (by
    f"{η:g}")."""
    return {"none": clipping_row(p, unclipped),
            **{f"{eta:g}": clipping_row(p, c) for eta, c in clipped.items()}}


def print_ablation(ablation: dict) -> None:
    for name, row in ablation.items():
        print(f"clip {name:>5}: " + ", ".join(f"{k} {v:.3g}" if isinstance(v, float)
                                             else f"{k} {v}" for k, v in row.items()))


# --- The verdict --------------------------------------------------------------------------------

def judge(p: dict, paper: dict, run: dict, hessian: dict, traj: dict, clipped: dict,
          residual: dict) -> list[Check]:
    """The chapter's checks, from the parameters `p`, the paper's numbers and words (`paper`,
    chapter.yaml's `paper:` block), the run as `slingshots` reads it, the Hessian's extremes at
    its checkpoints (`hessian_along`), the trajectory's PCA (`trajectory`: share, share_centred,
    pc1, rows), the clipped runs ({η: curves}) and the Lanczos residuals (`residual_summary`).

    A claim about a grokking run that does not pass reads INCONCLUSIVE, with the reason, when
    the run never grokked (t4 None); a clipped run that never grokked is INCONCLUSIVE too."""
    loss, spikes, t2, t4 = run["loss"], run["spikes"], run["t2"], run["t4"]
    grokked = t4 is not None

    def about_grokking(passed, why):
        if passed:
            return {}
        return {"inconclusive": not grokked, "diagnosis": why if grokked else
                f"the run {not_grokked(p['cap'], run['val_acc'])}; {why}"}

    checks = [_spike_count(loss, spikes, t2, t4, paper, about_grokking),
              *_jumps_at_spikes(run, paper, about_grokking),
              *_curvature(hessian, spikes, paper, about_grokking, p["lanczos_iterations"]),
              *_two_directions(traj, len(spikes), paper)]
    # the unclipped run's row of the ablation (clipping_row on its curves finds these spikes)
    unclipped = {"spikes": len(spikes), "largest spike loss": max(peak_loss(loss, spikes),
                                                                  default=0.0)}
    for i, (eta, curves) in enumerate(clipped.items(), start=1):
        checks += _clipping(p, i, eta, curves, unclipped, t4, paper)
    between_steps = run["between_steps"]
    if len(between_steps):
        lo, hi = np.nanpercentile(run["one_minus_cos"][between_steps - 1], [5, 95])
        checks.append(report("1 - cos(consecutive weights) between spikes, 5th and 95th "
                             "percentile", [float(lo), float(hi)],
                             paper["cosine-between-spikes"].value, id="cosine-between-spikes"))
    return checks + [
        report("t2 and t4 of the run (train / validation accuracy >= 0.99)",
               {"t2": t2, "t4": t4}, "not given", id="memorisation-and-grokking-steps"),
        report("Lanczos Hessian-vector products per Hessian checkpoint",
               p["lanczos_iterations"], "not given", id="lanczos-iterations"),
        report("Lanczos residual ||Hy - theta y|| / ||H||, largest over the checkpoints",
               {name: sl.order_of_magnitude(r) for name, r in residual.items()}, "not given",
               id="lanczos-residual")]


def _spike_count(loss, spikes, t2, t4, paper, about_grokking) -> Check:
    passed = len(spikes) >= 3
    return claim("at least 3 loss spikes (> 10x the recent minimum) after memorisation",
                 passed, len(spikes), paper["loss-spikes"].value,
                 **about_grokking(passed, f"{len(spikes)} spike(s) after t2 in the run "
                                          f"({len(loss):,} steps, t2 = {t2}, t4 = {t4})"),
                 id="loss-spikes")


def _jumps_at_spikes(run, paper, about_grokking) -> list[Check]:
    """The gradient norm and 1 - cos at each spike (largest within 10 steps either side of it)
    against their medians between spikes: >= 100x and >= 5x at 80% of the spikes or more."""
    spikes, between_steps = run["spikes"], run["between_steps"]

    def hood(series, s):
        return float(np.nanmax(series[max(0, s - HOOD - 1):s + HOOD]))

    checks = []
    for series, factor, name, key in [
            ("grad_norm", 100, "the gradient norm peaks at >= 100x its between-spike median",
             "gradient-spikes"),
            ("one_minus_cos", 5, "1 - cos(consecutive weights, float64) is >= 5x its median",
             "cosine-jumps")]:
        values = run[series]
        median = (float(np.median(values[between_steps - 1])) if len(between_steps)
                  else float("nan"))
        ok = [hood(values, s) >= factor * median for s in spikes]
        passed = bool(spikes) and np.mean(ok) >= 0.8
        checks.append(claim(
            f"at >= 80% of spikes {name}", passed,
            {"share": float(np.mean(ok)) if spikes else 0.0,
             "peak / median": [hood(values, s) / median for s in spikes]},
            paper[key].value,
            **about_grokking(passed, "no spike to look at" if not spikes else
                             f"{sum(ok)} of {len(spikes)} spikes reach {factor}x"), id=key))
    return checks


def _curvature(hessian, spikes, paper, about_grokking, iterations) -> list[Check]:
    """λ_max and λ_min at the checkpoints at a spike against those between spikes.

    Each check is decided at the reported eigenvalues and again at the two ends of what their
    Lanczos residuals allow (every value moved within [θ − r, θ + r] against the check, then for
    it): a check whose answer differs between the two ends read an eigenvalue that had not
    converged enough to decide it, and is INCONCLUSIVE with the range it could take."""
    lmax, lmin = hessian["lambda_max"], hessian["lambda_min"]
    rmax, rmin = hessian["residual_max"], hessian["residual_min"]
    at, between = at_spike(hessian["steps"], spikes), between_spikes(hessian["steps"], spikes)
    nan_range = [float("nan"), float("nan")]

    def over(x, y) -> float:  # a ratio whose denominator the residuals may take to 0
        return float(x / y) if y > 0 else float("inf")

    if at.any() and between.any():
        ratio_max = float(np.median(lmax[at]) / np.median(lmax[between]))
        (at_low, at_high), (b_low, b_high) = (within_residuals(lmax[at], rmax[at]),
                                              within_residuals(lmax[between], rmax[between]))
        max_range = [over(np.median(at_low), np.median(b_high)),
                     over(np.median(at_high), np.median(b_low))]
        neg = float(lmin[at].min())
        neg_low, neg_high = (float(v.min()) for v in within_residuals(lmin[at], rmin[at]))
        small, large = magnitude_range(lmin[between], rmin[between])
        ratio_min = abs(neg) / float(np.median(np.abs(lmin[between])))
        # against the claim: the most negative value as close to 0 as allowed, the between-spike
        # values as large; for it, the other way round
        min_range = [over(abs(min(neg_high, 0.0)), np.median(large)),
                     over(abs(min(neg_low, 0.0)), np.median(small))]
        negative_range = (neg_high < 0, neg_low < 0)
        rel_between = float(np.median(np.abs(lmin[between]) / lmax[between]))
        b_max_low, b_max_high = within_residuals(lmax[between], rmax[between])
        rel_range = [float(np.median([over(a, b) for a, b in zip(small, b_max_high)])),
                     float(np.median([over(a, b) for a, b in zip(large, b_max_low)]))]
    else:
        ratio_max = neg = ratio_min = rel_between = float("nan")
        max_range, min_range, rel_range = nan_range, nan_range, nan_range
        negative_range = (False, False)
    why = (f"{int(at.sum())} Hessian checkpoint(s) at a spike and {int(between.sum())} between "
           f"spikes")

    def decided(passes: tuple[bool, bool], value_range, threshold: str) -> dict:
        """{} when both ends of the residuals agree; else INCONCLUSIVE with the range."""
        if passes[0] == passes[1]:
            return {}
        low, high = value_range
        where = (f"lies between {low:.3g} and {high:.3g}" if np.isfinite(high) else
                 f"is at least {low:.3g} and unbounded above (a residual spans 0)")
        return {"inconclusive": True, "diagnosis":
                f"within the Lanczos residuals ({iterations} iterations) the ratio {where}, on "
                f"both sides of {threshold}: the eigenvalues it reads have not converged enough "
                "to decide; more `lanczos_iterations` would"}

    def judged(passed: bool, passes, value_range, threshold: str, why_not: str) -> dict:
        return decided(passes, value_range, threshold) or about_grokking(passed, why_not)

    # (against the claim, for it) at the ends of the residuals: a split leaves the check undecided
    def shown(value_range) -> list:  # JSON has no infinity: an unbounded end in words
        return [v if np.isfinite(v) or np.isnan(v) else "unbounded" for v in value_range]

    max_ends = tuple(r >= 10 for r in max_range)
    min_ends = tuple(bool(n and r >= 10) for n, r in zip(negative_range, min_range))
    rel_ends = (rel_range[1] <= 0.05, rel_range[0] <= 0.05)  # "small": its worst end is the top
    max_passed = ratio_max >= 10 and len(set(max_ends)) == 1
    min_passed = neg < 0 and ratio_min >= 10 and len(set(min_ends)) == 1
    rel_passed = rel_between <= 0.05 and len(set(rel_ends)) == 1
    return [
        claim("median lambda_max at spikes >= 10x its median between spikes",
              max_passed, {"ratio": ratio_max, "within Lanczos residuals": shown(max_range)},
              paper["lambda-max-at-spikes"].value,
              **judged(max_passed, max_ends, max_range, "10", f"ratio {ratio_max:.3g}; {why}"),
              id="lambda-max-at-spikes"),
        claim("lambda_min at spikes < 0 with |lambda_min| >= 10x its between-spike median",
              min_passed, {"min lambda_min": neg, "ratio": ratio_min,
                           "ratio within Lanczos residuals": shown(min_range)},
              paper["lambda-min-at-spikes"].value,
              **judged(min_passed, min_ends, min_range, "10",
                       f"lambda_min {neg:.3g}, ratio {ratio_min:.3g}; {why}"),
              id="lambda-min-at-spikes"),
        claim("between spikes |lambda_min| / lambda_max (median) <= 0.05",
              rel_passed, {"median ratio": rel_between,
                           "within Lanczos residuals": shown(rel_range)},
              paper["lambda-min-between-spikes"].value,
              **judged(rel_passed, rel_ends, rel_range, "0.05",
                       f"median ratio {rel_between:.3g}; {why}"),
              id="lambda-min-between-spikes")]


def _two_directions(traj, n_spikes, paper) -> list[Check]:
    """The paper's own number: more than its share of the variance in two directions. A fact of
    the trajectory, grokked or not, so never INCONCLUSIVE."""
    share, share_centred, rows = traj["share"], traj["share_centred"], traj["rows"]
    least = paper["pca-share"].value
    passed = share > least
    return [
        claim(f"PC1 + PC2 explain more than {least:.0%} of the trajectory variance (uncentred M)",
              passed, {"share": share, "against the paper": "consistent" if passed else "below"},
              f"more than {least:.0%}",
              diagnosis=None if passed else
              f"two directions hold {share:.1%} of the variance ({share_centred:.1%} centred; "
              f"PC1 alone {traj['pc1']:.1%}) over {len(rows) - 1} snapshots from step 1 to "
              f"{rows[-2]:,} and {n_spikes} spike(s)", id="pca-share"),
        report("PC1 + PC2 share with a centred PCA", share_centred,
               f"more than {least:.0%} (M not centred)", id="pca-share-centred")]


def _clipping(p, i, eta, curves, unclipped, t4, paper) -> list[Check]:
    """The i-th clipping threshold η: the clipped run still groks (INCONCLUSIVE if it reached
    its cap: that shows only that it had not grokked yet); how much later; its spikes."""
    row = clipping_row(p, curves)
    grokked = row["t4"] is not None
    checks = [claim(f"with gradient clipping at {eta:g} the model still groks (t4 finite)",
                    grokked, row["t4"], paper["clipping-groks"].value,
                    inconclusive=not grokked, diagnosis=None if grokked else
                    f"the clipped run did not grok within its cap of {p['cap']:,} steps "
                    f"(validation accuracy peaked at {curves.val_acc.max():.2f}; "
                    f"unclipped t4 = {t4})", id=f"clipped-run-{i}-groks")]
    if row["t4"] is not None and t4 is not None:
        checks.append(report(f"clipping at {eta:g} slows generalisation (t4 clipped vs unclipped)",
                             {"t4 clipped": row["t4"], "t4 unclipped": t4,
                              "slowed": row["t4"] > t4},
                             paper["clipping-slows"].value, id=f"clipped-run-{i}-slower"))
    largest = unclipped["largest spike loss"]
    checks.append(report(f"spikes with clipping at {eta:g} (count, largest peak loss) vs none",
                         {"clipped": [row["spikes"], row["largest spike loss"]],
                          "unclipped": [unclipped["spikes"], largest],
                          "shrunk": row["largest spike loss"] < largest},
                         paper["clipping-spikes"].value, id=f"clipped-run-{i}-spikes"))
    return checks


# --- Figures ------------------------------------------------------------------------------------

def _mark_spikes(ax, spikes: list[int], label: str | None = None, lw: float = 0.6,
                 alpha: float = 0.4) -> None:
    """A faint red line at each detected spike (labelled once)."""
    for s in spikes:
        ax.axvline(s, color="tab:red", lw=lw, alpha=alpha, label=label if s == spikes[0] else None)


def figure_run(chapter_run, run: dict) -> None:
    """The whole run: loss, accuracies, gradient norm and 1 - cos, spikes, t2 and t4 marked."""
    steps = np.arange(1, len(run["loss"]) + 1)
    fig, axes = plt.subplots(4, 1, figsize=(8, 10), sharex=True)
    axes[0].plot(steps, run["loss"], color="tab:blue", lw=0.8)
    axes[0].set(yscale="log", ylabel="training loss",
                title="Loss, accuracy, gradient norm and weight cosine")
    axes[1].plot(steps, run["train_acc"], color=plotting.SPLIT_COLORS["train"], label="train")
    axes[1].plot(steps, run["val_acc"], color=plotting.SPLIT_COLORS["test"], label="validation")
    axes[1].set(ylabel="accuracy")
    axes[2].plot(steps, run["grad_norm"], color="tab:brown", lw=0.8)  # green is "train"
    axes[2].set(yscale="log", ylabel="gradient norm")
    axes[3].plot(steps, run["one_minus_cos"], color="tab:purple", lw=0.8)
    axes[3].set(yscale="log", ylabel=r"$1 - \cos(\theta_t, \theta_{t-1})$", xlabel="step")
    plotting.steps_axis(axes[3], nbins=6)
    for ax in axes:
        _mark_spikes(ax, run["spikes"], "detected spike" if ax is axes[1] else None, 0.8, 0.5)
        for t in (run["t2"], run["t4"]):
            if t:
                ax.axvline(t, color="0.3", ls="--", lw=0.8,
                           label="$t_2$ and $t_4$" if ax is axes[1] and t == run["t2"] else None)
    plotting.legend_below(fig, axes=[axes[1]], ncol=4)
    plotting.show(
        fig, "fig-05-run",
        caption=r"After memorisation the training loss spikes again and again, and at each spike "
                r"the gradient norm and $1 - \cos$ of consecutive weights jump with it while "
                r"validation accuracy dips. Panels from the top: training loss; train (green) and "
                r"validation (orange) accuracy; gradient norm; $1 - \cos(\theta_t, \theta_{t-1})$, "
                r"computed from float64 copies of the weights. Red lines mark the detected spikes, "
                r"dashed grey lines $t_2$ (memorisation) and $t_4$ (generalisation). "
                f"Cf. the paper's {chapter_run.paper['loss-spikes'].where}; "
                f"{chapter_run.caption()}.",
        alt="Four stacked line plots against the training step: training loss (log scale), train "
            "and validation accuracy, gradient norm (log scale) and one minus the cosine of "
            "consecutive weights (log scale), with vertical lines at the detected spikes and at "
            "the memorisation and generalisation steps t2 and t4.")


def figure_spikes(chapter_run, run: dict) -> None:
    """Every spike, aligned on its detection step: loss, gradient norm and 1 - cos."""
    fig, axes = plotting.panel_grid(3, row_height=3.3)
    offsets = np.arange(-50, 201)
    series = [run["loss"], run["grad_norm"], run["one_minus_cos"]]
    for s in run["spikes"]:
        idx = s - 1 + offsets
        ok = (idx >= 0) & (idx < len(run["loss"]))
        for ax, values in zip(axes, series):
            ax.plot(offsets[ok], values[idx[ok]], lw=1, label=f"spike at step {s}")
    names = ["training loss", "gradient norm", r"$1 - \cos(\theta_t, \theta_{t-1})$"]
    for ax, name in zip(axes, names):
        ax.set(yscale="log", xlabel="steps from the spike", ylabel=name)
    plotting.legend_below(fig, axes=[axes[0]], ncol=3)
    plotting.show(
        fig, "fig-05-spikes",
        caption=r"Every spike has the same shape: the loss and the gradient norm jump by orders of "
                r"magnitude within a few steps and decay over the next hundred, while $1 - \cos$ "
                r"of consecutive weights peaks at the spike and then falls far below its level "
                r"before it. One line per detected spike, aligned on its detection step (step 0); "
                f"all three vertical axes are logarithmic. Run: {chapter_run.caption()}.",
        alt="Three line plots against steps from the spike, from 50 before to 200 after, of the "
            "training loss, the gradient norm and one minus the cosine of consecutive weights, "
            "all on log scales, with one line for each detected spike.")


def figure_hessian(chapter_run, hessian: dict, spikes: list[int]) -> None:
    """λ_max, λ_min and their ratio at every checkpoint, those just after a spike crossed."""
    ks, lmax, lmin = hessian["steps"], hessian["lambda_max"], hessian["lambda_min"]
    at = at_spike(ks, spikes)
    fig, axes = plt.subplots(3, 1, figsize=(8, 8.5), sharex=True)
    axes[0].plot(ks, lmax, "o-", ms=3, color="tab:blue")
    axes[0].set(yscale="log", ylabel=r"$\lambda_{max}$",
                title="Extreme Hessian eigenvalues of the training loss")
    axes[1].plot(ks, lmin, "o-", ms=3, color="tab:orange")
    nonzero = np.abs(lmin[lmin != 0])
    axes[1].set_yscale("symlog", linthresh=max(1e-8, float(nonzero.min())) if len(nonzero)
                       else 1e-8)
    axes[1].set(ylabel=r"$\lambda_{min}$ (symlog)")
    axes[1].axhline(0, color="0.5", lw=0.6)
    axes[2].plot(ks, lmin / lmax, "o-", ms=3, color="tab:purple")
    axes[2].set_yscale("symlog", linthresh=1e-4)
    axes[2].set(ylabel=r"$\lambda_{min}/\lambda_{max}$ (symlog)", xlabel="step")
    plotting.steps_axis(axes[2], nbins=6)
    for ax, values in zip(axes, [lmax, lmin, lmin / lmax]):
        ax.plot(ks[at], values[at], "x", color="tab:red", ms=7,
                label="checkpoint 0-20 steps after a spike")
        _mark_spikes(ax, spikes)
    plotting.legend_below(fig, axes=[axes[0]], ncol=1)
    plotting.show(
        fig, "fig-05-hessian",
        caption=r"At the spikes $\lambda_{max}$ jumps by orders of magnitude and $\lambda_{min}$ "
                r"turns clearly negative, while between spikes $|\lambda_{min}|$ stays a small "
                r"fraction of $\lambda_{max}$. From the top: $\lambda_{max}$, $\lambda_{min}$ and "
                r"the ratio $\lambda_{min}/\lambda_{max}$ (the paper's condition number), the last "
                r"two on a symmetric log scale, linear near 0; red crosses mark the checkpoints "
                r"0-20 steps after a spike, faint red lines the detected spikes. "
                f"Lanczos with {chapter_run.params['lanczos_iterations']} Hessian-vector products "
                f"per checkpoint; cf. the paper's "
                f"{chapter_run.paper['lambda-max-at-spikes'].where}; {chapter_run.caption()}.",
        alt="Three stacked plots against the training step, one dot per Hessian checkpoint: the "
            "largest Hessian eigenvalue on a log scale, the smallest eigenvalue and the ratio of "
            "the two on symmetric log scales, with crosses at the checkpoints just after a spike "
            "and vertical lines at the spikes.")


def figure_first_spike(chapter_run, hessian: dict, run: dict) -> None:
    """The loss, λ_max and λ_min at the checkpoints through the first spike; an empty panel when
    there is none (the text cites the figure all the same)."""
    if not run["spikes"]:
        fig, ax = plt.subplots(figsize=(8, 1.2))
        ax.text(0.5, 0.5, "no loss spike after memorisation in this run", ha="center",
                va="center")
        ax.set_axis_off()
        plotting.show(fig, "fig-05-first-spike",
                      caption=f"This run has no loss spike after memorisation, so there is no "
                              f"slingshot to follow. Run: {chapter_run.caption()}.",
                      alt="An empty panel: this run has no loss spike to show.")
        return
    s0, ks = run["spikes"][0], hessian["steps"]
    sel = [i for i, k in enumerate(ks) if -25 <= k - s0 <= 110]
    fig, axes = plotting.panel_grid(3, row_height=3.3)
    offs = ks[sel] - s0
    axes[0].plot(offs, run["loss"][ks[sel] - 1], "o-", color="tab:blue")
    axes[0].set(yscale="log", ylabel="training loss")
    axes[1].plot(offs, hessian["lambda_max"][sel], "o-")
    axes[1].set(yscale="log", ylabel=r"$\lambda_{max}$")
    axes[2].plot(offs, hessian["lambda_min"][sel], "o-", color="tab:orange")
    axes[2].axhline(0, color="0.5", lw=0.6)
    axes[2].set(ylabel=r"$\lambda_{min}$")
    fig.supxlabel(f"steps from the spike at step {s0}")
    plotting.show(
        fig, "fig-05-first-spike",
        caption=r"Through the first slingshot $\lambda_{max}$ rises by orders of magnitude with "
                r"the loss and $\lambda_{min}$ turns negative; $\lambda_{min}$ is back near zero "
                r"well before $\lambda_{max}$ and the loss have decayed. Dots: the Hessian "
                r"checkpoints from 25 steps before to 110 steps after the spike; training loss "
                r"and $\lambda_{max}$ on log scales, $\lambda_{min}$ on a linear scale with a grey "
                f"line at 0. Run: {chapter_run.caption()}.",
        alt="Three line plots against steps from the first spike, one dot per Hessian "
            "checkpoint: the training loss and the largest Hessian eigenvalue on log scales, "
            "and the smallest eigenvalue on a linear scale.")


def figure_trajectory(chapter_run, sling: sl.SlingshotRun, traj: dict, grid, surface,
                      spikes: list[int]) -> None:
    """The PC1 and PC2 coordinates along the run, and the loss on their plane through θ_T with
    the trajectory on it."""
    pca, share, (a_grid, b_grid) = traj["pca"], traj["share"], grid
    alpha, beta = pca.coords[:, 0], pca.coords[:, 1]
    row_steps = np.array(traj["rows"][:-1])
    fig, axes = plt.subplots(2, 1, figsize=(8, 9))
    axes[0].plot(row_steps, alpha, label=r"$\alpha(t)$ (PC1)")
    axes[0].plot(row_steps, beta, label=r"$\beta(t)$ (PC2)")
    _mark_spikes(axes[0], spikes)
    axes[0].set(xlabel="step", ylabel=r"projection of $\theta_t - \theta_T$",
                title=f"PCA coordinates (PC1+PC2 = {100 * share:.1f}% of the variance)")
    plotting.steps_axis(axes[0], nbins=6)
    mesh = axes[1].contourf(a_grid, b_grid, np.log10(surface), levels=30, cmap="viridis")
    fig.colorbar(mesh, ax=axes[1], label="log10 training loss")
    points = axes[1].scatter(alpha, beta, c=row_steps, cmap="autumn", s=8, zorder=3)
    fig.colorbar(points, ax=axes[1], label="step")
    spike_xy = np.array([(sling.snapshots[s] - traj["final"]) @ pca.directions.T
                         for s in sling.online_spikes if s in sling.snapshots])
    if len(spike_xy):
        axes[1].plot(spike_xy[:, 0], spike_xy[:, 1], "x", color="white", ms=8, label="spikes")
    axes[1].plot(0, 0, "*", color="black", ms=12, label=r"$\theta_T$")
    axes[1].set(xlabel="PC1", ylabel="PC2",
                title="Training loss in the PC1-PC2 plane through $\\theta_T$")
    plotting.legend_below(fig, ncol=4, facecolor="0.8")
    plotting.show(
        fig, "fig-05-trajectory",
        caption=r"The weights move in one sweep from their start until the first spike, then "
                r"approach the final weights $\theta_T$ in a zigzag with one turn per slingshot. "
                r"Top: the projections $\alpha(t)$ on PC1 and $\beta(t)$ on PC2 of "
                r"$\theta_t - \theta_T$, faint red lines at the detected spikes; bottom: "
                r"$\log_{10}$ of the training loss on the plane through $\theta_T$ (black star) "
                r"spanned by PC1 and PC2, with the snapshots coloured by step and the spikes as "
                f"white crosses. The two directions hold {100 * share:.1f}% of the variance of $M$ "
                f"(uncentred, as in the paper); cf. the paper's "
                f"{chapter_run.paper['pca-share'].where}; {chapter_run.caption()}.",
        alt="Top: line plot of the first two principal-component coordinates of the weights "
            "against the training step. Bottom: contour map of the training loss over the plane "
            "of the first two principal components, with the weight trajectory as dots coloured "
            "by step and crosses at the spikes.")


def figure_clipping(chapter_run, unclipped, clipped: dict, ablation: dict) -> None:
    """Training loss and validation accuracy with and without clipping."""
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.9))
    shown = [("no clipping", unclipped)] + [(f"clip at $\\eta$ = {eta:g}", c)
                                            for eta, c in clipped.items()]
    for name, c in shown:
        axes[0].plot(np.arange(1, len(c.loss) + 1), c.loss, lw=0.7, label=name)
        axes[1].plot(np.arange(1, len(c.val_acc) + 1), c.val_acc, lw=1, label=name)
    axes[0].set(yscale="log", xlabel="step", ylabel="training loss", title="Training loss")
    axes[1].set(xlabel="step", ylabel="validation accuracy", title="Generalisation")
    for ax in axes:
        plotting.steps_axis(ax, nbins=6)
    plotting.legend_below(fig, ncol=3)
    spike_counts = ", ".join(f"{row['spikes']} with clipping at {name}"
                             for name, row in ablation.items() if name != "none")
    plotting.show(
        fig, "fig-05-clipping",
        caption="Clipping the gradient norm does not remove the slingshots, and validation "
                "accuracy climbs at almost the same pace with and without it. Left: training loss "
                r"(log scale); right: validation accuracy; one colour per clipping threshold "
                r"$\eta$. "
                f"Loss spikes detected after $t_2$: {ablation['none']['spikes']} without clipping, "
                f"{spike_counts}; {chapter_run.caption()}.",
        alt="Two line plots against the training step, one line per clipping setting (none, and "
            "each threshold): the training loss on a log scale, and the validation accuracy.")
