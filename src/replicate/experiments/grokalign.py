"""Chapter 04: GrokAlign (Jacobian regularisation) against weight decay alone.

Two experiments, each a training step plugged into the shared `train_loop`:
- MNIST in the Omnigrok setting (large initialisation, few training digits, AdamW): how many
  updates until held-out accuracy first exceeds a threshold, with and without the regulariser.
- XOR (the GrokAlign code's version of Xu et al.'s setup): two +-1 signal coordinates, y = x1 x2,
  and many small +-eps noise coordinates; robustness = accuracy when Gaussian noise is added to
  the noise coordinates.

The regulariser is lambda times the mean over (a subsample of) the batch of ||J(x)||_F, estimated
by random projections (`replicate.measures.jacobian.grokalign_penalty`). With lambda = 0 it is not computed
at all, so a lambda = 0 run is exactly the baseline run.
"""
from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn

from ..measures import jacobian
from ..data import load_mnist, subset
from ..models import MLP
from ..runtime import device
from ..training import cached_run, log_spaced_steps, train_loop

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081


def regularised_loss(model: nn.Module, x: torch.Tensor, task_loss: torch.Tensor, lam: float,
                     reg_points: int, projections: int, generator: torch.Generator) -> torch.Tensor:
    """task loss + lam * mean ||J||_F over the first `reg_points` points of the batch x."""
    if lam == 0:
        return task_loss
    points = x[:reg_points] if reg_points > 0 else x
    return task_loss + lam * jacobian.grokalign_penalty(model, points, projections, generator)


ESTIMATORS = ("output", "input", "vjp")


