"""Chapter 01's verdict on planted runs: eight checkpoints of hand-made curves, no training.

The planted run that reproduces the claim: held-out accuracy settles at step 10 of 100,000; the
adversarial accuracy at eps 0.1 collapses to 0 after settling and climbs back to 0.3 from step
10,000; the training-point LC falls from 10 to 5, peaks at 12 (step 100) and ends at 2, below
the held-out points' 5."""
import math

import numpy as np
import pytest

from replicate.config import get_chapter
from replicate.experiments.chapters import delayed_robustness as chapter
from replicate.verdict import unique_ids

P = {"epsilons": [0.05, 0.1], "check_epsilon": 0.1, "lc_radii": [0.005, 0.05],
     "check_radius": 0.05}
PAPER = get_chapter("01_delayed_robustness").paper
STEPS = [0, 1, 10, 100, 1000, 3000, 10000, 100000]


def planted(train_lc=(10, 5, 6, 12, 8, 4, 3, 2), test_lc=(9, 9, 9, 9, 8, 7, 6, 5),
            robust=(0.0, 0.2, 0.3, 0.0, 0.0, 0.0, 0.2, 0.3),
            test_acc=(0.1, 0.5, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9),
            train_acc=(0.1, 0.6, 0.99, 1, 1, 1, 1, 1)):
    """The judge's arguments for a planted run; LC at the smaller radius is a tenth of that at
    the check radius, random points' LC a constant 4 falling to 2 at the end."""
    def radii(curve):
        curve = np.array(curve, dtype=float)
        return np.stack([curve / 10, curve], axis=1)
    random_lc = [4.0] * 7 + [2.0]
    adv = {0.05: np.array(robust) + 0.1, 0.1: np.array(robust)}
    adv[0.05][0] = 0.0  # lower before settling than after: the gain is counted from settling on
    lc_mean = {"train": radii(train_lc), "test": radii(test_lc), "random": radii(random_lc)}
    return dict(steps=np.array(STEPS), train_acc=np.array(train_acc),
                test_acc=np.array(test_acc), adv=adv, lc_mean=lc_mean)


def judged(**changes):
    return {c.id: c for c in chapter.judge(P, PAPER, **planted(**changes))}


def test_a_run_with_every_phase_in_order_reproduces_the_claim_with_its_numbers():
    checks = chapter.judge(P, PAPER, **planted())
    assert unique_ids(checks) == [
        "settles-early", "stays-put", "adversarial-rise", "rise-delayed", "lc-phases",
        "descent-before-rise-ends", "descent-before-onset", "train-below-held-out",
        "first-descent", "random-lc-falls", "gain-per-eps", "end-minus-settling-per-eps",
        "held-out-range", "smallest-radius-lc"]
    assert all(c.passed for c in checks if c.kind == "claim")
    by_id = {c.id: c for c in checks}
    assert by_id["settles-early"].ours == {"settled at step": 10, "T": 100000, "final": 0.9}
    assert by_id["adversarial-rise"].name == ("adversarial accuracy at eps 0.1 rises by >= 10 "
                                              "points after that (low after settling -> end)")
    assert by_id["adversarial-rise"].ours == {"low after settling": 0.0, "at step": 100,
                                              "final": 0.3, "rise": 0.3}
    assert by_id["rise-delayed"].ours == {"onset step": 10000, "settling step": 10}
    assert by_id["lc-phases"].name.startswith("train LC (r = 0.05) ascends")
    assert by_id["lc-phases"].ours == {"first min step": 1, "peak step": 100, "peak/min": 2.4,
                                       "fall from peak": pytest.approx(0.8333, abs=1e-4)}
    assert by_id["descent-before-rise-ends"].ours == {"LC peak step": 100,
                                                      "rise ends at step": 100000}
    assert by_id["train-below-held-out"].ours == {"train": 2.0, "held-out": 5.0}


def test_the_paper_column_is_the_chapters_paper_block():
    late = planted(test_acc=(0.1, 0.1, 0.1, 0.1, 0.15, 0.3, 0.6, 0.9))  # generalises late
    checks = (chapter.judge(P, PAPER, **planted())
              + chapter.generalisation_half(P, PAPER, **planted())
              + chapter.generalisation_half(P, PAPER, **late))
    assert [c.paper for c in checks] == [PAPER[c.id].value for c in checks]
    assert {c.id for c in checks} == set(PAPER)
    assert PAPER["adversarial-rise"].value == "groks adversarial examples after ~1e4 of 1e5 steps"


