"""The peers `bench` times our measures against, side by side in one process on the same inputs:
torchattacks (PGD), scikit-dimension (MLE and TwoNN), PyHessian (the top Hessian eigenvalue), SciPy's
ARPACK (both ends of the Hessian's spectrum, from the same Hessian-vector products) and a
`torch.func` computation of the empirical NTK, and torch.optim run one learning rate at a time
(chapter 07's grid). None is a dependency of the book: a peer that is
not installed gives a row that says so, and the benchmark still times ours."""
from __future__ import annotations

import importlib
import importlib.metadata
import warnings
from dataclasses import dataclass
from types import ModuleType
from unittest import mock

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, jacrev, vmap

BENCH_EXTRA = "pip install -e .[bench]"


@dataclass(frozen=True)
class Peer:
    """A peer library: its import name, its name on the package index, and how to install it."""
    module: str
    distribution: str
    install: str = BENCH_EXTRA

    def load(self) -> ModuleType | None:
        """The imported module, or None when it is not installed."""
        try:
            return importlib.import_module(self.module)
        except ImportError:
            return None

    def label(self) -> str:
        """'torchattacks 3.5.1', or what to install when the peer is missing."""
        if self.load() is None:
            return f"{self.distribution}: peer not installed ({self.install})"
        return f"{self.distribution} {importlib.metadata.version(self.distribution)}"


# torchattacks 3.5.1 pins requests~=2.25.1 while the book's Sphinx needs requests>=2.30, so pip
# cannot resolve it beside the book: it is installed on its own, without its dependencies.
TORCHATTACKS = Peer("torchattacks", "torchattacks", "pip install --no-deps torchattacks==3.5.1")
SKDIM = Peer("skdim", "scikit-dimension")
PYHESSIAN = Peer("pyhessian", "pyhessian")


def skdim_mle(skdim: ModuleType, points, k: int = 2) -> float:
    """scikit-dimension's MLE set up as ours: k neighbours, no noise model, the (k - 1) numerator
    (unbiased=False), and the local estimates pooled by the inverse of their mean inverse
    (comb="mle", MacKay and Ghahramani), as `mle_dimension`'s default pooling."""
    return float(skdim.id.MLE().fit(points, n_neighbors=k, comb="mle").dimension_)


def skdim_twonn(skdim: ModuleType, points, discard_fraction: float = 0.1) -> float:
    """scikit-dimension's TwoNN set up as ours: the least-squares line through the origin of
    Facco et al. 2017 (method="linear"), the largest 10% of the ratios discarded."""
    return float(skdim.id.TwoNN(discard_fraction=discard_fraction, method="linear")
                 .fit(points).dimension_)


def pyhessian_top_eigenvalue(pyhessian: ModuleType, model: nn.Module, x: torch.Tensor,
                             y: torch.Tensor, seed: int = 0, tol: float = 1e-3,
                             max_iter: int = 100) -> float:
    """PyHessian's largest-magnitude eigenvalue of the full-batch cross-entropy Hessian, by its
    power iteration (its defaults: maxIter 100, tol 1e-3, the relative change between two
    successive estimates at which it stops), on the CPU."""
    torch.manual_seed(seed)  # its start vector comes from the global generator
    # PyHessian differentiates the gradient that `backward` leaves in `.grad`: that must start
    # empty (a second call would add to the first), and is freed afterwards.
    model.zero_grad(set_to_none=True)
    with warnings.catch_warnings():
        # Its backward(create_graph=True) warns of the parameter-gradient reference cycle, which
        # zero_grad below breaks.
        warnings.simplefilter("ignore", UserWarning)
        top, _ = pyhessian.hessian(model, nn.CrossEntropyLoss(), data=(x, y),
                                   cuda=False).eigenvalues(maxIter=max_iter, tol=tol, top_n=1)
    model.zero_grad(set_to_none=True)
    return float(top[0])