def objective(model: nn.Module, x: torch.Tensor, y: torch.Tensor, kind: str, lam: float, reg_points: int,
              projections: int, generator: torch.Generator, estimator: str = "output",
              rank: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(task loss, task loss + lam * GrokAlign penalty) for one batch, the penalty on the first
    `reg_points` points of the batch (all if <= 0). Three estimators of ||J||_F^2, all unbiased;
    the penalty is the mean of its square root, as in the paper's code.

    - "output": random signs v on the k outputs (Hutchinson), ||J^T v||^2 computed by a linear pass
      down the narrow layers and the first layer's Gram matrix (`jacobian.forward_with_vjp_norm`):
      the reference's estimate, value and gradient, with one ordinary backward. ReLU MLPs only.
    - "input": `projections` random-sign probes per point in input space, in a random subspace of
      dimension `rank` (rank 1: shared by the batch), pushed through the masked linear network
      (`jacobian.forward_with_jvp`): the cheapest, but its gradient is much noisier.
    - "vjp": the reference, random signs on the outputs and a double backward through the input
      gradient (`jacobian.grokalign_penalty`); any differentiable network.
    """
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
    if lam == 0 or estimator == "vjp":
        fit = task_loss(model(x), y, kind)
        return fit, regularised_loss(model, x, fit, lam, reg_points, projections, generator)
    points = min(reg_points, len(x)) if reg_points > 0 else len(x)
    if estimator == "input":
        q, z = jacobian.subspace_probes(projections, points, rank, x[0].numel(), generator, like=x)
        out, ju = jacobian.forward_with_jvp(model, x, q, points, mix=z)
        sq = jacobian.frobenius_sq_from_jvp(ju)
    else:
        k = model.layers[-1].out_features
        sq = 0.0
        for _ in range(projections):
            v = jacobian.output_probes(points, k, generator, like=x)
            out, one = jacobian.forward_with_vjp_norm(model, x, v, points)
            sq = sq + one / projections
    fit = task_loss(out, y, kind)
    return fit, fit + lam * (sq + 1e-12).sqrt().mean()


# ----------------------------------------------------------------------------------------------
# MNIST


def mnist_data(n_train: int, seed: int):
    """`n_train` normalised training digits (drawn with the seed) and the whole held-out set."""
    mnist = load_mnist(verbose=False)
    x, y = subset(mnist.train_x, mnist.train_y, n_train, seed)
    norm = lambda t: (t - MNIST_MEAN) / MNIST_STD  # noqa: E731
    return norm(x), y, norm(mnist.test_x), mnist.test_y


LOSSES = ("mse", "mse_mean", "ce")


def task_loss(out: torch.Tensor, y: torch.Tensor, kind: str) -> torch.Tensor:
    """The squared error against one-hot targets, summed over the classes ("mse", Omnigrok's) or
    averaged over them ("mse_mean", PyTorch's MSELoss as in the GrokAlign code: a tenth of the
    sum), or cross-entropy ("ce"); each averaged over the batch. Adam does not see the loss's
    scale, so the two squared errors differ only in how large lambda is beside the loss."""
    if kind in ("mse", "mse_mean"):
        sq = (out - nn.functional.one_hot(y, out.shape[1]).to(out.dtype)) ** 2
        return sq.sum(1).mean() if kind == "mse" else sq.mean()
    if kind == "ce":
        return nn.functional.cross_entropy(out, y)
    raise ValueError(f"loss must be one of {LOSSES}, got {kind!r}")


# Evaluations that always run the diagnostics, from the first: at the chapter's interval of 40
# updates, the first 1,560 updates, where the GrokAlign runs do most of their learning.
DENSE_DIAGNOSTICS = 40


def wants_diagnostics(evaluation: int, step: int, done: list[int], growth: float | None) -> bool:
    """Whether the `evaluation`-th evaluation (from 0), at update `step`, runs the diagnostics,
    `done` holding the updates of those that did: every evaluation without a `growth`; with one,
    the first DENSE_DIAGNOSTICS, then one wherever the update count has grown by that factor since
    the last (log-spaced: a run of 12,000 updates at 40 a evaluation gets about 80 instead of 300,
    e.g. with growth 1.05)."""
    if growth is None or evaluation < DENSE_DIAGNOSTICS or not done:
        return True
    return step >= growth * done[-1]


def train_mnist(config: dict, data=None) -> dict:
    """One MNIST run; stops when held-out accuracy first exceeds `threshold` (checked every
    `eval_every` updates) or after `max_steps` updates. `config` keys: n_train, width, depth, bias,
    init_scale, lr, weight_decay, batch_size, loss, lam, reg_points, projections, max_steps,
    eval_every, threshold, jacobian_points, seed, and optionally estimator ("vjp" if absent),
    dtype ("float32" if absent; the GrokAlign code trains in "float64"), batch_order ("shuffled",
    a fresh permutation each epoch, if absent; "fixed": the same batches in the same order every
    epoch, as the GrokAlign code's loader, which does not shuffle), n_test (held-out digits
    evaluated, the first n_test of the held-out set; all if absent) and diagnostics_growth (see
    `wants_diagnostics`; absent: the diagnostics at every evaluation).

    The accuracies are measured at every evaluation, so the crossing is found to the
    evaluation interval; the diagnostics on the probe points (exact Jacobian norm, centroid
    alignment, one centroid image), which cost several times more, at the evaluations
    `wants_diagnostics` picks, at their own steps (`diagnostic_step`), the last evaluation always
    among them."""
    dev, dtype = device(), getattr(torch, config.get("dtype", "float32"))
    train_x, train_y, test_x, test_y = data or mnist_data(config["n_train"], config["seed"])
    if config.get("n_test"):
        test_x, test_y = test_x[:config["n_test"]], test_y[:config["n_test"]]
    train_x, test_x = train_x.to(dev, dtype), test_x.to(dev, dtype)
    train_y, test_y = train_y.to(dev), test_y.to(dev)
    torch.manual_seed(config["seed"])
    model = MLP(train_x.shape[1], config["width"], config["depth"], 10, bias=config["bias"],
                init_scale=config["init_scale"]).to(dev, dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=config["lr"], weight_decay=config["weight_decay"])
    batches = torch.Generator().manual_seed(config["seed"] + 1)
    projections = torch.Generator().manual_seed(config["seed"] + 2)
    n, bs = len(train_y), config["batch_size"]
    fixed_order = config.get("batch_order", "shuffled") == "fixed"
    order = torch.arange(n) if fixed_order else torch.randperm(n, generator=batches)
    per_epoch = max(n // bs, 1)
    probe = train_x[:config["jacobian_points"]]  # fixed points for the diagnostics
    clock = {"train_seconds": 0.0, "train_cpu_seconds": 0.0, "steps": 0}
    log: dict[str, list] = {k: [] for k in ["step", "train_acc", "test_acc", "diagnostic_step",
                                            "jacobian_norm", "alignment", "centroid"]}

    def step(t: int) -> float:
        nonlocal order
        start, cpu = time.perf_counter(), time.process_time()
        k = (t - 1) % per_epoch
        if k == 0 and t > 1 and not fixed_order:
            order = torch.randperm(n, generator=batches)
        idx = order[k * bs:(k + 1) * bs].to(dev)
        x = train_x[idx]
        fit, loss = objective(model, x, train_y[idx], config["loss"], config["lam"], config["reg_points"],
                              config["projections"], projections, config.get("estimator", "vjp"),
                              config.get("probe_rank", 1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        value = fit.item()
        clock["train_seconds"] += time.perf_counter() - start
        clock["train_cpu_seconds"] += time.process_time() - cpu
        clock["steps"] = t
        return value

    def evaluate(t: int) -> dict:
        model.eval()
        with torch.no_grad():
            train_acc = (model(train_x).argmax(1) == train_y).float().mean().item()
            test_acc = (model(test_x).argmax(1) == test_y).float().mean().item()
        log["step"].append(t)
        log["train_acc"].append(train_acc)
        log["test_acc"].append(test_acc)
        stop = test_acc > config["threshold"]
        if stop or t + config["eval_every"] > config["max_steps"] or wants_diagnostics(
                len(log["step"]) - 1, t, log["diagnostic_step"], config.get("diagnostics_growth")):
            stats = jacobian.centroid_statistics(model, probe)
            log["diagnostic_step"].append(t)
            log["jacobian_norm"].append(jacobian.frobenius_norm_exact(model, probe).mean().item())
            log["alignment"].append(stats["cosine"].mean().item())
            log["centroid"].append(jacobian.centroids(model, probe[:1])[0].cpu().numpy())
        model.train()
        return {"stop": stop}

    eval_steps = list(range(0, config["max_steps"] + 1, config["eval_every"]))
    train_loop(step, config["max_steps"], eval_steps, evaluate, desc=f"MNIST lambda={config['lam']:g}")
    reached = log["test_acc"][-1] > config["threshold"]
    result = {k: np.array(v) for k, v in log.items()}
    result.update(config=dict(config), reached=reached, steps_to_threshold=log["step"][-1] if reached else None,
                  digit=probe[0].cpu().numpy(), **clock)
    return result


def run_mnist(**config) -> dict:
    key = {**config, "data": load_mnist(verbose=False).source.split(" in ")[0], "device": device().type}
    return cached_run("04_grokalign_mnist", key, lambda: train_mnist(config))


def update_times(config: dict, variants: dict[str, dict], repeats: int = 60, warmup: int = 10
                 ) -> dict[str, list[float]]:
    """Seconds of each update of several kinds, timed *interleaved* in one process: each round
    times one update of every variant (each on its own copy of the same model, the order rotated
    from round to round), so that whatever else the machine is doing weighs on all of them alike.
    `variants` maps a name to overrides of `config` (lam, reg_points, projections, estimator).
    Returns, per variant, the `repeats` timed rounds in order (after `warmup` untimed ones)."""
    dev = device()
    x, y, _, _ = mnist_data(config["n_train"], config["seed"])
    xb, yb = x[:config["batch_size"]].to(dev), y[:config["batch_size"]].to(dev)
    setups = {}
    for name, over in variants.items():
        c = {**config, **over}
        torch.manual_seed(config["seed"])
        model = MLP(784, c["width"], c["depth"], 10, bias=c["bias"], init_scale=c["init_scale"]).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=c["lr"], weight_decay=c["weight_decay"])
        setups[name] = (c, model, opt, torch.Generator().manual_seed(0))
    names = list(variants)
    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(repeats + warmup):
        for name in names[i % len(names):] + names[:i % len(names)]:
            c, model, opt, gen = setups[name]
            start = time.perf_counter()
            _, loss = objective(model, xb, yb, c["loss"], c["lam"], c["reg_points"], c["projections"],
                                gen, c.get("estimator", "vjp"), c.get("probe_rank", 1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if dev.type == "cuda":
                torch.cuda.synchronize()
            if i >= warmup:
                times[name].append(time.perf_counter() - start)
    return times


def update_costs(config: dict, variants: dict[str, dict], repeats: int = 60, warmup: int = 10,
                 statistic: str = "median") -> dict[str, float]:
    """Seconds per update of each variant (`update_times`): the median, or with statistic="min"
    the fastest update of each kind, the closest to its cost on an idle core."""
    times = update_times(config, variants, repeats, warmup)
    reduce = {"median": np.median, "min": np.min}[statistic]
    return {name: float(reduce(t)) for name, t in times.items()}


def paired_ratios(times: dict[str, list[float]], baseline: str = "plain") -> dict[str, float]:
    """Each variant's cost relative to the baseline's: the median over rounds of the ratio of the
    two updates timed in the same round. A burst of load inflates one round's pair, not the
    median, and a slow drift of the load cancels within each pair."""
    base = np.asarray(times[baseline])
    return {name: float(np.median(np.asarray(t) / base)) for name, t in times.items()}


def step_cost(config: dict, lam: float, repeats: int = 60) -> float:
    """Median seconds per update for one kind of update alone (see `update_costs`)."""
    return update_costs(config, {"only": {"lam": lam}}, repeats)["only"]


# ----------------------------------------------------------------------------------------------
# XOR


def xor_data(n: int, dim: int, eps: float, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """n points in R^dim: two signal coordinates +-1, the rest +-eps; label y = x1 x2 in {-1, +1}."""
    signs = 2 * torch.randint(0, 2, (n, dim), generator=generator).float() - 1
    x = torch.cat([signs[:, :2], eps * signs[:, 2:]], dim=1)
    return x, x[:, 0] * x[:, 1]


class InputBasis:
    """Coordinates in which an XOR run is trained: the identity ("direct"), or an orthonormal
    basis B (rows) of the span of the training inputs and the initial first-layer weights
    ("reduced").

    Why the reduced run is the same run. Under full-batch gradient descent with weight decay, the
    gradient of the loss with respect to the first layer W1 is a sum of outer products g x_i^T over
    the training inputs x_i, plus, with GrokAlign, terms G W1 that mix the rows of W1 among
    themselves (||J(x)||^2 = u^T W1 W1^T u for a scalar output). So every row of W1 stays in the
    span of the n training inputs and the `width` initial rows. Writing W1 = C B, the network sees
    W1 x = C (B x), ||J||_F is unchanged (B B^T = I), and a step on C with the same learning rate
    and weight decay is the step on W1, exactly. A p = 40,000 input becomes an (n + width)-vector.

    Test inputs project exactly (B x); Gaussian noise n on the noise coordinates projects to a
    Gaussian B n with covariance I - b b^T, where b = B[:, :2] holds the basis' signal
    coordinates, so fresh noise can be drawn in the reduced space without ever forming a
    p-dimensional draw.
    """

    def __init__(self, anchors: torch.Tensor | None, dim: int):
        self.dim = dim
        self.anchors = anchors  # rows spanning the basis, or None for the identity
        if anchors is None:
            return
        # Gram matrix in float64, chunked over the p coordinates (B = L^-1 A with K = L L^T).
        gram = torch.zeros(len(anchors), len(anchors), dtype=torch.float64)
        for cols in torch.arange(dim).split(4096):
            a = anchors[:, cols].double()
            gram += a @ a.T
        self.chol = torch.linalg.cholesky(gram)
        signal = self._solve(anchors[:, :2].double())  # (r, 2): B's signal coordinates
        u, s, _ = torch.linalg.svd(signal, full_matrices=False)
        shrink = 1 - (1 - s.clamp(max=1) ** 2).sqrt()
        self.noise_root = torch.eye(len(anchors), dtype=torch.float64) - (u * shrink) @ u.T

    @property
    def size(self) -> int:
        return self.dim if self.anchors is None else len(self.anchors)

    def _solve(self, rhs: torch.Tensor) -> torch.Tensor:
        return torch.linalg.solve_triangular(self.chol, rhs, upper=False)

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """B x for every row x (float64)."""
        if self.anchors is None:
            return x.double()
        products = torch.zeros(len(self.anchors), len(x), dtype=torch.float64)
        for cols in torch.arange(self.dim).split(4096):
            products += self.anchors[:, cols].double() @ x[:, cols].double().T
        return self._solve(products).T

    def noise(self, count: int, generator: torch.Generator) -> torch.Tensor:
        """`count` draws of B n, n standard Gaussian on the noise coordinates (float64)."""
        if self.anchors is None:
            n = torch.randn(count, self.dim, generator=generator, dtype=torch.float64)
            n[:, :2] = 0
            return n
        return torch.randn(count, self.size, generator=generator, dtype=torch.float64) @ self.noise_root

    def to_full(self, weight: torch.Tensor) -> torch.Tensor:
        """A first-layer weight in the basis, mapped back to the p input coordinates (C B)."""
        if self.anchors is None:
            return weight.double()
        return weight.double() @ self._solve(self.anchors.double())


def train_xor(config: dict, keep_weights: bool = False) -> dict:
    """Full-batch SGD with weight decay on MSE, with or without GrokAlign; keys: n, dim, eps, width,
    lr, weight_decay, lam, steps, eval_points, amplitudes, noise_draws, basis ("reduced" or
    "direct", see `InputBasis`), dtype ("float32" or "float64"), seed.

    Robustness at each checkpoint: accuracy on the test inputs plus Gaussian noise of each
    amplitude on the noise coordinates, averaged over `noise_draws` fresh draws (one draw shared
    by the amplitudes, as in the GrokAlign code). With `keep_weights` the final first layer is
    returned in the p input coordinates (for tests)."""
    dev, dtype = device(), getattr(torch, config.get("dtype", "float32"))
    gen = torch.Generator().manual_seed(config["seed"])
    x, y = xor_data(config["n"], config["dim"], config["eps"], gen)
    test_x, test_y = xor_data(config["n"], config["dim"], config["eps"], gen)
    torch.manual_seed(config["seed"])
    full = MLP(config["dim"], config["width"], 2, 1, bias=False)
    reduced = config.get("basis", "reduced") == "reduced"
    basis = InputBasis(torch.cat([x, full.layers[0].weight.detach()]) if reduced else None,
                       config["dim"])
    model = MLP(basis.size, config["width"], 2, 1, bias=False)
    with torch.no_grad():  # the initial first layer in the basis (exact: its rows lie in the span)
        model.layers[0].weight.copy_(basis.project(full.layers[0].weight.detach()))
        model.layers[1].weight.copy_(full.layers[1].weight)
    del full
    model = model.to(dev, dtype)
    x, test_x = (basis.project(t).to(dev, dtype) for t in (x, test_x))
    y, test_y = y.to(dev, dtype), test_y.to(dev, dtype)
    noise_gen = torch.Generator().manual_seed(config["seed"] + 1)
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"], weight_decay=config["weight_decay"])
    log: dict[str, list] = {k: [] for k in ["train_acc", "test_acc", "robust_acc", "centroid_norm",
                                            "alignment"]}

    def accuracy(inputs, labels):
        with torch.no_grad():
            return (torch.sign(model(inputs)[:, 0]) == labels).float().mean().item()

    ones = torch.ones(len(x), 1, device=dev, dtype=dtype)

    def step(t: int) -> float:
        if config["lam"] == 0:
            fit = ((model(x)[:, 0] - y) ** 2).mean()
            loss = fit
        else:  # scalar output: J^T 1 = J, so the output-side estimate is the exact ||J||_F
            out, sq = jacobian.forward_with_vjp_norm(model, x, ones)
            fit = ((out[:, 0] - y) ** 2).mean()
            loss = fit + config["lam"] * (sq + 1e-12).sqrt().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return fit.item()

    def evaluate(t: int) -> dict:
        log["train_acc"].append(accuracy(x, y))
        log["test_acc"].append(accuracy(test_x, test_y))
        robust = np.zeros(len(config["amplitudes"]))
        for _ in range(config["noise_draws"]):
            noise = basis.noise(len(test_x), noise_gen).to(dev, dtype)
            robust += [accuracy(test_x + a * noise, test_y) for a in config["amplitudes"]]
        log["robust_acc"].append(robust / max(config["noise_draws"], 1))
        stats = jacobian.centroid_statistics(model, x)  # exact in the basis: x lies in its span
        log["centroid_norm"].append(stats["norm"].mean().item())
        log["alignment"].append((stats["cosine"] * y).mean().item())  # label-signed
        return {}

    eval_steps = log_spaced_steps(config["steps"], config["eval_points"])
    train_loop(step, config["steps"], eval_steps, evaluate, desc=f"XOR lambda={config['lam']:g}")
    result = {k: np.array(v) for k, v in log.items()}
    result.update(eval_steps=np.array(eval_steps), config=dict(config))
    if keep_weights:
        result["first_layer"] = basis.to_full(model.layers[0].weight.detach().cpu()).numpy()
    return result


def run_xor(**config) -> dict:
    key = {**config, "penalty": "exact, output side", "device": device().type}
    return cached_run("04_grokalign_xor", key, lambda: train_xor(config))


def first_step(steps, values, level: float):
    """The first step at which `values` reaches `level`, or None."""
    hit = np.nonzero(np.asarray(values) >= level)[0]
    return int(np.asarray(steps)[hit[0]]) if len(hit) else None


# ----------------------------------------------------------------------------------------------
# Configurations from a chapter's parameters (shared by the notebook and any script, so that both
# hit the same run-cache entries).

MNIST_KEYS = ["n_train", "width", "depth", "bias", "init_scale", "lr", "weight_decay", "batch_size",
              "reg_points", "projections", "eval_every", "threshold", "jacobian_points", "estimator",
              "probe_rank", "max_steps"]
# Settings a run takes only where the parameters give them (the GrokAlign code's own, at its
# operating point): absent, a run is what it was before they existed, and keeps its cache key.
MNIST_OPTIONAL = ["dtype", "batch_order", "n_test", "diagnostics_growth"]
BATCH_ORDERS = ("shuffled", "fixed")


def mnist_config(params: dict, lam: float, loss: str, seed: int, max_steps: int | None = None) -> dict:
    """One MNIST run's configuration: the chapter's shared settings, and its lambda, loss, seed
    (and an update cap other than `max_steps`, if given)."""
    if params["estimator"] not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {params['estimator']!r}")
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
    config = {**{k: params[k] for k in MNIST_KEYS}, "lam": float(lam), "loss": loss, "seed": int(seed),
              **{k: params[k] for k in MNIST_OPTIONAL if params.get(k) is not None}}
    if config.get("batch_order", "shuffled") not in BATCH_ORDERS:
        raise ValueError(f"batch_order must be one of {BATCH_ORDERS}, got {config['batch_order']!r}")
    if max_steps is not None:
        config["max_steps"] = int(max_steps)
    return config


def steps_to_threshold(run: dict) -> int | None:
    """Updates until held-out accuracy first exceeded the threshold, or None if it never did."""
    return run["steps_to_threshold"] if run["reached"] else None


def paper_point_runs(params: dict, loss: str, seed: int) -> tuple[dict, dict]:
    """(weight decay alone, GrokAlign) at the GrokAlign code's operating point, `paper_point`, a
    delta over the chapter's MNIST settings (its lambda per loss, learning rate, width, estimator,
    evaluation interval, update cap). GrokAlign runs first, up to `max_steps`; weight decay alone
    then runs up to `baseline_factor[loss]` times GrokAlign's count (or `max_steps`, if GrokAlign
    did not cross). A baseline stopped by that cap gives the speed-up as a lower bound: set above
    the paper's figure, it still tells "above the paper" from "consistent" or "below"."""
    point = {**params, **params["paper_point"]}
    grokalign = run_mnist(**mnist_config(point, point["lambda"][loss], loss, seed))
    crossed = steps_to_threshold(grokalign)
    cap = point["max_steps"] if crossed is None else int(np.ceil(point["baseline_factor"][loss] * crossed))
    return run_mnist(**mnist_config(point, 0.0, loss, seed, cap)), grokalign


