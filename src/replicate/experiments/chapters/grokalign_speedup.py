"""Chapter 04, GrokAlign makes grokking happen sooner: who runs with which seed, the verdict
(`judge`) and the figures.

The chapter trains three families of runs, all read here as plain dicts of arrays:
- the paper's operating point (`paper_runs`): {(loss, seed): (weight decay alone, GrokAlign)},
  from `grokalign.paper_point_runs`;
- the chapter's own operating point (`runs`): {(loss, seed, lambda): run}, lambda 0 being
  weight decay alone, from `grokalign.run_mnist`;
- XOR (`xor`): {(seed, lambda): run} from `grokalign.run_xor`, and per seed the comparison of
  the two runs' robustness onsets (`counts`, from `grokalign.earlier_onsets`).

The paper's numbers come from the chapter.yaml's `paper:` block (`run.paper`): the speed-ups in
updates with cross-entropy (`ce-factor`: its mean, and mean +- s.d. as its band) and with the
squared error (`mse-factor`, a mean without a spread), the wall-clock gain with cross-entropy
(`ce-time`) and the seeds per loss of the paper's study (`seeds`).
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D

from ... import plotting
from ...verdict import against_paper, claim, report
from .. import grokalign as ga

LOSS_NAME = {"mse": "squared error", "mse_mean": "squared error (mean)", "ce": "cross-entropy"}
COLOR_WORD = {"C0": "blue", "C1": "orange", "C2": "green", "C3": "red", "C4": "purple"}
WITH = {"mse": "with the squared error", "ce": "with cross-entropy"}


# ----------------------------------------------------------------------------------------------
# Who runs: lambdas and seeds from the parameters. A sweep over `seed` moves every run: each
# family uses `seed` + each of its offsets.

def lambdas(p: dict) -> list[float]:
    """Weight decay alone (0) first, then GrokAlign's strengths, weakest first."""
    return [0.0] + sorted(p["lambdas"])


def mnist_seeds(p: dict) -> dict[str, list[int]]:
    """The chapter's operating point: seeds per loss."""
    return {loss: [p["seed"] + s for s in offsets] for loss, offsets in p["seeds"].items()}


def paper_point(p: dict) -> dict:
    """The parameters at the paper's operating point (`paper_point` is a delta over them)."""
    return {**p, **p["paper_point"]}


def point_seeds(p: dict) -> dict[str, list[int]]:
    """The paper's operating point: seeds per loss."""
    return {loss: [p["seed"] + s for s in offsets]
            for loss, offsets in p["paper_point"]["seeds"].items()}


def xor_seeds(p: dict) -> list[int]:
    return [p["seed"] + s for s in p["xor_seeds"]]


def lambda_colors(p: dict) -> dict[float, str]:
    """One colour per lambda in every figure, weight decay alone first (blue)."""
    return {lam: f"C{i}" for i, lam in enumerate(lambdas(p))}


# ----------------------------------------------------------------------------------------------
# The paper's numbers, from `run.paper`.

def factor_key(loss: str) -> str:
    """The paper's speed-up for a loss: cross-entropy's, or the squared error's for both of our
    squared errors (summed over the outputs, or averaged as in the paper's code)."""
    return "ce-factor" if loss == "ce" else "mse-factor"


def spread(number) -> float:
    """The paper's s.d. of a number given as mean +- s.d. (its band's half-width; 0 if bare)."""
    return (number.band[1] - number.band[0]) / 2


def speedup_band(paper: dict, loss: str) -> tuple[float, float]:
    """The paper's speed-up for `loss` as an interval, which our range over seeds must overlap.

    Cross-entropy's is its mean +- s.d. over the paper's seeds. The squared error's comes as a
    mean without a spread, and an interval of width zero would fail any measured ratio, however
    close; so it gets cross-entropy's *relative* spread (s.d. / mean, about 11%) around its own
    mean: the same study, the same seeds, the same relative noise assumed."""
    ce = paper["ce-factor"]
    if loss == "ce":
        return ce.band
    relative = spread(ce) / ce.value
    mean = paper[factor_key(loss)].value
    return (mean * (1 - relative), mean * (1 + relative))


def paper_text(paper: dict, loss: str) -> str:
    """The paper's speed-up for `loss` in words: 'mean x ± s.d. (n seeds, paper's code)', without
    the s.d. where the paper gives none."""
    number = paper[factor_key(loss)]
    sd = f" ± {spread(number):g}" if spread(number) else ""
    return f"{number.value:g}x{sd} ({paper['seeds'].value} seeds, paper's code)"


def paper_tex(paper: dict, loss: str) -> str:
    """The same for a caption, in TeX: '$(m \\pm s)\\times$', or '$m\\times$' without a spread."""
    number = paper[factor_key(loss)]
    if spread(number):
        return f"$({number.value:g} \\pm {spread(number):g})\\times$"
    return f"${number.value:g}\\times$"


# ----------------------------------------------------------------------------------------------
# Runs in words.

def label(lam: float) -> str:
    return "weight decay only" if lam == 0 else f"GrokAlign, λ = {lam:g}"


def seeds_text(seeds: list) -> str:
    *rest, last = [str(s) for s in seeds]
    return f"seeds {', '.join(rest)} and {last}" if rest else f"seed {last}"


def crossing(r: dict) -> str:
    t = ga.steps_to_threshold(r)
    return f"after {t:,} updates" if t is not None else f"not within {r['steps']:,} updates"


def speedup_text(value: float | None, bound: str) -> str:
    """A speed-up from `grokalign.speedup` in words: '2.75x', '<= 0.80x', '3.10x (lower bound)'."""
    if value is None:
        return "not reached"
    return (("<= " if bound == "upper" else "") + f"{value:.2f}x"
            + (" (lower bound)" if bound == "lower" else ""))


def updates(r: dict) -> int | str:
    """Updates to the threshold, or '> cap' where the run did not cross."""
    t = ga.steps_to_threshold(r)
    return t if t is not None else f"> {r['steps']}"


def chapter_point_runs(p: dict) -> dict:
    """The chapter's operating point, {(loss, seed, lambda): run}: for every seed, weight decay
    alone and the strongest lambda; for the first seed of each loss also the weaker lambdas (the
    dose-response), but only where the strongest crossed before its cap. With `cap_at_baseline`
    a GrokAlign run stops at weight decay alone's count: past it, it is not sooner."""
    runs, strongest = {}, lambdas(p)[-1]
    for loss, loss_seeds in mnist_seeds(p).items():
        for s in loss_seeds:
            base = runs[loss, s, 0.0] = ga.run_mnist(**ga.mnist_config(p, 0.0, loss, s))
            cap = ga.steps_to_threshold(base) if p["cap_at_baseline"] else None
            runs[loss, s, strongest] = ga.run_mnist(**ga.mnist_config(p, strongest, loss, s, cap))
            if s == loss_seeds[0] and ga.steps_to_threshold(runs[loss, s, strongest]) is not None:
                for lam in lambdas(p)[1:-1]:
                    runs[loss, s, lam] = ga.run_mnist(**ga.mnist_config(p, lam, loss, s, cap))
    return runs