def test_the_reports_give_ratios_and_gains_at_every_eps():
    checks = judged()
    assert checks["first-descent"].ours == 0.5  # 5 / 10
    assert checks["random-lc-falls"].ours == 0.5  # 2 at the end / 4 at the train-LC peak
    assert checks["gain-per-eps"].ours == {"0.05": pytest.approx(0.3), "0.1": 0.3}
    assert checks["end-minus-settling-per-eps"].ours == {"0.05": 0.0, "0.1": 0.0}
    assert checks["held-out-range"].ours == [0.9, 0.9]
    assert checks["smallest-radius-lc"].ours == [1.2, 0.2]
    assert all(checks[i].kind == "report" and checks[i].passed is None
               for i in ("first-descent", "held-out-range"))


def test_held_out_accuracy_settling_at_exactly_a_tenth_of_training_is_early_and_later_is_not():
    at_tenth = judged(test_acc=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.9, 0.9))["settles-early"]
    assert at_tenth.passed and at_tenth.ours["settled at step"] == 10000
    at_end = judged(test_acc=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.9))["settles-early"]
    assert not at_end.passed and at_end.ours["settled at step"] == 100000


def test_held_out_accuracy_stays_put_within_its_settling_tolerance():
    # Settling is where the accuracy first comes within 1 point of its final value, so this
    # check cannot fail: it states what the settling rule guarantees.
    check = judged(test_acc=(0.1, 0.5, 0.885, 0.895, 0.9, 0.9, 0.9, 0.9))["stays-put"]
    assert check.passed and check.ours == {"at settling": 0.895, "final": 0.9}  # not 0.885


@pytest.mark.parametrize("final, passes", [(0.1, True), (0.09, False)])
def test_an_adversarial_rise_of_ten_points_passes_and_of_nine_fails(final, passes):
    check = judged(robust=(0.0, 0.2, 0.3, 0.0, 0.0, 0.0, 0.06, final))["adversarial-rise"]
    assert check.passed is passes and check.ours["rise"] == final


def test_a_rise_that_never_clears_the_low_by_five_points_has_no_onset_and_fails_both_onset_checks():
    checks = judged(robust=(0.0, 0.2, 0.3, 0.0, 0.0, 0.0, 0.02, 0.04))
    assert not checks["rise-delayed"].passed and checks["rise-delayed"].ours["onset step"] is None
    assert not checks["descent-before-onset"].passed
    assert not checks["adversarial-rise"].inconclusive  # a fail, not an untested claim


@pytest.mark.parametrize("robust, onset, passes", [
    ((0.0, 0.0, 0.0, 0.0, 0.0, 0.3, 0.3, 0.3), 3000, False),  # 3x the settling step
    ((0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.3, 0.3), 10000, True),  # exactly 10x
])
def test_the_rise_is_delayed_when_its_onset_is_at_least_ten_times_the_settling_step(
        robust, onset, passes):
    checks = judged(test_acc=(0.1, 0.2, 0.3, 0.4, 0.9, 0.9, 0.9, 0.9), robust=robust)
    assert checks["rise-delayed"].ours == {"onset step": onset, "settling step": 1000}
    assert checks["rise-delayed"].passed is passes


@pytest.mark.parametrize("train_lc, passes", [
    ((10, 5, 6, 7.5, 7, 6, 5.5, 2), True),  # peak exactly 1.5x the minimum, falls 73%
    ((10, 5, 6, 7.4, 7, 6, 5.5, 2), False),  # 1.48x
    ((10, 5, 6, 12, 10, 9, 9, 8.52), False),  # falls 29%
    ((10, 5, 6, 12, 10, 9, 9, 8.28), True),  # falls 31%
])
def test_train_lc_must_ascend_by_half_and_then_fall_by_thirty_percent(train_lc, passes):
    assert judged(train_lc=train_lc)["lc-phases"].passed is passes


def test_the_first_minimum_is_sought_only_up_to_interpolation():
    # interpolation at index 2: the lower LC at index 4 is in the second descent, not the first
    checks = judged(train_lc=(10, 5, 6, 12, 4, 4, 3, 2))
    assert checks["lc-phases"].ours["first min step"] == 1
    never = chapter.milestones(P, **{k: v for k, v in planted(train_acc=[0.5] * 8).items()
                                     if k != "steps"})
    assert never.interp == 7 and never.phases.first_min == 7


