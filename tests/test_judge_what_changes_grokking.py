"""Chapter 10's verdict on planted runs: hand-made curves at ten checkpoints, no training.

The planted plain run is chapter 01's story: training accuracy reaches 1 at step 10, the
held-out accuracy settles at 0.9 from step 5, the adversarial accuracy falls to 0.05 after
settling and climbs to 0.35 from step 5,000 on (the onset), and the training-point LC falls from
10 to 5 (step 2), peaks at 20 (step 100) and ends at 4. Each knob's runs are that run with its
onset, its LC peak or its height moved the way the paper says the knob moves them."""
import numpy as np
import pytest
import torch

from replicate.config import PaperNumber
from replicate.experiments.chapters import what_changes_grokking as chapter
from replicate.verdict import unique_ids

STEPS = np.array([0, 1, 2, 5, 10, 100, 1000, 5000, 20000, 40000])
IDS = ["bn-no-delayed-robustness", "bn-higher-lc", "bn-no-first-descent", "size-onset-earlier",
       "size-descent-earlier", "labels-ascent-delayed", "labels-memorised", "width-peak-rises",
       "width-migration-earlier", "width-peak-falls", "apgd-rises", "apgd-below-pgd"]
PAPER = {key: PaperNumber(f"the paper on {key}", None, "Fig. 12", "what") for key in IDS}
P = {"check_epsilon": 0.1, "check_radius": 0.05, "min_rise": 0.10, "min_rise_apgd": 0.05,
     "attack_slack": 0.01, "first_descent_margin": 0.1, "train_sizes": [500, 1000, 2000],
     "random_label_sizes": [250, 500, 1000], "widths": [20, 200, 1000],
     "apgd_run": "batchnorm: plain"}


def lc_curve(peak_at=5, height=20.0, first_min=5.0, end=4.0):
    """10 at initialisation, `first_min` at step 2, rising to `height` at checkpoint `peak_at`,
    then falling to `end`."""
    curve = np.interp(np.arange(10), [0, 2, peak_at, 9], [10.0, first_min, height, end])
    return curve


def adversarial(onset_at=7, low=0.05, top=0.35):
    """0.2 while the held-out accuracy climbs, `low` after settling, rising from checkpoint
    `onset_at` (None: never) to `top` at the end."""
    curve = np.array([0.0, 0.2, 0.2] + [low] * 7)
    if onset_at is not None:
        curve[onset_at:] = np.linspace(low + 0.1, top, 10 - onset_at)
    return curve


def run(lc=None, pgd=None, apgd=None, train_end=1.0):
    train = np.array([0.1, 0.5, 0.9, 0.98, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]) * train_end
    test = np.array([0.1, 0.5, 0.8, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9])
    return chapter.Trajectory({}, STEPS, train, test, lc_curve() if lc is None else lc,
                              adversarial() if pgd is None else pgd, apgd, 1.0)


def planted(**changes):
    """The knob groups of a run where every claim holds; `changes` replaces runs by label."""
    plain = run(apgd=adversarial(top=0.3) - 0.01)
    runs = {
        "batchnorm": {"plain": plain,
                      "BatchNorm": run(lc=lc_curve(first_min=9.5, height=30.0, end=25.0),
                                       pgd=adversarial(onset_at=None))},
        "train_size": {"500 digits": run(pgd=adversarial(onset_at=9), lc=lc_curve(peak_at=7)),
                       "1000 digits": run(lc=lc_curve(peak_at=6)),
                       "2000 digits": run(pgd=adversarial(onset_at=6))},
        "random_labels": {"250 random-label digits": run(),
                          "500 random-label digits": run(lc=lc_curve(peak_at=6),
                                                         train_end=0.995),
                          "1000 random-label digits": run(lc=lc_curve(peak_at=7),
                                                          train_end=0.99)},
        "width": {"width 20": run(lc=lc_curve(peak_at=6, height=12.0)), "width 200": run(),
                  "width 1000": run(lc=lc_curve(peak_at=4, height=30.0))},
    }
    for name, replacement in changes.items():
        knob, label = name.split(": ")
        runs[knob][label] = replacement
    return runs


