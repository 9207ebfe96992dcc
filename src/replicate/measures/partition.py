"""The exact linear regions of a ReLU MLP on a 2-D slice of its input space.

A ReLU network is a continuous piecewise-affine function; restricted to a plane
x(u, v) = origin + u d1 + v d2 of its input space, its linear regions are convex polygons. This
module computes them exactly, as SplineCam (Humayun et al., CVPR 2023) does, in plain numpy:

- On the square domain, layer 1's pre-activations are affine in (u, v).
- Each neuron's zero line cuts every current polygon whose vertices it separates into two
  (Sutherland-Hodgman clipping, vectorised over all polygons at once). Inside a polygon the
  pre-activations of the layer being cut do not change form, so the neurons of one layer are
  applied one after the other to the children of the previous cuts.
- After a layer, each polygon's activation mask is fixed; composing it with the next Linear
  layer gives the next layer's pre-activations, again affine per polygon. Repeat.
- The leaves are the linear regions. Inside each, the logits are affine, so the decision
  boundary (where the top logit changes) is a set of exact segments.

Every cut also records its chord (the segment of the zero line inside the polygon it cut); the
chords and the domain's border are exactly the edges of the partition, and the chords of one
layer are that layer's share of it (the layer-wise pictures of the paper's Fig. 24).

Coordinates (u, v) use an orthonormal basis of the plane, so areas and lengths on the slice
are Euclidean areas and lengths in input space.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..runtime import costed

# Two polygon vertices closer than this (times the domain side) to a zero line count as lying on
# it; keeps float round-off from creating sliver regions where a line passes through a vertex.
_TOL = 1e-10
# Affine maps are composed for this many regions at a time (bounds the memory of one step).
_CHUNK = 1024


@dataclass(frozen=True)
class Plane:
    """The plane origin + u * basis[0] + v * basis[1] of input space (basis rows orthonormal)."""

    origin: np.ndarray  # (D,)
    basis: np.ndarray  # (2, D)

    def to_input(self, uv: np.ndarray) -> np.ndarray:
        """Input-space points (N, D) of plane coordinates (N, 2)."""
        return self.origin + np.asarray(uv, dtype=np.float64) @ self.basis

    def coords(self, x: np.ndarray) -> np.ndarray:
        """Plane coordinates (N, 2) of input points (N, D) (their orthogonal projection)."""
        return (np.asarray(x, dtype=np.float64) - self.origin) @ self.basis.T


def plane_through(a, b, c) -> Plane:
    """The plane through three input points, with origin `a` and an orthonormal basis."""
    a, b, c = (np.asarray(p, dtype=np.float64).ravel() for p in (a, b, c))
    d1 = b - a
    if np.linalg.norm(d1) == 0:
        raise ValueError("the three points must be distinct")
    d1 = d1 / np.linalg.norm(d1)
    d2 = (c - a) - ((c - a) @ d1) * d1
    if np.linalg.norm(d2) < 1e-12 * max(np.linalg.norm(c - a), 1.0):
        raise ValueError("the three points are collinear; they do not span a plane")
    return Plane(origin=a, basis=np.stack([d1, d2 / np.linalg.norm(d2)]))


def square_around(points: np.ndarray, margin: float = 0.5) -> tuple[float, float, float, float]:
    """A square (umin, umax, vmin, vmax) centred on the bounding box of 2-D `points`, with side
    (1 + 2 * margin) times the box's longer side."""
    points = np.asarray(points, dtype=np.float64)
    lo, hi = points.min(0), points.max(0)
    centre, half = (lo + hi) / 2, (1 + 2 * margin) * (hi - lo).max() / 2
    return (centre[0] - half, centre[0] + half, centre[1] - half, centre[1] + half)


def square_at(centre, side: float) -> tuple[float, float, float, float]:
    return (centre[0] - side / 2, centre[0] + side / 2, centre[1] - side / 2, centre[1] + side / 2)


