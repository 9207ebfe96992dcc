"""The MNIST MLP run of "Deep Networks Always Grok" (Fig. 2), shared by chapters 01, 02 and 10.

One training run with checkpoints at log-spaced steps; the chapters compute their measures
(local complexity, PGD, partitions) from the checkpoints afterwards. The run is cached by its
configuration, so chapter 02 reuses the run chapter 01 trained when their settings agree, and
chapter 10 reuses it wherever its knobs (BatchNorm, training-set size, randomly labelled
digits, width) sit at chapter 01's values.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..data import load_mnist, relabel_at_random, subset
from ..models import MLP, BatchNormMLP
from ..runtime import default_dtype, device
from ..training import cached_run, log_spaced_steps, train_loop

DEFAULTS = dict(n_train=1000, width=200, depth=4, steps=40_000, lr=1e-3, weight_decay=0.01,
                batch_size=200, init_scale=1.0, loss="mse", bias=True, eval_points=32, seed=0,
                batchnorm=False, random_labels=0.0)


@dataclass
class MnistMLPRun:
    config: dict
    eval_steps: list[int]
    train_loss: np.ndarray
    train_acc: np.ndarray
    test_acc: np.ndarray
    checkpoints: list[dict[str, torch.Tensor]]  # CPU state dicts, one per eval step

    def model_at(self, index: int) -> MLP | BatchNormMLP:
        """The network as it was at `eval_steps[index]`, on CPU, in eval mode (a BatchNorm
        network normalises with its running statistics then; `folded()` makes it an MLP)."""
        model = build_model(self.config)
        model.load_state_dict(self.checkpoints[index])
        return model.eval()


def build_model(config: dict) -> MLP | BatchNormMLP:
    """The MLP of `config`, with BatchNorm after each hidden layer where `batchnorm` is set."""
    model_class = BatchNormMLP if config.get("batchnorm") else MLP
    return model_class(784, config["width"], config["depth"], 10, bias=config["bias"],
                       init_scale=config["init_scale"])


def training_data(config: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(train_x, train_y, test_x, test_y): `n_train` digits drawn without replacement from the
    training pool with the run's seed, and the whole held-out set. Where `random_labels` is above
    0, that share of the training digits carries a wrong label drawn at random (seeded by the
    run's seed + 2; + 1 orders the batches); the held-out labels are always the true ones."""
    mnist = load_mnist()
    train_x, train_y = subset(mnist.train_x, mnist.train_y, config["n_train"], config["seed"])
    if config.get("random_labels", 0.0) > 0:
        train_y, _ = relabel_at_random(train_y, config["random_labels"], config["seed"] + 2)
    return train_x, train_y, mnist.test_x, mnist.test_y


def _accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


def _train(config: dict) -> MnistMLPRun:
    dev, dtype = device(), default_dtype()
    train_x, train_y, test_x, test_y = (t.to(dev) for t in training_data(config))
    train_x, test_x = train_x.to(dtype), test_x.to(dtype)
    torch.manual_seed(config["seed"])
    model = build_model(config).to(dev, dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=config["lr"], weight_decay=config["weight_decay"])
    targets = nn.functional.one_hot(train_y, 10).to(dtype)
    if config["loss"] not in ("mse", "ce"):
        raise ValueError(f"loss must be 'mse' or 'ce', got {config['loss']!r}")
    gen = torch.Generator().manual_seed(config["seed"] + 1)
    n, bs = len(train_y), config["batch_size"]
    order = torch.randperm(n, generator=gen)
    batches_per_epoch = max(n // bs, 1)

    def step(t: int) -> float:
        nonlocal order
        k = (t - 1) % batches_per_epoch
        if k == 0 and t > 1:
            order = torch.randperm(n, generator=gen)
        idx = order[k * bs:(k + 1) * bs].to(dev)
        out = model(train_x[idx])
        if config["loss"] == "mse":
            loss = ((out - targets[idx]) ** 2).sum(1).mean()
        else:
            loss = nn.functional.cross_entropy(out, train_y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    log = {"train_acc": [], "test_acc": [], "train_loss": [], "checkpoints": []}

    def evaluate(t: int) -> dict:
        model.eval()
        with torch.no_grad():
            out = model(train_x)
            loss = ((out - targets) ** 2).sum(1).mean() if config["loss"] == "mse" else \
                nn.functional.cross_entropy(out, train_y)
        log["train_loss"].append(loss.item())
        log["train_acc"].append(_accuracy(model, train_x, train_y))
        log["test_acc"].append(_accuracy(model, test_x, test_y))
        log["checkpoints"].append({k: v.detach().to("cpu", torch.float32).clone()
                                   for k, v in model.state_dict().items()})
        model.train()
        return {}

    eval_steps = log_spaced_steps(config["steps"], config["eval_points"])
    train_loop(step, config["steps"], eval_steps, evaluate, desc="MNIST MLP")
    return MnistMLPRun(config=dict(config), eval_steps=eval_steps,
                       train_loss=np.array(log["train_loss"]), train_acc=np.array(log["train_acc"]),
                       test_acc=np.array(log["test_acc"]), checkpoints=log["checkpoints"])


def run_mnist_mlp(**overrides) -> MnistMLPRun:
    """Train (or fetch from the run cache) the MLP with DEFAULTS updated by `overrides`."""
    unknown = set(overrides) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"unknown setting(s) {sorted(unknown)}; valid: {', '.join(DEFAULTS)}")
    config = {**DEFAULTS, **overrides}
    # The data source is part of the configuration: a run on the offline split is not a run on
    # the standard split.
    key = {**config, "data": load_mnist(verbose=False).source.split(" in ")[0],
           "device": device().type}
    return cached_run("mnist_mlp", key, lambda: _train(config))