def print_chapter_point(p: dict, runs: dict) -> None:
    """Every run at the chapter's point, then each loss's speed-ups per seed."""
    if not runs:
        print("The chapter's operating point is not run at this preset: the `cpu` preset runs "
              "and judges it.")
    for (loss, s, lam), r in runs.items():
        t = ga.steps_to_threshold(r)
        when = f"after {t} updates" if t is not None else f"not within {r['steps']} updates"
        print(f"{loss:>3s} seed {s} {label(lam):>24s}: 85% held-out {when}; "
              f"held-out {r['test_acc'][-1]:.3f}, exact ||J||_F {r['jacobian_norm'][-1]:.3g}")
    strongest = lambdas(p)[-1]
    for loss, seeds in mnist_seeds(p).items():
        pairs = [ga.speedup(runs[loss, s, 0.0], runs[loss, s, strongest]) for s in seeds]
        print(f"speed-up in updates, {LOSS_NAME[loss]}: " + ", ".join(
            f"seed {s}: {speedup_text(*pair)}" for s, pair in zip(seeds, pairs)))


def print_paper_point(p: dict, paper_runs: dict) -> None:
    """Each seed's two runs at the paper's operating point and their speed-up, or where this
    preset leaves that point to the `paper` preset."""
    if not paper_runs:
        print("The paper's operating point is not run at this preset: the `paper` preset runs "
              "and judges it.")
    point = paper_point(p)
    for (loss, s), (base, grok) in paper_runs.items():
        print(f"{LOSS_NAME[loss]}, seed {s}: GrokAlign (lambda {point['lambda'][loss]:g}) "
              f"{crossing(grok)},\n    weight decay alone {crossing(base)}: speed-up "
              f"{speedup_text(*ga.speedup(base, grok))}")


def print_onsets(p: dict, onsets: dict, counts: dict) -> None:
    """Each XOR seed's robustness onset per amplitude, both runs, and whether GrokAlign was
    sooner by the chapter's rule."""
    if not counts:
        print("XOR is not run at this preset.")
        return
    text = lambda t: "-" if t is None else str(t)  # noqa: E731
    lam_x = p["xor_lam"]
    print(f"onset of robustness ({p['xor_robust_level']:.0%} under noise), SGD step, weight decay "
          "/ GrokAlign; '-': not reached")
    print("seed  " + "".join(f"{f'amplitude {a:g}':>15s}" for a in p["xor_amplitudes"])
          + "   sooner?")
    for s in xor_seeds(p):
        row = "".join(f"{text(w) + ' / ' + text(g):>15s}"
                      for w, g in zip(onsets[s, 0.0], onsets[s, lam_x]))
        c = counts[s]
        print(f"{s:>4d}  {row}   {'yes' if ga.sooner_at_most_amplitudes(c) else 'no'} "
              f"({c['grokalign']} earlier, {c['weight decay']} later, {c['tie']} tied)")


def print_xor_ends(p: dict, xor: dict) -> None:
    """Both XOR runs of each seed at their last step."""
    amps, lam_x = p["xor_amplitudes"], p["xor_lam"]
    if not xor:
        return
    print(f"\nat the end ({p['xor_steps']} steps), weight decay / GrokAlign:")
    for s in xor_seeds(p):
        a, b = xor[s, 0.0], xor[s, lam_x]
        print(f"seed {s}: clean test {a['test_acc'][-1]:.2f} / {b['test_acc'][-1]:.2f}; under "
              f"noise {amps[-1]:g}: {a['robust_acc'][-1, -1]:.2f} / {b['robust_acc'][-1, -1]:.2f}; "
              f"centroid norm (mean) {a['centroid_norm'].mean():.2f} / "
              f"{b['centroid_norm'].mean():.2f}; alignment {a['alignment'][-1]:+.2f} / "
              f"{b['alignment'][-1]:+.2f}")


# ----------------------------------------------------------------------------------------------
# The verdict.

def summary(speedups: list) -> tuple[float, list[float], bool, bool]:
    """(median, [min, max], any lower bound, any missing) of per-seed (speed-up, bound) pairs
    from `grokalign.speedup`; a missing ratio (neither run crossed) counts as 0."""
    values = [0.0 if v is None else v for v, _ in speedups]
    return (float(np.median(values)), [float(min(values)), float(max(values))],
            any(b == "lower" for _, b in speedups), any(v is None for v, _ in speedups))


def beside_paper(band: tuple[float, float], speedups: list) -> str:
    """Our range over seeds beside the paper's band, in words (`verdict.against_paper`): a lower
    bound can only be above; a seed whose runs never crossed leaves it inconclusive."""
    _, (low, high), bound, missing = summary(speedups)
    if missing:
        return "inconclusive (a seed's runs did not cross)"
    return against_paper((low, high), band, lower_bound=bound)


def majority(flags) -> bool:
    """More than half: a tie between seeds is not a majority."""
    flags = list(flags)
    return sum(flags) > len(flags) / 2


def crossings_text(pairs: dict, loss: str, seeds: list) -> str:
    """Each seed's two crossings, for a diagnosis: 'seed 0: weight decay alone 62,320 updates,
    GrokAlign 45,560' ('> 80000' where a run did not cross)."""
    def count(r):
        t = updates(r)
        return f"{t:,}" if isinstance(t, int) else t
    return "; ".join(f"seed {s}: weight decay alone {count(pairs[loss, s][0])} updates, "
                     f"GrokAlign {count(pairs[loss, s][1])}" for s in seeds)


def span(rng: list[float]) -> str:
    """'1.31-1.37x', or '1.33x' where the range is one value (one seed)."""
    low, high = f"{rng[0]:.3g}", f"{rng[1]:.3g}"
    return f"{low}x" if low == high else f"{low}-{high}x"


def why_not_most(flags: dict, what: str) -> str | None:
    """None where a per-seed XOR condition holds in a majority of seeds; else a diagnosis: the
    seeds where it failed, and `what` (their numbers)."""
    if majority(flags.values()):
        return None
    return f"fails in seed(s) {', '.join(str(s) for s, ok in flags.items() if not ok)}: {what}"


def check_id(*words: str) -> str:
    """A check's id from words that may hold a loss's key ('mse_mean' -> 'mse-mean')."""
    return "-".join(words).replace("_", "-")


