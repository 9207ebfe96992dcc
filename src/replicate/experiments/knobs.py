"""Chapter 10's runs: chapter 01's MNIST run with one knob turned at a time (BatchNorm, the
number of training digits, how many digits the network must memorise with random labels, the
width), each measured at every checkpoint as chapter 01 measures it.

A *knob group* is a list of runs that differ in one setting, all trained for the group's own
step budget (`knob_steps`), so that within a group the checkpoints are the same steps. Each run
is measured by:

- the local complexity (LC) of the hidden layers around `lc_points` training digits at
  `check_radius` (the BatchNorm network's through its eval-mode fold, `BatchNormMLP.folded`);
- the accuracy under PGD at `check_epsilon` on `pgd_points` held-out digits, and, on the group
  run named by `apgd_run`, under APGD (`measures.apgd`) on the same digits.

The same digits, LC frame and attack seeds as chapter 01, so that the run at chapter 01's
settings measures what chapter 01 measures at that radius and eps. Training and measurements are
cached (`training.cached_run`): a run at chapter 01's settings is chapter 01's run.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..data import load_mnist, subset
from ..measures.adversarial import robust_accuracy
from ..measures.apgd import apgd_robust_accuracy
from ..measures.local_complexity import local_complexity
from ..models import BatchNormMLP
from ..training import cached_run
from .mnist_mlp import MnistMLPRun, run_mnist_mlp

# Chapter 01's training settings, which every run starts from.
TRAINING = ("n_train", "width", "depth", "steps", "lr", "weight_decay", "batch_size", "init_scale",
            "eval_points", "seed")

# `random_labels` is the share of digits given a *wrong* label, drawn among the other nine
# classes. At 0.9 each digit's label is the true one with probability 0.1 and each wrong one with
# 0.9 / 9 = 0.1: a label drawn uniformly from the ten classes, the usual "random labels", which
# leave nothing to learn (a share of 1.0 would: the true class is then never the label).
UNIFORM_LABELS = 0.9


def variants(p: dict) -> dict[str, dict[str, dict]]:
    """{knob: {run label: the run's settings}}: chapter 01's training settings from `p`, the
    knob's step budget and checkpoints (`knob_steps`, `knob_eval_points`, in place of `steps`
    and `eval_points`), and the knob turned to each of its values."""
    base = {name: p[name] for name in TRAINING if name not in ("steps", "eval_points")}
    groups = {
        "batchnorm": {"plain": {}, "BatchNorm": {"batchnorm": True}},
        "train_size": {f"{n} digits": {"n_train": n} for n in p["train_sizes"]},
        # As the paper's Figs 13 and 31: every label random, the number of such digits varied.
        "random_labels": {f"{n} random-label digits": {"n_train": n,
                                                       "random_labels": UNIFORM_LABELS}
                          for n in p["random_label_sizes"]},
        "width": {f"width {w}": {"width": w} for w in p["widths"]},
    }
    return {knob: {label: {**base, "steps": p["knob_steps"][knob],
                           "eval_points": p["knob_eval_points"][knob], **change}
                   for label, change in runs.items()}
            for knob, runs in groups.items()}


@dataclass
class Trajectory:
    """One run's curves at its checkpoints."""
    settings: dict
    steps: np.ndarray
    train_acc: np.ndarray
    test_acc: np.ndarray
    lc_train: np.ndarray  # mean hidden-layer LC around the training digits
    pgd: np.ndarray  # accuracy under PGD at check_epsilon
    apgd: np.ndarray | None  # under APGD, where measured
    seconds: float  # the measurements' time when computed


def measured_digits(p: dict, config: dict) -> tuple:
    """(LC points, attacked digits, their labels): the first `lc_points` training digits of the
    run of `config`, drawn as `mnist_mlp.training_data` draws them (without printing the data's
    description each time; their labels are not needed), and `pgd_points` held-out digits drawn
    with the seed + 1, as in chapter 01."""
    mnist = load_mnist(verbose=False)
    train_x, _ = subset(mnist.train_x, mnist.train_y, config["n_train"], config["seed"])
    attack_x, attack_y = subset(mnist.test_x, mnist.test_y,
                                min(p["pgd_points"], len(mnist.test_y)), p["seed"] + 1)
    return train_x[:p["lc_points"]], attack_x, attack_y


def _measure(p: dict, run: MnistMLPRun, with_apgd: bool) -> dict:
    lc_points, attack_x, attack_y = measured_digits(p, run.config)
    eps, started = p["check_epsilon"], time.perf_counter()
    lc, pgd, apgd = [], [], []
    for index in range(len(run.eval_steps)):
        model = run.model_at(index)
        geometry = model.folded() if isinstance(model, BatchNormMLP) else model
        per_layer = local_complexity(geometry, lc_points, p["check_radius"], p["lc_directions"],
                                     seed=p["seed"]).per_layer
        lc.append(float(per_layer[:, :-1].sum(1).float().mean()))  # hidden layers, as chapter 01
        pgd.append(robust_accuracy(model, attack_x, attack_y, [eps], p["pgd_alpha"],
                                   p["pgd_steps"], seed=p["seed"])[eps])
        if with_apgd:
            apgd.append(apgd_robust_accuracy(model, attack_x, attack_y, eps, p["apgd_steps"],
                                             seed=p["seed"]))
    return {"lc": np.array(lc), "pgd": np.array(pgd),
            "apgd": np.array(apgd) if with_apgd else np.zeros(0),
            "seconds": time.perf_counter() - started}


def trajectory(p: dict, settings: dict, with_apgd: bool = False) -> Trajectory:
    """Train (or read from the run cache) the run of `settings` and measure it at every
    checkpoint (the measurements cached too, by the run's and the measures' settings)."""
    run = run_mnist_mlp(**settings)
    key = {"training": run.config, "data": load_mnist(verbose=False).source.split(" in ")[0],
           "apgd": with_apgd,
           **{k: p[k] for k in ("check_epsilon", "check_radius", "pgd_alpha", "pgd_steps",
                                "pgd_points", "apgd_steps", "lc_directions", "lc_points")}}
    measured = cached_run("10_what_changes_grokking", key, lambda: _measure(p, run, with_apgd))
    return Trajectory(settings, np.array(run.eval_steps), run.train_acc, run.test_acc,
                      measured["lc"], measured["pgd"],
                      measured["apgd"] if with_apgd else None, measured["seconds"])


def all_trajectories(p: dict) -> dict[str, dict[str, Trajectory]]:
    """Every run of every knob group, measured ({knob: {label: Trajectory}})."""
    return {knob: {label: trajectory(p, settings, with_apgd=f"{knob}: {label}" == p["apgd_run"])
                   for label, settings in runs.items()}
            for knob, runs in variants(p).items()}
