"""The loss landscape along a training run: Hessian extremes, gradient norms, the cosine of
consecutive weights, the trajectory's principal components, the loss on a 2D slice, and a
detector for loss spikes (slingshots).

Every measure is a function of (model, data) or of recorded curves and weight vectors; none
imports the training loop. Weight vectors are "flat": all parameters concatenated in
`model.parameters()` order.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch import nn
from torch.func import functional_call

from ..runtime import costed


# --- flat parameter vectors -------------------------------------------------------------------

def flat_params(model: nn.Module, dtype: torch.dtype | None = None) -> torch.Tensor:
    """All parameters of `model` as one detached vector (optionally cast, e.g. to float64)."""
    vec = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    return vec.to(dtype) if dtype is not None else vec.clone()


def _unflatten(model: nn.Module, vec: torch.Tensor) -> dict[str, torch.Tensor]:
    """Split a flat vector into a {name: tensor} dict shaped like `model`'s parameters."""
    named = list(model.named_parameters())
    total = sum(p.numel() for _, p in named)
    if total != vec.numel():
        raise ValueError(f"vector has {vec.numel()} entries, the model has {total} parameters")
    out, i = {}, 0
    for name, p in named:
        out[name] = vec[i:i + p.numel()].view_as(p)
        i += p.numel()
    return out


def loss_at(model: nn.Module, vec: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
            loss_fn: Callable = nn.functional.cross_entropy) -> torch.Tensor:
    """The loss of `model` with its parameters replaced by the flat vector `vec` (differentiable in vec)."""
    return loss_fn(functional_call(model, _unflatten(model, vec), (x,)), y)


# --- Hessian-vector products and Lanczos ------------------------------------------------------

def hvp_operator(model: nn.Module, x: torch.Tensor, y: torch.Tensor, at: torch.Tensor | None = None,
                 loss_fn: Callable = nn.functional.cross_entropy) -> Callable[[torch.Tensor], torch.Tensor]:
    """v -> H v for the Hessian H of the full-batch loss at the flat weights `at` (default: the
    model's current weights), by double backpropagation. The gradient graph is built once and
    reused for every product."""
    theta = (flat_params(model) if at is None else at.detach().clone()).requires_grad_(True)
    (grad,) = torch.autograd.grad(loss_at(model, theta, x, y, loss_fn), theta, create_graph=True)

    def hvp(v: torch.Tensor) -> torch.Tensor:
        (hv,) = torch.autograd.grad(grad, theta, grad_outputs=v.to(grad.dtype), retain_graph=True)
        return hv.detach()

    return hvp


def dense_hessian(model: nn.Module, x: torch.Tensor, y: torch.Tensor, at: torch.Tensor | None = None,
                  loss_fn: Callable = nn.functional.cross_entropy) -> torch.Tensor:
    """The full Hessian matrix (for tests on tiny models only)."""
    theta = flat_params(model) if at is None else at.detach().clone()
    return torch.autograd.functional.hessian(lambda t: loss_at(model, t, x, y, loss_fn), theta, vectorize=True)


@dataclass
class LanczosResult:
    lambda_max: float
    lambda_min: float
    ritz_values: np.ndarray  # all Ritz values of the tridiagonal matrix, ascending
    iterations: int
    # ‖H y − θ y‖ of each extreme Ritz pair (θ, y), ‖y‖ = 1, from one more product each. A
    # symmetric H has an eigenvalue within this distance of θ, so a small residual says the
    # Ritz value has converged to an eigenvalue (though not that no eigenvalue lies beyond it).
    residual_max: float = math.nan
    residual_min: float = math.nan

    @property
    def norm_estimate(self) -> float:
        """max |Ritz value|: the operator norm seen so far (a lower bound on ‖H‖)."""
        return float(np.max(np.abs(self.ritz_values)))

    @property
    def relative_residual(self) -> float:
        """The larger of the two residuals over `norm_estimate`: how far either extreme may sit
        from an eigenvalue, as a share of the spectrum's scale."""
        return max(self.residual_max, self.residual_min) / max(self.norm_estimate, 1e-30)