def speedup(base: dict, grokalign: dict) -> tuple[float | None, str]:
    """(baseline updates / GrokAlign updates, bound), bound "" for a ratio of two measured counts.
    A baseline that never crossed counts with its cap: the ratio is a lower bound ("lower"). A
    GrokAlign run that never crossed while the baseline did, within at least as many updates,
    gives an upper bound <= 1 ("upper"); if neither crossed there is no ratio (None)."""
    t_base, t_ga = steps_to_threshold(base), steps_to_threshold(grokalign)
    if t_ga is not None:
        return (t_base if t_base is not None else base["steps"]) / max(t_ga, 1), "" if t_base else "lower"
    if t_base is not None and grokalign["steps"] >= t_base:
        return t_base / grokalign["steps"], "upper"
    return None, ""


def xor_config(params: dict, lam: float, seed: int, **knobs) -> dict:
    """One XOR run's configuration from the chapter's `xor_*` parameters, with `knobs` (parameter
    name -> value, e.g. xor_dim=2000) replacing the chapter's values."""
    params = {**params, **knobs}
    return {"seed": int(seed), "n": params["xor_n"], "dim": params["xor_dim"], "eps": params["xor_eps"],
            "width": params["xor_width"], "lr": params["xor_lr"], "weight_decay": params["xor_weight_decay"],
            "lam": float(lam), "steps": params["xor_steps"], "eval_points": params["xor_eval_points"],
            "amplitudes": params["xor_amplitudes"], "noise_draws": params["xor_noise_draws"],
            "dtype": params["xor_dtype"], "basis": "reduced" if params["xor_n"] + params["xor_width"]
            < params["xor_dim"] else "direct"}


