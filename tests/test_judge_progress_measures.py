"""Chapter 09's verdict on planted runs: hand-made onsets, crossings and signatures, no training.
Each test plants the numbers for one branch of a check and reads its words back."""
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from replicate.config import get_chapter, load_preset
from replicate.experiments.chapters import progress_measures as chapter

CH = "09_progress_measures"
PAPER = get_chapter(CH).paper
P = load_preset(CH, "cpu")  # train fractions 0.5, 0.6, 0.7; AUROC bar 0.8; MNIST 24,000 steps
MOD = [f"mod 47, r = {r:g}" for r in P["train_fractions"]]
MNIST = "MNIST, init x8"
T2_T4 = {MOD[0]: (400.0, 1500.0), MOD[1]: (300.0, 900.0), MOD[2]: (250.4, 600.6),
         MNIST: (2000.0, 10000.0)}


def leads(alignment: dict, others: dict | None = None) -> pd.DataFrame:
    """An onset table: the centroid alignment's lead share in each run of `alignment` (NaN: it
    never moved), and `others` ({measure: {run: share}}) beside it."""
    rows = []
    for measure, shares in {"centroid alignment": alignment, **(others or {})}.items():
        for run, share in shares.items():
            moved = not np.isnan(share)
            rows.append({"run": run, "measure": measure, "lead share": share,
                         "lead": 100 * share if moved else np.nan,
                         "onset": 50.0 if moved else np.nan})
    return pd.DataFrame(rows)


def events(signatures: dict, grokked=(True, True, True)) -> pd.DataFrame:
    """The modular runs: with weight decay (t4 where `grokked`) and their controls (never);
    `signatures` maps r to (signature with weight decay, signature of the control)."""
    rows = [{"run": kind, "r": r, "t4": 700.0 if kind == "weight decay" and won else None,
             "signature": pair[i]}
            for i, kind in enumerate(("weight decay", "control"))
            for (r, pair), won in zip(signatures.items(), grokked)]
    return pd.DataFrame(rows)


SEPARATED = {0.5: (3.0, 1.0), 0.6: (2.0, 0.5), 0.7: (4.0, 0.1)}  # AUROC 1
GOOD_LC = {"peak step": 6000.0, "fall": 0.45}
ALIGNED = {MOD[0]: 0.2, MOD[1]: 0.4, MOD[2]: -0.1, MNIST: 0.3}


def checks(lc=GOOD_LC, mnist_t4=10000.0, onsets=None, planted_events=None, not_generalised=(),
           t2_t4=T2_T4):
    found = chapter.judge(P, PAPER, lc=lc, mnist_t4=mnist_t4, t2_t4=t2_t4,
                          not_generalised=list(not_generalised),
                          leads=leads(ALIGNED) if onsets is None else onsets,
                          events=events(SEPARATED) if planted_events is None else planted_events)
    return {c.id: c for c in found}


# LC's second descent on MNIST -------------------------------------------------------------------

def test_an_lc_peak_before_t4_and_a_fall_of_30_percent_passes():
    lc = checks(lc={"peak step": 6000.0, "fall": 0.30})["lc-second-descent-mnist"]
    assert lc.passed and lc.diagnosis is None
    assert lc.name.startswith("MNIST: LC around training points peaks before t4 and then falls "
                              "by >= 30%")
    assert lc.ours == {"LC peak step": 6000.0, "t4": 10000.0, "lead": 4000.0,
                       "fall from peak": 0.3}
    assert lc.paper == "the second descent precedes the onset of robustness"


def test_an_lc_that_peaks_early_but_falls_too_little_fails():
    lc = checks(lc={"peak step": 6000.0, "fall": 0.29})["lc-second-descent-mnist"]
    assert not lc.passed and not lc.inconclusive
    assert lc.diagnosis == ("LC peaked at step 6,000, 4,000 steps before t4 = 10,000, and then "
                            "fell by 29%")


