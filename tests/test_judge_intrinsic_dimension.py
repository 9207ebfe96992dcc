"""Chapter 06's judge on planted sweeps: hand-made tables of runs (no training), one for each way
the verdict can go."""
import math

import numpy as np
import pandas as pd
import pytest

from replicate.config import PaperNumber, get_chapter
from replicate.experiments.chapters import intrinsic_dimension as chapter
from replicate.measures.intrinsic_dimension import PowerLaw

P = {"marked_change": 0.25}
FRACTIONS = [0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
MARKED = "in every run some layer's ID changes by >= 25% between t2 and t4"
POWER_LAW = "the power law t4 = a r^-gamma + b (r in %) fits with R2 >= 0.95 and gamma > 1"
T4_FALLS = "t4 decreases strictly with r (every fraction generalises within its budget)"


def number(value, band=None):
    return PaperNumber(value, band or (value, value), "somewhere", "something")


def paper(gamma=7.73, gamma_band=None, pearson=0.996):
    return {"estimators-pearson": number(pearson), "power-law-gamma": number(gamma, gamma_band),
            "power-law-a": number(1.09e15), "power-law-b": number(1442.63)}


def synthetic(mle=(2.0, 5.0, 10.0), twonn=(2.0, 5.0, 10.0)):
    """The estimators' answers on data of dimension 2, 5 and 10 (the third column is the plain
    mean, which the check ignores)."""
    return pd.DataFrame({"MLE (MacKay-Ghahramani)": mle, "TwoNN": twonn,
                         "MLE, plain mean (Levina-Bickel)": [30.0, 40.0, 50.0]},
                        index=pd.Index([2, 5, 10], name="true dimension"))


def law(r, gamma=2.0, a=1.0e6, b=100.0):
    """t4 on an exact power law of r in percent."""
    return a * (100 * r) ** -gamma + b


def events(t4: dict, seeds=(0,), t2=20.0, cap=9000):
    """One row per fraction and seed; t4[r] is one number for every seed or one per seed (NaN:
    the run reached its cap without generalising, its validation accuracy peaking at 0.42)."""
    rows = []
    for r, value in t4.items():
        for i, s in enumerate(seeds):
            t = value[i] if isinstance(value, (list, tuple)) else value
            rows.append({"r": r, "seed": s, "cap": cap, "steps": cap if math.isnan(t) else 1.5 * t,
                         "t2": t2, "t4": t, "peak val acc": 0.42 if math.isnan(t) else 1.0,
                         "final val acc": 0.4 if math.isnan(t) else 1.0})
    return pd.DataFrame(rows)


def ids(events: pd.DataFrame, change=None):
    """Checkpoints at 0, t2, t4 and 2 t4 (0, t2 and the cap for a run that never generalised).
    Every ID starts at 10 (1 + r) and moves by the relative `change[(layer, split)]` (default 0)
    between t2 and t4; TwoNN reads 2% above the MLE, so the two correlate perfectly."""
    change = change or {}
    rows = []
    for _, ev in events.iterrows():
        steps = [0, ev.t2, ev.cap] if math.isnan(ev.t4) else [0, ev.t2, ev.t4, 2 * ev.t4]
        for split in chapter.SPLITS:
            for layer in chapter.LAYERS:
                start = 10 * (1 + ev.r)
                grown = start * (1 + change.get((layer, split), 0.0))
                values = [start] * 3 if math.isnan(ev.t4) else [start, start, grown, grown]
                rows += [{"r": ev.r, "seed": ev.seed, "step": step, "split": split,
                          "layer": layer, "mle": v, "twonn": 1.02 * v}
                         for step, v in zip(steps, values)]
    return pd.DataFrame(rows)


# The embedding grows by 150% from t2 to t4 on both splits, the hidden layer shrinks by 10%.
GROWTH = {("embedding", "train"): 1.5, ("embedding", "val"): 1.5,
          ("hidden", "train"): -0.1, ("hidden", "val"): -0.1}
POINTS = {"40%": {"train": 880, "val": 1320}}


def judged(ev, change=GROWTH, the_paper=None, synth=None, id_table=None, points=POINTS):
    id_table = ids(ev, change) if id_table is None else id_table
    checks = chapter.judge(P, the_paper or paper(), synthetic() if synth is None else synth, ev,
                           id_table, chapter.id_changes(ev, id_table), points)
    return {c.id: c for c in checks}


def grokked(**kw):
    return events({r: law(r, **kw) for r in FRACTIONS})


# --- Every check, on a sweep that reproduces the claim ----------------------------------------

def test_a_sweep_that_follows_the_paper_passes_every_claim_check_in_the_order_of_the_chapter():
    checks = judged(grokked())
    assert list(checks) == ["synthetic-dimension", "estimators-correlate", "marked-change",
                            "change-direction", "final-id-trend", "t4-id-trend",
                            "points-per-split", "t4-decreases", "power-law", "t2-by-fraction"]
    assert all(c.passed for c in checks.values() if c.kind == "claim")
    assert not any(c.inconclusive or c.diagnosis for c in checks.values())
    assert checks["estimators-correlate"].name == (
        "MLE (k = 2) and TwoNN correlate with Pearson >= 0.95 over layers, splits, steps and r")
    assert checks["marked-change"].name == MARKED
    assert checks["power-law"].name == POWER_LAW
    assert checks["t4-decreases"].name == T4_FALLS
    assert checks["points-per-split"].ours == POINTS


def test_the_checks_read_the_papers_numbers_from_the_chapters_paper_block():
    checks = judged(grokked(), the_paper=get_chapter("06_intrinsic_dimension").paper)
    book = get_chapter("06_intrinsic_dimension").paper
    assert checks["estimators-correlate"].paper == book["estimators-pearson"].value
    # numbers in a check keep 4 significant digits (nbval compares them as text)
    assert checks["power-law"].paper == {"gamma": book["power-law-gamma"].value,
                                         "a": book["power-law-a"].value,
                                         "b": float(f"{book['power-law-b'].value:.4g}")}
    planted = judged(grokked(), the_paper=paper(gamma=3.5, pearson=0.9))
    assert planted["estimators-correlate"].paper == 0.9
    assert planted["power-law"].paper["gamma"] == 3.5


# --- The estimators on data of known dimension ------------------------------------------------

def test_estimators_within_ten_percent_of_the_true_dimension_pass_and_report_both_estimates():
    check = judged(grokked(), synth=synthetic(mle=(1.8, 4.5, 11.0)))["synthetic-dimension"]
    assert check.name == ("both estimators recover d in {2, 5, 10} on a subspace of R^200 "
                          "within 10%")
    assert check.passed  # 10% off exactly (11 for 10, 4.5 for 5) still counts as within
    assert check.ours == {"d=2": [1.8, 2.0], "d=5": [4.5, 5.0], "d=10": [11.0, 10.0]}
    assert check.paper == "known answer"


@pytest.mark.parametrize("column", ["mle", "twonn"])
def test_one_estimate_more_than_ten_percent_off_fails_the_sanity_check(column):
    off = {column: (2.0, 5.0, 11.01)}
    check = judged(grokked(), synth=synthetic(**off))["synthetic-dimension"]
    assert not check.passed and not check.inconclusive


def test_the_plain_mean_column_does_not_enter_the_sanity_check():
    synth = synthetic()
    synth["MLE, plain mean (Levina-Bickel)"] = [100.0, 100.0, 100.0]
    assert judged(grokked(), synth=synth)["synthetic-dimension"].passed


# --- The two estimators agree -------------------------------------------------------------------

def test_estimators_that_disagree_on_the_network_fail_the_correlation_check():
    ev = grokked()
    table = ids(ev, GROWTH)
    table["twonn"] = np.random.default_rng(0).uniform(1, 30, len(table))
    check = judged(ev, id_table=table)["estimators-correlate"]
    assert not check.passed and check.ours < 0.95
    assert check.ours == pytest.approx(np.corrcoef(table.mle, table.twonn)[0, 1], abs=1e-3)


@pytest.mark.parametrize("pearson, passed", [(0.95, True), (0.9499, False), (0.99, True)])
def test_a_correlation_of_exactly_the_threshold_passes(monkeypatch, pearson, passed):
    monkeypatch.setattr(chapter, "estimator_pearson", lambda ids: pearson)
    check = judged(grokked())["estimators-correlate"]
    assert check.passed is passed and check.ours == pearson


# --- A marked change between t2 and t4 -----------------------------------------------------------

def test_a_marked_change_in_every_run_passes_and_names_the_largest():
    check = judged(grokked())["marked-change"]
    assert check.passed and check.diagnosis is None
    assert check.ours["runs that generalised"] == "6/6"
    assert check.ours["largest change per run"] == {f"r={r:g}": 1.5 for r in FRACTIONS}
    assert check.ours["largest"] == "embedding/train at r=0.4: +1.50"
    assert check.paper == "the evolution of ID is informative (no direction stated)"


def test_a_change_of_exactly_the_marked_size_counts_as_marked():
    check = judged(grokked(), change={("logits", "val"): -0.25})["marked-change"]
    assert check.passed
    assert check.ours["largest"] == "logits/val at r=0.4: -0.25"


def test_a_run_whose_layers_barely_move_fails_and_says_which_run():
    ev = grokked()
    table = ids(ev, GROWTH)
    quiet = (table.r == 0.6) & (table.step >= table.r.map(dict(zip(ev.r, ev.t4))))
    table.loc[quiet & (table.layer == "embedding"), ["mle", "twonn"]] *= 1.2 / 2.5
    check = judged(ev, id_table=table)["marked-change"]
    assert not check.passed and not check.inconclusive
    assert check.diagnosis == "no marked change in r = 0.6, seed 0 (largest 0.20)"
    assert check.ours["largest change per run"]["r=0.6"] == pytest.approx(0.2)


def test_a_run_that_never_grokked_leaves_the_marked_change_inconclusive_with_its_diagnosis():
    t4 = {r: law(r) for r in FRACTIONS} | {0.4: float("nan")}
    check = judged(events(t4, cap=12800))["marked-change"]
    assert not check.passed and check.inconclusive
    assert check.ours["runs that generalised"] == "5/6"
    assert check.diagnosis == ("1 of 6 runs did not grok within their cap: r = 0.4, seed 0, "
                               "12,800 steps (validation accuracy peaked at 0.42)")


def test_an_unmarked_run_fails_even_when_another_never_grokked():
    t4 = {r: law(r) for r in FRACTIONS} | {0.4: float("nan")}
    check = judged(events(t4), change={("hidden", "train"): 0.1})["marked-change"]
    assert not check.passed and not check.inconclusive
    assert check.diagnosis.startswith("no marked change in r = 0.5, seed 0 (largest 0.10)")


def test_no_run_that_generalised_leaves_the_marked_change_inconclusive():
    ev = events({r: float("nan") for r in (0.8, 0.9)}, cap=150)
    checks = judged(ev)
    check = checks["marked-change"]
    assert (check.passed, check.inconclusive, check.ours) == (False, True, "no run generalised")
    assert check.paper == "the evolution of ID is informative"
    assert check.diagnosis.startswith("2 of 2 runs did not grok within their cap: r = 0.8, seed 0,"
                                      " 150 steps (validation accuracy peaked at 0.42); r = 0.9")
    assert "change-direction" not in checks


def test_the_direction_report_says_which_way_each_layer_moved_and_how_often():
    change = dict(GROWTH) | {("logits", "train"): 0.0}
    direction = judged(grokked(), change=change)["change-direction"].ours
    assert direction["embedding/train"] == ("rises (median +1.50; rises in 6/6 runs; median "
                                            "largest excursion within [t2, t4] +1.50)")
    assert direction["hidden/val"].startswith("falls (median -0.10; rises in 0/6 runs;")
    assert direction["logits/train"].startswith("falls (median +0.00; rises in 0/6 runs;")
    assert len(direction) == 6


# --- The ID against the training fraction -----------------------------------------------------

def test_trends_in_r_read_as_increases_or_decreases_with_slope_and_pearson():
    ev = grokked()
    table = ids(ev, GROWTH)
    last = table.groupby(["r", "seed", "split", "layer"]).step.transform("max") == table.step
    table.loc[last, "mle"] = 100 - 50 * table.loc[last, "r"]  # the final ID falls with r
    checks = judged(ev, id_table=table)
    final = checks["final-id-trend"].ours
    assert final["embedding/train"] == "decreases with r (slope -50, Pearson -1.00)"
    assert checks["final-id-trend"].paper == "figures 22-23, direction not stated in the text"
    # at t4 (not the last step) the embedding's ID is 2.5 x 10 (1 + r): it grows with r
    at_t4 = checks["t4-id-trend"].ours
    assert at_t4["embedding/train"] == "increases with r (slope 25, Pearson 1.00)"


def test_an_id_that_grows_with_r_increases():
    trend = chapter.describe_trend({"hidden/val": chapter.trend_in_r(
        pd.Series([1.0, 2.0, 4.0], index=[0.5, 0.6, 0.7]))})
    assert trend["hidden/val"].startswith("increases with r (slope 15, Pearson 0.98)")


def test_a_flat_trend_does_not_read_as_an_increase():
    flat = chapter.describe_trend({"logits/val": {"slope per unit r": 0.0, "Pearson": 0.0}})
    assert flat == {"logits/val": "decreases with r (slope 0, Pearson 0.00)"}


def test_two_fractions_are_enough_for_a_trend():
    checks = judged(events({0.8: law(0.8), 0.9: law(0.9)}))
    # every ID starts at 10 (1 + r) and the embedding's grows 2.5-fold: 25 (1 + r) at the end
    assert checks["final-id-trend"].ours["embedding/val"] == ("increases with r (slope 25, "
                                                             "Pearson 1.00)")
    assert len(checks["t4-id-trend"].ours) == 6


def test_trends_need_two_fractions():
    ev = events({0.9: law(0.9)})
    checks = judged(ev)
    assert checks["final-id-trend"].ours == "fewer than 2 fractions"
    assert checks["t4-id-trend"].ours == "fewer than 2 fractions"


# --- t4 against the training fraction -------------------------------------------------------------

def test_t4_falling_with_r_passes_and_lists_t4_per_fraction_in_percent():
    check = judged(grokked())["t4-decreases"]
    assert check.passed and check.paper == "t2(r), t4(r) decreasing"
    assert check.ours == {f"{100 * r:g}%": pytest.approx(law(r), rel=1e-3) for r in FRACTIONS}


def test_t4_that_stays_level_between_two_fractions_fails_and_says_where():
    t4 = {0.5: 900.0, 0.6: 700.0, 0.7: 700.0, 0.8: 650.0}
    check = judged(events(t4))["t4-decreases"]
    assert not check.passed and not check.inconclusive
    assert check.diagnosis == "t4 rises from r = 0.6 to 0.7 (700 to 700 steps)"


def test_a_fraction_where_one_seed_never_grokked_has_no_t4_and_leaves_the_order_inconclusive():
    nan = float("nan")
    t4 = {0.6: [800.0, 900.0], 0.7: [600.0, nan], 0.8: [500.0, 520.0], 0.9: [400.0, 410.0]}
    checks = judged(events(t4, seeds=(3, 4)))
    check = checks["t4-decreases"]
    assert check.ours == {"60%": 850.0, "70%": None, "80%": 510.0, "90%": 405.0}
    assert check.inconclusive and not check.passed
    assert check.diagnosis.startswith("1 of 8 runs did not grok within their cap: r = 0.7, seed 4,")
    # three fractions with a t4 are too few for the power law, which is inconclusive too
    fit = checks["power-law"]
    assert fit.ours == "only 3 fractions generalised; a fit needs 4" and fit.inconclusive
    assert fit.paper == {"gamma": 7.73} and fit.diagnosis == check.diagnosis


def test_t2_per_fraction_is_reported_as_the_mean_over_seeds():
    t2 = judged(events({0.8: [500.0, 520.0]}, seeds=(0, 1), t2=30.0))["t2-by-fraction"]
    assert t2.ours == {"80%": 30.0} and t2.paper == "t2(r) decreasing" and t2.kind == "report"


# --- The power law t4 = a r^-gamma + b ----------------------------------------------------------

def test_an_exact_power_law_fits_and_recovers_its_exponent():
    check = judged(grokked(gamma=2.0))["power-law"]
    assert check.passed
    assert check.ours["gamma"] == pytest.approx(2.0, rel=1e-3)
    assert check.ours["R2"] == pytest.approx(1.0) and check.ours["fractions fitted"] == 6
    assert check.ours["b"] == pytest.approx(100.0, rel=1e-2)


@pytest.mark.parametrize("band, words", [(None, "below"), ((1.5, 2.5), "consistent"),
                                         ((0.5, 1.2), "above")])
def test_our_exponent_is_set_beside_the_papers_band(band, words):
    the_paper = paper(gamma=7.73 if band is None else sum(band) / 2, gamma_band=band)
    check = judged(grokked(gamma=2.0), the_paper=the_paper)["power-law"]
    assert check.ours["gamma beside the paper's"] == words


def test_a_shallow_law_fails_on_its_exponent():
    check = judged(grokked(gamma=0.5, a=3000.0, b=10.0))["power-law"]
    assert check.ours["gamma"] == pytest.approx(0.5, rel=1e-3)
    assert not check.passed and not check.inconclusive


def test_t4_that_no_power_law_follows_fails_on_its_r2():
    t4 = {0.4: 2000.0, 0.5: 200.0, 0.6: 1900.0, 0.7: 250.0, 0.8: 1800.0, 0.9: 150.0}
    check = judged(events(t4))["power-law"]
    assert check.ours["R2"] < 0.95 and not check.passed


@pytest.mark.parametrize("fit, passed", [
    (PowerLaw(a=1.0, gamma=1.0, b=0.0, r2=0.99), False),  # gamma must exceed 1
    (PowerLaw(a=1.0, gamma=1.01, b=0.0, r2=0.95), True),  # an R2 of exactly 0.95 is enough
    (PowerLaw(a=1.0, gamma=1.01, b=0.0, r2=0.9499), False)])
def test_the_fits_thresholds_at_their_edges(monkeypatch, fit, passed):
    monkeypatch.setattr(chapter.idim, "fit_power_law", lambda r, t: fit)
    assert judged(grokked())["power-law"].passed is passed


def test_three_fractions_that_all_generalised_cannot_be_fitted_and_fail_saying_so():
    check = judged(events({r: law(r) for r in (0.7, 0.8, 0.9)}))["power-law"]
    assert not check.passed and not check.inconclusive
    assert check.ours == "only 3 fractions generalised; a fit needs 4"
    assert check.diagnosis == "t4 undefined at 0 fractions"


def test_four_fractions_are_enough_for_a_fit():
    check = judged(events({r: law(r) for r in (0.6, 0.7, 0.8, 0.9)}))["power-law"]
    assert check.passed and check.ours["fractions fitted"] == 4


# --- The tables the judge reads ------------------------------------------------------------------

def test_id_changes_interpolate_between_log_spaced_checkpoints():
    table = pd.concat([pd.DataFrame({"r": 0.5, "seed": 0, "split": split, "layer": layer,
                                     "step": [0, 9, 99, 999], "mle": [5.0, 10.0, 30.0, 20.0],
                                     "twonn": 1.0})
                       for split in chapter.SPLITS for layer in chapter.LAYERS])
    halfway = math.sqrt(10 * 100) - 1  # from 9 to 99, halfway in log(1 + step)
    one = chapter.trajectory(table, 0.5, 0, "train", "embedding")
    assert chapter.id_at(one, halfway) == pytest.approx(20.0)
    ev = pd.DataFrame([{"r": 0.5, "seed": 0, "t2": 9.0, "t4": 999.0}])
    changes = chapter.id_changes(ev, table)
    row = changes[(changes.split == "train") & (changes.layer == "embedding")].iloc[0]
    assert (row["ID at t2"], row["ID at t4"], row.change) == (10.0, 20.0, 1.0)
    assert row["largest excursion"] == 2.0  # the peak at step 99, on the way from t2 to t4


def test_only_runs_that_generalised_enter_the_changes():
    ev = events({0.8: 500.0, 0.9: float("nan")})
    assert set(chapter.id_changes(ev, ids(ev)).r) == {0.8}
    assert list(chapter.id_changes(ev.iloc[1:], ids(ev)).columns) == chapter.CHANGE_COLUMNS


def test_the_featured_run_is_the_smallest_fraction_that_generalised():
    ev = events({0.4: float("nan"), 0.5: 1400.0, 0.6: 800.0})
    assert chapter.featured_run(ev).r == 0.5
    assert chapter.featured_run(events({0.4: float("nan")})).r == 0.4