def sooner_claim(where: str, threshold: float, pairs: list, paper: str, why: str, id: str,
                 details: dict | None = None):
    """GrokAlign crosses the threshold sooner than weight decay alone: the median speed-up over
    seeds (`grokalign.speedup` pairs) above 1. A seed whose two runs never crossed makes it
    inconclusive; `why` (each seed's crossings) is the diagnosis where it does not pass, and
    `details` join the numbers shown."""
    med, rng, bound, missing = summary(pairs)
    sooner = med > 1 and not missing
    why = (f"no speed-up where neither run crossed; {why}" if missing
           else f"median speed-up {med:.3g}x; {why}")
    return claim(f"{where}: GrokAlign reaches {threshold:g} held-out accuracy sooner than weight "
                 "decay alone (median speed-up over seeds > 1)", sooner,
                 {"speed-up median": med, "range": rng, "lower bound": bound} | (details or {}),
                 paper,
                 inconclusive=missing, diagnosis=None if sooner else why, id=id)


def paper_point_checks(p: dict, paper: dict, paper_runs: dict) -> list:
    """For each loss at the paper's operating point, two claims: GrokAlign crosses sooner (median
    speed-up over seeds above 1), and by the paper's factor (our range overlaps its band). A seed
    whose two runs never crossed makes both inconclusive; a baseline stopped at its cap gives a
    lower bound, which can say "above" but not "consistent"."""
    point, checks = paper_point(p), []
    for loss, seeds in point_seeds(p).items():
        pairs = [ga.speedup(*paper_runs[loss, s]) for s in seeds]
        med, rng, bound, missing = summary(pairs)
        band = speedup_band(paper, loss)
        beside = beside_paper(band, pairs)
        per_seed = {f"seed {s}": [updates(paper_runs[loss, s][0]), updates(paper_runs[loss, s][1])]
                    for s in seeds}
        where = f"paper's operating point, {LOSS_NAME[loss]} (lambda {point['lambda'][loss]:g})"
        why = crossings_text(paper_runs, loss, seeds)
        paper_range = f"{band[0]:.3g}-{band[1]:.3g}"
        if missing:  # neither run of a seed crossed: no speed-up to judge
            compare_why = f"no speed-up where neither run crossed; {why}"
        else:
            compare_why = (f"weight decay alone stopped at its cap uncrossed, so the speed-up is "
                           f"only known to be at least {rng[0]:.3g}x; {why}" if bound else
                           f"our speed-up {span(rng)} is {beside} the paper's "
                           f"{paper_range}x; {why}")
        checks += [
            sooner_claim(where, p["threshold"], pairs, paper_text(paper, loss), why,
                         check_id("paper-point", loss, "sooner"),
                         {"updates (weight decay only, GrokAlign) per seed": per_seed}),
            claim(f"{where}: the speed-up is the paper's (our range over seeds overlaps "
                  f"{paper_range})", beside == "consistent",
                  {"speed-up median": med, "against the paper": beside, "range": rng,
                   "lower bound": bound},
                  paper_text(paper, loss), inconclusive=beside.startswith("inconclusive"),
                  diagnosis=None if beside == "consistent" else compare_why,
                  id=check_id("paper-point", loss, "factor")),
        ]
    return checks


def paper_point_wall_clock(p: dict, paper: dict, paper_runs: dict, overhead: dict) -> list:
    """Per loss at the paper's operating point, the wall-clock speed-up implied by the median
    speed-up in updates and the per-update cost of its estimator (timed interleaved on the
    preset's network in float32): reported beside the paper's time figure, not judged."""
    point, time = paper_point(p), paper["ce-time"].value
    cost = overhead["ratio"][point["estimator"]]
    return [report(
        f"paper's operating point, {LOSS_NAME[loss]}: wall-clock speed-up (median speed-up in "
        f"updates / per-update cost of the {point['estimator']} estimator)",
        summary([ga.speedup(*paper_runs[loss, s]) for s in seeds])[0] / cost,
        f"{time:g}x less time (CE)" if loss == "ce" else "not given",
        id=check_id("paper-point", loss, "wall-clock")) for loss, seeds in point_seeds(p).items()]


def not_run(what: str, where: str, id: str):
    """A part of the claim this preset does not run, named in the verdict (never a pass)."""
    return report(f"{what}: not run at this preset", where, "", id=id)


def xor_checks(p: dict, xor: dict, counts: dict, small_counts: dict) -> list:
    """XOR at the paper's input dimension: the three parts of the paper's sentence (robust sooner,
    centroid norm lower, alignment higher), each in a majority of seeds; the end state and the
    shrunk setting, reported."""
    seeds, lam_x, amps = xor_seeds(p), p["xor_lam"], p["xor_amplitudes"]
    norm = {(s, lam): xor[s, lam]["centroid_norm"] for s in seeds for lam in (0.0, lam_x)}
    align = {(s, lam): xor[s, lam]["alignment"][-1] for s in seeds for lam in (0.0, lam_x)}
    sooner = {s: ga.sooner_at_most_amplitudes(c) for s, c in counts.items()}
    lower_norm = {s: bool(norm[s, lam_x].mean() < norm[s, 0.0].mean()
                          and norm[s, lam_x][-1] < norm[s, 0.0][-1]) for s in seeds}
    aligned = {s: bool(align[s, lam_x] > align[s, 0.0]) for s in seeds}
    name = f"XOR (p {p['xor_dim']}, width {p['xor_width']})"
    mean_end = lambda key, lam: float(np.mean([xor[s, lam][key][-1] for s in seeds]))  # noqa: E731
    return [
        claim(f"{name}: robustness sooner with GrokAlign at most noise amplitudes (the rule "
              "above), in a majority of seeds", majority(sooner.values()),
              {"seeds where sooner": f"{sum(sooner.values())}/{len(sooner)}",
               "GrokAlign earlier, later, tied, neither, per seed": {
                   f"seed {s}": [c["grokalign"], c["weight decay"], c["tie"], c["neither"]]
                   for s, c in counts.items()}},
              "accelerated onset of robustness",
              diagnosis=why_not_most(sooner, "; ".join(
                  f"seed {s}: GrokAlign earlier at {c['grokalign']}, later at "
                  f"{c['weight decay']}, tied at {c['tie']} of {len(amps)} amplitudes"
                  for s, c in counts.items() if not sooner[s])), id="xor-robust-sooner"),
        claim(f"{name}: the centroid norm stays lower with GrokAlign (mean over checkpoints and "
              "at the end), in a majority of seeds", majority(lower_norm.values()),
              {f"seed {s}": [float(norm[s, lam].mean()) for lam in (0.0, lam_x)] for s in seeds}
              | {"seeds where lower": f"{sum(lower_norm.values())}/{len(seeds)}"},
              "maintained at a relatively lower value",
              diagnosis=why_not_most(lower_norm, "; ".join(
                  f"seed {s}: mean norm {norm[s, lam_x].mean():.3g} with GrokAlign, "
                  f"{norm[s, 0.0].mean():.3g} without; at the end "
                  f"{norm[s, lam_x][-1]:.3g} and {norm[s, 0.0][-1]:.3g}"
                  for s in seeds if not lower_norm[s])), id="xor-centroid-norm-lower"),
        claim(f"{name}: the label-signed centroid alignment ends higher with GrokAlign, in a "
              "majority of seeds", majority(aligned.values()),
              {f"seed {s}": [float(align[s, lam]) for lam in (0.0, lam_x)] for s in seeds}
              | {"seeds where higher": f"{sum(aligned.values())}/{len(seeds)}"},
              "allowing it to become aligned",
              diagnosis=why_not_most(aligned, "; ".join(
                  f"seed {s}: final alignment {align[s, lam_x]:+.3f} with GrokAlign, "
                  f"{align[s, 0.0]:+.3f} without" for s in seeds if not aligned[s])),
              id="xor-alignment-higher"),
        report(f"{name}, at the end: clean test accuracy and accuracy under noise {amps[-1]:g} "
               "(weight decay only, GrokAlign), mean over seeds",
               {"clean": [mean_end("test_acc", lam) for lam in (0.0, lam_x)],
                f"noise {amps[-1]:g}": [
                    float(np.mean([xor[s, lam]["robust_acc"][-1, -1] for s in seeds]))
                    for lam in (0.0, lam_x)]},
               "not given", id="xor-end-accuracy"),
        report("XOR, shrunk setting (" + ", ".join(f"{k} {v}" for k, v in p["xor_small"].items())
               + "): seeds where GrokAlign is robust sooner at most amplitudes",
               f"{sum(ga.sooner_at_most_amplitudes(c) for c in small_counts.values())}/"
               f"{len(small_counts)}", "not run by the paper", id="xor-shrunk-robust-sooner"),
    ]