def test_an_lc_that_peaks_after_t4_fails_and_says_after():
    lc = checks(lc={"peak step": 12500.0, "fall": 0.6})["lc-second-descent-mnist"]
    assert not lc.passed
    assert lc.diagnosis.startswith("LC peaked at step 12,500, 2,500 steps after t4 = 10,000")


def test_an_lc_peak_at_t4_itself_is_not_before_it():
    lc = checks(lc={"peak step": 10000.0, "fall": 0.6})["lc-second-descent-mnist"]
    assert not lc.passed and "0 steps after t4" in lc.diagnosis


def test_an_mnist_run_that_never_generalised_leaves_lc_and_alignment_inconclusive():
    # It has no onsets either: a run without t4 has no t2 -> t4 to share.
    found = checks(mnist_t4=None, onsets=leads({n: ALIGNED[n] for n in MOD}),
                   not_generalised=[MNIST])
    why = "the MNIST run did not reach 0.8 held-out accuracy within 24,000 steps"
    for check_id in ("lc-second-descent-mnist", "alignment-onset-mnist"):
        assert found[check_id].inconclusive and not found[check_id].passed
        assert found[check_id].diagnosis == why
    assert found["lc-second-descent-mnist"].ours["lead"] is None


def test_the_lc_peak_is_read_after_the_first_descent_up_to_t2():
    steps = np.array([0, 10, 100, 1000, 10000])
    mnist = SimpleNamespace(steps=steps, measures={"local complexity": np.array(
        [5.0, 2.0, 4.0, 8.0, 6.0])})
    lc = chapter.lc_second_descent(mnist, mnist_t2=100.0)
    assert lc == {"peak step": 1000.0, "fall": pytest.approx(0.25)}
    assert chapter.lc_summary(lc, 2000.4) == ("LC peak (start of the second descent) at step "
                                              "1000; it falls 25% from there to the end; t4 = 2000")


# The centroid alignment -------------------------------------------------------------------------

def test_a_median_modular_alignment_onset_before_t4_passes():
    modular = checks()["alignment-onset-modular"]
    assert modular.passed and modular.diagnosis is None
    assert modular.ours == {"lead share per run": [0.2, 0.4, -0.1], "median": 0.2,
                            "runs that generalised": 3}
    assert modular.paper == "alignment changes as the network learns features"


def test_a_median_modular_alignment_onset_at_or_after_t4_fails_with_every_share():
    for middle, said in ((0.0, "0.00"), (-0.05, "0.05")):
        onsets = leads({MOD[0]: 0.2, MOD[1]: middle, MOD[2]: -0.1, MNIST: 0.3})
        modular = checks(onsets=onsets)["alignment-onset-modular"]
        assert not modular.passed and not modular.inconclusive
        assert modular.diagnosis == (f"the median run's alignment reached its onset {said} x "
                                     f"(t4 - t2) after t4 (lead shares +0.20, {middle:+.2f}, "
                                     f"-0.10)")


def test_modular_runs_that_never_generalised_are_left_out_of_the_median():
    modular = checks(not_generalised=[MOD[2]])["alignment-onset-modular"]
    assert modular.ours["lead share per run"] == [0.2, 0.4]
    assert modular.ours["median"] == pytest.approx(0.3) and modular.passed


def test_no_modular_run_that_generalised_leaves_the_alignment_inconclusive():
    modular = checks(not_generalised=MOD)["alignment-onset-modular"]
    assert modular.inconclusive and not modular.passed
    assert modular.diagnosis == "no modular run both memorised and generalised"


def test_an_alignment_that_never_moved_in_any_modular_run_fails_and_says_so():
    onsets = leads({MOD[0]: np.nan, MOD[1]: np.nan, MOD[2]: np.nan, MNIST: 0.3})
    modular = checks(onsets=onsets)["alignment-onset-modular"]
    assert not modular.passed and not modular.inconclusive
    assert modular.ours["median"] is None and modular.ours["lead share per run"] == [None] * 3
    assert modular.diagnosis == "the alignment reached no onset in any run"


def test_an_mnist_alignment_onset_before_t4_passes():
    mnist = checks()["alignment-onset-mnist"]
    assert mnist.passed and mnist.ours == {"lead share": 0.3}


