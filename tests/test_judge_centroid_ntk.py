"""Chapter 03's judge on planted runs: a rich and a lazy run made by hand, three checkpoints and
two tracked points (x0 first), each test moving one number across one threshold."""
import numpy as np
import pytest

from replicate.config import get_chapter
from replicate.experiments.chapters import centroid_ntk as chapter

PAPER = get_chapter("03_centroid_ntk").paper
P = {"float64": True, "depth": 3, "width": 64}


def planted_run(ntk=(0.0, 0.5, 2.0), inner=(0.0, -4.0, -10.0), cosine=(0.1, -0.2, -0.4),
                norm=(1.0, 2.0, 3.0), model_inner=(0.0, -1.0, -3.0), accuracy=(0.99, 0.98),
                other_cosine=(0.3, 0.3, 0.3)):
    """A run as `run_centroid_ntk` returns it, at x0 the given curves over three checkpoints; a
    second tracked point whose alignment is `other_cosine`; outputs equal to the inner products
    (Euler's identity exact)."""
    column = lambda x0: np.array([x0, [1.0, 1.0, 1.0]], dtype=float).T  # noqa: E731
    inner = column(inner)
    cosine = np.array([cosine, other_cosine], dtype=float).T
    return {"ntk_change": np.array(ntk, dtype=float), "inner": inner, "output": inner.copy(),
            "cosine": cosine, "norm": column(norm), "model_inner": column(model_inner),
            "train_acc": np.array([0.5, accuracy[0]]), "test_acc": np.array([0.5, accuracy[1]])}


def lazy_run(**changes):
    """A lazy run that stays: NTK change 0.2, |dcos| 0.02, the inner product moves 0.2."""
    return planted_run(**{"ntk": (0.0, 0.1, 0.2), "inner": (0.0, -0.1, -0.2),
                          "cosine": (0.1, 0.11, 0.12), "norm": (1.0, 1.0, 1.0), **changes})


def checks_of(rich=None, lazy=None, p=None):
    return {c.id: c for c in chapter.judge({**P, **(p or {})}, PAPER, rich or planted_run(),
                                           lazy or lazy_run())}


def test_a_rich_run_that_learns_features_beside_a_lazy_run_that_stays_reproduces_every_claim():
    checks = checks_of()
    assert [c.id for c in checks.values()] == [
        "euler-identity", "rich-run-moves", "lazy-run-stays", "lazy-inner-product-stays",
        "inner-product-tracks-ntk", "norm-holds-alignment-back", "final-accuracies",
        "tracked-points-cosine-change", "lazy-model-inner-product", "architecture"]
    assert all(c.passed for c in checks.values() if c.kind == "claim")
    assert checks["rich-run-moves"].ours == {"NTK change": 2.0, "|dcos|": 0.5}
    assert checks["lazy-run-stays"].ours == {"NTK change": 0.2, "|dcos|": 0.02}
    assert checks["lazy-inner-product-stays"].ours == {"lazy": 0.2, "rich": 10.0}
    assert checks["inner-product-tracks-ntk"].ours == 1.0
    assert checks["norm-holds-alignment-back"].ours == {"norm growth": 3.0, "max |cos|": 0.4}


def test_the_names_are_the_published_sentences_and_the_paper_column_comes_from_the_chapter():
    checks = checks_of()
    assert checks["rich-run-moves"].name == ("rich run: the NTK moves (relative change >= 1) and "
                                             "the alignment moves (|dcos| >= 0.2)")
    assert checks["lazy-inner-product-stays"].name == ("lazy run: the inner product moves <= 5% "
                                                       "of the rich run's movement")
    assert checks["norm-holds-alignment-back"].name == ("rich run: the centroid norm grows >= 2x "
                                                        "while |cos| stays < 0.9")
    assert checks["norm-holds-alignment-back"].paper == ("the factor inhibiting centroid "
                                                         "alignment is the norm of the centroid")
    assert all(c.paper == PAPER[c.id].value for c in checks.values())


def test_euler_gap_at_the_float64_tolerance_fails_and_float32_allows_more():
    rich = planted_run()
    rich["output"][0, 0] = -1e-6  # where the inner product is 0: a gap of exactly 1e-6
    at_tolerance = checks_of(rich=rich)["euler-identity"]
    assert at_tolerance.name.endswith("(max gap < 1e-06)") and at_tolerance.ours == 1e-6
    assert not at_tolerance.passed
    rich["output"][0, 0] = 0.0
    rich["output"][2, 1] -= 1e-5  # at the second tracked point: the gap is the largest anywhere
    assert not checks_of(rich=rich)["euler-identity"].passed
    float32 = checks_of(rich=rich, p={"float64": False})["euler-identity"]
    assert float32.passed and float32.name.endswith("(max gap < 0.001)")


def test_a_euler_gap_in_the_lazy_run_counts_too():
    lazy = lazy_run()
    lazy["output"][1, 0] += 0.01
    check = checks_of(lazy=lazy)["euler-identity"]
    assert not check.passed and check.ours == 0.01


