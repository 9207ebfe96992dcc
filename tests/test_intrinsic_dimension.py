"""Intrinsic-dimension estimators and the power-law fit against known answers."""
import math

import numpy as np
import pytest
import torch

from replicate.measures import intrinsic_dimension
from replicate.measures.intrinsic_dimension import (fit_power_law, layer_dimensions, mle_dimension, mle_local,
                                           neighbour_distances, smallest_per_row, twonn_dimension)


def _rotation(dim: int, gen: torch.Generator) -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(dim, dim, generator=gen, dtype=torch.float64))
    return q


def gaussian_on_subspace(n: int, d: int, ambient: int, seed: int) -> torch.Tensor:
    """n Gaussian points on a random d-dimensional linear subspace of R^ambient."""
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(n, d, generator=gen, dtype=torch.float64)
    return z @ _rotation(ambient, gen)[:d]


def uniform_on_sphere(n: int, d: int, ambient: int, seed: int) -> torch.Tensor:
    """n uniform points on the unit d-sphere (in R^{d+1}), rotated into R^ambient."""
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(n, d + 1, generator=gen, dtype=torch.float64)
    z = z / z.norm(dim=1, keepdim=True)
    return z @ _rotation(ambient, gen)[:d + 1]


CLOUDS = {"subspace": gaussian_on_subspace, "sphere": uniform_on_sphere}


@pytest.mark.parametrize("shape", ["subspace", "sphere"])
@pytest.mark.parametrize("d, ambient", [(2, 50), (5, 80), (10, 100)])
def test_estimators_recover_known_dimension(shape, d, ambient):
    x = CLOUDS[shape](1000, d, ambient, seed=d)
    assert mle_dimension(x, k=2) == pytest.approx(d, rel=0.15)
    assert twonn_dimension(x) == pytest.approx(d, rel=0.15)


def test_estimators_tell_dimensions_apart():
    # Guards against an estimator that returns a constant: 2 and 10 must be told apart.
    low, high = gaussian_on_subspace(500, 2, 60, 1), gaussian_on_subspace(500, 10, 60, 1)
    for estimate in (mle_dimension, twonn_dimension):
        assert estimate(high) > 3 * estimate(low)


def brute_force_log_mu(x: np.ndarray) -> np.ndarray:
    """log(r2 / r1) per point, from an explicit double loop over all pairs."""
    n = len(x)
    out = np.empty(n)
    for i in range(n):
        dist = sorted(math.dist(x[i], x[j]) for j in range(n) if j != i)
        out[i] = math.log(dist[1] / dist[0])
    return out


def test_mle_k2_is_mackay_ghahramani_closed_form():
    # For k = 2 the local estimate is 1 / log(mu) and the MG pooling gives n / sum(log mu).
    x = gaussian_on_subspace(120, 4, 20, seed=3)
    log_mu = brute_force_log_mu(x.numpy())
    # mle_local returns one value per distinct point, in torch.unique's order: compare as sets.
    assert np.sort(mle_local(x, k=2).numpy()) == pytest.approx(np.sort(1 / log_mu), rel=1e-9)
    assert mle_dimension(x, k=2) == pytest.approx(len(log_mu) / log_mu.sum(), rel=1e-9)
    assert mle_dimension(x, k=2, pooling="mean") == pytest.approx(np.mean(1 / log_mu), rel=1e-9)


def test_twonn_matches_facco_formula():
    x = gaussian_on_subspace(200, 3, 20, seed=4)
    mu = np.sort(np.exp(brute_force_log_mu(x.numpy())))
    n = len(mu)
    keep = int(n * 0.9)
    y = -np.log(1 - np.arange(1, keep + 1) / n)
    expected = (y * np.log(mu[:keep])).sum() / (np.log(mu[:keep]) ** 2).sum()
    assert twonn_dimension(x, discard_fraction=0.1) == pytest.approx(expected, rel=1e-9)


def test_larger_k_mle_recovers_dimension():
    x = gaussian_on_subspace(1000, 6, 40, seed=5)
    assert mle_dimension(x, k=10) == pytest.approx(6, rel=0.15)