def orthogonalise_step(w: torch.Tensor, basis: torch.Tensor, alpha: float,
                       beta_before: float) -> torch.Tensor:
    """w = H q_j made orthogonal to the Krylov basis q_0..q_j (the rows of `basis`), in place.

    The three-term recurrence first removes the two large components (alpha q_j and beta q_{j-1})
    at O(dim) cost; what is left against the whole basis is then at rounding level, so a single
    full Gram-Schmidt pass removes it, and a second pass runs only when that pass cancelled much
    of w (the test of Daniel, Gragg, Kaufman and Stewart 1976, with 1/sqrt 2). The full passes
    read the whole basis, the cost of Lanczos beyond the products: one pass where the plain
    scheme always did two halves it.
    """
    w.sub_(basis[-1], alpha=alpha)
    if basis.shape[0] > 1:
        w.sub_(basis[-2], alpha=beta_before)
    for _ in range(2):
        before = float(w.norm())
        w.addmv_(basis.T, basis @ w, alpha=-1.0)
        if float(w.norm()) > before / math.sqrt(2):
            break
    return w


def tridiagonal(diagonal: np.ndarray, off_diagonal: np.ndarray) -> np.ndarray:
    """The dense symmetric tridiagonal matrix with these diagonals (Lanczos's T)."""
    return np.diag(diagonal) + np.diag(off_diagonal, 1) + np.diag(off_diagonal, -1)


# Which extreme Ritz pairs a Lanczos tolerance applies to: their columns in `eigh`'s ascending
# order. "largest" suits a measure that reports lambda_max only (chapter 09, PyHessian's task).
CONVERGED_PAIRS = {"both": [0, -1], "largest": [-1]}


def extremes_converged(alpha: np.ndarray, beta: np.ndarray, tolerance: float,
                       which: str = "both") -> bool:
    """Whether the extreme Ritz pairs named by `which` (see CONVERGED_PAIRS) of the tridiagonal
    matrix with diagonal `alpha` (length k) and off-diagonal beta[:k-1] have a relative residual
    below `tolerance`, beta[k-1] being the norm of the next Lanczos vector before normalisation.

    With an orthonormal basis, the residual of the Ritz pair (theta, Q s) is exactly
    |beta_k * s_k| (s_k: the last component of s), so it costs no product: only the eigenvectors
    of a k x k tridiagonal matrix (dense `eigh`: ~0.2 ms at k = 60, against ~18 ms a product,
    so it runs every iteration). Relative: over max |Ritz value|, the scale of the spectrum.
    """
    ritz, vectors = np.linalg.eigh(tridiagonal(alpha, beta[:len(alpha) - 1]))
    scale = max(float(np.max(np.abs(ritz))), 1e-30)
    residuals = abs(beta[len(alpha) - 1]) * np.abs(vectors[-1, CONVERGED_PAIRS[which]])
    return bool(np.all(residuals < tolerance * scale))


