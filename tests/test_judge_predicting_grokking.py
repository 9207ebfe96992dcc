"""Chapter 08's verdict on planted runs: hand-made tables of outcomes, signatures and t4, no
training. Each test plants the numbers for one branch of a check and reads its words back."""
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from replicate.config import get_chapter, load_preset
from replicate.experiments.chapters import predicting_grokking as chapter

CH = "08_predicting_grokking"
PAPER = get_chapter(CH).paper


@pytest.fixture
def p():
    # The cpu preset with a small grid: weight decays 0.3 and 1 over four learning rates at r 0.7.
    return {**load_preset(CH, "cpu"), "weight_decays": [0.3, 1.0],
            "learning_rates": [0.01, 0.1, 1.0, 3.0], "n_boot": 200}


COUNTS = {"grokked": 4, "not grokked": 3, "undecided": 1}
NO_RULE = {"fitted": 3, "others": 5, "law": None, "rule": None, "table": pd.DataFrame()}


def separation(auroc, low, high=1.0, grokked=4, not_grokked=3):
    return {"both": True, "auroc": auroc, "interval": (low, high), "grokked": grokked,
            "not grokked": not_grokked, "after window": 2}


def one_kind():
    return {"both": False, "auroc": np.nan, "interval": (np.nan, np.nan), "grokked": 4,
            "not grokked": 0, "after window": 0}


def grid_table(p, curves):
    """A runs table of the grid at r 0.7: `curves` maps a weight decay to t4 at each of the
    grid's learning rates (None: did not grok)."""
    return pd.DataFrame([{"r": 0.7, "weight decay": wd, "lr": lr, "budget": 4000,
                          "fit set": False, "outcome": "not grokked" if t4 is None else "grokked",
                          "t4": np.nan if t4 is None else float(t4), "signature": 1.0}
                         for wd, t4s in curves.items()
                         for lr, t4 in zip(p["learning_rates"], t4s)])


def thresholds_of(p, curves):
    return chapter.lr_thresholds(p, grid_table(p, curves))


FALLS_THEN_WORSE = {0.3: [900, 400, 800, None], 1.0: [700, 300, 200, 600]}


def checks(p, counts=COUNTS, sep=None, stopping=NO_RULE, curves=FALLS_THEN_WORSE):
    found = chapter.judge(p, PAPER, counts, sep or separation(0.9, 0.7), stopping,
                          thresholds_of(p, curves))
    return {c.id: c for c in found}


# The runs' outcomes -----------------------------------------------------------------------------

def test_the_outcomes_are_reported_with_every_fractions_budget(p):
    outcomes = checks(p)["run-outcomes"]
    assert outcomes.kind == "report" and outcomes.paper == "not stated"
    assert outcomes.ours["grokked"] == 4 and outcomes.ours["undecided"] == 1
    assert outcomes.ours["budgets (steps) per r"] == {"0.4": 5000, "0.5": 4000, "0.6": 4000,
                                                       "0.7": 4000, "0.8": 4000}


def test_outcome_counts_keep_their_order_and_count_absent_outcomes_as_zero():
    table = pd.DataFrame({"outcome": ["not grokked", "grokked", "not grokked"]})
    assert list(chapter.outcome_counts(table).items()) == [("grokked", 1), ("not grokked", 2),
                                                           ("undecided", 0)]


# The signature as a predictor -------------------------------------------------------------------

def test_a_signature_at_the_bar_with_chance_outside_its_interval_passes(p):
    signature = checks(p, sep=separation(0.8, 0.51))["signature-auroc"]
    assert signature.passed and signature.diagnosis is None
    assert signature.name.startswith("early-loss signature separates")
    assert ">= 0.8" in signature.name
    assert signature.ours["grokked after the window"] == "2/4"
    assert signature.paper == "oscillations early -> grokking later (no number given)"


def test_a_signature_below_the_bar_fails(p):
    signature = checks(p, sep=separation(0.79, 0.6))["signature-auroc"]
    assert not signature.passed and not signature.inconclusive


