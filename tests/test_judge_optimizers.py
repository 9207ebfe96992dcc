"""Chapter 07's judge on planted final distances: a grid of three learning rates, the middle one
the check learning rate, each test moving one distance across one threshold."""
import numpy as np
import pytest

from replicate.config import get_chapter
from replicate.experiments.chapters import optimizers as chapter

PAPER = get_chapter("07_optimizers").paper
P = {"learning_rates": [0.001, 0.01, 0.3], "check_lr": 0.01}
GRADIENT = [-4.0, 0.0]


def planted_final(**changes):
    """Final distances as the paper describes them: the adaptive methods reach the Rosenbrock
    minimum at the check learning rate, momentum comes close, SGD stays far; on Rastrigin every
    method stays at least 3 away. `rosenbrock_<o>=` or `rastrigin_<o>=` replace one curve."""
    ros = {"sgd": [2.0, 1.0, 0.8], "momentum": [1.0, 0.3, 0.6],
           **{o: [1.0, 0.01, 0.5] for o in chapter.ADAPTIVE}}
    ras = {o: [3.5, 3.2, 3.0] for o in ros}
    final = {"rosenbrock": ros, "rastrigin": ras}
    for key, values in changes.items():
        objective, optimiser = key.split("_")
        if values is None:
            final[objective].pop(optimiser)
        else:
            final[objective][optimiser] = values
    return {f: {o: np.array(d, dtype=float) for o, d in runs.items()} for f, runs in final.items()}


def checks_of(final=None, double=None, p=None, flat_best=2e-15):
    double = {("adam", 0.01): {}} if double is None else double
    checks = chapter.judge({**P, **(p or {})}, PAPER, final or planted_final(), double,
                           flat_best, GRADIENT)
    return {c.id: c for c in checks}


def test_runs_that_behave_as_the_paper_says_reproduce_every_clause():
    checks = checks_of()
    assert list(checks) == [
        "rmsprop-reaches-rosenbrock", "rprop-reaches-rosenbrock", "adam-reaches-rosenbrock",
        "adamax-reaches-rosenbrock", "momentum-comes-close", "sgd-does-not-reach",
        "no-method-reaches-rastrigin", "double-descent", "rastrigin-reached-at-large-lr",
        "momentum-with-offset-one", "rosenbrock-gradient-at-minus-one-one"]
    assert all(c.passed for c in checks.values() if c.kind == "claim")
    assert checks["adam-reaches-rosenbrock"].ours == 0.01  # at the check learning rate
    assert checks["momentum-comes-close"].ours == 0.3 and checks["sgd-does-not-reach"].ours == 0.8
    assert set(checks["no-method-reaches-rastrigin"].ours.values()) == {3.0}  # at lr 0.3
    assert checks["double-descent"].ours == ["adam@0.01"]


def test_the_names_are_the_published_sentences_and_the_paper_column_comes_from_the_chapter():
    checks = checks_of()
    assert checks["rprop-reaches-rosenbrock"].name == ("rprop reaches the Rosenbrock minimum at "
                                                       "lr 0.01 (distance <= 0.05)")
    assert checks["momentum-comes-close"].name == ("momentum comes close without reaching it "
                                                   "(best over grid in (0.05, 0.5])")
    assert checks["no-method-reaches-rastrigin"].name == ("no method reaches the Rastrigin minimum "
                                                          "(all > 0.5 at lr <= 0.3)")
    assert checks["rprop-reaches-rosenbrock"].paper == "reaches the minimum"
    assert checks["rastrigin-reached-at-large-lr"].paper == "no method succeeded"
    assert checks["momentum-with-offset-one"].paper == "c not given"


@pytest.mark.parametrize("at_check, passed", [(0.05, True), (0.051, False)])
def test_an_adaptive_method_reaches_the_minimum_within_the_tolerance_at_the_check_rate(
        at_check, passed):
    # the other learning rates do not count, however close they end
    check = checks_of(planted_final(rosenbrock_rmsprop=[0.0, at_check, 0.0]))[
        "rmsprop-reaches-rosenbrock"]
    assert check.passed is passed and check.ours == at_check