def test_invariant_to_rotation_translation_and_scaling():
    x = uniform_on_sphere(400, 5, 30, seed=6)
    gen = torch.Generator().manual_seed(7)
    moved = 3.7 * x @ _rotation(30, gen) + torch.randn(30, generator=gen, dtype=torch.float64)
    assert mle_dimension(moved) == pytest.approx(mle_dimension(x), rel=1e-8)
    assert twonn_dimension(moved) == pytest.approx(twonn_dimension(x), rel=1e-8)
    assert mle_dimension(moved, k=5) == pytest.approx(mle_dimension(x, k=5), rel=1e-8)


def test_duplicates_are_collapsed_not_divided_by_zero():
    x = gaussian_on_subspace(300, 3, 10, seed=8)
    doubled = torch.cat([x, x[:100]])
    for estimate in (mle_dimension, twonn_dimension):
        assert math.isfinite(estimate(doubled))
        assert estimate(doubled) == pytest.approx(estimate(x), rel=1e-12)
    assert neighbour_distances(doubled, 2).min() > 0


def dense_float64_neighbours(x: torch.Tensor, k: int) -> torch.Tensor:
    """The k smallest distances from each distinct point to the others, by a dense float64
    matrix of |p_i - p_j| (no matrix-product shortcut): the reference for the fast path."""
    points = torch.unique(x, dim=0).double()
    distances = torch.cdist(points, points, compute_mode="donot_use_mm_for_euclid_dist")
    distances.fill_diagonal_(float("inf"))
    return distances.topk(k, dim=1, largest=False).values


def lattice_with_near_ties(seed: int = 0) -> torch.Tensor:
    """A 4-D integer lattice rotated into R^32, each point moved by ~1e-7: every interior point
    has 8 neighbours at distance 1 that float32 cannot tell apart (its scores err by ~1e-5 here)
    but float64 can, more than the k + EXTRA_CANDIDATES = 4 candidates the fast path keeps."""
    gen = torch.Generator().manual_seed(seed)
    grid = torch.cartesian_prod(*[torch.arange(6, dtype=torch.float64)] * 4)
    jitter = 1e-7 * torch.randn(grid.shape, generator=gen, dtype=torch.float64)
    return (grid + jitter) @ _rotation(32, gen)[:4]


def test_twonn_fast_neighbours_match_dense_float64_on_near_ties(monkeypatch):
    x = lattice_with_near_ties()
    dense_rows = []
    slow_path = intrinsic_dimension.dense_distances
    monkeypatch.setattr(intrinsic_dimension, "dense_distances",
                        lambda points, rows: dense_rows.extend(rows.tolist())
                        or slow_path(points, rows))
    for k in (2, 3):
        expected = dense_float64_neighbours(x, k)
        assert torch.allclose(neighbour_distances(x, k), expected, rtol=1e-12, atol=0)
    # The near-ties defeat the float32 candidates on some rows, which the certificate caught.
    assert dense_rows
    # The ties are broken in float64 (which neighbour comes first matters), by ~1e-7 relative.
    ratios = expected[:, 1] / expected[:, 0]
    assert (ratios > 1).all() and ratios.max() < 1.01


def test_fast_neighbours_match_dense_float64_on_a_wide_cloud_far_from_the_origin():
    # Far from the origin: the float32 error grows with the norms, which the centring keeps small.
    x = gaussian_on_subspace(1500, 6, 40, seed=3) + 1e4
    assert torch.allclose(neighbour_distances(x, 3), dense_float64_neighbours(x, 3), rtol=1e-12,
                          atol=0)


def test_smallest_per_row_gives_the_values_of_topk_even_with_ties():
    gen = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 40, (50, 1024), generator=gen).float()  # many ties
    for m in (1, 3, 6):
        values, columns = smallest_per_row(scores, m, chunk=32)
        assert torch.equal(values, scores.topk(m, dim=1, largest=False).values)
        assert torch.equal(scores.gather(1, columns), values)  # the columns hold those values