def test_an_mnist_alignment_onset_after_t4_fails_and_says_after():
    onsets = leads({**ALIGNED, MNIST: -0.25})
    mnist = checks(onsets=onsets)["alignment-onset-mnist"]
    assert not mnist.passed
    assert mnist.diagnosis == "the alignment reached its onset 0.25 x (t4 - t2) after t4 = 10,000"


def test_an_mnist_alignment_onset_exactly_at_t4_fails():
    mnist = checks(onsets=leads({**ALIGNED, MNIST: 0.0}))["alignment-onset-mnist"]
    assert not mnist.passed and "after t4" in mnist.diagnosis


def test_an_mnist_alignment_that_never_moved_fails_and_says_so():
    mnist = checks(onsets=leads({**ALIGNED, MNIST: np.nan}))["alignment-onset-mnist"]
    assert not mnist.passed and not mnist.inconclusive
    assert mnist.ours == {"lead share": None}
    assert mnist.diagnosis == "the alignment reached no onset"


# The spectral signature -------------------------------------------------------------------------

def test_a_signature_that_separates_the_runs_passes_and_names_the_larger_of_each_pair():
    found = checks()
    separates = found["signature-auroc"]
    assert separates.passed and separates.ours == {"AUROC": 1.0, "grokked": 3, "not grokked": 3}
    assert separates.name.endswith("(AUROC >= 0.8)")
    assert separates.paper == "early oscillations foretell grokking"
    larger = found["larger-signature-per-fraction"]
    assert larger.kind == "report" and larger.paper == "the run that groks"
    assert larger.ours == {"r = 0.5": "weight decay", "r = 0.6": "weight decay",
                           "r = 0.7": "weight decay"}


def test_a_signature_at_the_bar_passes_and_below_it_fails_with_its_auroc():
    # Three grokked against three not: one pair in the wrong order of nine gives AUROC 8/9;
    # two give 7/9 (below 0.8).
    at_bar = {0.5: (3.0, 1.0), 0.6: (2.0, 0.5), 0.7: (1.2, 1.5)}
    assert checks(planted_events=events(at_bar))["signature-auroc"].ours["AUROC"] == 0.8889
    below = {0.5: (3.0, 1.0), 0.6: (1.2, 1.5), 0.7: (1.1, 0.1)}
    separates = checks(planted_events=events(below))["signature-auroc"]
    assert not separates.passed and not separates.inconclusive
    assert separates.diagnosis == "AUROC 0.78 over 3 runs that grokked and 3 that did not"
    assert checks(planted_events=events(below))["larger-signature-per-fraction"].ours == {
        "r = 0.5": "weight decay", "r = 0.6": "control", "r = 0.7": "weight decay"}


def test_an_auroc_exactly_at_the_bar_passes():
    bar = {**P, "auroc_threshold": 8 / 9}
    at_bar = {0.5: (3.0, 1.0), 0.6: (2.0, 0.5), 0.7: (1.2, 1.5)}
    found = chapter.judge(bar, PAPER, lc=GOOD_LC, mnist_t4=10000.0, t2_t4=T2_T4,
                          not_generalised=[], leads=leads(ALIGNED), events=events(at_bar))
    assert found[3].id == "signature-auroc" and found[3].passed


def test_a_tie_in_signature_names_the_control():
    tie = {0.5: (1.0, 1.0), 0.6: (2.0, 0.5), 0.7: (4.0, 0.1)}
    larger = checks(planted_events=events(tie))["larger-signature-per-fraction"]
    assert larger.ours["r = 0.5"] == "control"


def test_runs_all_of_one_kind_leave_the_signature_inconclusive():
    separates = checks(planted_events=events(SEPARATED, grokked=(False,) * 3))["signature-auroc"]
    assert separates.inconclusive and not separates.passed
    assert separates.ours["AUROC"] == "needs runs of both kinds"
    assert separates.diagnosis == ("needs runs that grok and runs that do not; 0 grokked, 6 did "
                                   "not")


