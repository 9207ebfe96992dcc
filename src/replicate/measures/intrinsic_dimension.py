"""Intrinsic dimension of a point cloud (MLE and TwoNN), and the t4(r) power-law fit.

Both estimators look only at the distances from each point to its nearest neighbours:

- MLE (Levina & Bickel 2004): around a point x, with T_j(x) the distance to its j-th neighbour,
  the local estimate is m_k(x) = [ 1/(k-1) * sum_{j<k} log(T_k(x) / T_j(x)) ]^{-1}.
  Levina & Bickel average the local estimates; MacKay & Ghahramani (2005) point out that the
  maximum-likelihood way to pool them is to average their *inverses*, m_k = [mean_x 1/m_k(x)]^{-1}.
  That corrected version is the default here (it is what Notsawo et al. use, with k = 2).
- TwoNN (Facco et al. 2017): mu = r_2 / r_1 follows the Pareto law F(mu) = 1 - mu^{-d} whatever
  the density, so -log(1 - F(mu)) = d log(mu). With the empirical CDF F(mu_(i)) = i/n of the
  sorted ratios, d is the least-squares slope through the origin. Facco et al. discard the
  largest 10% of the ratios, where the empirical CDF is noisiest.

Duplicates. Two identical points are at distance zero, so log(T_k/T_j) or r_2/r_1 would divide by
zero. A representation can hold exact duplicates (e.g. two inputs mapped to the same ReLU
pattern with all-zero activations), and they carry no information about the dimension of the
set, so we keep one copy of each distinct point before looking for neighbours (and say how many
were dropped). Neighbours are exact: float32 scores pick candidates, float64 distances rank them
(see `neighbour_distances`).

The power law t4(r) = a r^{-gamma} + b is linear in (a, b) for a fixed gamma, so we solve for
(a, b) in closed form and search gamma in one dimension (variable projection).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import minimize_scalar

from ..runtime import costed

# Facco et al. discard the top 10% of the ratios mu.
TWONN_DISCARD = 0.1


def unique_points(x: torch.Tensor) -> torch.Tensor:
    """The distinct rows of x (exact duplicates removed), as a 2-D tensor."""
    if x.ndim != 2:
        raise ValueError(f"expected a 2-D tensor of points (n, features), got shape {tuple(x.shape)}")
    return torch.unique(x, dim=0)


# Candidates per point beyond the k wanted, found in float32 before the exact float64 re-ranking:
# enough that the certificate in `neighbour_distances` almost never sends a row to the dense path
# (none of 2,000 on the bench's cloud or an isotropic one in 256 dimensions; 27 with one extra).
EXTRA_CANDIDATES = 2
# Columns per chunk when picking the smallest entries of a row (see `smallest_per_row`).
ROW_CHUNK = 64
UNIT_ROUNDOFF_FLOAT32 = 2.0 ** -24


def smallest_per_row(scores: torch.Tensor, m: int, chunk: int = ROW_CHUNK
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """The m smallest entries of each row of `scores` and their columns, ascending: the values of
    `scores.topk(m, largest=False)`, several times faster on wide rows. The width of `scores`
    must be a multiple of `chunk` (pad with inf).

    `topk` on a whole 2,000-wide row costs as much as the matrix product that made it. Instead,
    each row is cut into chunks of `chunk` columns; the m smallest entries lie in at most m
    chunks, and those are among the m chunks with the smallest minima (a chunk holding one of
    them has its minimum at or below the m-th smallest). So `topk` runs on the chunk minima, then
    on the m chunks they pick. Ties may pick other columns of equal value, never other values.
    """
    rows, width = scores.shape
    scores = scores.contiguous()  # the rows are cut into chunks by a view
    if width % chunk or m * chunk >= width // 2:  # too few chunks to gain anything
        return scores.topk(m, dim=1, largest=False)
    chunks = scores.view(rows, -1, chunk)
    picked = chunks.amin(dim=2).topk(m, dim=1, largest=False).indices  # (rows, m)
    # index_select on flat rows: several times faster than gather or fancy indexing here.
    first = torch.arange(rows).unsqueeze(1) * chunks.shape[1]
    within = scores.view(-1, chunk).index_select(0, (picked + first).flatten()).view(rows, -1)
    values, where = within.topk(m, dim=1, largest=False)
    return values, picked.gather(1, where // chunk) * chunk + where % chunk


def float32_score_slack(norms: torch.Tensor, features: int) -> torch.Tensor:
    """A bound, per row i, on |s~_ij - (d_ij^2 - |a_i|^2)| over all j, where s~_ij is the float32
    score |a_j|^2 - 2 a_i.a_j of `neighbour_distances`, a = float32(p) the rounded points,
    d_ij = |p_i - p_j| the exact distance, and `norms` = |p_i| (float64).

    Rounding p to float32 moves each distance by at most u(|p_i| + |p_j|), so d^2 by at most
    about 2u(|p_i| + |p_j|)^2; a float32 dot product of length D errs by at most
    gamma_D |a_i||a_j| in any summation order (gamma_D = D u / (1 - D u), Higham 2002, sec. 3.1),
    and the norm and the addition add two more roundings: gamma_{D+2} (|a_i| + |a_j|)^2 in all.
    The max over j replaces |p_j| by the largest norm. Doubled, for the float64 centring before
    the rounding and as a margin against any slip in this count.
    """
    u = UNIT_ROUNDOFF_FLOAT32
    gamma = (features + 2) * u / (1 - (features + 2) * u)
    return 2 * (gamma + 2.01 * u) * (norms + norms.max()) ** 2


def float32_candidates(rounded: torch.Tensor, squared_norms: torch.Tensor, n: int, m: int,
                       block: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """The m smallest float32 scores |a_j|^2 - 2 a_i.a_j (j != i) of each of the n rows i of
    `rounded`, and their columns j, `block` rows at a time; `squared_norms` = |a_j|^2. The
    columns are padded to a multiple of ROW_CHUNK with zero points of infinite squared norm,
    whose scores come out inf: `smallest_per_row` then needs no padded copy of each block.

    Along row i the score is d_ij^2 - |a_i|^2, so it ranks the neighbours as the distances do,
    and one fused `addmm` gives it. (Multiplying only the blocks on and above the diagonal of
    the symmetric Gram matrix was measured slower on 2,000 points: the merging costs more than
    the products it saves.)
    """
    values, columns = [], []
    for start in range(0, n, block):
        stop = min(start + block, n)
        scores = torch.addmm(squared_norms.unsqueeze(0), rounded[start:stop], rounded.T,
                             alpha=-2.0)
        rows = torch.arange(stop - start)
        scores[rows, rows + start] = float("inf")  # a point is not its own neighbour
        smallest = smallest_per_row(scores, m)
        values.append(smallest[0])
        columns.append(smallest[1])
    return torch.cat(values), torch.cat(columns)


def neighbour_distances(x: torch.Tensor, k: int, block: int = 1024) -> torch.Tensor:
    """Distances from each distinct point of x to its k nearest other points, shape (n, k), sorted
    along each row; rows follow `unique_points(x)`.

    Exact duplicates are removed first (see the module docstring), so every distance is > 0.
    The distances are exact float64 norms |p_i - p_j|, so that close neighbours in a large cloud
    are not lost to rounding; but finding the neighbours needs all n^2 scores, and a float32
    matrix product computes those in half the time of a float64 one. So the float32 scores pick
    k + EXTRA_CANDIDATES candidates per point (`float32_candidates`), and the candidates are
    re-ranked by their exact float64 distances; both `block` rows at a time. This is exact, not a
    heuristic: `float32_score_slack` bounds the float32 error, so any true k-th neighbour scores
    within twice the bound of the k-th candidate; when the last candidate scores beyond that, all
    true neighbours are among the candidates. A row where that is not proven (near-ties at the
    float32 resolution) is computed densely in float64 instead (`dense_distances`).
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    points = unique_points(x.detach()).to(torch.float64)
    n = points.shape[0]
    if n < k + 1:
        raise ValueError(f"need at least k + 1 = {k + 1} distinct points for k = {k} neighbours, "
                         f"got {n} (of {x.shape[0]} points before removing duplicates)")
    # Distances do not change under a translation, and the float32 error grows with the norms:
    # centre before rounding.
    centred = points - points.mean(dim=0)
    slack = float32_score_slack(centred.norm(dim=1), points.shape[1])
    width = n + (-n % ROW_CHUNK)  # columns padded: see `float32_candidates`
    rounded = torch.zeros(width, points.shape[1], dtype=torch.float32)
    rounded[:n] = centred
    squared_norms = torch.full((width,), float("inf"), dtype=torch.float32)
    squared_norms[:n] = (rounded[:n] * rounded[:n]).sum(dim=1)
    m = min(k + EXTRA_CANDIDATES, n - 1)
    values, columns = float32_candidates(rounded, squared_norms, n, m, block)
    # Every other point a candidate, or the true k nearest proven to be among the candidates.
    proven = (values[:, -1] > values[:, k - 1] + 2 * slack) | (m == n - 1)
    out = []
    for start in range(0, n, block):
        stop = min(start + block, n)
        candidates = points.index_select(0, columns[start:stop].flatten()).view(stop - start, m, -1)
        exact = (candidates - points[start:stop].unsqueeze(1)).norm(dim=2)
        out.append(exact.topk(k, dim=1, largest=False).values)
    nearest = torch.cat(out)
    unproven = (~proven).nonzero().flatten()
    for start in range(0, len(unproven), block):  # in blocks: a dense row is n float64s
        rows = unproven[start:start + block]
        nearest[rows] = dense_distances(points, rows).topk(k, dim=1, largest=False).values
    return nearest