def judged(p=P, **changes):
    return {c.id: c for c in chapter.judge(p, PAPER, planted(**changes))}


def test_runs_where_every_knob_moves_as_the_paper_says_reproduce_every_claim():
    checks = chapter.judge(P, PAPER, planted())
    assert unique_ids(checks) == IDS
    assert [c.id for c in checks if c.kind == "claim" and not c.passed] == []
    by_id = {c.id: c for c in checks}
    assert by_id["size-onset-earlier"].ours == {"500 digits": 40000, "1000 digits": 5000,
                                                "2000 digits": 1000}
    assert by_id["labels-ascent-delayed"].ours == {"250 random-label digits": 100,
                                                   "500 random-label digits": 1000,
                                                   "1000 random-label digits": 5000}
    assert by_id["width-peak-rises"].ours == {"width 20": 12.0, "width 200": 20.0,
                                              "width 1000": 30.0}
    assert by_id["bn-no-delayed-robustness"].ours["plain"]["delayed"] is True
    assert by_id["width-peak-falls"].kind == "report"  # no width 2,000 at this preset


def test_a_batchnorm_run_with_the_plain_runs_delayed_rise_fails_the_batchnorm_claim():
    same = judged(**{"batchnorm: BatchNorm": run()})["bn-no-delayed-robustness"]
    assert not same.passed and same.diagnosis.startswith("with BatchNorm the adversarial accuracy "
                                                         "still rises by 0.300 from step 5,000")
    # a delayed rise under half the plain network's still passes
    small = adversarial(onset_at=7, top=0.18)  # a rise of 0.13 against 0.30
    assert judged(**{"batchnorm: BatchNorm": run(pgd=small)})["bn-no-delayed-robustness"].passed


def test_a_batchnorm_run_with_a_first_descent_or_lower_lc_fails_those_claims():
    dipped = judged(**{"batchnorm: BatchNorm": run(lc=lc_curve(first_min=8.5, end=25.0))})
    assert not dipped["bn-no-first-descent"].passed and dipped["bn-higher-lc"].passed
    assert dipped["bn-no-first-descent"].diagnosis == ("with BatchNorm the LC falls to 0.85 of its "
                                                       "initial value by step 2, before "
                                                       "interpolating")  # 8.5 / 10 at checkpoint 2
    assert not judged(**{"batchnorm: BatchNorm": run(lc=lc_curve(first_min=9.5, end=3.0))})[
        "bn-higher-lc"].passed


def test_an_onset_that_comes_later_with_more_data_or_never_fails_the_data_claim():
    later = judged(**{"train_size: 2000 digits": run(pgd=adversarial(onset_at=8))})
    assert not later["size-onset-earlier"].passed
    assert later["size-onset-earlier"].diagnosis == (
        "onset: 1000 digits (step 5,000) comes before 2000 digits (step 20,000)")
    never = judged(**{"train_size: 2000 digits": run(pgd=adversarial(onset_at=None))})
    assert not never["size-onset-earlier"].passed
    # the smallest set may never rise within the budget: that counts as latest
    never_small = run(pgd=adversarial(onset_at=None), lc=lc_curve(peak_at=7))
    assert judged(**{"train_size: 500 digits": never_small})["size-onset-earlier"].passed


def test_equal_lc_peaks_at_every_size_are_a_tie_not_a_delay():
    tie = {f"train_size: {n} digits": run() for n in (500, 1000, 2000)}
    assert not judged(**tie)["size-descent-earlier"].passed
    random = {f"random_labels: {n} random-label digits": run() for n in (250, 500, 1000)}
    assert not judged(**random)["labels-ascent-delayed"].passed
    earlier = judged(**{"random_labels: 1000 random-label digits": run(lc=lc_curve(peak_at=4))})
    assert not earlier["labels-ascent-delayed"].passed  # the most digits peaking first