def robustness_onsets(run: dict, level: float) -> list[int | None]:
    """Per noise amplitude, the first checkpoint at which the accuracy under noise reaches `level`
    (None: not within the run)."""
    return [first_step(run["eval_steps"], run["robust_acc"][:, j], level)
            for j in range(run["robust_acc"].shape[1])]


def earlier_onsets(base: list, grokalign: list) -> dict[str, int]:
    """Counts, over the amplitudes, of GrokAlign's robustness onset against weight decay alone's:
    "grokalign" (earlier, or reached where the other was not), "weight decay", "tie" (the same
    checkpoint) and "neither" (not reached by either)."""
    out = {"grokalign": 0, "weight decay": 0, "tie": 0, "neither": 0}
    for b, g in zip(base, grokalign):
        key = ("neither" if b is None and g is None else "grokalign" if b is None
               else "weight decay" if g is None else "tie" if b == g
               else "grokalign" if g < b else "weight decay")
        out[key] += 1
    return out


def sooner_at_most_amplitudes(counts: dict[str, int]) -> bool:
    """The chapter's rule for "an accelerated onset of robustness", fixed before the runs: among
    the amplitudes at which the two runs differ (ties and amplitudes that neither reached are not
    scored), GrokAlign is earlier at more than half."""
    decided = counts["grokalign"] + counts["weight decay"]
    return decided > 0 and counts["grokalign"] > decided / 2