@pytest.mark.parametrize("ntk, cosine, passed", [
    ((0.0, 0.5, 1.0), (0.0, -0.1, -0.2), True),  # both exactly at their thresholds
    ((0.0, 0.5, 0.99), (0.1, -0.2, -0.4), False),  # the NTK moves too little
    ((0.0, 0.5, 2.0), (0.0, -0.1, -0.19), False),  # the alignment moves too little
    ((0.0, 0.5, 2.0), (0.0, 0.1, 0.3), True),  # an alignment that grows counts as well
])
def test_the_rich_run_must_move_both_its_ntk_and_its_alignment(ntk, cosine, passed):
    assert checks_of(rich=planted_run(ntk=ntk, cosine=cosine))["rich-run-moves"].passed is passed


@pytest.mark.parametrize("ntk, cosine, passed", [
    ((0.0, 0.2, 0.5), (0.0, 0.02, 0.05), True),  # both exactly at their thresholds
    ((0.0, 0.2, 0.51), (0.1, 0.11, 0.12), False),  # the NTK moves
    ((0.0, 0.1, 0.2), (0.0, 0.02, 0.06), False),  # the alignment moves
    ((0.0, 0.1, 0.2), (0.0, -0.02, -0.06), False),  # ... whichever way
])
def test_the_lazy_run_must_keep_both_its_ntk_and_its_alignment(ntk, cosine, passed):
    assert checks_of(lazy=lazy_run(ntk=ntk, cosine=cosine))["lazy-run-stays"].passed is passed


@pytest.mark.parametrize("lazy_end, passed", [(-0.5, True), (0.5, True), (-0.51, False)])
def test_the_lazy_inner_product_may_move_at_most_five_percent_of_the_rich_one(lazy_end, passed):
    check = checks_of(lazy=lazy_run(inner=(0.0, 0.0, lazy_end)))["lazy-inner-product-stays"]
    assert check.passed is passed and check.ours == {"lazy": abs(lazy_end), "rich": 10.0}


def test_an_inner_product_that_moves_out_of_step_with_the_ntk_is_not_rank_correlated():
    ntk = (0.0, 0.5, 1.0, 1.5, 2.0)
    rich = planted_run(ntk=ntk)
    rich["inner"] = np.array([[0.0, -2.0, -1.0, -3.0, -4.0], [1.0] * 5]).T  # one swap in five
    rich["output"], rich["norm"] = rich["inner"].copy(), np.array([[1.0, 2, 3, 4, 5]] * 2).T
    rich["cosine"] = np.array([[0.1, 0.0, -0.1, -0.2, -0.4], [0.3] * 5]).T
    check = checks_of(rich=rich)["inner-product-tracks-ntk"]
    assert not check.passed and check.ours == 0.9  # 0.8999999999999998, shown to 4 digits


def test_a_rank_correlation_exactly_at_the_threshold_passes(monkeypatch):
    monkeypatch.setattr(chapter, "MIN_SPEARMAN", 0.5)  # three checkpoints, one swap: exactly 0.5
    rich = planted_run(ntk=(0.0, 2.0, 1.0), inner=(0.0, -4.0, -10.0))
    check = checks_of(rich=rich)["inner-product-tracks-ntk"]
    assert check.passed and check.ours == 0.5 and check.name.endswith("(Spearman >= 0.5)")


@pytest.mark.parametrize("norm, cosine, passed", [
    ((1.0, 1.5, 2.0), (0.1, -0.2, -0.4), True),  # the norm exactly doubles
    ((1.0, 1.5, 1.9), (0.1, -0.2, -0.4), False),  # it grows too little
    ((1.0, 2.0, 3.0), (0.1, -0.9, -0.4), False),  # |cos| reaches 0.9 on the way
    ((1.0, 2.0, 3.0), (0.1, -0.8, -0.4), True),
])
def test_the_norm_must_grow_while_the_alignment_stays_short_of_one(norm, cosine, passed):
    check = checks_of(rich=planted_run(norm=norm, cosine=cosine))["norm-holds-alignment-back"]
    assert check.passed is passed


def test_the_reports_give_accuracies_the_other_points_the_lazy_model_and_the_architecture():
    rich = planted_run(accuracy=(1.0, 0.9975))
    # three tracked points whose alignments move by 0.5 (x0), 0.7 and 0: the median is 0.5
    rich["cosine"] = np.column_stack([rich["cosine"][:, 0], (0.2, 0.4, 0.9), (0.3, 0.2, 0.3)])
    checks = checks_of(rich=rich, p={"depth": 2, "width": 32})
    assert checks["final-accuracies"].ours == {"rich": [1.0, 0.9975], "lazy": [0.99, 0.98]}
    assert checks["tracked-points-cosine-change"].ours == [0.5, 0.01]  # the lazy run: 0.02 and 0
    assert checks["lazy-model-inner-product"].ours == -3.0
    assert checks["architecture"].ours == "2 Linear layers (1 hidden), width 32, no bias"
    assert all(c.kind == "report" and c.passed is None for c in list(checks.values())[6:])