@costed("Hessian extremes (Lanczos)")
def lanczos_extremes(matvec: Callable[[torch.Tensor], torch.Tensor], dim: int, iterations: int = 80,
                     seed: int = 0, dtype: torch.dtype = torch.float32,
                     tolerance: float | None = None, which: str = "both") -> LanczosResult:
    """Extreme eigenvalues of a symmetric operator by Lanczos with full reorthogonalisation.

    The extreme Ritz values bound the spectrum from inside (λ_min ≤ ritz_min, ritz_max ≤ λ_max)
    and converge first; with `iterations` ≥ `dim` they are exact up to rounding. Too few
    iterations err toward the middle of the spectrum: |λ_min| and λ_max come out too small.
    The Krylov basis is kept in float64 so that reorthogonalisation does not lose the small end
    of the spectrum; `dtype` is the dtype the operator expects. The result carries the residual
    ‖H y − θ y‖ of both extreme Ritz pairs, computed with two more operator products.

    `tolerance=None` runs exactly `iterations` products (fewer only on an invariant subspace).
    A number stops as soon as both extreme Ritz pairs have a relative residual (over the largest
    |Ritz value|) below it, read off the tridiagonal matrix at no cost in products (see
    `extremes_converged`); `iterations` is then the cap. `which="largest"` asks that of the
    largest pair only, for a caller that reports lambda_max alone (both residuals are still
    reported). A small residual says the Ritz value lies that close to an eigenvalue, not that no
    eigenvalue lies beyond it.
    """
    if which not in CONVERGED_PAIRS:
        raise ValueError(f"which must be one of {', '.join(CONVERGED_PAIRS)}, got {which!r}")
    m = min(iterations, dim)
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(dim, generator=gen, dtype=torch.float64)
    q /= q.norm()
    basis = torch.empty(m, dim, dtype=torch.float64)
    alpha, beta = np.zeros(m), np.zeros(m)
    k = m
    for j in range(m):
        basis[j] = q
        w = matvec(q.to(dtype)).to(torch.float64)
        alpha[j] = float(w @ q)
        w = orthogonalise_step(w, basis[:j + 1], alpha[j], beta[j - 1] if j else 0.0)
        b = float(w.norm())
        if j == m - 1:
            break
        if b < 1e-10 * max(1.0, abs(alpha[j])):  # invariant subspace found: the Ritz values are exact
            k = j + 1
            break
        beta[j] = b
        if tolerance is not None and extremes_converged(alpha[:j + 1], beta[:j + 1], tolerance,
                                                        which):
            k = j + 1
            break
        q = w / b
    ritz, vectors = np.linalg.eigh(tridiagonal(alpha[:k], beta[:k - 1]))
    residuals = []
    for i in (-1, 0):  # the largest, then the smallest Ritz pair
        y = basis[:k].T @ torch.from_numpy(vectors[:, i])
        y /= y.norm()
        hy = matvec(y.to(dtype)).to(torch.float64)
        residuals.append(float((hy - float(ritz[i]) * y).norm()))
    return LanczosResult(float(ritz[-1]), float(ritz[0]), ritz, k, residuals[0], residuals[1])


@costed("Hessian extremes (Lanczos)")
def hessian_extremes(model: nn.Module, x: torch.Tensor, y: torch.Tensor, at: torch.Tensor | None = None,
                     iterations: int = 80, seed: int = 0, tolerance: float | None = None,
                     which: str = "both") -> LanczosResult:
    """λ_max and λ_min of the full-batch loss Hessian at the flat weights `at` (Lanczos on HVPs;
    `tolerance` and `which` as in `lanczos_extremes`)."""
    hvp = hvp_operator(model, x, y, at)
    dim = sum(p.numel() for p in model.parameters())
    dtype = next(model.parameters()).dtype
    return lanczos_extremes(hvp, dim, iterations, seed, dtype, tolerance, which)


# --- gradient norm and cosine of consecutive weights ------------------------------------------

def gradient_norm(model: nn.Module, x: torch.Tensor, y: torch.Tensor, at: torch.Tensor | None = None,
                  loss_fn: Callable = nn.functional.cross_entropy) -> float:
    """Euclidean norm of the full-batch loss gradient."""
    theta = (flat_params(model) if at is None else at.detach().clone()).requires_grad_(True)
    (grad,) = torch.autograd.grad(loss_at(model, theta, x, y, loss_fn), theta)
    return float(grad.norm())


def cosine(u: torch.Tensor, v: torch.Tensor) -> float:
    """Cosine similarity of two weight vectors, computed in float64 (in float32 the cosine of
    consecutive steps sits at the precision floor: 1 - cos ~ 1e-6 either way)."""
    u, v = u.to(torch.float64), v.to(torch.float64)
    return float((u @ v) / (u.norm() * v.norm()))