def test_float32_input_gives_the_float64_answer():
    x = gaussian_on_subspace(300, 4, 16, seed=9)
    assert mle_dimension(x.float()) == pytest.approx(mle_dimension(x), rel=1e-3)


def test_too_few_points_are_rejected():
    with pytest.raises(ValueError, match="at least k \\+ 1"):
        mle_dimension(torch.randn(5, 3), k=5)
    with pytest.raises(ValueError, match="at least k \\+ 1"):
        twonn_dimension(torch.randn(2, 3))
    # Six copies of two points are only two distinct points.
    with pytest.raises(ValueError, match="got 2 \\(of 12 points"):
        twonn_dimension(torch.tensor([[0.0, 1.0], [1.0, 0.0]]).repeat(6, 1))
    with pytest.raises(ValueError, match="k >= 2"):
        mle_dimension(torch.randn(10, 3), k=1)


def test_layer_dimensions_reports_each_layer():
    reps = {"flat": gaussian_on_subspace(400, 2, 20, 10), "wide": gaussian_on_subspace(400, 8, 20, 10)}
    out = layer_dimensions(reps)
    assert set(out) == {"flat", "wide"}
    assert out["flat"]["distinct"] == 400
    assert out["flat"]["mle"] < out["wide"]["mle"]
    assert out["flat"]["twonn"] < out["wide"]["twonn"]


@pytest.mark.parametrize("a, gamma, b", [(1.09e15, 7.73, 1442.63), (1.85e6, 1.18, 0.0), (3.0e4, 2.0, 500.0)])
def test_power_law_fit_recovers_known_parameters(a, gamma, b):
    r = np.array([35.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0])
    fit = fit_power_law(r, a * r ** -gamma + b)
    assert fit.gamma == pytest.approx(gamma, rel=1e-4)
    assert fit.a == pytest.approx(a, rel=1e-3)
    assert fit.b == pytest.approx(b, rel=1e-3, abs=1e-3 * a * r.max() ** -gamma)
    assert fit.r2 == pytest.approx(1.0, abs=1e-9)
    assert fit(50.0) == pytest.approx(a * 50.0 ** -gamma + b, rel=1e-6)


def test_power_law_fit_with_noise_and_a_poor_model():
    rng = np.random.default_rng(0)
    r = np.linspace(40, 90, 8)
    t = 3.0e8 * r ** -3.0 + 200 * (1 + 0.01 * rng.standard_normal(8))
    fit = fit_power_law(r, t)
    assert fit.gamma == pytest.approx(3.0, rel=0.1)
    assert fit.r2 > 0.99
    # A curve that rises is not a decreasing power law: the fit must say so through R^2.
    assert fit_power_law(r, np.sin(r / 5.0)).r2 < 0.9


def test_power_law_fit_rejects_bad_input():
    with pytest.raises(ValueError, match="at least 4"):
        fit_power_law([1.0, 2.0, 3.0], [3.0, 2.0, 1.0])
    with pytest.raises(ValueError, match="positive"):
        fit_power_law([0.0, 1.0, 2.0, 3.0], [4.0, 3.0, 2.0, 1.0])


def test_agrees_with_scikit_dimension():
    skdim = pytest.importorskip("skdim")
    x = uniform_on_sphere(500, 4, 20, seed=11)
    ours_twonn = twonn_dimension(x, discard_fraction=0.1)
    peer_twonn = skdim.id.TwoNN(discard_fraction=0.1).fit(x.numpy()).dimension_
    assert ours_twonn == pytest.approx(peer_twonn, rel=1e-6)
    peer_mle = skdim.id.MLE().fit(x.numpy(), n_neighbors=2, comb="mle").dimension_
    assert mle_dimension(x, k=2) == pytest.approx(peer_mle, rel=1e-6)
    peer_mle5 = skdim.id.MLE().fit(x.numpy(), n_neighbors=5, comb="mle").dimension_
    assert mle_dimension(x, k=5) == pytest.approx(peer_mle5, rel=1e-6)
