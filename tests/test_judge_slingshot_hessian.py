"""Chapter 05's judge on planted runs: hand-made curves, spikes, Hessian checkpoints, trajectory
shares and clipped runs, no training. Each test plants one situation the verdict can meet and
asserts on the words and numbers of the checks."""
import dataclasses

import numpy as np
import pytest

from replicate.config import get_chapter
from replicate.experiments.algorithmic import ModularRun
from replicate.experiments.chapters import slingshot_hessian as chapter
from replicate.experiments.slingshot import SlingshotRun
from replicate.verdict import unique_ids

PAPER = get_chapter("05_slingshot_hessian").paper
P = {"cap": 3000, "lanczos_iterations": 60, "spike_factor": 10.0, "spike_window": 200,
     "spike_floor": 1.0e-4, "spike_gap": 300}
STEPS, T2, T4 = 3000, 100, 2500
SPIKES = [1000, 1500, 2000]
RESIDUAL = {"lambda_max": 0.067, "lambda_min": 0.11}


def spiky_loss(spikes, n=STEPS, base=1e-3, peak=0.5):
    """A flat loss with a one-step jump to `peak` at each spike step (step k at index k - 1)."""
    loss = np.full(n, base)
    for s in spikes:
        loss[s - 1] = peak
    return loss


def accuracy_from(step, n=STEPS, top=1.0):
    """0 before `step`, `top` from it on (never 0.99 or more when top is lower, or step None)."""
    acc = np.zeros(n)
    if step is not None:
        acc[step - 1:] = top
    return acc


def planted_run(spikes=SPIKES, t2=T2, t4=T4, grad_peaks=100.0, cos_peaks=5.0, val_peak=1.0):
    """The run as `chapter.slingshots` reads it: gradient norm and 1 - cos 1 everywhere but at
    each spike step, where they are `grad_peaks` and `cos_peaks` (one value, or one per spike)."""
    grad, cos = np.ones(STEPS), np.ones(STEPS)
    for s, g, c in zip(spikes, np.broadcast_to(grad_peaks, len(spikes)),
                       np.broadcast_to(cos_peaks, len(spikes))):
        grad[s - 1], cos[s - 1] = g, c
    val_acc = accuracy_from(t4) if t4 else np.full(STEPS, val_peak)
    return {"loss": spiky_loss(spikes), "train_acc": accuracy_from(t2), "val_acc": val_acc,
            "grad_norm": grad, "one_minus_cos": cos, "t2": t2, "t4": t4, "spikes": list(spikes),
            "online_spikes": list(spikes),
            "between_steps": chapter.between_spike_steps(STEPS, t2, list(spikes))}


def planted_hessian(spikes=SPIKES, lmax_at=20.0, lmin_at=-0.625, lmax_between=2.0,
                    lmin_between=-0.0625, residual_at=(0.0, 0.0), residual_between=(0.0, 0.0)):
    """Checkpoints 3 steps after each spike (at it) and at 1100, 1300, 1700 and 2300 (between);
    the Lanczos residuals (of lambda_max, of lambda_min) at and between spikes: 0 is exact."""
    at, between = [s + 3 for s in spikes], [1100, 1300, 1700, 2300]
    steps = sorted(at + between)

    def each(at_value, between_value):
        return np.array([at_value if k in at else between_value for k in steps])

    return {"steps": np.array(steps), "lambda_max": each(lmax_at, lmax_between),
            "lambda_min": each(lmin_at, lmin_between),
            "residual_max": each(residual_at[0], residual_between[0]),
            "residual_min": each(residual_at[1], residual_between[1]),
            "seconds": np.ones(len(steps))}


def planted_trajectory(share=0.99):
    return {"share": share, "share_centred": 0.95, "pc1": 0.875,
            "rows": list(range(100, STEPS + 1, 100))}


def clipped_run(t4=2700, spikes=(1200,), top=1.0):
    """A clipped run's curves: memorised at T2, generalised at `t4` (None: never, peaking at
    `top`)."""
    val_acc = accuracy_from(t4) if t4 else np.full(STEPS, top)
    return ModularRun(spiky_loss(spikes, peak=0.25), accuracy_from(T2), val_acc, np.ones(STEPS))


def judged(run=None, hessian=None, traj=None, clipped=None, paper=PAPER, p=P):
    checks = chapter.judge(p, paper, run or planted_run(), hessian or planted_hessian(),
                           traj or planted_trajectory(),
                           {0.01: clipped_run()} if clipped is None else clipped, RESIDUAL)
    unique_ids(checks)
    return {c.id: c for c in checks}