# What is reported -------------------------------------------------------------------------------

def test_the_median_lead_shares_are_reported_in_the_measures_fixed_order():
    onsets = leads(ALIGNED, {"Hessian lambda_max": {MOD[0]: 0.9, MOD[1]: 0.7, MNIST: np.nan},
                             "local complexity": {MOD[0]: 0.1, MNIST: -0.3}})
    medians = checks(onsets=onsets)["median-lead-shares"]
    assert medians.kind == "report" and medians.paper == "not compared in any of the papers"
    assert list(medians.ours) == ["local complexity", "centroid alignment", "Hessian lambda_max"]
    assert medians.ours["Hessian lambda_max"] == {"median lead share": 0.8, "moved in": "2/3 runs"}
    assert medians.ours["local complexity"] == {"median lead share": -0.1, "moved in": "2/2 runs"}
    ranked = chapter.rank_measures(onsets)
    assert list(ranked.index) == ["Hessian lambda_max", "centroid alignment", "local complexity"]


def test_the_spread_of_the_onsets_is_reported_for_runs_with_two_shares_or_more():
    onsets = leads(ALIGNED, {"weight norm": {MOD[0]: 0.6, MOD[1]: np.nan},
                             "Jacobian norm": {MOD[0]: 1.0}})
    spread = checks(onsets=onsets)["onset-spread"]
    # mod r = 0.5 has shares 0.2, 0.6, 1.0: quartiles 0.4 and 0.8
    assert spread.ours == {MOD[0]: pytest.approx(0.4)} and spread.paper == "not stated"


def test_t2_and_t4_are_reported_in_whole_steps_none_where_never_reached():
    crossings = {**T2_T4, MNIST: (2000.0, None)}
    reported = checks(t2_t4=crossings, mnist_t4=None, not_generalised=[MNIST],
                      onsets=leads({n: ALIGNED[n] for n in MOD}))["crossing-steps"]
    assert reported.ours == {MOD[0]: [400, 1500], MOD[1]: [300, 900], MOD[2]: [250, 601],
                             MNIST: [2000, None]}


def test_every_check_has_its_own_id():
    assert list(checks()) == ["lc-second-descent-mnist", "alignment-onset-modular",
                              "alignment-onset-mnist", "signature-auroc",
                              "larger-signature-per-fraction", "median-lead-shares",
                              "onset-spread", "crossing-steps"]


# The tables the verdict reads ------------------------------------------------------------------

def test_runs_without_both_crossings_or_measures_have_no_onsets():
    steps = np.array([0, 10, 100, 1000])
    rising = {"weight norm": np.array([0.0, 0.0, 1.0, 1.0])}
    settings = {"a": (steps, rising, 5.0, 500.0), "b": (steps, rising, 5.0, None),
                "c": (steps, {}, 5.0, 500.0)}
    table, not_generalised = chapter.onset_table(P, settings)
    assert not_generalised == ["b", "c"] and list(table.run) == ["a"]
    assert list(table.columns) == ["run", "t2", "t4", "measure", "onset", "lead", "lead share",
                                   "at t2", "at end"]


def test_the_lead_share_figure_draws_a_marker_for_every_run_of_the_paper_preset(monkeypatch):
    # paper: five training fractions and MNIST, one more run than the cpu preset's marker list held
    import matplotlib

    matplotlib.use("Agg")
    drawn = {}
    monkeypatch.setattr(chapter.plotting, "show", lambda fig, name, **kw: drawn.update(
        {name: {line.get_label(): line.get_marker() for ax in fig.axes for line in ax.lines
                if line.get_label().startswith(("mod", "MNIST"))}}))
    runs = [f"mod 97, r = {r:g}" for r in (0.3, 0.4, 0.5, 0.6, 0.7)] + [MNIST]
    chapter.figure_lead_shares({run: None for run in runs},
                               leads({run: 0.1 * i for i, run in enumerate(runs)}), "caption")
    markers = drawn["fig-09-lead-shares"]
    assert set(markers) == set(runs) and len(set(markers.values())) == len(runs)