def test_a_second_descent_that_starts_when_the_rise_ends_or_the_onset_comes_is_not_before_them():
    # the LC peaks at index 7, the end of training: the rise ends and the onset falls there too
    checks = judged(train_lc=(10, 5, 6, 7, 8, 9, 10, 12),
                    robust=(0.0, 0.2, 0.3, 0.0, 0.0, 0.0, 0.0, 0.3))
    assert checks["descent-before-rise-ends"].ours == {"LC peak step": 100000,
                                                       "rise ends at step": 100000}
    assert not checks["descent-before-rise-ends"].passed
    assert not checks["descent-before-onset"].passed


def test_a_peak_one_checkpoint_before_the_onset_is_before_it():
    checks = judged(train_lc=(10, 5, 6, 7, 8, 12, 3, 2))  # peak at index 5, onset at 6
    assert checks["descent-before-onset"].passed and checks["descent-before-rise-ends"].passed


@pytest.mark.parametrize("final_train_lc, passes", [(4.9, True), (5, False), (5.1, False)])
def test_train_lc_must_end_strictly_below_held_out_lc(final_train_lc, passes):
    check = judged(train_lc=(10, 5, 6, 12, 8, 4, 3, final_train_lc))["train-below-held-out"]
    assert check.passed is passes and check.ours["held-out"] == 5.0


def test_lc_summary_leaves_the_output_layer_out_and_gives_99_percent_intervals():
    counts = np.zeros((1, 1, 4, 3), dtype=np.int16)  # checkpoints, radii, points, layers
    counts[0, 0, :, 0] = [1, 2, 3, 4]
    counts[0, 0, :, 2] = 100  # the output layer
    mean, half = chapter.lc_summary({"train": counts})
    assert mean["train"][0, 0] == 2.5
    assert half["train"][0, 0] == pytest.approx(2.5758 * np.std([1, 2, 3, 4], ddof=1) / 2,
                                                rel=1e-4)
    assert math.isnan(chapter.lc_summary({"train": counts[:, :, :1]})[1]["train"][0, 0])


def generalisation(**changes):
    (check,) = chapter.generalisation_half(P, PAPER, **planted(**changes))
    return check


def test_a_run_that_has_generalised_before_interpolating_leaves_the_generalisation_half_untested():
    # the planted run: held-out 0.9 from step 10, interpolation at step 10 too; nothing to gain
    check = generalisation()
    assert check.kind == "report" and check.id == "generalisation-untested"
    assert "gains < 10 points after interpolation" in check.name  # accuracy points, not a ratio
    assert check.ours == {"interpolation step": 10, "held-out low after it": 0.9, "final": 0.9,
                          "gain": 0.0, "onset step": None, "LC peak step": 100}


@pytest.mark.parametrize("test_acc, kind", [
    ((0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.15, 0.2), "claim"),  # gains exactly 10 points
    ((0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.15, 0.19), "report"),  # 9 points
])
def test_generalisation_is_delayed_when_the_held_out_accuracy_gains_ten_points_after_interpolating(
        test_acc, kind):
    assert generalisation(test_acc=test_acc).kind == kind


@pytest.mark.parametrize("test_acc, onset, passes", [
    ((0.5, 0.2, 0.1, 0.1, 0.1, 0.3, 0.6, 0.9), 3000, True),  # LC peak at step 100, onset 3,000
    ((0.5, 0.2, 0.1, 0.1, 0.16, 0.3, 0.6, 0.9), 1000, True),  # onset one checkpoint after the peak
    ((0.5, 0.2, 0.1, 0.2, 0.3, 0.4, 0.6, 0.9), 100, False),  # onset at the peak: not before it
])
def test_the_second_descent_must_begin_before_the_held_out_accuracy_rises_five_points_from_its_low(
        test_acc, onset, passes):
    check = generalisation(test_acc=test_acc)
    assert check.id == "descent-before-generalisation" and check.kind == "claim"
    assert check.ours["onset step"] == onset and check.ours["LC peak step"] == 100
    assert check.passed is passes


def test_the_low_is_sought_from_interpolation_on_so_an_earlier_dip_does_not_count():
    # held-out accuracy dips to 0.05 at step 1, before interpolation (step 10); from there its low
    # is 0.2, so the gain to 0.5 is 30 points and the onset the first value above 0.25
    check = generalisation(test_acc=(0.3, 0.05, 0.2, 0.2, 0.2, 0.2, 0.26, 0.5))
    assert check.ours["held-out low after it"] == 0.2 and check.ours["gain"] == pytest.approx(0.3)
    assert check.ours["onset step"] == 10000 and check.passed