GROKKING_CLAIMS = ["loss-spikes", "gradient-spikes", "cosine-jumps", "lambda-max-at-spikes",
                   "lambda-min-at-spikes", "lambda-min-between-spikes"]


def test_a_grokking_run_at_every_threshold_passes_every_claim_and_quotes_the_paper():
    checks = judged()
    assert list(checks) == [*GROKKING_CLAIMS, "pca-share", "pca-share-centred",
                            "clipped-run-1-groks", "clipped-run-1-slower", "clipped-run-1-spikes",
                            "cosine-between-spikes", "memorisation-and-grokking-steps",
                            "lanczos-iterations", "lanczos-residual"]
    claims = [c for c in checks.values() if c.kind == "claim"]
    assert len(claims) == 8 and all(c.passed and not c.diagnosis for c in claims)
    assert checks["loss-spikes"].ours == 3
    assert checks["gradient-spikes"].ours == {"share": 1.0, "peak / median": [100.0] * 3}
    assert checks["cosine-jumps"].ours == {"share": 1.0, "peak / median": [5.0] * 3}
    # exact eigenvalues (residual 0): the range within the residuals is the value itself
    assert checks["lambda-max-at-spikes"].ours == {"ratio": 10.0,
                                                   "within Lanczos residuals": [10.0, 10.0]}
    assert checks["lambda-min-at-spikes"].ours == {"min lambda_min": -0.625, "ratio": 10.0,
                                                   "ratio within Lanczos residuals": [10.0, 10.0]}
    assert checks["lambda-min-between-spikes"].ours == {
        "median ratio": 0.03125, "within Lanczos residuals": [0.03125, 0.03125]}
    assert checks["pca-share"].ours == {"share": 0.99, "against the paper": "consistent"}
    assert checks["pca-share"].paper == "more than 98%"
    assert checks["pca-share-centred"].paper == "more than 98% (M not centred)"
    for key in GROKKING_CLAIMS:
        assert checks[key].paper == PAPER[key].value
    assert checks["loss-spikes"].name == ("at least 3 loss spikes (> 10x the recent minimum) "
                                          "after memorisation")


def test_two_spikes_in_a_grokking_run_fail_and_say_how_many_in_how_long_a_run():
    check = judged(planted_run(spikes=[1000, 1500]))["loss-spikes"]
    assert not check.passed and not check.inconclusive
    assert check.diagnosis == "2 spike(s) after t2 in the run (3,000 steps, t2 = 100, t4 = 2500)"


def test_a_run_that_never_grokked_is_inconclusive_with_its_diagnosis():
    checks = judged(planted_run(spikes=[], t4=None, val_peak=0.5), planted_hessian(spikes=[]))
    never = "the run did not grok within its cap of 3,000 steps (validation accuracy peaked at 0.50)"
    for key in GROKKING_CLAIMS:
        assert not checks[key].passed and checks[key].inconclusive, key
        assert checks[key].diagnosis.startswith(never + "; "), key
    assert checks["loss-spikes"].diagnosis.endswith(
        "; 0 spike(s) after t2 in the run (3,000 steps, t2 = 100, t4 = None)")
    assert checks["gradient-spikes"].diagnosis == f"{never}; no spike to look at"
    assert checks["gradient-spikes"].ours == {"share": 0.0, "peak / median": []}
    assert checks["lambda-max-at-spikes"].diagnosis == (
        f"{never}; ratio nan; 0 Hessian checkpoint(s) at a spike and 0 between spikes")
    assert np.isnan(checks["lambda-max-at-spikes"].ours["ratio"])
    # the trajectory's share is a fact of any run: it passes or fails, never inconclusive
    assert checks["pca-share"].passed and not checks["pca-share"].inconclusive
    assert "clipped-run-1-slower" not in checks  # no unclipped t4 to compare with
    assert checks["memorisation-and-grokking-steps"].ours == {"t2": 100, "t4": None}


def test_a_run_that_never_grokked_but_passes_a_claim_still_passes_it():
    checks = judged(planted_run(t4=None, val_peak=0.5))
    assert checks["loss-spikes"].passed and not checks["loss-spikes"].inconclusive


