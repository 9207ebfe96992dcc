"""The runs of chapter 09: every progress measure at the same checkpoints of the same runs.

Two settings. *Modular addition*: the small MLP of chapters 05, 06 and 08, trained full-batch
until it generalises and then for as many steps again (so that each measure's value after
generalisation is seen), with the measures taken in the training loop at log-spaced steps.
*MNIST*: chapter 01's MLP with an 8x initialisation (Omnigrok's recipe for late generalisation),
trained for a fixed number of steps; the measures are taken afterwards from its checkpoints.

The measures (all but the Fourier one are the book's, from `replicate.measures`):
- local complexity (LC) around training points, summed over the hidden layers;
- centroid alignment, the mean cos(c(x), x) over training points, and the mean Frobenius norm
  of the input Jacobian (GrokAlign);
- the largest eigenvalue of the full-batch loss Hessian (Lanczos);
- the TwoNN intrinsic dimension of the last hidden layer's representation of the training set;
- the norm of all weights (Omnigrok);
- for modular addition, the share of the token embedding's energy in its top Fourier frequencies.

For the modular MLP the "input" of LC and of the Jacobian measures is the concatenated operand
embedding: the tokens themselves are discrete, and the network after its embedding is an ordinary
ReLU MLP on R^(2 x embed_dim), which is where linear regions and Jacobians live.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from ..measures import intrinsic_dimension, jacobian, landscape, progress
from ..measures.local_complexity import local_complexity
from ..models import MLP, ModularMLP
from ..training import cached_run, log_spaced_steps
from .algorithmic import modular_arithmetic, train_modular
from .mnist_mlp import run_mnist_mlp, training_data

# Column names, in the order the chapter shows them.
MEASURES = ["local complexity", "centroid alignment", "Jacobian norm", "Hessian lambda_max",
            "intrinsic dimension", "weight norm", "Fourier sparsity"]


def embedding_head(model: ModularMLP) -> MLP:
    """The modular MLP after its embedding, as an `MLP` on the concatenated operand embeddings
    (it shares the model's layers, so it always computes what the model computes)."""
    head = MLP(model.hidden.in_features, model.hidden.out_features, 2, model.out.out_features)
    head.layers = nn.ModuleList([model.hidden, model.out])
    return head


def network_measures(net: MLP, points: torch.Tensor, hidden: torch.Tensor, full_model: nn.Module,
                     x: torch.Tensor, y: torch.Tensor, loss_fn: Callable, settings: dict) -> dict:
    """Every measure but the Fourier one, for a ReLU MLP `net` around `points` (its inputs),
    with `hidden` the last hidden layer's representation of the training set, and the Hessian of
    `full_model`'s loss on the full training batch (x, y)."""
    lc = local_complexity(net, points, settings["lc_radius"], settings["lc_directions"],
                          seed=settings["seed"]).hidden.double().mean()
    stats = jacobian.centroid_statistics(net, points)
    lanczos = landscape.lanczos_extremes(landscape.hvp_operator(full_model, x, y, loss_fn=loss_fn),
                                         sum(p.numel() for p in full_model.parameters()),
                                         settings["lanczos_iterations"], settings["seed"],
                                         next(full_model.parameters()).dtype)
    return {"local complexity": float(lc),
            "centroid alignment": float(stats["cosine"].mean()),
            "Jacobian norm": float(jacobian.frobenius_norm_exact(net, points).mean()),
            "Hessian lambda_max": lanczos.lambda_max,
            "intrinsic dimension": intrinsic_dimension.twonn_dimension(hidden),
            "weight norm": progress.weight_norm(full_model)}


# --- modular addition -----------------------------------------------------------------------------

@dataclass
class ModularProgressRun:
    """One modular-addition run: per-step curves and the measures at its checkpoints."""
    train_fraction: float
    weight_decay: float
    seed: int
    loss: np.ndarray        # index t - 1 = step t
    train_acc: np.ndarray
    val_acc: np.ndarray
    steps: np.ndarray       # the checkpoints' steps
    measures: dict          # name -> values at the checkpoints (empty for runs without measures)


def modular_measures(model: ModularMLP, data, settings: dict) -> dict:
    """The measures of one checkpoint of the modular MLP."""
    model.eval()
    with torch.no_grad():
        reps = model.representations(data.train_x)
        points = reps["embedding"][:settings["lc_points"]]
        hidden = reps["hidden"][:settings["max_points"]]
    out = network_measures(embedding_head(model), points, hidden, model, data.train_x, data.train_y,
                           nn.functional.cross_entropy, settings)
    out["Fourier sparsity"] = progress.fourier_sparsity(model.embed.weight,
                                                        settings["fourier_top"])
    model.train()
    return out


def modular_progress_run(settings: dict, train_fraction: float, weight_decay: float, seed: int,
                         measured: bool = True) -> ModularProgressRun:
    """Train until validation accuracy reaches `accuracy_threshold`, then `patience` x that many
    steps more, or until `cap` steps (cached). With `measured`, every measure is taken at
    `checkpoints` log-spaced steps of the cap and at the last step."""
    config = {k: settings[k] for k in ("p", "lr", "betas", "embed_dim", "hidden", "cap",
                                       "accuracy_threshold", "patience")}
    config.update(train_fraction=train_fraction, weight_decay=weight_decay, seed=seed,
                  measured=measured)
    if measured:
        config.update({k: settings[k] for k in ("checkpoints", "lc_points", "lc_radius",
                                                "lc_directions", "lanczos_iterations",
                                                "max_points", "fourier_top")})

    def train() -> ModularProgressRun:
        data = modular_arithmetic(settings["p"], "+", train_fraction, seed=seed)
        taken: dict[int, dict] = {}

        def measure(step: int, model: nn.Module) -> dict:
            taken[step] = modular_measures(model, data, {**settings, "seed": seed})
            return {}

        run = train_modular(data, settings["cap"], seed=seed, lr=settings["lr"],
                            weight_decay=weight_decay, betas=tuple(settings["betas"]),
                            embed_dim=settings["embed_dim"], hidden=settings["hidden"],
                            measure_steps=log_spaced_steps(settings["cap"], settings["checkpoints"])
                            if measured else [],
                            measure=measure if measured else None,
                            stop_at_val_acc=settings["accuracy_threshold"],
                            patience=settings["patience"],
                            desc=f"r = {train_fraction:g}, weight decay {weight_decay:g}, seed {seed}")
        last = len(run.loss)
        if measured and last not in taken:  # the value after generalisation: the last step's
            model = ModularMLP(data.p, settings["embed_dim"], settings["hidden"])
            model.load_state_dict(run.state_dict)
            taken[last] = modular_measures(model, data, {**settings, "seed": seed})
        steps = sorted(taken)
        return ModularProgressRun(train_fraction, weight_decay, seed, run.loss, run.train_acc,
                                  run.val_acc, np.array(steps, dtype=float),
                                  {name: np.array([taken[s][name] for s in steps])
                                   for name in MEASURES} if measured else {})

    return cached_run("09_modular", config, train)


# --- MNIST ------------------------------------------------------------------------------------

@dataclass
class MnistProgressRun:
    """The MNIST run's accuracy curves and the measures at its checkpoints."""
    seed: int
    steps: np.ndarray
    train_acc: np.ndarray
    test_acc: np.ndarray
    measures: dict


def mnist_progress_run(settings: dict, seed: int) -> MnistProgressRun:
    """Chapter 01's MLP (784-200-200-200-10, squared error) with the initialisation scaled by
    `mnist_init_scale`, then every measure but the Fourier one at its checkpoints (cached)."""
    training = {"n_train": settings["mnist_train"], "init_scale": settings["mnist_init_scale"], "weight_decay": settings["mnist_weight_decay"],
                "steps": settings["mnist_steps"], "eval_points": settings["checkpoints"],
                "seed": seed}
    mlp = run_mnist_mlp(**training)
    key = {"training": mlp.config, **{k: settings[k] for k in ("lc_points", "lc_radius_mnist",
                                                              "lc_directions", "lanczos_iterations",
                                                              "max_points")}}

    def measure_all() -> MnistProgressRun:
        train_x, train_y, _, _ = training_data(mlp.config)
        x = train_x[:settings["max_points"]]
        targets = nn.functional.one_hot(train_y, 10).to(train_x.dtype)
        squared_error = lambda out, t: ((out - t) ** 2).sum(1).mean()  # noqa: E731  (as trained)
        local = {**settings, "seed": seed, "lc_radius": settings["lc_radius_mnist"]}
        rows = []
        for i in range(len(mlp.eval_steps)):
            model = mlp.model_at(i)
            with torch.no_grad():
                hidden = torch.relu(model.preactivations(x)[-2])
            rows.append(network_measures(model, train_x[:settings["lc_points"]], hidden, model,
                                         train_x, targets, squared_error, local))
        return MnistProgressRun(seed, np.array(mlp.eval_steps, dtype=float), mlp.train_acc,
                                mlp.test_acc, {name: np.array([r[name] for r in rows])
                                               for name in MEASURES[:-1]})

    return cached_run("09_mnist", key, measure_all)


# --- events and onsets ------------------------------------------------------------------------

def crossing_step(steps, values, threshold: float) -> float | None:
    """The first step at which `values` reach `threshold`, read between checkpoints linearly in
    log(1 + step) (None if never). For per-step curves (steps 1, 2, ...) it is the first step."""
    steps, values = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    hits = np.flatnonzero(values >= threshold)
    if not len(hits):
        return None
    i = int(hits[0])
    if i == 0 or steps[i] - steps[i - 1] <= 1:
        return float(steps[i])
    x0, x1 = np.log1p(steps[i - 1]), np.log1p(steps[i])
    v0, v1 = values[i - 1], values[i]
    return float(np.expm1(x0 + (threshold - v0) / (v1 - v0) * (x1 - x0)))


def onsets(steps, measures: dict, t2: float, t4: float, settings: dict) -> list[dict[str, Any]]:
    """Per measure: its onset (the rule of `progress.onset`), its lead before t4 in steps and
    as a share of t4 - t2, and the values it moved between."""
    rows = []
    for name, values in measures.items():
        found = progress.onset(steps, values, t2, settings["onset_fraction"],
                               settings["min_relative_move"])
        lead, share = progress.lead_time(t4, found.step, t2)
        rows.append({"measure": name, "onset": found.step, "lead": lead, "lead share": share,
                     "at t2": found.start, "at end": found.end})
    return rows