def test_a_peak_that_falls_between_two_widths_fails_the_width_claim_and_2000_is_judged_when_run():
    assert not judged(**{"width: width 1000": run(lc=lc_curve(height=18.0))})[
        "width-peak-rises"].passed
    p = {**P, "widths": [20, 200, 1000, 2000]}
    runs = planted()
    runs["width"]["width 2000"] = run(lc=lc_curve(height=25.0))
    by_id = {c.id: c for c in chapter.judge(p, PAPER, runs)}
    assert by_id["width-peak-falls"].kind == "claim" and by_id["width-peak-falls"].passed
    assert by_id["width-peak-rises"].passed  # judged up to 1,000 only


def test_apgd_above_pgd_anywhere_is_a_failed_check_of_the_attacks():
    plain = run(apgd=adversarial() + np.where(np.arange(10) == 4, 0.05, 0.0))
    checks = judged(**{"batchnorm: plain": plain})
    assert not checks["apgd-below-pgd"].passed
    assert checks["apgd-below-pgd"].ours["largest APGD - PGD"] == pytest.approx(0.05)
    flat = run(apgd=np.minimum(adversarial(), 0.06))
    assert not judged(**{"batchnorm: plain": flat})["apgd-rises"].passed


def test_a_run_that_never_interpolates_makes_its_lc_claims_inconclusive_not_failed():
    short = run(lc=lc_curve(peak_at=7), train_end=0.95)
    check = judged(**{"random_labels: 1000 random-label digits": short})["labels-ascent-delayed"]
    assert check.inconclusive and not check.passed
    assert check.diagnosis.startswith("1000 random-label digits: training accuracy never reached")


def test_the_knob_runs_start_from_chapter_01s_training_settings():
    from replicate.experiments import knobs
    from replicate.experiments.chapters import delayed_robustness
    assert list(knobs.TRAINING) == list(delayed_robustness.TRAINING)


def test_the_knob_runs_measure_chapter_01s_digits(data_dir):
    from replicate.data import subset
    from replicate.experiments import knobs, mnist_mlp
    config = {**mnist_mlp.DEFAULTS, "n_train": 300, "seed": 3, "random_labels": 0.3}
    p = {"lc_points": 40, "pgd_points": 60, "seed": 3}
    lc_points, attack_x, attack_y = knobs.measured_digits(p, config)
    train_x, _, test_x, test_y = mnist_mlp.training_data(config)
    assert torch.equal(lc_points, train_x[:40])
    expected_x, expected_y = subset(test_x, test_y, 60, 4)
    assert torch.equal(attack_x, expected_x) and torch.equal(attack_y, expected_y)


def test_a_width_whose_lc_only_falls_after_interpolation_has_no_ascent_peak_to_compare():
    falling = np.interp(np.arange(10), [0, 4, 9], [30.0, 12.0, 2.0])  # no ascent after step 10
    check = judged(**{"width: width 1000": run(lc=falling)})["width-peak-rises"]
    assert check.inconclusive and not check.passed
    assert check.diagnosis.startswith("width 1000: no ascent")


def test_a_wider_network_peaking_later_fails_the_width_migration_claim():
    assert judged()["width-migration-earlier"].ours == {"width 20": 1000, "width 200": 100,
                                                        "width 1000": 10}
    late = judged(**{"width: width 1000": run(lc=lc_curve(peak_at=7, height=30.0))})
    assert not late["width-migration-earlier"].passed and late["width-peak-rises"].passed