def test_jumps_need_four_spikes_in_five_at_100x_the_gradient_norm_and_5x_one_minus_cos():
    spikes = [600, 1000, 1400, 1800, 2200]
    run = planted_run(spikes=spikes, grad_peaks=[100, 100, 100, 100, 99.5],
                      cos_peaks=[5, 5, 5, 4.9, 4.9])
    checks = judged(run, planted_hessian(spikes=spikes))
    assert checks["gradient-spikes"].passed
    assert checks["gradient-spikes"].ours["share"] == 0.8
    cosine = checks["cosine-jumps"]
    assert not cosine.passed and not cosine.inconclusive
    assert cosine.ours["share"] == 0.6 and cosine.diagnosis == "3 of 5 spikes reach 5x"
    grad = judged(planted_run(grad_peaks=99.9))["gradient-spikes"]
    assert not grad.passed and grad.diagnosis == "0 of 3 spikes reach 100x"


def test_a_jump_counts_within_ten_steps_of_its_spike_and_not_beyond():
    run = planted_run(grad_peaks=1.0, cos_peaks=1.0)
    for s in SPIKES:
        run["grad_norm"][s - 1 + 10] = 100.0   # 10 steps after: in the neighbourhood
        run["one_minus_cos"][s - 1 - 10] = 5.0  # 10 steps before: in it too
    checks = judged(run)
    assert checks["gradient-spikes"].passed and checks["cosine-jumps"].passed
    run = planted_run(grad_peaks=1.0, cos_peaks=1.0)
    for s in SPIKES:
        run["grad_norm"][s - 1 + 11] = 100.0
        run["one_minus_cos"][s - 1 - 11] = 5.0
    checks = judged(run)
    assert not checks["gradient-spikes"].passed and not checks["cosine-jumps"].passed


def test_the_hessian_checks_pass_at_their_thresholds_and_fail_just_short_of_them():
    short = judged(hessian=planted_hessian(lmax_at=19.0, lmin_at=-0.6))
    assert not short["lambda-max-at-spikes"].passed
    assert short["lambda-max-at-spikes"].diagnosis == (
        "ratio 9.5; 3 Hessian checkpoint(s) at a spike and 4 between spikes")
    assert not short["lambda-min-at-spikes"].passed
    assert short["lambda-min-at-spikes"].diagnosis.startswith("lambda_min -0.6, ratio 9.6; ")
    # large but positive at the spikes: no negative curvature there
    positive = judged(hessian=planted_hessian(lmin_at=0.625))["lambda-min-at-spikes"]
    assert not positive.passed and not positive.inconclusive
    assert (positive.ours["min lambda_min"], positive.ours["ratio"]) == (0.625, 10.0)
    edge = judged(hessian=planted_hessian(lmin_between=-0.1, lmin_at=-1.0))
    assert edge["lambda-min-between-spikes"].passed
    assert edge["lambda-min-between-spikes"].ours == {"median ratio": 0.05,
                                                      "within Lanczos residuals": [0.05, 0.05]}
    steep = judged(hessian=planted_hessian(lmin_between=-0.102, lmin_at=-1.02))
    check = steep["lambda-min-between-spikes"]
    assert not check.passed and check.diagnosis.startswith("median ratio 0.051; ")


def test_residuals_small_against_every_margin_leave_the_hessian_checks_decided():
    # lambda_max 40 vs 2 known to 0.1, lambda_min -1.25 vs -0.0625 known to 0.001
    checks = judged(hessian=planted_hessian(lmax_at=40.0, lmin_at=-1.25, residual_at=(0.1, 0.001),
                                            residual_between=(0.1, 0.001)))
    for key in ("lambda-max-at-spikes", "lambda-min-at-spikes", "lambda-min-between-spikes"):
        assert checks[key].passed and not checks[key].inconclusive, key
    low, high = checks["lambda-max-at-spikes"].ours["within Lanczos residuals"]
    # (a check keeps four significant digits)
    assert low == pytest.approx(39.9 / 2.1, rel=1e-3)
    assert high == pytest.approx(40.1 / 1.9, rel=1e-3)


def test_a_ratio_the_residuals_could_put_on_either_side_of_its_threshold_is_inconclusive():
    # Between spikes lambda_min -0.0625 +- 0.2: |lambda_min| may be 0 or 0.2625, so the ratio
    # to the spikes' 0.625 lies between 2.38 and infinity, on both sides of 10.
    check = judged(hessian=planted_hessian(residual_between=(0.0, 0.2)))["lambda-min-at-spikes"]
    assert not check.passed and check.inconclusive
    assert check.diagnosis.startswith(
        "within the Lanczos residuals (60 iterations) the ratio is at least 2.38 and unbounded "
        "above (a residual spans 0), on both sides of 10: the eigenvalues it reads have not "
        "converged enough to decide")
    assert check.ours["ratio within Lanczos residuals"] == [2.381, "unbounded"]
    # the same values, exact, pass: the residual alone made it undecided
    assert judged()["lambda-min-at-spikes"].passed