def dose_response(p: dict, runs: dict, loss: str) -> tuple[dict, bool]:
    """The first seed's updates to the threshold per lambda, in words, and whether they are
    ordered: a larger lambda no later, and the strongest strictly before weight decay alone
    (a run that did not cross, or was not run, counts as never)."""
    first, grid = mnist_seeds(p)[loss][0], lambdas(p)
    order = [ga.steps_to_threshold(runs[loss, first, lam]) if (loss, first, lam) in runs
             else None for lam in grid]
    shown = {f"lambda {lam:g}": (o if o is not None else "not reached"
                                 if (loss, first, lam) in runs else "not run")
             for lam, o in zip(grid, order)}
    order = [float("inf") if o is None else o for o in order]
    return shown, all(a >= b for a, b in zip(order, order[1:])) and order[-1] < order[0]


def chapter_point_checks(p: dict, paper: dict, runs: dict, overhead: dict) -> list:
    """The chapter's own operating point: per loss, GrokAlign crosses sooner (judged, as at the
    paper's point); its speed-up beside the paper's (reported: the paper's factor belongs to the
    paper's point), the dose-response, and the wall-clock gain (the update speed-up over the
    per-update cost ratio) reported beside the verdict."""
    seeds, strongest = mnist_seeds(p), lambdas(p)[-1]
    losses, shown = list(seeds), list(seeds)[0]
    pairs = {(loss, s): (runs[loss, s, 0.0], runs[loss, s, strongest])
             for loss in losses for s in seeds[loss]}
    speedups = {loss: [ga.speedup(*pairs[loss, s]) for s in seeds[loss]] for loss in losses}
    time = paper["ce-time"].value
    checks = []
    for loss in [loss for loss in ("mse", "ce") if loss in losses]:
        where = f"chapter's operating point, {LOSS_NAME[loss]} (lambda {strongest:g})"
        checks.append(sooner_claim(
            where, p["threshold"], speedups[loss],
            f"sooner ({paper_text(paper, loss)} at the paper's own point)",
            crossings_text(pairs, loss, seeds[loss]), check_id("chapter-point", loss, "sooner")))
    for loss in [loss for loss in ("mse", "ce") if loss in losses]:
        med, rng, bound, _ = summary(speedups[loss])
        checks.append(report(
            f"chapter's operating point, {LOSS_NAME[loss]}: speed-up in updates of GrokAlign "
            f"(lambda {strongest:g}, {p['estimator']} estimator), median over seeds",
            {"speed-up median": med, "range": rng, "lower bound": bound,
             "against the paper": beside_paper(speedup_band(paper, loss), speedups[loss]),
             "updates (weight decay only, GrokAlign) per seed": {
                 f"seed {s}": [updates(runs[loss, s, 0.0]), updates(runs[loss, s, strongest])]
                 for s in seeds[loss]}}, paper_text(paper, loss),
            id=check_id("chapter-point", loss, "speedup")))
    for loss in losses:
        order, ordered = dose_response(p, runs, loss)
        checks.append(report(
            f"chapter's operating point, {LOSS_NAME[loss]}: dose-response, a larger lambda reaches "
            "the threshold no later (lambda 0 last)", order | {"ordered": ordered}, "not given",
            id=check_id("chapter-point", loss, "dose-response")))
    cost = overhead["ratio"][p["estimator"]]
    for loss in losses:
        checks.append(report(
            f"chapter's operating point, {LOSS_NAME[loss]}: wall-clock speed-up (update speed-up / "
            "per-update cost ratio)", summary(speedups[loss])[0] / cost,
            f"{time:g}x less time (CE)" if loss == "ce" else "not given",
            id=check_id("chapter-point", loss, "wall-clock")))
    r0, r1 = runs[shown, seeds[shown][0], 0.0], runs[shown, seeds[shown][0], strongest]
    return checks + [
        report(f"{LOSS_NAME[shown]}, first seed: exact mean ||J||_F at GrokAlign's threshold step: "
               "GrokAlign, weight decay only",
               [float(r1["jacobian_norm"][-1]),
                float(np.interp(r1["diagnostic_step"][-1], r0["diagnostic_step"],
                                r0["jacobian_norm"]))], "not given",
               id="first-seed-jacobian-norm"),
        report(f"{LOSS_NAME[shown]}, first seed: mean cos(c(x), x) at the end: weight decay only, "
               "GrokAlign", [float(r0["alignment"][-1]), float(r1["alignment"][-1])],
               "more resemblant of the training point", id="first-seed-centroid-alignment"),
    ]


def cost_reports(p: dict, paper: dict, overhead: dict, agreement: dict) -> list:
    """What an update costs with each estimator, how well one draw points along the exact
    gradient, and the chapter's estimator: reported, a property of our code."""
    ce, time = paper["ce-factor"].value, paper["ce-time"].value
    return [
        # The paper's time and step factors imply what its update cost: steps / time.
        report("per-update cost, GrokAlign / plain (interleaved timing), per estimator",
               overhead["ratio"],
               f"~{ce / time:.2g}x implied ({time:g}x time vs {ce:g}x steps, CE)",
               id="update-cost"),
        report("gradient cosine with the exact one (one draw, at initialisation), per estimator",
               agreement, "not given", id="gradient-cosine"),
        report("estimator of ||J||_F^2 in this preset's MNIST runs",
               f"{p['estimator']}, {p['projections']} draw(s) per point, "
               f"on {p['reg_points']} of {p['batch_size']} points",
               "signs on the outputs, 1 draw per point (paper's code)", id="estimator"),
    ]