def linear_layers(model) -> list[tuple[np.ndarray, np.ndarray]]:
    """(W, b) of each Linear layer of a ReLU MLP (`models.MLP` or anything with `.layers`)."""
    import torch

    act = getattr(model, "act", torch.nn.ReLU())
    if not isinstance(act, torch.nn.ReLU):
        raise ValueError(f"the exact partition needs ReLU activations, got {type(act).__name__}")
    out = []
    for layer in model.layers:
        w = layer.weight.detach().to("cpu", torch.float64).numpy()
        b = (layer.bias.detach().to("cpu", torch.float64).numpy() if layer.bias is not None
             else np.zeros(w.shape[0]))
        out.append((w, b))
    return out


def forward_patterns(layers, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(activation pattern (N, hidden neurons) bool, logits (N, classes)) at input points x."""
    h, masks = np.asarray(x, dtype=np.float64), []
    for w, b in layers[:-1]:
        z = h @ w.T + b
        masks.append(z > 0)
        h = np.maximum(z, 0)
    w, b = layers[-1]
    return np.concatenate(masks, axis=1), h @ w.T + b


# ---------------------------------------------------------------------------------------------
# Ragged polygon sets: vertices (V, 2) listed polygon after polygon, each polygon counter-
# clockwise, `owner` (V,) the polygon of each vertex (non-decreasing), `starts` (R+1,) offsets.


def _starts(owner: np.ndarray, n: int) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=n))])


def _next_vertex(starts: np.ndarray) -> np.ndarray:
    """Index of each vertex's successor around its polygon."""
    nxt = np.arange(1, starts[-1] + 1)
    nxt[starts[1:] - 1] = starts[:-1]
    return nxt


def polygon_areas(verts: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Shoelace areas (positive for counter-clockwise polygons)."""
    nxt = _next_vertex(starts)
    cross = verts[:, 0] * verts[nxt, 1] - verts[nxt, 0] * verts[:, 1]
    return 0.5 * np.add.reduceat(cross, starts[:-1])


def _vertex_means(verts: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The mean of each polygon's vertices: a point inside the (convex) polygon."""
    counts = np.diff(starts)[:, None]
    return np.add.reduceat(verts, starts[:-1], axis=0) / counts


def _split(verts, owner, starts, dist, tol):
    """Cut each polygon by the line dist = 0 (dist: signed distance of each vertex to its
    polygon's line). Returns (cut polygons' indices, positive-side children, negative-side
    children, chords), each child set as (verts, owner in 0..len(cut)-1)."""
    big = np.maximum.reduceat(dist, starts[:-1])
    small = np.minimum.reduceat(dist, starts[:-1])
    cut = np.flatnonzero((big > tol) & (small < -tol))
    if len(cut) == 0:
        return cut, None, None, None
    rank = np.full(len(starts) - 1, -1)
    rank[cut] = np.arange(len(cut))
    idx = np.flatnonzero(rank[owner] >= 0)  # vertices of cut polygons, in polygon order
    nxt = _next_vertex(starts)[idx]
    p, q, sa, sb = verts[idx], verts[nxt], dist[idx], dist[nxt]
    cross = ((sa > tol) & (sb < -tol)) | ((sa < -tol) & (sb > tol))
    t = np.where(cross, sa / np.where(cross, sa - sb, 1.0), 0.0)
    x = p + t[:, None] * (q - p)
    # Each edge contributes up to two points in order: its start vertex, then its crossing.
    slots = np.stack([p, x], axis=1).reshape(-1, 2)
    own = np.repeat(rank[owner[idx]], 2)
    keep_pos = np.stack([sa >= -tol, cross], axis=1).ravel()
    keep_neg = np.stack([sa <= tol, cross], axis=1).ravel()
    on_line = np.stack([np.abs(sa) <= tol, cross], axis=1).ravel()
    pos = (slots[keep_pos], own[keep_pos])
    neg = (slots[keep_neg], own[keep_neg])
    # The chord: the first and last on-line point of each cut polygon (there are exactly two).
    line_pts, line_own = slots[on_line], own[on_line]
    first = np.searchsorted(line_own, np.arange(len(cut)), side="left")
    last = np.searchsorted(line_own, np.arange(len(cut)), side="right") - 1
    chords = np.concatenate([line_pts[first], line_pts[last]], axis=1)
    return cut, pos, neg, chords


def _line_distance(coef: np.ndarray, verts: np.ndarray) -> np.ndarray:
    """Signed distance of points to lines c0 u + c1 v + c2 = 0 (one line per point; lines
    with c0 = c1 = 0 give 0 or the sign of c2, i.e. never a cut)."""
    value = coef[:, 0] * verts[:, 0] + coef[:, 1] * verts[:, 1] + coef[:, 2]
    norm = np.hypot(coef[:, 0], coef[:, 1])
    return np.where(norm > 0, value / np.where(norm > 0, norm, 1.0), np.sign(value))


@dataclass
class Partition:
    """The linear regions of a network on a square of a plane (coordinates in the plane's basis).

    Region r is the convex polygon `verts[starts[r]:starts[r+1]]` (counter-clockwise); on it the
    network's logits are `logit_maps[r] @ (u, v, 1)`.
    """

    domain: tuple[float, float, float, float]
    verts: np.ndarray  # (V, 2)
    starts: np.ndarray  # (R+1,)
    patterns: np.ndarray  # (R, ceil(hidden/8)) uint8: np.packbits of each region's activation pattern
    n_hidden: int
    logit_maps: np.ndarray  # (R, classes, 3): d logits / du, d logits / dv, offset
    chords: np.ndarray  # (C, 4) u0, v0, u1, v1 of every cut
    chord_layer: np.ndarray  # (C,) the hidden layer (0-based) whose neuron made the cut
    layer_counts: list[int]  # number of regions after each hidden layer's cuts
    _boundary: np.ndarray | None = field(default=None, repr=False)

    @property
    def n_regions(self) -> int:
        return len(self.starts) - 1

    @property
    def side(self) -> float:
        return self.domain[1] - self.domain[0]

    def polygon(self, r: int) -> np.ndarray:
        return self.verts[self.starts[r]:self.starts[r + 1]]

    def polygons(self) -> list[np.ndarray]:
        return np.split(self.verts, self.starts[1:-1])

    def areas(self) -> np.ndarray:
        return polygon_areas(self.verts, self.starts)

    def centroids(self) -> np.ndarray:
        """Area centroids of the regions."""
        nxt = _next_vertex(self.starts)
        p, q = self.verts, self.verts[nxt]
        cross = p[:, 0] * q[:, 1] - q[:, 0] * p[:, 1]
        area = 0.5 * np.add.reduceat(cross, self.starts[:-1])
        c = np.add.reduceat((p + q) * cross[:, None], self.starts[:-1], axis=0)
        # A sliver the float arithmetic left with zero area has no area centroid: use the mean of
        # its vertices, a point of the sliver all the same (else NaN breaks every later query).
        flat = np.abs(area) <= 1e-15 * self.side ** 2
        with np.errstate(divide="ignore", invalid="ignore"):
            c = c / (6 * area[:, None])
        if flat.any():
            mean = np.add.reduceat(self.verts, self.starts[:-1], axis=0) / np.diff(self.starts)[:, None]
            c[flat] = mean[flat]
        return c

    def pattern(self, r: int) -> np.ndarray:
        return np.unpackbits(self.patterns[r])[: self.n_hidden].astype(bool)

    def slope_norms(self) -> np.ndarray:
        """Frobenius norm of each region's logit slope d logits / d(u, v) (a classes x 2 matrix;
        with the orthonormal basis, the Jacobian's restriction to the plane)."""
        return np.linalg.norm(self.logit_maps[:, :, :2], axis=(1, 2))

    def locate(self, points: np.ndarray) -> np.ndarray:
        """The region containing each 2-D point (-1 outside the domain)."""
        points = np.atleast_2d(np.asarray(points, dtype=np.float64))
        nxt = _next_vertex(self.starts)
        edge = self.verts[nxt] - self.verts
        owner = np.repeat(np.arange(self.n_regions), np.diff(self.starts))
        lo = np.minimum.reduceat(self.verts, self.starts[:-1], axis=0)
        hi = np.maximum.reduceat(self.verts, self.starts[:-1], axis=0)
        found = np.full(len(points), -1)
        for k, pt in enumerate(points):
            near = np.flatnonzero(np.all((lo <= pt) & (pt <= hi), axis=1))
            if len(near) == 0:
                continue
            sel = np.flatnonzero(np.isin(owner, near))
            rel = pt - self.verts[sel]
            cross = edge[sel, 0] * rel[:, 1] - edge[sel, 1] * rel[:, 0]
            # The smallest edge cross product of each nearby polygon: >= 0 when the point is in it.
            worst = np.full(self.n_regions, np.inf)
            np.minimum.at(worst, owner[sel], cross)
            worst = worst[near]
            if worst.max() >= -1e-12 * self.side ** 2:
                found[k] = near[np.argmax(worst)]
        return found

    def decision_boundary(self) -> np.ndarray:
        """The decision boundary as exact segments (S, 2, 2): inside each region where two
        classes tie for the top logit."""
        if self._boundary is None:
            self._boundary = _decision_boundary(self)
        return self._boundary


class _PolygonPool:
    """Polygons in an append-only vertex buffer: a cut marks its polygon dead and appends the
    two children, so one neuron's pass costs time in proportion to the polygons it may cut,
    not to the whole partition."""

    def __init__(self, verts: np.ndarray, counts: np.ndarray, parent: np.ndarray):
        self.verts = verts.copy()
        self.n_verts = len(verts)
        self.start = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        self.count = counts.astype(np.int64)
        self.parent = parent.astype(np.int64)
        self.alive = np.ones(len(counts), dtype=bool)

    def gather(self, polys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(verts, owner, starts) of the given polygons as a compact ragged set."""
        counts = self.count[polys]
        starts = np.concatenate([[0], np.cumsum(counts)])
        idx = np.repeat(self.start[polys] - starts[:-1], counts) + np.arange(starts[-1])
        return self.verts[idx], np.repeat(np.arange(len(polys)), counts), starts

    def append(self, verts: np.ndarray, owner: np.ndarray, n: int, parent: np.ndarray) -> None:
        """Add n polygons (vertices `verts`, listed polygon after polygon, with `owner` 0..n-1)."""
        need = self.n_verts + len(verts)
        if need > len(self.verts):
            grown = np.empty((max(need, 2 * len(self.verts)), 2))
            grown[: self.n_verts] = self.verts[: self.n_verts]
            self.verts = grown
        self.verts[self.n_verts:need] = verts
        counts = np.bincount(owner, minlength=n)
        self.start = np.concatenate([self.start, self.n_verts + np.cumsum(counts) - counts])
        self.n_verts = need
        self.count = np.concatenate([self.count, counts])
        self.parent = np.concatenate([self.parent, parent])
        self.alive = np.concatenate([self.alive, np.ones(n, dtype=bool)])

    def compact(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(verts, owner, starts, parent) of the live polygons."""
        live = np.flatnonzero(self.alive)
        verts, owner, starts = self.gather(live)
        return verts, owner, starts, self.parent[live]


def _crossings(maps: np.ndarray, verts: np.ndarray, owner: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """(neurons, regions) bool: whether each neuron's zero line (maps: (regions, 3, neurons))
    may cross each region, i.e. its pre-activation takes both signs at the region's vertices."""
    n_regions, _, n = maps.shape
    out = np.zeros((n_regions, n), dtype=bool)
    for lo in range(0, n_regions, _CHUNK):
        hi = min(lo + _CHUNK, n_regions)
        v0, v1 = starts[lo], starts[hi]
        z = _affine_at(maps[owner[v0:v1]], verts[v0:v1])
        local = starts[lo:hi] - v0
        out[lo:hi] = (np.maximum.reduceat(z, local, axis=0) > 0) & (np.minimum.reduceat(z, local, axis=0) < 0)
    return np.ascontiguousarray(out.T)


def _affine_at(maps: np.ndarray, points: np.ndarray) -> np.ndarray:
    """maps (N, 3, n) evaluated at points (N, 2): u * maps[:, 0] + v * maps[:, 1] + maps[:, 2]."""
    return maps[:, 0] * points[:, :1] + maps[:, 1] * points[:, 1:] + maps[:, 2]


@costed("exact 2D partition")
def partition(layers, plane: Plane, domain: tuple[float, float, float, float]) -> Partition:
    """The exact partition of `domain` (umin, umax, vmin, vmax; a square) of `plane` by the ReLU
    MLP with Linear layers `layers` [(W, b), ...] (ReLU after each but the last)."""
    umin, umax, vmin, vmax = map(float, domain)
    side = max(umax - umin, vmax - vmin)
    tol = _TOL * side
    verts = np.array([[umin, vmin], [umax, vmin], [umax, vmax], [umin, vmax]])
    owner, starts = np.zeros(4, dtype=np.int64), np.array([0, 4])
    masks_so_far = np.zeros((1, 0), dtype=bool)
    # Each region's pre-activations of the current layer as an affine map of (u, v): maps[r] is
    # (3, neurons) holding d/du, d/dv and the offset. For layer 1 one map serves the whole
    # domain: u (W d1) + v (W d2) + (W origin + b).
    w, b = layers[0]
    maps = np.stack([w @ plane.basis[0], w @ plane.basis[1], w @ plane.origin + b])[None]
    chords, chord_layer, layer_counts = [], [], []
    for layer in range(len(layers) - 1):
        # Regions at the start of the layer are the parents; a neuron can only cut the
        # descendants of the parents its line crosses.
        crosses = _crossings(maps, verts, owner, starts)
        pool = _PolygonPool(verts, np.diff(starts), np.arange(len(starts) - 1))
        for neuron in np.flatnonzero(crosses.any(1)):
            cand = np.flatnonzero(pool.alive & crosses[neuron][pool.parent])
            if len(cand) == 0:
                continue
            cv, co, cs = pool.gather(cand)
            dist = _line_distance(maps[pool.parent[cand], :, neuron][co], cv)
            cut, pos, neg, chord = _split(cv, co, cs, dist, tol)
            if len(cut) == 0:
                continue
            parents = pool.parent[cand[cut]]
            pool.alive[cand[cut]] = False
            pool.append(np.concatenate([pos[0], neg[0]]), np.concatenate([pos[1], len(cut) + neg[1]]),
                        2 * len(cut), np.concatenate([parents, parents]))
            chords.append(chord)
            chord_layer.append(np.full(len(cut), layer))
        verts, owner, starts, parent = pool.compact()
        layer_counts.append(len(parent))
        # Fix each region's mask at an interior point, then compose with the next Linear layer:
        # next maps = (maps * mask) @ W^T, plus the bias in the offset row.
        inside = _vertex_means(verts, starts)
        w, b = layers[layer + 1]
        new_maps = np.empty((len(parent), 3, w.shape[0]))
        layer_masks = np.empty((len(parent), maps.shape[2]), dtype=bool)
        for lo in range(0, len(parent), _CHUNK):
            sl = slice(lo, lo + _CHUNK)
            m = maps[parent[sl]]  # (chunk, 3, n)
            active = _affine_at(m, inside[sl]) > 0
            layer_masks[sl] = active
            m *= active[:, None, :]
            new_maps[sl] = (m.reshape(-1, m.shape[2]) @ w.T).reshape(-1, 3, w.shape[0])
        new_maps[:, 2] += b
        masks_so_far = np.concatenate([masks_so_far[parent], layer_masks], axis=1)
        maps = new_maps
    return Partition(
        domain=(umin, umax, vmin, vmax), verts=verts, starts=starts,
        patterns=np.packbits(masks_so_far, axis=1), n_hidden=masks_so_far.shape[1],
        logit_maps=np.ascontiguousarray(maps.transpose(0, 2, 1)),
        chords=np.concatenate(chords) if chords else np.zeros((0, 4)),
        chord_layer=np.concatenate(chord_layer) if chord_layer else np.zeros(0, dtype=int),
        layer_counts=layer_counts)


def _clip_keep(verts, owner, starts, coef, tol):
    """Keep the part of each polygon where coef[r] @ (u, v, 1) >= 0 (coef: (R, 3)).
    Returns the clipped polygons (verts, owner, starts, index of the source polygon)."""
    dist = _line_distance(coef[owner], verts)
    small = np.minimum.reduceat(dist, starts[:-1])
    big = np.maximum.reduceat(dist, starts[:-1])
    whole, empty = small >= -tol, big <= tol
    cut, pos, _, _ = _split(verts, owner, starts, dist, tol)
    keep = whole & ~empty
    src = np.concatenate([np.flatnonzero(keep), cut])
    vkeep = keep[owner]
    ids = np.cumsum(keep) - 1
    new_verts = np.concatenate([verts[vkeep]] + ([pos[0]] if len(cut) else []))
    new_owner = np.concatenate([ids[owner[vkeep]]] + ([keep.sum() + pos[1]] if len(cut) else []))
    return new_verts, new_owner, _starts(new_owner, len(src)), src


def _decision_boundary(part: Partition) -> np.ndarray:
    """Segments where the top logit changes, computed region by region."""
    owner = np.repeat(np.arange(part.n_regions), np.diff(part.starts))
    hom = np.concatenate([part.verts, np.ones((len(part.verts), 1))], axis=1)
    logits = np.einsum("vkc,vc->vk", part.logit_maps[owner], hom)
    top = logits.argmax(1)
    ordered = np.sort(logits, axis=1)
    scale = np.abs(part.logit_maps[:, :, :2]).sum((1, 2))[owner] * part.side + 1e-300
    tie = (ordered[:, -1] - ordered[:, -2]) <= 1e-9 * scale
    # If every vertex of a (convex) region has the same top class k, then L_k >= L_j at every
    # vertex and hence everywhere in it: only regions with mixed vertex winners hold boundary,
    # or regions with a tie at a vertex (where the boundary may run along their edge).
    mixed = np.flatnonzero((np.minimum.reduceat(top, part.starts[:-1])
                            != np.maximum.reduceat(top, part.starts[:-1]))
                           | np.maximum.reduceat(tie, part.starts[:-1]).astype(bool))
    if len(mixed) == 0:
        return np.zeros((0, 2, 2))
    n_classes = part.logit_maps.shape[1]
    tol = _TOL * part.side
    segments = []
    sub_counts = np.diff(part.starts)[mixed]
    sub_verts = np.concatenate([part.polygon(r) for r in mixed])
    sub_owner = np.repeat(np.arange(len(mixed)), sub_counts)
    maps = part.logit_maps[mixed]  # (M, classes, 3)
    for k in range(n_classes):
        # The cell of class k in each mixed region: clip by L_k - L_j >= 0 for every j != k.
        verts, own, starts, src = sub_verts, sub_owner, _starts(sub_owner, len(mixed)), np.arange(len(mixed))
        for j in range(n_classes):
            if j == k or len(src) == 0:
                continue
            coef = maps[src, k, :] - maps[src, j, :]
            verts, own, starts, kept = _clip_keep(verts, own, starts, coef, tol)
            src = src[kept]
        if len(src) == 0:
            continue
        # Cell edges on the boundary: where class k ties with the runner-up. Keep each segment
        # once, from the side of the smaller class index.
        nxt = _next_vertex(starts)
        mid = np.concatenate([(verts + verts[nxt]) / 2, np.ones((len(verts), 1))], axis=1)
        logits = np.einsum("vkc,vc->vk", maps[src[own]], mid)
        others = np.delete(logits, k, axis=1)
        gap = logits[:, k] - others.max(1)
        runner = np.delete(np.arange(n_classes), k)[others.argmax(1)]
        scale = np.abs(maps[src[own]][:, :, :2]).sum((1, 2)) * part.side + 1e-300
        on = (gap <= 1e-9 * scale) & (runner > k) & (np.linalg.norm(verts[nxt] - verts, axis=1) > tol)
        segments.append(np.stack([verts[on], verts[nxt][on]], axis=1))
    return np.concatenate(segments) if segments else np.zeros((0, 2, 2))


# ---------------------------------------------------------------------------------------------
# Where the regions are: measures relative to the decision boundary.


def sample_segments(segments: np.ndarray, spacing: float) -> np.ndarray:
    """Points along segments (S, 2, 2), at most `spacing` apart (ends included)."""
    if len(segments) == 0:
        return np.zeros((0, 2))
    length = np.linalg.norm(segments[:, 1] - segments[:, 0], axis=1)
    n = np.maximum(np.ceil(length / spacing).astype(int), 1) + 1
    t = _ramp(n)
    owner = np.repeat(np.arange(len(segments)), n)
    return segments[owner, 0] + t[:, None] * (segments[owner, 1] - segments[owner, 0])


def _ramp(n: np.ndarray) -> np.ndarray:
    """Concatenated linspace(0, 1, k) for each k in n (all k >= 2), vectorised."""
    first = np.concatenate([[0], np.cumsum(n)[:-1]])
    k = np.arange(n.sum()) - np.repeat(first, n)
    return k / np.repeat(n - 1, n)


class BoundaryDistance:
    """Distance to the decision boundary, from a dense sampling of its segments (error at most
    half the sampling spacing, side / 4000 by default)."""

    def __init__(self, part: Partition, spacing: float | None = None):
        from scipy.spatial import cKDTree

        self.spacing = spacing or part.side / 4000
        self.samples = sample_segments(part.decision_boundary(), self.spacing)
        self.tree = cKDTree(self.samples) if len(self.samples) else None

    def __call__(self, points: np.ndarray) -> np.ndarray:
        if self.tree is None:
            return np.full(len(points), np.inf)
        return self.tree.query(np.asarray(points, dtype=np.float64))[0]


def grid_points(domain, resolution: int) -> np.ndarray:
    """Centres of a resolution x resolution grid of cells over the domain, row by row."""
    us = domain[0] + (np.arange(resolution) + 0.5) * (domain[1] - domain[0]) / resolution
    vs = domain[2] + (np.arange(resolution) + 0.5) * (domain[3] - domain[2]) / resolution
    return np.stack(np.meshgrid(us, vs), -1).reshape(-1, 2)


def boundary_concentration(part: Partition, band: float, resolution: int = 400) -> dict:
    """How the partition sits relative to the band of half-width `band` around the boundary.

    - `band_area_share`: the share of the domain within `band` of the boundary (grid estimate);
    - `edge_share`: the share of the total length of region edges (the chords) within the band;
    - `edge_concentration`: edge_share / band_area_share (1 = edges spread evenly);
    - `region_density_ratio`: (regions per unit area in the band) / (regions per unit area
      outside it), counting each region at its centroid (the region density rho).
    """
    dist = BoundaryDistance(part)
    in_band = dist(grid_points(part.domain, resolution)) <= band
    area_share = float(in_band.mean())
    # Chord length inside the band, from pieces at most side / 1000 long.
    chords = part.chords.reshape(-1, 2, 2)
    length = np.linalg.norm(chords[:, 1] - chords[:, 0], axis=1)
    pieces = np.maximum(np.ceil(length / (part.side / 1000)).astype(int), 1)
    owner = np.repeat(np.arange(len(chords)), pieces)
    k = np.arange(pieces.sum()) - np.repeat(np.concatenate([[0], np.cumsum(pieces)[:-1]]), pieces)
    t = (k + 0.5) / pieces[owner]
    mids = chords[owner, 0] + t[:, None] * (chords[owner, 1] - chords[owner, 0])
    near = dist(mids) <= band
    piece_len = (length / pieces)[owner]
    edge_share = float(piece_len[near].sum() / piece_len.sum()) if len(piece_len) else 0.0
    centre_in = dist(part.centroids()) <= band
    inside, outside = centre_in.sum(), (~centre_in).sum()
    area = part.side ** 2
    if 0 < area_share < 1 and outside > 0:
        ratio = (inside / (area_share * area)) / (outside / ((1 - area_share) * area))
    else:
        ratio = float("nan")
    return {"band_area_share": area_share, "edge_share": edge_share,
            "edge_concentration": edge_share / area_share if area_share > 0 else float("nan"),
            "region_density_ratio": float(ratio)}


def near_and_away_squares(part: Partition, side: float, count: int,
                          resolution: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """Centres of up to `count` non-overlapping squares of the given side inside the domain:
    centred on the decision boundary (spread out: each new one farthest from those chosen,
    starting nearest the domain's centre), and as far from the boundary as possible (greedy,
    farthest first). The paper's Fig. 26 compares the region counts of such equal-area squares."""
    umin, umax, vmin, vmax = part.domain
    half = side / 2

    def fits(pts):  # centres whose square lies inside the domain
        return ((pts[:, 0] >= umin + half) & (pts[:, 0] <= umax - half)
                & (pts[:, 1] >= vmin + half) & (pts[:, 1] <= vmax - half))

    dist = BoundaryDistance(part)
    on = dist.samples[fits(dist.samples)] if len(dist.samples) else np.zeros((0, 2))
    near = []
    if len(on):
        centre = np.array([(umin + umax) / 2, (vmin + vmax) / 2])
        gap = np.linalg.norm(on - centre, axis=1)
        near.append(on[np.argmin(gap)])
        gap = np.full(len(on), np.inf)
        while len(near) < count:
            gap = np.minimum(gap, np.abs(on - near[-1]).max(1))  # Chebyshev: squares don't overlap
            if gap.max() < side:
                break
            near.append(on[np.argmax(gap)])
    grid = grid_points(part.domain, resolution)
    grid = grid[fits(grid)]
    far = dist(grid)
    away = []
    for i in np.argsort(-far, kind="stable"):
        if len(away) == count or far[i] < half:
            break
        if all(np.abs(grid[i] - c).max() >= side for c in away):
            away.append(grid[i])
    return np.array(near).reshape(-1, 2), np.array(away).reshape(-1, 2)


# ---------------------------------------------------------------------------------------------
# Pictures in SplineCam's style: region edges black, decision boundary red, regions coloured by
# the norm of their slope.


def draw_partition(ax, part: Partition, points: np.ndarray | None = None, layer: int | None = None,
                   color: np.ndarray | None = None, norm=None, cmap: str = "viridis",
                   edge_width: float = 0.15, boundary: bool = True):
    """Draw the partition on `ax`; returns the region fill (for a colour bar) or None.

    `layer` (0-based) draws only that hidden layer's cuts, without fills (paper Fig. 24).
    `color` defaults to the slope norm of each region."""
    from matplotlib.collections import LineCollection, PolyCollection

    fill = None
    if layer is None:
        color = part.slope_norms() if color is None else color
        fill = PolyCollection(part.polygons(), array=color, cmap=cmap, norm=norm,
                              edgecolors="none", linewidths=0, antialiased=False)
        ax.add_collection(fill)
        chords = part.chords
    else:
        chords = part.chords[part.chord_layer == layer]
    ax.add_collection(LineCollection(chords.reshape(-1, 2, 2), colors="k", linewidths=edge_width))
    if boundary:
        ax.add_collection(LineCollection(part.decision_boundary(), colors="red", linewidths=1.2))
    if points is not None:
        ax.plot(points[:, 0], points[:, 1], "o", ms=7, mfc="white", mec="k", mew=1.5, zorder=5)
    ax.set_xlim(part.domain[0], part.domain[1])
    ax.set_ylim(part.domain[2], part.domain[3])
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    return fill


def patterns_on_plane(layers, plane: Plane, uv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`forward_patterns` at the plane points uv (N, 2), without forming the N input vectors:
    the first layer is affine in (u, v)."""
    (w, b), rest = layers[0], layers[1:]
    uv = np.asarray(uv, dtype=np.float64)
    z = uv @ (plane.basis @ w.T) + (w @ plane.origin + b)
    masks, h = [z > 0], np.maximum(z, 0)
    for w, b in rest[:-1]:
        z = h @ w.T + b
        masks.append(z > 0)
        h = np.maximum(z, 0)
    w, b = rest[-1] if rest else (None, None)
    logits = h @ w.T + b if rest else z
    return np.concatenate(masks, axis=1), logits


def count_patterns(patterns: np.ndarray) -> int:
    """The number of distinct rows of a boolean pattern matrix."""
    packed = np.ascontiguousarray(np.packbits(patterns, axis=1))
    return len(np.unique(packed.view(np.dtype((np.void, packed.shape[1])))))