def test_negative_curvature_the_residual_could_move_above_zero_is_inconclusive():
    # lambda_min at the spikes -0.01 +- 0.02 may be positive; between spikes exact and tiny
    check = judged(hessian=planted_hessian(lmin_at=-0.01, lmin_between=-1e-4,
                                           residual_at=(0.0, 0.02)))["lambda-min-at-spikes"]
    assert not check.passed and check.inconclusive


def test_the_between_spike_ratio_fails_as_inconclusive_only_when_the_residuals_span_005():
    # 0.0625 / 2 = 0.031: +- 0.05 on lambda_min spans 0.05, +- 0.01 does not
    split = judged(hessian=planted_hessian(residual_between=(0.0, 0.05)))
    assert split["lambda-min-between-spikes"].inconclusive
    held = judged(hessian=planted_hessian(residual_between=(0.0, 0.01)))
    assert held["lambda-min-between-spikes"].passed
    # a clear failure stays a failure: 0.2 / 2 = 0.1 with every end above 0.05
    failed = judged(hessian=planted_hessian(lmin_between=-0.2, lmin_at=-2.5,
                                            residual_between=(0.0, 0.01)))
    check = failed["lambda-min-between-spikes"]
    assert not check.passed and not check.inconclusive
    assert check.diagnosis.startswith("median ratio 0.1; ")


def test_the_hessian_along_the_run_carries_each_checkpoints_residuals():
    hess = {k: {"lambda_max": 2.0 * k, "lambda_min": -k, "residual_max": 0.1 * k,
                "residual_min": 0.01 * k, "seconds": 1.0} for k in (1, 2)}
    along = chapter.hessian_along([1, 2], hess)
    assert along["residual_max"].tolist() == [0.1, 0.2]
    assert along["residual_min"].tolist() == [0.01, 0.02]


def test_hessian_checkpoints_at_a_spike_are_those_0_to_20_steps_after_it():
    steps = np.array([999, 1000, 1020, 1021])
    assert chapter.at_spike(steps, [1000]).tolist() == [False, True, True, False]


def test_hessian_checkpoints_between_spikes_start_20_steps_before_the_first_and_skip_each_spike():
    steps = np.array([979, 980, 989, 990, 1050, 1051, 1489, 1490])
    assert chapter.between_spikes(steps, [1000, 1500]).tolist() == [
        False, True, True, False, False, True, True, False]
    assert not chapter.between_spikes(steps, []).any()


def test_steps_between_spikes_follow_memorisation_and_skip_each_spike_from_10_before_to_50_after():
    steps = chapter.between_spike_steps(200, 20, [100])
    assert steps[0] == 21 and 89 in steps and 90 not in steps
    assert 150 not in steps and 151 in steps and steps[-1] == 200
    assert len(chapter.between_spike_steps(200, None, [100])) == 0


def test_the_trajectory_check_needs_more_than_the_papers_share_and_says_where_it_falls_short():
    check = judged(traj=planted_trajectory(share=0.98))["pca-share"]
    assert not check.passed and not check.inconclusive
    assert check.ours == {"share": 0.98, "against the paper": "below"}
    assert check.diagnosis == ("two directions hold 98.0% of the variance (95.0% centred; PC1 "
                               "alone 87.5%) over 29 snapshots from step 1 to 2,900 and 3 "
                               "spike(s)")
    assert check.name == ("PC1 + PC2 explain more than 98% of the trajectory variance "
                          "(uncentred M)")


def test_the_trajectory_check_reads_its_threshold_from_the_paper_block():
    paper = {**PAPER, "pca-share": dataclasses.replace(PAPER["pca-share"], value=0.9)}
    check = judged(traj=planted_trajectory(share=0.95), paper=paper)["pca-share"]
    assert check.passed and check.name.startswith("PC1 + PC2 explain more than 90% ")
    assert check.paper == "more than 90%"