def test_an_interval_that_reaches_chance_fails_and_says_the_runs_are_too_few(p):
    signature = checks(p, sep=separation(0.95, 0.5, grokked=2, not_grokked=1))["signature-auroc"]
    assert not signature.passed
    assert signature.diagnosis == ("the interval reaches 0.50, below chance: 2 grokked and 1 not "
                                   "grokked runs are too few to tell")


def test_runs_all_of_one_kind_leave_the_signature_inconclusive(p):
    signature = checks(p, counts={"grokked": 6, "not grokked": 0, "undecided": 2},
                       sep=one_kind())["signature-auroc"]
    assert signature.inconclusive and not signature.passed
    assert signature.diagnosis == "the runs are all of one kind"
    assert signature.ours == ("no AUROC: 6 grokked and 0 not grokked runs (both kinds needed)")
    assert signature.paper == "no number given"


def test_the_separation_counts_only_labelled_runs_and_those_grokked_after_the_window(p):
    end = chapter.window_end(p)
    table = pd.DataFrame([
        {"outcome": "grokked", "t4": end + 10.0, "signature": 3.0},
        {"outcome": "grokked", "t4": end - 10.0, "signature": 2.0},
        {"outcome": "grokked", "t4": float(end), "signature": 2.5},  # in the window's last step
        {"outcome": "not grokked", "t4": np.nan, "signature": 1.0},
        {"outcome": "not grokked", "t4": np.nan, "signature": np.nan},  # diverged
        {"outcome": "undecided", "t4": np.nan, "signature": 9.0}])
    sep = chapter.signature_separation(p, table)
    assert sep["both"] and sep["auroc"] == 1.0
    assert (sep["grokked"], sep["not grokked"], sep["after window"]) == (3, 1, 1)
    assert chapter.separation_summary(sep).startswith("AUROC 1.000 (95% bootstrap interval")


# The stopping rule ------------------------------------------------------------------------------

def fit_table(p, others):
    """Runs known to grok at the cpu fractions, t4 = 1e5 r^-1.5 (r in %), beside `others`:
    (r, t4 or None, budget)."""
    fit = [{"r": r, "weight decay": 1.0, "lr": 0.01, "budget": b, "fit set": True,
            "outcome": "grokked", "t4": 1e5 * (100 * r) ** -1.5}
           for r, b in zip(p["train_fractions"], p["steps"])]
    rest = [{"r": r, "weight decay": 0.0, "lr": 0.1, "budget": b, "fit set": False,
             "outcome": "not grokked" if t4 is None else "grokked",
             "t4": np.nan if t4 is None else float(t4)} for r, t4, b in others]
    return pd.DataFrame(fit + rest)


def test_a_rule_that_stops_runs_which_never_grok_saves_steps_and_passes(p):
    stopping = chapter.fit_stopping_rule(p, fit_table(p, [(0.7, None, 4000), (0.7, 300, 4000)]))
    assert stopping["fitted"] == 5 and stopping["others"] == 2
    assert stopping["law"].gamma == pytest.approx(1.5, rel=1e-3)
    rule = checks(p, stopping=stopping)["stopping-rule"]
    assert rule.passed and rule.name == ("the t4(r) + 1000 stopping rule saves steps (its error "
                                         "rate stated)")
    assert rule.ours["stopped"] == "1/2"
    # budget ceil(t4(70) + 1000) = 1171, so the stopped run saves 4000 - 1171 of 4300 steps
    assert rule.ours["steps saved"] == "2829 of 4300"
    assert rule.ours["error rate (grokked within 3x the budget)"] == "0/1 = 0.00"
    assert rule.paper == "stopping at t4(r) + 1k; may stop runs that would grok later"


def planted_rule(saved, stopped=2, unknown=0, errors=0):
    judged = stopped - unknown
    rule = {"stopped": stopped, "unknown": unknown, "errors": errors, "steps_saved": saved,
            "steps_without_rule": 8000, "error_rate": errors / judged if judged else math.nan}
    law = SimpleNamespace(a=1e5, gamma=1.5, b=0.0, r2=1.0)
    return {"fitted": 5, "others": 4, "law": law, "rule": rule, "table": pd.DataFrame()}