def judge(p: dict, paper: dict, paper_runs: dict, runs: dict, xor: dict, xor_counts: dict,
          small_counts: dict, overhead: dict, agreement: dict) -> list:
    """The chapter's checks, for the parts of the claim that this preset runs: at the paper's
    operating point (`paper_point`'s seeds), sooner and by the paper's factor; on XOR at the
    paper's input dimension; at the chapter's own point (`seeds`), sooner, with its speed-up,
    dose-response and wall-clock gain reported. A part that this preset does not run is named
    as such (the `cpu` book leaves the paper's point to the `paper` preset, which leaves the
    chapter's point and, on this machine, XOR to `cpu`). Then the cost of an update and the
    seeds."""
    n = paper["seeds"].value
    checks = (paper_point_checks(p, paper, paper_runs) + paper_point_wall_clock(
        p, paper, paper_runs, overhead) if point_seeds(p) else [not_run(
        "paper's operating point: GrokAlign sooner, by the paper's factor, per loss",
        "judged by the paper preset (float64, the same batches in the same order every epoch)",
        "paper-point")])
    checks += (xor_checks(p, xor, xor_counts, small_counts) if xor_seeds(p) else [not_run(
        f"XOR (p {p['xor_dim']}, width {p['xor_width']}): robustness sooner, centroid norm lower, "
        "alignment higher", "judged by the cpu preset at width "
        "512; the paper's width is not run here (about 1.4 CPU-hours a seed)", "xor")])
    checks += (chapter_point_checks(p, paper, runs, overhead) if mnist_seeds(p) else [not_run(
        "the chapter's operating point: GrokAlign sooner, speed-up, dose-response",
        "judged by the cpu preset", "chapter-point")])
    return checks + cost_reports(p, paper, overhead, agreement) + [
        report("seeds: paper point per loss, chapter's point per loss, XOR",
               {"paper point": point_seeds(p), "chapter's point": mnist_seeds(p),
                "XOR": xor_seeds(p)}, f"CE and MSE, {n} seeds each", id="seeds")]


# ----------------------------------------------------------------------------------------------
# The figures. Each takes the chapter's `run` (its parameters, its paper numbers and the words
# for its preset) and the runs it draws, and shows one numbered figure.

def figure_paper_point(run, paper_runs: dict) -> None:
    """Held-out accuracy of both runs of the first seed of each loss at the paper's point."""
    if not paper_runs:  # the paper's point is not run at this preset
        return
    p, seeds = run.params, point_seeds(run.params)
    point, colors, strongest = paper_point(p), lambda_colors(p), lambdas(p)[-1]
    fig, axes = plt.subplots(1, len(seeds), figsize=(8, 3.4), squeeze=False, sharey=True)
    for ax, loss in zip(axes[0], seeds):
        base, grok = paper_runs[loss, seeds[loss][0]]
        for r, lam in ((base, 0.0), (grok, point["lambda"][loss])):
            color = colors[0.0] if lam == 0 else colors[strongest]
            ax.plot(r["step"], r["test_acc"], color=color,
                    label=label(lam) if lam == 0 else "GrokAlign")
            if r["reached"]:
                ax.axvline(r["steps_to_threshold"], color=color, lw=1, ls=":")
        ax.axhline(p["threshold"], color="0.4", ls="--", lw=1)
        ax.set(xlabel="update", title=f"{LOSS_NAME[loss]}, λ = {point['lambda'][loss]:g}",
               ylim=(0, 1.02))
        plotting.steps_axis(ax)
    axes[0, 0].set_ylabel("held-out accuracy")
    handles, names = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, names, loc="outside upper center", ncol=2, fontsize="small")
    pairs = "; ".join(
        f"{LOSS_NAME[loss]}: GrokAlign {crossing(paper_runs[loss, seeds[loss][0]][1])}, weight "
        f"decay alone {crossing(paper_runs[loss, seeds[loss][0]][0])}" for loss in seeds)
    plotting.show(
        fig, "fig-04-paper-point",
        caption=f"At the paper's operating point, the dotted lines mark each run's first crossing "
                f"of the dashed {p['threshold']:.0%} line: {pairs}. "
                f"{COLOR_WORD[colors[0.0]].capitalize()}: weight decay alone, "
                f"{COLOR_WORD[colors[strongest]]}: GrokAlign at the paper code's $\\lambda$ with "
                "its output-side estimator; a curve "
                "ends at its run's crossing or cap. Width 196 without biases, learning rate "
                f"$10^{{-3}}$, an evaluation every {point['eval_every']} updates; the first seed "
                "of each loss (" + ", ".join(f"{LOSS_NAME[loss]} seed {seeds[loss][0]}"
                                             for loss in seeds) + f"), preset {run.label}.",
        alt="Line plots, one per loss, of held-out accuracy against the update for weight decay "
            "alone and for GrokAlign at the paper's settings, with a dashed threshold line and "
            "dotted vertical lines at each run's first crossing.")