def arpack_extremes(model: nn.Module, x: torch.Tensor, y: torch.Tensor, tol: float,
                    seed: int = 0) -> tuple[float, float, int]:
    """(lambda_max, lambda_min, Hessian-vector products) of the full-batch cross-entropy Hessian
    by ARPACK's implicitly restarted Lanczos (`scipy.sparse.linalg.eigsh`, `which="BE"`: one
    eigenvalue from each end) on a LinearOperator of the same products our Lanczos uses, built
    afresh each call as ours is; `tol` is ARPACK's relative accuracy of the Ritz values."""
    from scipy.sparse.linalg import LinearOperator, eigsh

    from ..measures.landscape import hvp_operator

    hvp, dtype = hvp_operator(model, x, y), next(model.parameters()).dtype
    size, count = sum(p.numel() for p in model.parameters()), [0]

    def matvec(v: np.ndarray) -> np.ndarray:
        count[0] += 1
        return hvp(torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32)).to(dtype)).numpy()

    start = np.random.default_rng(seed).standard_normal(size).astype(np.float32)
    values = eigsh(LinearOperator((size, size), matvec=matvec, dtype=np.float32), k=2,
                   which="BE", tol=tol, v0=start, return_eigenvectors=False)
    return float(values.max()), float(values.min()), count[0]


def pyhessian_products(pyhessian: ModuleType, model: nn.Module, x: torch.Tensor,
                       y: torch.Tensor, tol: float = 1e-3, max_iter: int = 100) -> int:
    """How many Hessian-vector products PyHessian's power iteration took before its tolerance
    stopped it (one untimed run, counting calls to its product function)."""
    module = importlib.import_module("pyhessian.hessian")  # the module, not the class of that name
    with mock.patch.object(module, "hessian_vector_product",
                           wraps=module.hessian_vector_product) as counted:
        pyhessian_top_eigenvalue(pyhessian, model, x, y, tol=tol, max_iter=max_iter)
    return counted.call_count


def torch_func_ntk(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The n x n empirical NTK summed over the outputs, by the torch.func recipe: per-point
    Jacobians of each parameter tensor (vmap of jacrev), contracted tensor by tensor and summed,
    without gathering all parameters into one matrix as `empirical_ntk` does."""
    params = {name: p.detach() for name, p in model.named_parameters()}

    def one_point(theta, point):
        return functional_call(model, theta, (point.unsqueeze(0),)).squeeze(0)

    jacobians = vmap(jacrev(one_point), in_dims=(None, 0))(params, x)  # name -> (n, k, *shape)
    kernel = sum(torch.einsum("naf,mbf->nmab", j.flatten(2), j.flatten(2))
                 for j in jacobians.values())
    return kernel.diagonal(dim1=2, dim2=3).sum(-1)  # the trace over the k outputs


# torch.optim at its defaults ("momentum": SGD with momentum 0.9), the optimisers chapter 07 races.
TORCH_OPTIMIZERS = {
    "sgd": lambda params, lr: torch.optim.SGD(params, lr=lr),
    "momentum": lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=0.9),
    "rmsprop": lambda params, lr: torch.optim.RMSprop(params, lr=lr),
    "rprop": lambda params, lr: torch.optim.Rprop(params, lr=lr),
    "adam": lambda params, lr: torch.optim.Adam(params, lr=lr),
    "adamax": lambda params, lr: torch.optim.Adamax(params, lr=lr),
}


def torch_optim_race(objective, start: list[float], optimizer: str, lrs: list[float],
                     iterations: int) -> np.ndarray:
    """What `objectives.optimizer_race` computes, by torch.optim itself, one learning rate at a
    time (one point, one optimiser, one backward a step): the positions, shape
    (iterations + 1, len(lrs), n), in float64."""
    paths = []
    for lr in lrs:
        point = torch.tensor(start, dtype=torch.float64, requires_grad=True)
        opt = TORCH_OPTIMIZERS[optimizer]([point], lr)
        path = [np.array(start)]
        for _ in range(iterations):
            opt.zero_grad(set_to_none=True)
            objective(point).backward()
            opt.step()
            path.append(point.detach().numpy().copy())
        paths.append(np.array(path))
    return np.stack(paths, axis=1)
