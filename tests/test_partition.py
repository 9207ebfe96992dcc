"""The exact 2-D partition against closed forms, dense grids and brute-force geometry."""
from math import comb

import numpy as np
import pytest
import torch

from replicate.measures import partition as P
from replicate.models import MLP


def _identity_plane(dim: int = 2) -> P.Plane:
    return P.Plane(origin=np.zeros(dim), basis=np.eye(dim)[:2])


def _random_net(in_dim=5, width=8, depth=3, out=3, seed=0):
    torch.manual_seed(seed)
    return P.linear_layers(MLP(in_dim, width, depth, out))


def _random_slice(in_dim=5, seed=0, margin=0.5):
    points = np.random.default_rng(seed).normal(size=(3, in_dim))
    plane = P.plane_through(*points)
    return plane, P.square_around(plane.coords(points), margin)


def _grid(domain, n):
    us = np.linspace(domain[0], domain[1], n + 2)[1:-1]
    vs = np.linspace(domain[2], domain[3], n + 2)[1:-1]
    return np.stack(np.meshgrid(us, vs), -1).reshape(-1, 2)


def _inside_count(part: P.Partition, pts: np.ndarray) -> np.ndarray:
    """Brute force: for each point, how many polygons contain it (strictly or on an edge)."""
    counts = np.zeros(len(pts), dtype=int)
    for poly in part.polygons():
        edge = np.roll(poly, -1, axis=0) - poly
        rel = pts[:, None, :] - poly[None]
        cross = edge[None, :, 0] * rel[..., 1] - edge[None, :, 1] * rel[..., 0]
        counts += (cross >= -1e-12).all(1)
    return counts


@pytest.fixture(scope="module")
def small():
    layers = _random_net()
    plane, domain = _random_slice()
    return layers, plane, domain, P.partition(layers, plane, domain)


def test_plane_through_is_orthonormal_and_contains_the_points():
    rng = np.random.default_rng(1)
    a, b, c = rng.normal(size=(3, 7))
    plane = P.plane_through(a, b, c)
    np.testing.assert_allclose(plane.basis @ plane.basis.T, np.eye(2), atol=1e-12)
    for pt in (a, b, c):
        np.testing.assert_allclose(plane.to_input(plane.coords(pt[None]))[0], pt, atol=1e-12)
    with pytest.raises(ValueError):
        P.plane_through(a, b, a + 2 * (b - a))


def test_regions_tile_the_domain(small):
    *_, domain, part = small
    areas = part.areas()
    assert (areas > 0).all()
    assert areas.sum() == pytest.approx((domain[1] - domain[0]) ** 2, rel=1e-9)
    # No overlaps and no holes: random points lie in exactly one region.
    rng = np.random.default_rng(2)
    pts = rng.uniform([domain[0], domain[2]], [domain[1], domain[3]], size=(400, 2))
    assert (_inside_count(part, pts) == 1).all()
    assert (part.locate(pts) >= 0).all()
    assert part.n_regions == 1 + len(part.chords)  # each cut adds exactly one region


def test_each_region_has_one_activation_pattern(small):
    layers, plane, domain, part = small
    rng = np.random.default_rng(3)
    for r in range(part.n_regions):
        poly = part.polygon(r)
        weights = rng.dirichlet(np.ones(len(poly)), size=20)  # interior points
        pattern, _ = P.forward_patterns(layers, plane.to_input(weights @ poly))
        assert (pattern == part.pattern(r)).all(), f"region {r} is not one linear region"
    # Distinct regions have distinct patterns (each pattern is one convex set).
    assert len(np.unique(part.patterns, axis=0)) == part.n_regions


def _grid_patterns(layers, plane, pts) -> set[bytes]:
    pattern, _ = P.forward_patterns(layers, plane.to_input(pts))
    packed = np.ascontiguousarray(np.packbits(pattern, axis=1))
    return {p.tobytes() for p in np.unique(packed.view(np.dtype((np.void, packed.shape[1]))))}