def figure_accuracy(run, runs: dict) -> None:
    """Training and held-out accuracy of every run of the first seed of each loss at the
    chapter's point, one row per loss on a shared update axis."""
    if not runs:  # the chapter's point is not run at this preset
        return
    p, grid = run.params, lambdas(run.params)
    first = {loss: seeds[0] for loss, seeds in mnist_seeds(p).items()}
    losses, strongest = list(first), grid[-1]
    fig, axes = plt.subplots(len(losses), len(grid), figsize=(8, 2.7 * len(losses) + 0.4),
                             sharex="row", sharey=True, squeeze=False)
    for row, loss in enumerate(losses):
        for ax, lam in zip(axes[row], grid):
            plotting.steps_axis(ax, nbins=3)
            if (loss, first[loss], lam) not in runs:
                ax.set_visible(False)
                continue
            r = runs[loss, first[loss], lam]
            ax.plot(r["step"], r["train_acc"], color=plotting.SPLIT_COLORS["train"])
            ax.plot(r["step"], r["test_acc"], color=plotting.SPLIT_COLORS["test"])
            ax.axhline(p["threshold"], color="0.4", ls="--", lw=1)
            if r["reached"]:
                ax.axvline(r["steps_to_threshold"], color="k", lw=1)
            ax.set(xlabel="update", ylim=(0, 1.02))
            ax.set_title(f"{loss.upper()}: {label(lam)}", fontsize="small")
        axes[row, 0].set_ylabel("accuracy")
    marks = [Line2D([], [], color=plotting.SPLIT_COLORS["train"], label="train"),
             Line2D([], [], color=plotting.SPLIT_COLORS["test"], label="held-out"),
             Line2D([], [], color="0.4", ls="--", lw=1, label=f"{p['threshold']:.0%} threshold"),
             Line2D([], [], color="k", lw=1, label="first crossing")]
    fig.legend(handles=marks, loc="outside upper center", ncol=4, fontsize="small")
    missing = any((loss, first[loss], lam) not in runs for loss in losses for lam in grid)
    cross = "; ".join(f"{LOSS_NAME[loss]}, weight decay alone "
                      f"{crossing(runs[loss, first[loss], 0.0])} and GrokAlign at "
                      f"$\\lambda = {strongest:g}$ {crossing(runs[loss, first[loss], strongest])}"
                      for loss in losses)
    plotting.show(
        fig, "fig-04-accuracy",
        caption=f"The solid vertical lines mark where held-out accuracy first exceeds the dashed "
                f"{p['threshold']:.0%} line, on one update axis per row: {cross}. Green is "
                "training accuracy, orange held-out accuracy; a run stops at its first crossing"
                + (", and a missing panel is a run not trained (the weaker $\\lambda$ are run "
                   "only where the strongest crossed)" if missing else "") + ". "
                "MSE: squared error, CE: cross-entropy; the first seed of each loss ("
                + ", ".join(f"{LOSS_NAME[loss]} seed {first[loss]}" for loss in losses)
                + f"), preset {run.label}.",
        alt="Grid of line plots, one row per loss (" + " and ".join(LOSS_NAME[x] for x in losses)
            + ") and one column per run (weight decay only, then GrokAlign at lambda "
            + " and ".join(f"{lam:g}" for lam in grid[1:]) + "): training and held-out accuracy "
            "against the update, with a dashed threshold line and a vertical line where held-out "
            "accuracy first exceeds it. The panels of a row share one update axis.")


def figure_speedups(run, runs: dict, paper_runs: dict) -> None:
    """Left: each seed's updates to the threshold, both runs, at the point this preset judges
    "sooner" at (the chapter's, or the paper's where the chapter's is not run). Right: per loss,
    the speed-ups beside the paper's mean +- s.d.: at the paper's operating point (judged against
    it, solid) and, apart from them, hatched, the chapter's point (not judged against it)."""
    p, paper = run.params, run.paper
    strongest, colors = lambdas(p)[-1], lambda_colors(p)
    # (weight decay alone, GrokAlign) per loss and seed, at each point this preset runs
    points = {"paper's point": {loss: {s: paper_runs[loss, s] for s in seeds}
                                for loss, seeds in point_seeds(p).items()},
              "chapter's point": {loss: {s: (runs[loss, s, 0.0], runs[loss, s, strongest])
                                         for s in seeds}
                                  for loss, seeds in mnist_seeds(p).items()}}
    points = {name: pairs for name, pairs in points.items() if pairs}
    if not points:
        return
    ratios = {name: {loss: [ga.speedup(*pair) for pair in by_seed.values()]
                     for loss, by_seed in pairs.items()} for name, pairs in points.items()}
    left = "chapter's point" if "chapter's point" in points else "paper's point"
    fig, axes = plt.subplots(1, 2, figsize=(8, 4.2))
    for i, (loss, by_seed) in enumerate(points[left].items()):
        for k, pair in enumerate(by_seed.values()):
            counts, x = [], i + 0.05 * (k - (len(by_seed) - 1) / 2)  # seeds side by side
            for j, (r, lam) in enumerate(zip(pair, [0.0, strongest])):
                t = ga.steps_to_threshold(r)
                counts.append(t if t is not None else r["steps"])
                axes[0].scatter(x + 0.4 * j - 0.2, counts[-1], color=colors[lam], zorder=3,
                                facecolors=colors[lam] if t is not None else "none")
            axes[0].plot([x - 0.2, x + 0.2], counts, color="0.6", lw=0.8, zorder=2)
    # Right: one group per paper factor (cross-entropy; the squared error, summed or averaged).
    styles = {"paper's point": (-0.3, dict(color="C0", label="paper's point (judged)")),
              "chapter's point": (0.3, dict(color="0.85", hatch="//", edgecolor="0.5",
                                            label=f"chapter's point, λ = {strongest:g} "
                                                  "(not judged against the paper)"))}
    groups = list(dict.fromkeys(factor_key(loss) for by_loss in ratios.values()
                                for loss in by_loss))
    for i, key in enumerate(groups):
        for name, by_loss in ratios.items():
            for loss, values in by_loss.items():
                measured = [v for v, _ in values if v is not None]
                if factor_key(loss) == key and measured:
                    offset, style = styles[name]
                    axes[1].bar(i + offset, np.median(measured), width=0.25, **style)
                    axes[1].scatter([i + offset] * len(measured), measured, color="k", s=12,
                                    zorder=3, label="one seed")
        if "paper's point" in ratios:  # the paper's number only beside the point it belongs to
            plotting.paper_band(axes[1], paper[key], x=i, label="paper (mean ± s.d.)")
    thr = f"{p['threshold']:.0%}"
    axes[0].set_xticks(range(len(points[left])), [LOSS_NAME[loss] for loss in points[left]])
    axes[0].set(xlim=(-0.6, len(points[left]) - 0.4), ylabel=f"updates to {thr} held-out",
                title=f"The {left}")
    plotting.steps_axis(axes[0], "y", log=True)
    axes[1].set_xticks(range(len(groups)), ["cross-entropy" if key == "ce-factor"
                                            else "squared error" for key in groups])
    axes[1].set_xlim(-0.6, len(groups) - 0.4)
    axes[1].axhline(1, color="0.4", ls="--", lw=1)
    axes[1].set(ylabel="speed-up in updates", title="Speed-ups beside the paper's")
    grokalign = ("GrokAlign" if left == "paper's point" else f"GrokAlign, λ = {strongest:g}")
    plotting.crossed_legend(axes[0], {"weight decay only": colors[0.0],
                                      grokalign: colors[strongest]})
    handles, names = axes[1].get_legend_handles_labels()
    seen = dict(zip(names, handles))
    axes[1].legend(seen.values(), seen.keys(), loc="upper center", bbox_to_anchor=(0.5, -0.12),
                   fontsize="small")

    def medians(values_of: dict, with_paper: bool) -> str:
        return " and ".join(
            f"{'at least ' * any(b == 'lower' for _, b in values_of[loss])}"
            f"{np.median(v):.3g}$\\times$ with {LOSS_NAME[loss]}"
            + (f" (the paper: {paper_tex(paper, loss)})" if with_paper else "") if v else
            f"not measured with {LOSS_NAME[loss]} (no seed's pair of runs crossed)"
            for loss, v in ((loss, [v for v, _ in values_of[loss] if v is not None])
                            for loss in values_of))

    said = []
    if "paper's point" in ratios:
        judged = medians(ratios["paper's point"], True)
        said.append("The judged speed-up, at the paper's operating point (solid bars, right), is "
                    f"{judged}.")
    if "chapter's point" in ratios:
        own = medians(ratios["chapter's point"], "paper's point" not in ratios)
        said.append("The chapter's own point (hatched bars: GrokAlign at "
                    f"$\\lambda = {strongest:g}$ with the `{p['estimator']}` estimator; judged "
                    "\"sooner\", not judged "
                    f"against the paper's factor) gives {own}.")
    if "paper's point" not in ratios:
        said.append("The paper's factor belongs to its own operating point, which the `paper` "
                    "preset runs and judges.")
    plotting.show(
        fig, "fig-04-speedups",
        caption=" ".join(said) + " The dashed line at 1 marks no speed-up; a bar is the median "
                "over seeds, a black dot one seed"
                + (", the diamond the paper's mean $\\pm$ s.d. over "
                   f"{paper['seeds'].value} seeds of its code (it gives no s.d. for the squared "
                   "error)" if "paper's point" in ratios else
                   "; the paper's factors are not drawn, since they belong to its operating point")
                + f". Left, at the {left}: each seed's updates to the {thr} threshold, weight "
                f"decay only in {COLOR_WORD.get(colors[0.0], 'colour')} and GrokAlign in "
                f"{COLOR_WORD.get(colors[strongest], 'colour')}, a grey line joining the two runs "
                "of a seed; an open marker did not cross within its cap and is drawn at the cap. "
                "Seeds: " + "; ".join(
                    f"the {name}, " + ", ".join(f"{LOSS_NAME[loss]} {seeds_text(list(by_seed))}"
                                                for loss, by_seed in pairs.items())
                    for name, pairs in points.items()) + f"; preset {run.label}.",
        alt="Two panels. Left: dot plot on a logarithmic axis of the updates each seed needed to "
            f"reach the threshold at the {left}, for weight decay only and for GrokAlign. "
            "Right: bar chart of the median speed-up in updates per loss, "
            + " and ".join({"paper's point": "at the paper's operating point (judged)",
                            "chapter's point": "hatched, at the chapter's point (not judged "
                                               "against the paper)"}[name] for name in points)
            + ", each seed a dot" + (", and the paper's value as a diamond." if "paper's point"
                                     in ratios else "."))