def test_each_knob_group_trains_for_its_own_budget_and_checkpoints_from_chapter_01s_settings():
    from replicate.experiments import knobs
    p = {**P, "n_train": 1000, "width": 200, "depth": 4, "steps": 40000, "lr": 1e-3,
         "weight_decay": 0.01, "batch_size": 200, "init_scale": 1.0, "eval_points": 32, "seed": 2,
         "knob_steps": {"batchnorm": 40000, "train_size": 40000, "random_labels": 5000,
                        "width": 10000},
         "knob_eval_points": {"batchnorm": 32, "train_size": 32, "random_labels": 64,
                              "width": 32}}
    groups = knobs.variants(p)
    assert list(groups["train_size"]) == ["500 digits", "1000 digits", "2000 digits"]
    plain = groups["batchnorm"]["plain"]
    assert plain == {name: p[name] for name in knobs.TRAINING}  # chapter 01's very run
    assert groups["batchnorm"]["BatchNorm"] == {**plain, "batchnorm": True}
    random = groups["random_labels"]["500 random-label digits"]
    assert (random["steps"], random["eval_points"], random["n_train"],
            random["random_labels"]) == (5000, 64, 500, knobs.UNIFORM_LABELS)
    assert groups["width"]["width 20"]["width"] == 20


def test_the_random_label_group_draws_each_label_uniformly_from_the_ten_classes(data_dir):
    from replicate.experiments import knobs, mnist_mlp
    n = 4000
    config = {**mnist_mlp.DEFAULTS, "n_train": n, "seed": 5, "random_labels": knobs.UNIFORM_LABELS}
    _, labels, _, _ = mnist_mlp.training_data(config)
    _, true, _, _ = mnist_mlp.training_data({**config, "random_labels": 0.0})
    assert (labels == true).sum() == round(0.1 * n)  # a tenth keep theirs, as by chance
    # for the digits of each class, every one of the ten labels about as often: within five
    # binomial standard errors of 0.1 (about 0.075 for the ~400 digits of a class)
    table = torch.zeros(10, 10)
    table.index_put_((true, labels), torch.ones(n), accumulate=True)
    shares = table / table.sum(1, keepdim=True)
    assert shares.sub(0.1).abs().max() < 5 * (0.1 * 0.9 / table.sum(1).min()) ** 0.5
    # a share of 1.0 would never give the true label: the labels would carry information
    _, wrong, _, _ = mnist_mlp.training_data({**config, "random_labels": 1.0})
    assert (wrong == true).sum() == 0


def test_an_order_that_fails_is_explained_by_its_first_break_or_its_tie():
    labels = ["a", "b", "c"]
    assert chapter.out_of_order("peak", labels, [10, 20, 30]) is None
    assert chapter.out_of_order("peak", labels, [10, None, None]) is None  # after the budget
    assert chapter.out_of_order("peak", labels, [10, 30, 20]) == (
        "peak: c (step 20) comes before b (step 30)")
    assert chapter.out_of_order("peak", labels, [10, 10, 10]) == (
        "peak: a and c both at step 10, a tie, not a delay")
    assert chapter.out_of_order("peak", labels, [None, 5, 6]) == (
        "peak: a not within the budget, so nothing can come later")
    for steps in ([10, 20, 30], [10, 30, 20], [10, 10, 10], [None, 5, 6], [5, None, 6]):
        assert (chapter.out_of_order("x", labels, steps) is None) == chapter.ordered_later(steps)


def test_every_failed_check_says_why():
    broken = planted(**{"batchnorm: BatchNorm": run(lc=lc_curve(first_min=8.5, end=3.0)),
                        "train_size: 2000 digits": run(pgd=adversarial(onset_at=8)),
                        "random_labels: 1000 random-label digits": run(lc=lc_curve(peak_at=4)),
                        "width: width 1000": run(lc=lc_curve(peak_at=7, height=18.0)),
                        "batchnorm: plain": run(apgd=np.minimum(adversarial(), 0.06) + 0.2)})
    failed = [c for c in chapter.judge(P, PAPER, broken) if c.kind == "claim" and not c.passed]
    assert {c.id for c in failed} >= {"bn-no-first-descent", "bn-higher-lc", "size-onset-earlier",
                                      "labels-ascent-delayed", "width-peak-rises",
                                      "width-migration-earlier", "apgd-rises", "apgd-below-pgd"}
    assert all(c.diagnosis for c in failed), [c.id for c in failed if not c.diagnosis]