def test_a_rule_that_saves_nothing_fails(p):
    rule = checks(p, stopping=planted_rule(saved=0, stopped=0))["stopping-rule"]
    assert not rule.passed and not rule.inconclusive
    assert rule.ours["error rate (grokked within 3x the budget)"] == "0/0"  # nothing judged


def test_a_rule_whose_errors_are_all_unknown_states_no_rate(p):
    rule = checks(p, stopping=planted_rule(saved=10, stopped=2, unknown=2))["stopping-rule"]
    assert rule.passed and rule.ours["errors unknown (budget too short to tell)"] == 2
    assert rule.ours["error rate (grokked within 3x the budget)"] == "0/0"


def test_a_rule_with_errors_states_their_rate(p):
    rule = checks(p, stopping=planted_rule(saved=10, stopped=4, unknown=1, errors=1))
    assert rule["stopping-rule"].ours["error rate (grokked within 3x the budget)"] == "1/3 = 0.33"


def test_four_grokked_fit_runs_are_enough_for_the_law(p):
    stopping = chapter.fit_stopping_rule(p, fit_table(p, [(0.7, None, 4000)]).drop(index=[0]))
    assert stopping["fitted"] == 4 and stopping["law"] is not None
    assert chapter.stopping_summary(stopping).endswith("steps saved 2829 of 4000")


def test_too_few_grokked_fit_runs_leave_the_rule_untested(p):
    stopping = chapter.fit_stopping_rule(p, fit_table(p, [(0.7, None, 4000)]).drop(index=[0, 1]))
    assert stopping["fitted"] == 3 and stopping["law"] is None
    assert chapter.stopping_summary(stopping) == ("only 3 of the runs known to grok generalised: "
                                                  "no fit (it needs 4)")
    rule = checks(p, stopping=stopping)["stopping-rule"]
    assert rule.inconclusive and not rule.passed
    assert rule.ours == "only 3 runs known to grok generalised; the fit needs 4"
    assert rule.diagnosis == ("only 3 runs of the fit set grokked within their budgets; the law "
                              "t4(r) needs 4 to be fitted")
    assert rule.paper == "stopping at t4(r) + 1k"


# The learning-rate threshold and its dependence on the weight decay ----------------------------

def test_two_weight_decays_with_different_thresholds_pass_both_checks(p):
    found = checks(p)
    exists, depends = found["lr-threshold"], found["threshold-depends-on-weight-decay"]
    assert exists.passed and exists.ours == {"wd=0.3": "falls to lr 0.1, worse from lr 1",
                                             "wd=1": "falls to lr 1, worse from lr 3"}
    assert exists.paper == "threshold depends on the weight decay"
    assert depends.passed and depends.ours == {"wd=0.3": 1.0, "wd=1": 3.0, "differ": True}
    assert depends.paper == "yes (threshold depends on the weight decay)"


def test_one_threshold_fails_the_first_check_and_names_every_shape(p):
    found = checks(p, curves={0.3: [900, 400, 800, None], 1.0: [None, None, None, None]})
    exists = found["lr-threshold"]
    assert not exists.passed
    assert exists.diagnosis == ("1 weight decay(s) show the fall and the threshold; t4 against "
                                "the lr: wd=0.3 falls to lr 0.1, worse from lr 1; wd=1 never groks")
    depends = found["threshold-depends-on-weight-decay"]
    assert depends.inconclusive and not depends.passed
    assert depends.ours == "fewer than 2 weight decays have t4 falling with the lr"
    assert depends.diagnosis == "only 1 weight decay(s) have t4 falling with the lr"


def test_a_t4_that_rises_from_the_first_rate_never_falls(p):
    found = checks(p, curves={0.3: [300, 400, 800, None], 1.0: [700, 300, 200, 600]})
    assert found["lr-threshold"].ours["wd=0.3"] == "never falls"