def figure_jacobian_norm(run, runs: dict) -> None:
    """The exact mean ||J(x)||_F during training, every lambda, first seed of each loss."""
    if not runs:
        return
    p, grid, colors = run.params, lambdas(run.params), lambda_colors(run.params)
    first = {loss: seeds[0] for loss, seeds in mnist_seeds(p).items()}
    losses, strongest = list(first), grid[-1]
    fig, axes = plt.subplots(1, len(losses), figsize=(8, 3.4), squeeze=False, sharey=True)
    for ax, loss in zip(axes[0], losses):
        for lam in grid:
            if (loss, first[loss], lam) in runs:
                r = runs[loss, first[loss], lam]
                ax.plot(r["diagnostic_step"], r["jacobian_norm"], color=colors[lam],
                        label=label(lam))
        ax.set(yscale="log", xlabel="update", title=LOSS_NAME[loss])
        plotting.steps_axis(ax)
    axes[0, 0].set_ylabel(r"mean exact $\|J(x)\|_F$")
    handles, names = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, names, loc="outside upper center", ncol=3, fontsize="small")
    at_end = []
    for loss in losses:
        r0, r1 = runs[loss, first[loss], 0.0], runs[loss, first[loss], strongest]
        base = np.interp(r1["diagnostic_step"][-1], r0["diagnostic_step"], r0["jacobian_norm"])
        at_end.append(f"{r1['jacobian_norm'][-1]:.3g} against {base:.3g} ({LOSS_NAME[loss]}, "
                      f"update {r1['diagnostic_step'][-1]:,})")
    plotting.show(
        fig, "fig-04-jacobian-norm",
        caption=f"Compare the curves at equal updates: where GrokAlign's run at "
                f"$\\lambda = {strongest:g}$ ends, its mean exact $\\|J(x)\\|_F$ is "
                f"{', and '.join(at_end)}, the first number with GrokAlign and the second with "
                "weight decay alone. The norm is computed from the full Jacobian (not the "
                f"training estimator) on {p['jacobian_points']} training points, on a logarithmic "
                "scale; each curve ends where its run first crossed the threshold or reached its "
                "cap. The first seed of each loss (" + ", ".join(
                    f"{LOSS_NAME[loss]} seed {first[loss]}" for loss in losses)
                + f"), preset {run.label}.",
        alt="Two line plots, one per loss (" + " and ".join(LOSS_NAME[x] for x in losses) + "), of "
            "the mean exact Jacobian norm on a logarithmic axis against the update, one line for "
            "weight decay only and one for each GrokAlign strength.")