def dense_distances(points: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """|p_i - p_j| for each i in `rows` and every j, with inf at j = i: the slow, plainly exact
    path (differences, not the matrix-product formula, which loses digits to cancellation)."""
    distances = torch.cdist(points[rows], points, compute_mode="donot_use_mm_for_euclid_dist")
    distances[torch.arange(len(rows)), rows] = float("inf")
    return distances


def mle_local(x: torch.Tensor, k: int = 2) -> torch.Tensor:
    """Levina-Bickel local dimension estimate at each distinct point (k >= 2 neighbours),
    in the order of `unique_points(x)` (duplicates removed, rows sorted)."""
    if k < 2:
        raise ValueError(f"the MLE needs k >= 2 neighbours, got {k}")
    t = neighbour_distances(x, k)
    log_ratios = torch.log(t[:, -1:] / t[:, :-1])  # log(T_k / T_j), j = 1..k-1
    return 1.0 / log_ratios.mean(dim=1)


@costed("intrinsic dimension (MLE)")
def mle_dimension(x: torch.Tensor, k: int = 2, pooling: str = "inverse") -> float:
    """Global MLE of the intrinsic dimension of the rows of x.

    pooling="inverse" (default): MacKay-Ghahramani, the inverse of the mean inverse local estimate;
    pooling="mean": Levina-Bickel's plain average of the local estimates.
    """
    local = mle_local(x, k)
    if pooling == "inverse":
        return float(1.0 / (1.0 / local).mean())
    if pooling == "mean":
        return float(local.mean())
    raise ValueError(f"pooling must be 'inverse' or 'mean', got {pooling!r}")


@costed("intrinsic dimension (TwoNN)")
def twonn_dimension(x: torch.Tensor, discard_fraction: float = TWONN_DISCARD) -> float:
    """TwoNN estimate of the intrinsic dimension of the rows of x (Facco et al. 2017)."""
    if not 0 <= discard_fraction < 1:
        raise ValueError(f"discard_fraction must be in [0, 1), got {discard_fraction}")
    t = neighbour_distances(x, 2)
    mu = torch.sort(t[:, 1] / t[:, 0]).values
    n = mu.shape[0]
    # F_emp(mu_(i)) = i/n; the last point (F = 1) has -log(1 - F) = inf and is always dropped.
    keep = min(n - 1, int(np.floor(n * (1 - discard_fraction))))
    if keep < 1:
        raise ValueError(f"too few distinct points ({n}) for TwoNN with discard_fraction={discard_fraction}")
    i = torch.arange(1, keep + 1, dtype=torch.float64)
    y = -torch.log1p(-i / n)
    logmu = torch.log(mu[:keep])
    return float((y * logmu).sum() / (logmu * logmu).sum())


def layer_dimensions(representations: dict[str, torch.Tensor], k: int = 2,
                     discard_fraction: float = TWONN_DISCARD) -> dict[str, dict[str, float]]:
    """MLE (k neighbours, MacKay-Ghahramani pooling) and TwoNN of each layer's representation."""
    return {name: {"mle": mle_dimension(z, k), "twonn": twonn_dimension(z, discard_fraction),
                   "distinct": int(unique_points(z.detach()).shape[0])}
            for name, z in representations.items()}


@dataclass
class PowerLaw:
    """t(r) = a r^{-gamma} + b, fitted by least squares; r2 is the coefficient of determination."""
    a: float
    gamma: float
    b: float
    r2: float

    def __call__(self, r):
        return self.a * np.asarray(r, dtype=float) ** (-self.gamma) + self.b


def _linear_part(r: np.ndarray, t: np.ndarray, gamma: float) -> tuple[float, float, float]:
    """For a fixed gamma: the least-squares (a', b) of t = a' (r/r0)^-gamma + b, and the SSE."""
    design = np.stack([r ** (-gamma), np.ones_like(r)], axis=1)
    coef, *_ = np.linalg.lstsq(design, t, rcond=None)
    sse = float(((design @ coef - t) ** 2).sum())
    return float(coef[0]), float(coef[1]), sse


def fit_power_law(r, t, gamma_bounds: tuple[float, float] = (1.0e-2, 30.0)) -> PowerLaw:
    """Least-squares fit of t = a r^{-gamma} + b (residuals in t itself, as in the paper's plot).

    r is rescaled by its geometric mean while fitting, so that a r^{-gamma} stays well conditioned
    for large gamma (the paper's a = 1.09e15 with r in percent); a is converted back at the end.
    """
    r = np.asarray(r, dtype=float)
    t = np.asarray(t, dtype=float)
    if r.shape != t.shape or r.ndim != 1:
        raise ValueError("r and t must be 1-D arrays of the same length")
    if len(r) < 4:
        raise ValueError(f"fitting three parameters needs at least 4 points, got {len(r)}")
    if np.any(r <= 0):
        raise ValueError("r must be positive")
    r0 = float(np.exp(np.log(r).mean()))
    rs = r / r0
    # A coarse log-spaced scan finds the basin (the SSE can have a flat tail), then refine.
    lo, hi = gamma_bounds
    grid = np.geomspace(lo, hi, 400)
    sse = [_linear_part(rs, t, g)[2] for g in grid]
    j = int(np.argmin(sse))
    bracket = (grid[max(j - 1, 0)], grid[min(j + 1, len(grid) - 1)])
    best = minimize_scalar(lambda g: _linear_part(rs, t, g)[2], bounds=bracket, method="bounded",
                           options={"xatol": 1e-10})
    gamma = float(best.x) if best.fun <= sse[j] else float(grid[j])
    a_scaled, b, sse_best = _linear_part(rs, t, gamma)
    total = float(((t - t.mean()) ** 2).sum())
    r2 = 1.0 - sse_best / total if total > 0 else float("nan")
    return PowerLaw(a=a_scaled * r0 ** gamma, gamma=gamma, b=b, r2=r2)