def test_count_matches_distinct_patterns_on_a_fine_grid(small):
    layers, plane, domain, part = small
    exact = {p.tobytes() for p in part.patterns}
    # The grid never finds a region the partition lacks.
    assert _grid_patterns(layers, plane, _grid(domain, 300)) <= exact
    # On a net whose smallest region (1e-5 of the domain) is larger than a grid cell, the grid
    # sees every region.
    layers = _random_net(in_dim=4, width=6, depth=3, seed=2)
    plane, domain = _random_slice(in_dim=4, seed=2)
    part = P.partition(layers, plane, domain)
    found = _grid_patterns(layers, plane, _grid(domain, 500))
    assert found == {p.tobytes() for p in part.patterns}
    assert len(found) == part.n_regions > 30
    # The plane shortcut gives the same patterns and logits as the full forward pass.
    sample = _grid(domain, 40)
    pat, logits = P.forward_patterns(layers, plane.to_input(sample))
    pat2, logits2 = P.patterns_on_plane(layers, plane, sample)
    assert (pat == pat2).all() and np.allclose(logits, logits2)
    assert P.count_patterns(pat) == len(_grid_patterns(layers, plane, sample))
    # Point location agrees with the patterns.
    sample = _grid(domain, 500)[::2999]
    pat, _ = P.forward_patterns(layers, plane.to_input(sample))
    assert (np.packbits(pat, axis=1) == part.patterns[part.locate(sample)]).all()


def test_arrangement_of_lines_has_the_closed_form_count():
    # One hidden layer of k neurons on a 2-D input: k lines in general position through a small
    # disc, all their crossings inside the domain, cut it into 1 + k + C(k, 2) regions.
    rng = np.random.default_rng(4)
    k = 9
    angles = rng.uniform(0, np.pi, k)
    w1 = np.stack([np.cos(angles), np.sin(angles)], 1)
    b1 = rng.uniform(-1, 1, k)
    layers = [(w1, b1), (rng.normal(size=(2, k)), rng.normal(size=2))]
    part = P.partition(layers, _identity_plane(), (-1e3, 1e3, -1e3, 1e3))
    assert part.n_regions == 1 + k + comb(k, 2)
    assert part.layer_counts == [1 + k + comb(k, 2)]


@pytest.mark.parametrize("bias, expected", [(-0.3, 2), (-1.5, 1)])
def test_one_hidden_neuron(bias, expected):
    layers = [(np.array([[1.0, 0.0]]), np.array([bias])), (np.array([[1.0], [-1.0]]), np.zeros(2))]
    part = P.partition(layers, _identity_plane(), (-1.0, 1.0, -1.0, 1.0))
    assert part.n_regions == expected
    if expected == 2:
        # The line u = 0.3 splits the square [-1, 1]^2 into areas 2 * 1.3 and 2 * 0.7.
        assert sorted(part.areas()) == pytest.approx([1.4, 2.6])
        np.testing.assert_allclose(sorted(part.chords[0, [0, 2]]), [0.3, 0.3])


def test_slopes_match_finite_differences(small):
    layers, plane, domain, part = small
    rng = np.random.default_rng(5)
    for r in rng.choice(part.n_regions, 10, replace=False):
        poly = part.polygon(r)
        c = poly.mean(0)
        h = 1e-6 * np.min(np.linalg.norm(poly - c, axis=1))
        pts = np.array([c, c + [h, 0], c + [0, h]])
        _, logits = P.forward_patterns(layers, plane.to_input(pts))
        slope = np.stack([(logits[1] - logits[0]) / h, (logits[2] - logits[0]) / h], 1)
        np.testing.assert_allclose(part.logit_maps[r, :, :2], slope, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(part.logit_maps[r] @ np.array([*c, 1.0]), logits[0], atol=1e-9)
    assert part.slope_norms()[r] == pytest.approx(np.linalg.norm(slope), rel=1e-4)


def test_decision_boundary_separates_classes():
    layers = _random_net(in_dim=2, width=10, depth=3, out=3, seed=6)
    domain = (-3.0, 3.0, -3.0, 3.0)
    part = P.partition(layers, _identity_plane(), domain)
    seg = part.decision_boundary()
    assert len(seg) > 0
    # On every segment the top two logits tie; just off it, on either side, the winners differ.
    mid = seg.mean(1)
    _, logits = P.forward_patterns(layers, mid)
    top2 = np.sort(logits, axis=1)[:, -2:]
    np.testing.assert_allclose(top2[:, 0], top2[:, 1], atol=1e-9)
    d = seg[:, 1] - seg[:, 0]
    normal = np.stack([-d[:, 1], d[:, 0]], 1) / np.linalg.norm(d, axis=1, keepdims=True)
    eps = 1e-7
    _, plus = P.forward_patterns(layers, mid + eps * normal)
    _, minus = P.forward_patterns(layers, mid - eps * normal)
    assert (plus.argmax(1) != minus.argmax(1)).mean() > 0.99
    # Two points with different predicted classes: the segment joining them crosses the boundary;
    # two points whose segment crosses no boundary segment get the same class.
    rng = np.random.default_rng(7)
    a = rng.uniform(-3, 3, size=(300, 2))
    b = np.clip(a + rng.normal(scale=0.5, size=(300, 2)), -3, 3)
    _, la = P.forward_patterns(layers, a)
    _, lb = P.forward_patterns(layers, b)
    crossed = _segments_cross(a, b, seg)
    differs = la.argmax(1) != lb.argmax(1)
    assert differs.any() and (~differs).any()
    assert (crossed[differs] > 0).all()
    assert (~differs[crossed == 0]).all()


def _segments_cross(a, b, seg):
    """Number of boundary segments each segment a[i]-b[i] crosses."""
    def orient(p, q, r):
        return np.sign((q[..., 0] - p[..., 0]) * (r[..., 1] - p[..., 1])
                       - (q[..., 1] - p[..., 1]) * (r[..., 0] - p[..., 0]))
    p, q = a[:, None], b[:, None]
    s0, s1 = seg[None, :, 0], seg[None, :, 1]
    hit = (orient(p, q, s0) != orient(p, q, s1)) & (orient(s0, s1, p) != orient(s0, s1, q))
    return hit.sum(1)


def test_linear_layers_refuses_other_activations():
    with pytest.raises(ValueError):
        P.linear_layers(MLP(4, 5, 2, 3, activation="gelu"))


def _vertical_boundary_net():
    """Logits (2u, -2u) through relu(u) - relu(-u): the boundary is the line u = 0. A third
    neuron, relu(v - 0.5), cuts without touching the logits."""
    w1 = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]])
    b1 = np.array([0.0, 0.0, -0.5])
    w2 = np.array([[1.0, -1.0, 0.0], [-1.0, 1.0, 0.0]])
    return [(w1, b1), (w2, np.zeros(2))]