def figure_centroids(run, runs: dict) -> None:
    """The centroid of one training digit at initialisation, halfway and at the end, both runs
    of the first seed of the first loss."""
    if not runs:  # not run at this preset
        return
    p, strongest = run.params, lambdas(run.params)[-1]
    loss, seeds = next(iter(mnist_seeds(p).items()))
    fig, axes = plt.subplots(2, 3, figsize=(8, 5.8))
    for row, lam in enumerate([0.0, strongest]):
        r = runs[loss, seeds[0], lam]
        steps = r["diagnostic_step"]
        for col, i in enumerate([0, len(steps) // 2, len(steps) - 1]):
            image = r["centroid"][i].reshape(28, 28)
            bound = np.abs(image).max()
            axes[row, col].imshow(image, cmap="RdBu_r", vmin=-bound, vmax=bound)
            axes[row, col].set_title(f"{label(lam)}\nupdate {steps[i]}, "
                                     f"mean cos {r['alignment'][i]:+.2f}", fontsize="small")
    for ax in axes.flat:
        ax.set(xticks=[], yticks=[])
    ends = [runs[loss, seeds[0], lam]["alignment"][-1] for lam in (0.0, strongest)]
    plotting.show(
        fig, "fig-04-centroids",
        caption="A centroid that resembled its training digit would show the digit's shape and a "
                "clearly positive mean alignment $\\cos(c(x), x)$; at the end of the runs the mean "
                f"alignment is {ends[0]:+.2f} with weight decay alone and {ends[1]:+.2f} with "
                "GrokAlign. Rows: weight decay only, then GrokAlign at "
                f"$\\lambda = {strongest:g}$; "
                "columns: initialisation, the middle one of the log-spaced checkpoints of the "
                "diagnostics and the end of the run (the update "
                "and the mean alignment over "
                f"{p['jacobian_points']} training points are in each title). Red is positive, blue "
                "negative, each image on its own colour scale. "
                f"{LOSS_NAME[loss].capitalize()}, seed {seeds[0]}, preset {run.label}.",
        alt="Six 28 by 28 pixel images of the centroid of one training digit in a red and blue "
            "colour map, in two rows (weight decay only, GrokAlign) and three columns "
            "(initialisation, middle and end of training).")


def figure_xor(run, xor: dict, onsets: dict) -> None:
    """Both XOR networks of the first seed: clean accuracy, accuracy under noise, centroid norm
    and label-signed alignment against the step."""
    if not xor:  # not run at this preset
        return
    p = run.params
    s0, lam_x = xor_seeds(p)[0], p["xor_lam"]
    level, amps = p["xor_robust_level"], p["xor_amplitudes"]
    fig, axes = plt.subplots(2, 2, figsize=(8, 6.4))
    axes = axes.flat
    for i, lam in enumerate((0.0, lam_x)):
        r = xor[s0, lam]
        t = np.maximum(r["eval_steps"], 1)
        axes[0].plot(t, r["test_acc"], color=f"C{i}",
                     label="weight decay only" if lam == 0 else f"+ GrokAlign, λ = {lam_x:g}")
        for j, a in enumerate(amps):
            axes[1].plot(t, r["robust_acc"][:, j], color=f"C{i}",
                         alpha=0.35 + 0.65 * (j + 1) / len(amps))
        axes[2].plot(t, r["centroid_norm"], color=f"C{i}")
        axes[3].plot(t, r["alignment"], color=f"C{i}")
    axes[0].set(ylabel="test accuracy", title="clean test accuracy")
    axes[1].set(ylabel="test accuracy under noise", title="robustness (lighter: smaller amplitude)")
    axes[1].axhline(level, color="0.4", ls="--", lw=1)
    axes[2].set(ylabel=r"mean $\|c(x)\|$ (training points)", title="centroid norm", yscale="log")
    axes[3].set(ylabel=r"mean $y\cos(c(x), x)$", title="label-signed centroid alignment")
    for ax in axes:
        ax.set(xscale="log", xlabel="SGD step")
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="outside upper center", ncol=2)
    when = lambda t: f"after {t} steps" if t is not None else "not within the run"  # noqa: E731
    norms = [xor[s0, lam]["centroid_norm"].mean() for lam in (0.0, lam_x)]
    plotting.show(
        fig, "fig-04-xor",
        caption=f"At the smallest noise amplitude ({amps[0]:g}) accuracy under noise first reaches "
                f"the dashed {level:.0%} line {when(onsets[s0, 0.0][0])} with weight decay "
                f"alone and {when(onsets[s0, lam_x][0])} with GrokAlign (top right), while the "
                f"mean centroid norm over the checkpoints is {norms[0]:.2g} without GrokAlign and "
                f"{norms[1]:.2g} with it (bottom left). Blue: weight decay only, orange: with "
                f"GrokAlign at $\\lambda = {lam_x:g}$; top right has one curve per noise "
                "amplitude ("
                + ", ".join(f"{a:g}" for a in amps) + "), lighter for smaller ones, each the mean "
                f"of {p['xor_noise_draws']} fresh noise draws. The step axes are logarithmic, step "
                f"0 drawn at 1. XOR with $p = {p['xor_dim']:,}$ inputs, {p['xor_n']} training "
                f"points and {p['xor_width']} hidden units, seed {s0}; {run.caption()}.",
        alt="Four line plots against the SGD step on a logarithmic axis, each with one line for "
            "weight decay only and one for GrokAlign: clean test accuracy, test accuracy under "
            "noise (one line per noise amplitude), the mean centroid norm (logarithmic) and the "
            "label-signed centroid alignment.")


def figure_xor_onsets(run, full: tuple[dict, dict], shrunk: tuple[dict, dict]) -> None:
    """Every seed's robustness onset per amplitude, both runs, in the two XOR settings: `full`
    (the paper's input dimension) and `shrunk` (`xor_small`), each (onsets, counts) as in
    `judge`."""
    if not full[0]:  # not run at this preset
        return
    p, seeds = run.params, xor_seeds(run.params)
    lam_x, level, amps = p["xor_lam"], p["xor_robust_level"], p["xor_amplitudes"]
    small = {k: p["xor_small"].get(k, p[k]) for k in ("xor_dim", "xor_width")}
    titles = [f"p = {p['xor_dim']:,}, width {p['xor_width']}",
              f"p = {small['xor_dim']:,}, width {small['xor_width']}"]
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.6), sharey=True)
    top = p["xor_steps"] * 1.6  # where "not reached" is drawn
    for ax, title, (onsets, _) in zip(axes, titles, (full, shrunk)):
        for k, s in enumerate(seeds):
            for i, lam in enumerate((0.0, lam_x)):
                x = np.arange(len(amps)) + (i - 0.5) * 0.3 + 0.06 * (k - (len(seeds) - 1) / 2)
                y = np.array([top if t is None else max(t, 1) for t in onsets[s, lam]])
                filled = np.array([t is not None for t in onsets[s, lam]])
                ax.scatter(x[filled], y[filled], color=f"C{i}", s=18, zorder=3)
                ax.scatter(x[~filled], y[~filled], s=18, zorder=3, facecolors="none",
                           edgecolors=f"C{i}")
        ax.axhline(p["xor_steps"], color="0.6", lw=0.8, ls=":")
        ax.set(xticks=range(len(amps)), xticklabels=[f"{a:g}" for a in amps],
               xlabel="noise amplitude", title=title)
        plotting.steps_axis(ax, "y", log=True)
    axes[0].set_ylabel(f"SGD steps to {level:.0%} under noise")
    dot = dict(ls="", marker="o")
    fig.legend(handles=[Line2D([], [], color="C0", label="weight decay only", **dot),
                        Line2D([], [], color="C1", label=f"GrokAlign, λ = {lam_x:g}", **dot),
                        Line2D([], [], color="0.3", markerfacecolor="none",
                               label="open: not reached (drawn above the run's end)", **dot)],
               loc="outside upper center", ncol=3, fontsize="small")
    wins = [sum(ga.sooner_at_most_amplitudes(c) for c in counts.values())
            for _, counts in (full, shrunk)]
    plotting.show(
        fig, "fig-04-xor-onsets",
        caption=f"GrokAlign (orange) becomes robust sooner at most amplitudes in {wins[0]} "
                f"of {len(seeds)} seeds at $p = {p['xor_dim']:,}$ (left) and in "
                f"{wins[1]} of {len(seeds)} in the shrunk setting (right). Each dot "
                f"is one seed's first checkpoint at {level:.0%} accuracy under noise of that "
                "amplitude, weight decay only in blue; an open dot above the dotted line (the "
                f"run's last step) was not reached. Seeds {', '.join(map(str, seeds))}, "
                f"{p['xor_noise_draws']} noise draws per checkpoint; preset {run.label}.",
        alt="Two dot plots, one per XOR setting, of the SGD step (logarithmic) at which each run "
            "first reaches the robustness level, against the noise amplitude, for weight decay "
            "only and for GrokAlign, one dot per seed.")