def test_the_same_threshold_for_every_weight_decay_fails_within_one_grid_step(p):
    depends = checks(p, curves={0.3: [900, 400, 300, 800],
                                1.0: [700, 300, 200, 600]})["threshold-depends-on-weight-decay"]
    assert not depends.passed and not depends.inconclusive
    assert depends.ours == {"wd=0.3": 3.0, "wd=1": 3.0, "differ": False}
    assert depends.diagnosis == ("every weight decay first groks later at lr 3 on the grid 0.01, "
                                 "0.1, 1, 3: a difference within one grid step is not resolved")


def test_a_threshold_inside_the_grid_differs_from_one_beyond_it(p):
    found = checks(p, curves={0.3: [900, 400, 800, None], 1.0: [700, 300, 200, 100]})
    assert found["lr-threshold"].ours["wd=1"] == "falls up to the largest lr 3"
    assert not found["lr-threshold"].passed
    depends = found["threshold-depends-on-weight-decay"]
    assert depends.passed and depends.ours == {"wd=0.3": 1.0, "wd=1": "beyond 3", "differ": True}


def test_two_thresholds_beyond_the_grid_cannot_be_told_apart(p):
    depends = checks(p, curves={0.3: [900, 400, 300, 200],
                                1.0: [700, 300, 200, 100]})["threshold-depends-on-weight-decay"]
    assert not depends.passed and not depends.inconclusive
    assert depends.diagnosis == "every weight decay's t4 still falls at the grid's largest lr 3"


def test_thresholds_are_labelled_by_r_only_when_the_grid_has_several_fractions(p):
    several = {**p, "grid_fractions": [0.6, 0.7]}
    assert list(thresholds_of(several, FALLS_THEN_WORSE)) == ["wd=0.3, r=0.7", "wd=1, r=0.7"]
    assert thresholds_of(p, FALLS_THEN_WORSE)["wd=0.3"]["t4"] == {"0.01": 900, "0.1": 400,
                                                                  "1": 800, "3": None}


def test_every_check_has_its_own_id(p):
    assert list(checks(p)) == ["run-outcomes", "signature-auroc", "stopping-rule", "lr-threshold",
                               "threshold-depends-on-weight-decay"]


def legend_counts_against_points(ax):
    """(label's count, dots drawn) for every legend entry that ends in "(N)": a dot is drawn when
    both coordinates are finite and, on a log axis, positive."""
    import re

    pairs = []
    for handle, label in zip(*ax.get_legend_handles_labels()):
        if m := re.search(r"\((\d+)\)$", label):
            xy = np.asarray(handle.get_offsets(), dtype=float).reshape(-1, 2)
            keep = np.isfinite(xy).all(axis=1)
            for axis, column in (("x", 0), ("y", 1)):
                if getattr(ax, f"get_{axis}scale")() == "log":
                    keep &= xy[:, column] > 0
            pairs.append((int(m.group(1)), int(keep.sum())))
    return pairs


def test_the_signature_figure_counts_the_dots_it_draws_and_names_the_runs_it_leaves_out(
        p, monkeypatch):
    # Ten runs not grokked, one of them diverged (no signature): the legend says 9, as plotted.
    rows = ([{"outcome": "grokked", "signature": s, "diverged": False} for s in (2.0, 3.0, 5.0)]
            + [{"outcome": "not grokked", "signature": 0.1 * (i + 1), "diverged": False}
               for i in range(9)]
            + [{"outcome": "not grokked", "signature": np.nan, "diverged": True},
               {"outcome": "undecided", "signature": 1.0, "diverged": False}])
    table = pd.DataFrame(rows)
    shown = []
    monkeypatch.setattr(chapter.plotting, "show", lambda fig, name, caption, alt:
                        shown.append((fig, caption)))
    chapter.figure_signature(p, table, {"both": False, "auroc": np.nan}, "planted runs")
    (fig, caption), = shown
    pairs = legend_counts_against_points(fig.axes[0])
    assert pairs == [(3, 3), (9, 9), (1, 1)]
    assert "1 of 14 runs, whose loss diverged" in caption