def test_boundary_measures_on_a_known_partition():
    part = P.partition(_vertical_boundary_net(), _identity_plane(), (-1.0, 1.0, -1.0, 1.0))
    assert part.n_regions == 4
    seg = part.decision_boundary()
    assert np.allclose(seg[:, :, 0], 0) and np.isclose(np.abs(seg[:, 1, 1] - seg[:, 0, 1]).sum(), 2.0)
    # Band of half-width 0.1 around u = 0: a tenth of the square; the edges are the boundary
    # itself (length 2) plus the line v = 0.5 (length 2), of which 0.2 lies in the band.
    conc = P.boundary_concentration(part, 0.1, resolution=400)
    assert conc["band_area_share"] == pytest.approx(0.1, abs=0.005)
    assert conc["edge_share"] == pytest.approx(2.2 / 4, abs=0.005)
    assert conc["region_density_ratio"] == 0  # all four centroids lie outside the band
    near, away = P.near_and_away_squares(part, 0.5, 2)
    assert len(near) == 2 and np.allclose(near[:, 0], 0, atol=1e-9)
    assert np.abs(near[0, 1] - near[1, 1]) >= 0.5  # not overlapping
    assert len(away) == 2 and np.allclose(np.abs(away[:, 0]), 0.75, atol=0.01)


def test_sample_segments_spacing():
    seg = np.array([[[0.0, 0.0], [1.0, 0.0]], [[0.0, 1.0], [0.0, 1.25]]])
    pts = P.sample_segments(seg, 0.1)
    assert len(pts) == 11 + 4
    np.testing.assert_allclose(pts[:11, 0], np.linspace(0, 1, 11))
    np.testing.assert_allclose(pts[11:, 1], np.linspace(1, 1.25, 4))


def test_centroids_of_a_zero_area_sliver_are_finite():
    # Two regions of the unit square: a unit square (centroid (0.5, 0.5)) and a degenerate
    # "triangle" on the bottom edge (zero area, as float cuts sometimes leave): its centroid is
    # the mean of its vertices instead of 0/0.
    part = P.Partition(domain=(0.0, 1.0, 0.0, 1.0),
                       verts=np.array([[0, 0], [1, 0], [1, 1], [0, 1], [0, 0], [0.5, 0], [1, 0]],
                                      dtype=float),
                       starts=np.array([0, 4, 7]), patterns=np.zeros((2, 1), np.uint8), n_hidden=1,
                       logit_maps=np.zeros((2, 2, 3)), chords=np.zeros((0, 4)),
                       chord_layer=np.zeros(0, int), layer_counts=[2])
    c = part.centroids()
    assert np.allclose(c[0], [0.5, 0.5]) and np.allclose(c[1], [0.5, 0.0])