def test_a_method_left_out_of_the_race_has_no_check():
    checks = checks_of(planted_final(rosenbrock_adamax=None, rosenbrock_momentum=None,
                                     rosenbrock_sgd=None))
    assert "adamax-reaches-rosenbrock" not in checks and "adam-reaches-rosenbrock" in checks
    assert "momentum-comes-close" not in checks and "sgd-does-not-reach" not in checks


@pytest.mark.parametrize("momentum, passed", [
    ([1.0, 0.05, 0.6], False),  # reaching it is not coming close without reaching it
    ([1.0, 0.051, 0.6], True),
    ([1.0, 0.7, 0.5], True),  # at the edge of "close", at any learning rate of the grid
    ([1.0, 0.7, 0.51], False),
])
def test_momentum_comes_close_between_the_two_distances(momentum, passed):
    check = checks_of(planted_final(rosenbrock_momentum=momentum))["momentum-comes-close"]
    assert check.passed is passed and check.ours == min(momentum)


@pytest.mark.parametrize("sgd, passed", [([2.0, 0.51, 0.8], True), ([2.0, 1.0, 0.5], False)])
def test_sgd_must_stay_farther_than_close_at_every_learning_rate(sgd, passed):
    assert checks_of(planted_final(rosenbrock_sgd=sgd))["sgd-does-not-reach"].passed is passed


@pytest.mark.parametrize("rates, rprop, closest, passed, large", [
    ([0.001, 0.01, 0.3], [3.5, 3.2, 0.5], 0.5, False, "none"),  # 0.3 counts; 0.5 is not > 0.5
    ([0.001, 0.01, 0.3], [3.5, 3.2, 0.51], 0.51, True, "none"),
    ([0.001, 0.01, 0.3], [3.5, 3.2, 0.05], 0.05, False, "none"),  # judged at 0.3, not reported
    ([0.001, 0.01, 1.0], [3.5, 3.2, 0.05], 3.2, True, {"rprop@1": 0.05}),  # above 0.3: reported
    ([0.001, 0.01, 1.0], [3.5, 3.2, 0.051], 3.2, True, "none"),  # not reached: not reported
])
def test_the_rastrigin_claim_is_judged_up_to_its_largest_rate_and_the_rest_reported(
        rates, rprop, closest, passed, large):
    checks = checks_of(planted_final(rastrigin_rprop=rprop), p={"learning_rates": rates})
    assert checks["no-method-reaches-rastrigin"].passed is passed
    assert checks["no-method-reaches-rastrigin"].ours["rprop"] == closest
    assert checks["rastrigin-reached-at-large-lr"].ours == large


def test_no_double_descent_anywhere_fails_and_says_none():
    check = checks_of(double={})["double-descent"]
    assert not check.passed and check.ours == "none"


def test_the_double_descents_are_listed_by_optimiser_then_learning_rate():
    double = {("sgd", 0.3): {}, ("momentum", 0.01): {}, ("momentum", 0.001): {}}
    check = checks_of(double=double)["double-descent"]
    assert check.passed and check.ours == ["momentum@0.001", "momentum@0.01", "sgd@0.3"]


def test_the_reports_give_momentum_with_offset_one_and_the_gradient():
    checks = checks_of(flat_best=0.29)
    assert checks["momentum-with-offset-one"].ours == 0.29
    assert checks["rosenbrock-gradient-at-minus-one-one"].ours == [-4.0, 0.0]
    assert checks["rosenbrock-gradient-at-minus-one-one"].paper == "listed as a stationary point"
    assert all(checks[i].kind == "report" and checks[i].passed is None for i in
               ("rastrigin-reached-at-large-lr", "momentum-with-offset-one",
                "rosenbrock-gradient-at-minus-one-one"))