def measured_overhead(params: dict) -> dict:
    """Seconds per update (median) of a plain (weight decay only) update and of GrokAlign updates
    at the largest lambda with each estimator, timed interleaved in one process (`update_times`),
    and their costs relative to the plain update (`paired_ratios`); cached so that a re-execution
    shows the same numbers."""
    lam = float(max(params["lambdas"]))
    config = {**mnist_config(params, 0.0, "mse", params["seed"]), "repeats": params["overhead_repeats"],
              "statistic": "median seconds; ratio: median of per-round ratios, interleaved"}
    chosen = params["estimator"]
    variants = {"plain": {"lam": 0.0}} | {name: {"lam": lam, "estimator": name}
                                          for name in [chosen] + [e for e in ESTIMATORS if e != chosen]}

    def measure():
        times = update_times(config, variants, config["repeats"])
        ratio = paired_ratios(times)
        return {"seconds": {k: float(np.median(t)) for k, t in times.items()},
                "ratio": {k: ratio[k] for k in ESTIMATORS}}
    return cached_run("04_grokalign_overhead", {**config, "lam": lam, "device": device().type}, measure)


def gradient_agreement(params: dict, draws: int = 5) -> dict[str, float]:
    """How well one draw of each estimator's penalty gradient points along the exact gradient of
    the mean ||J||_F (from the full Jacobian, by double backward): the mean cosine over `draws`
    draws, on one batch at initialisation. Weights only (the biases do not enter ||J||)."""
    config = mnist_config(params, 0.0, "mse", params["seed"])

    def measure():
        x, _, _, _ = mnist_data(config["n_train"], config["seed"])
        x = x[:config["batch_size"]].to(device())
        torch.manual_seed(config["seed"])
        model = MLP(784, config["width"], config["depth"], 10, bias=config["bias"],
                    init_scale=config["init_scale"]).to(device())
        weights = [layer.weight for layer in model.layers]
        k = model.layers[-1].out_features
        exact = 0.0
        for i in range(k):
            v = torch.zeros(len(x), k, device=x.device)
            v[:, i] = 1
            exact = exact + jacobian._vjp(model, x, v, create_graph=True)[1].pow(2).sum(1)
        target = torch.cat([g.flatten() for g in torch.autograd.grad(exact.sqrt().mean(), weights)])
        gen = torch.Generator().manual_seed(config["seed"] + 3)
        out = {}
        for name in ESTIMATORS:
            cosines = []
            for _ in range(draws):
                fit, loss = objective(model, x, torch.zeros(len(x), dtype=torch.long, device=x.device),
                                      "mse", 1.0, 0, config["projections"], gen, name, config["probe_rank"])
                grads = torch.autograd.grad(loss - fit, weights)
                g = torch.cat([t.flatten() for t in grads])
                cosines.append(torch.nn.functional.cosine_similarity(g, target, dim=0).item())
            out[name] = float(np.mean(cosines))
        return out
    return cached_run("04_grokalign_gradient", {**config, "draws": draws, "device": device().type}, measure)