# --- trajectory PCA and the loss on a plane ---------------------------------------------------

@dataclass
class TrajectoryPCA:
    directions: np.ndarray          # (k, d) unit principal directions
    variance_ratio: np.ndarray      # (k,) share of the total variance, all of them sum to 1
    coords: np.ndarray              # (n, k) coordinates of each row of M on the directions
    centred: bool


def trajectory_pca(thetas: np.ndarray, final: np.ndarray | None = None, centred: bool = False,
                   components: int = 2) -> TrajectoryPCA:
    """PCA of M = [θ_t − θ_T]: the rows of `thetas` minus `final` (default: the last row, which
    is then dropped, as in Notsawo et al.'s M with 1 ≤ t ≤ T−1).

    `centred=False` takes M as the paper writes it (its second moment about θ_T, not the mean);
    `centred=True` subtracts the column means first, as standard PCA does. The variance ratios
    are those of all singular values, so they sum to 1 over all components.
    """
    thetas = np.asarray(thetas, dtype=np.float64)
    if final is None:
        thetas, final = thetas[:-1], thetas[-1]
    m = thetas - np.asarray(final, dtype=np.float64)
    if centred:
        m = m - m.mean(axis=0)
    # SVD of the small Gram matrix: rows (snapshots) are few, columns (weights) many.
    gram = m @ m.T
    evals, evecs = np.linalg.eigh(gram)
    order = np.argsort(evals)[::-1]
    evals, evecs = np.clip(evals[order], 0.0, None), evecs[:, order]
    ratio = evals / evals.sum()
    k = min(components, len(evals))
    sing = np.sqrt(evals[:k])
    directions = (evecs[:, :k].T @ m) / sing[:, None]
    return TrajectoryPCA(directions, ratio, m @ directions.T, centred)


def loss_surface(model: nn.Module, x: torch.Tensor, y: torch.Tensor, center: torch.Tensor,
                 d1: torch.Tensor, d2: torch.Tensor, alphas: np.ndarray, betas: np.ndarray,
                 loss_fn: Callable = nn.functional.cross_entropy) -> np.ndarray:
    """Loss at center + a·d1 + b·d2 for every (a, b) on the grid; shape (len(betas), len(alphas))."""
    out = np.zeros((len(betas), len(alphas)))
    with torch.no_grad():
        for i, b in enumerate(betas):
            for j, a in enumerate(alphas):
                out[i, j] = float(loss_at(model, center + float(a) * d1 + float(b) * d2, x, y, loss_fn))
    return out


# --- spikes -----------------------------------------------------------------------------------

class SpikeDetector:
    """Online slingshot detector: step t is a spike when L_t > factor × the
    minimum loss over the previous `window` steps, L_t > floor, t > start, and t is at least
    `gap` steps after the previous spike. Feed it the loss step by step with `update`."""

    def __init__(self, factor: float = 10.0, window: int = 200, floor: float = 1e-4, gap: int = 300,
                 start: int = 0):
        self.factor, self.window, self.floor, self.gap, self.start = factor, window, floor, gap, start
        self.recent: list[float] = []
        self.spikes: list[int] = []

    def update(self, t: int, loss: float) -> bool:
        past_min = min(self.recent) if self.recent else math.inf
        self.recent.append(loss)
        if len(self.recent) > self.window:
            self.recent.pop(0)
        is_spike = (t > self.start and loss > self.floor and loss > self.factor * past_min
                    and (not self.spikes or t - self.spikes[-1] >= self.gap))
        if is_spike:
            self.spikes.append(t)
        return is_spike


def find_spikes(loss: np.ndarray, start: int = 0, **kwargs) -> list[int]:
    """Spike steps (1-based, step t = loss[t-1]) of a whole loss curve; see SpikeDetector."""
    detector = SpikeDetector(start=start, **kwargs)
    for t, value in enumerate(np.asarray(loss, dtype=float), start=1):
        detector.update(t, float(value))
    return detector.spikes