def test_a_clipped_run_that_groks_later_with_smaller_spikes_is_reported_as_slowed_and_shrunk():
    checks = judged()
    assert checks["clipped-run-1-groks"].passed and checks["clipped-run-1-groks"].ours == 2700
    assert checks["clipped-run-1-groks"].name == (
        "with gradient clipping at 0.01 the model still groks (t4 finite)")
    assert checks["clipped-run-1-slower"].ours == {"t4 clipped": 2700, "t4 unclipped": 2500,
                                                   "slowed": True}
    assert checks["clipped-run-1-spikes"].ours == {"clipped": [1, 0.25], "unclipped": [3, 0.5],
                                                   "shrunk": True}
    sooner = judged(clipped={0.01: clipped_run(t4=2500, spikes=(900, 1300, 1700, 2100))})
    assert sooner["clipped-run-1-slower"].ours["slowed"] is False
    assert sooner["clipped-run-1-spikes"].ours == {"clipped": [4, 0.25], "unclipped": [3, 0.5],
                                                   "shrunk": True}
    flat = judged(run=planted_run(spikes=[]), clipped={0.01: clipped_run(spikes=())})
    assert flat["clipped-run-1-spikes"].ours == {"clipped": [0, 0.0], "unclipped": [0, 0.0],
                                                 "shrunk": False}


def test_a_clipped_run_that_never_grokked_is_inconclusive_with_its_diagnosis():
    checks = judged(clipped={0.01: clipped_run(t4=None, top=0.75)})
    check = checks["clipped-run-1-groks"]
    assert not check.passed and check.inconclusive and check.ours is None
    assert check.diagnosis == ("the clipped run did not grok within its cap of 3,000 steps "
                               "(validation accuracy peaked at 0.75; unclipped t4 = 2500)")
    assert "clipped-run-1-slower" not in checks and "clipped-run-1-spikes" in checks


def test_each_clipping_threshold_has_its_own_checks_numbered_in_order():
    checks = judged(clipped={1.0: clipped_run(), 0.01: clipped_run(t4=2900)})
    assert checks["clipped-run-1-groks"].name.startswith("with gradient clipping at 1 the ")
    assert checks["clipped-run-2-slower"].ours["t4 clipped"] == 2900


def test_the_reports_give_the_cosine_between_spikes_t2_t4_and_the_lanczos_settings():
    run = planted_run()
    run["one_minus_cos"][run["between_steps"] - 1] = np.linspace(1, 2, len(run["between_steps"]))
    checks = judged(run)
    assert checks["cosine-between-spikes"].ours == pytest.approx([1.05, 1.95], abs=1e-3)
    assert checks["cosine-between-spikes"].paper == PAPER["cosine-between-spikes"].value
    assert checks["memorisation-and-grokking-steps"].ours == {"t2": 100, "t4": 2500}
    assert checks["lanczos-iterations"].ours == 60
    assert checks["lanczos-residual"].ours == {"lambda_max": "<= 1e-01", "lambda_min": "<= 1e+00"}
    never_memorised = judged(planted_run(spikes=[], t2=None, t4=None), planted_hessian(spikes=[]))
    assert "cosine-between-spikes" not in never_memorised


def test_slingshots_reads_the_spikes_after_memorisation_from_the_loss_curve():
    loss = spiky_loss([50, 1000, 1500])  # the first comes before memorisation: not a slingshot
    curves = ModularRun(loss, accuracy_from(T2), accuracy_from(T4), np.ones(STEPS))
    sling = SlingshotRun(curves, np.r_[np.nan, np.full(STEPS - 1, 0.75)], {}, [1000, 1500])
    run = chapter.slingshots(P, sling)
    assert (run["t2"], run["t4"], run["spikes"]) == (T2, T4, [1000, 1500])
    assert run["one_minus_cos"][1] == 0.25
    assert chapter.peak_loss(loss, run["spikes"]) == [0.5, 0.5]
    assert chapter.clipping_ablation(P, curves, {})["none"] == {
        "t2": T2, "t4": T4, "spikes": 2, "largest spike loss": 0.5}


def test_a_spikes_peak_loss_is_the_largest_within_50_steps_of_its_detection():
    loss = spiky_loss([1000], peak=0.125)
    loss[1000 - 1 + 50], loss[1000 - 1 + 51] = 0.25, 1.0  # 50 steps on: counts; 51: does not
    assert chapter.peak_loss(loss, [1000]) == [0.25]
    run = {**planted_run(spikes=[1000]), "loss": loss}
    check = judged(run, clipped={0.01: clipped_run(spikes=())})["clipped-run-1-spikes"]
    assert check.ours == {"clipped": [0, 0.0], "unclipped": [1, 0.25], "shrunk": True}
