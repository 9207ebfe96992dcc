"""Algorithmic tasks (modular arithmetic) and their full-batch training run, shared by the
slingshot/Hessian chapter (05) and the intrinsic-dimension chapter (06).

A run logs cheap metrics at every step (loss, accuracies, gradient norm) and calls an optional
`measure(step, model)` at chosen steps for expensive ones (Hessian, intrinsic dimension, weight
snapshots), so the measures stay outside the loop.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import itertools
import math

import numpy as np
import torch
from torch import nn

from ..models import algorithmic_model
from ..training import train_loop

OPERATIONS: dict[str, Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]] = {
    "+": lambda a, b, p: (a + b) % p,
    "-": lambda a, b, p: (a - b) % p,
    "*": lambda a, b, p: (a * b) % p,
}


@dataclass
class AlgorithmicData:
    train_x: torch.Tensor  # (n, 2) int64 operand pairs
    train_y: torch.Tensor
    val_x: torch.Tensor
    val_y: torch.Tensor
    p: int
    op: str


def modular_arithmetic(p: int, op: str = "+", train_fraction: float = 0.5, seed: int = 0) -> AlgorithmicData:
    """All p^2 pairs (a, b) labelled a op b mod p, split at random into train and validation."""
    if op not in OPERATIONS:
        raise ValueError(f"unknown operation {op!r}; valid: {', '.join(OPERATIONS)}")
    if not 0 < train_fraction < 1:
        raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction}")
    a, b = torch.meshgrid(torch.arange(p), torch.arange(p), indexing="ij")
    x = torch.stack([a.flatten(), b.flatten()], dim=1)
    y = OPERATIONS[op](x[:, 0], x[:, 1], p)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    n_train = int(round(train_fraction * len(y)))
    tr, va = order[:n_train], order[n_train:]
    return AlgorithmicData(x[tr], y[tr], x[va], y[va], p, op)


def s5_composition(train_fraction: float = 0.5, seed: int = 0) -> AlgorithmicData:
    """All 120^2 pairs (a, b) of permutations of 5 elements labelled a∘b, (a∘b)(i) = a(b(i)),
    split at random; tokens and classes are the permutations' indices in lexicographic order."""
    if not 0 < train_fraction < 1:
        raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction}")
    perms = list(itertools.permutations(range(5)))
    index = {perm: i for i, perm in enumerate(perms)}
    table = torch.tensor([[index[tuple(a[j] for j in b)] for b in perms] for a in perms])
    a, b = torch.meshgrid(torch.arange(120), torch.arange(120), indexing="ij")
    x, y = torch.stack([a.flatten(), b.flatten()], dim=1), table.flatten()
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    n_train = int(round(train_fraction * len(y)))
    tr, va = order[:n_train], order[n_train:]
    return AlgorithmicData(x[tr], y[tr], x[va], y[va], 120, "s5")


def algorithmic_task(operation: str, p: int, train_fraction: float, seed: int) -> AlgorithmicData:
    """`a op b mod p` for op in OPERATIONS, or composition in S5 (operation "s5"; p is ignored)."""
    if operation == "s5":
        return s5_composition(train_fraction, seed)
    return modular_arithmetic(p, operation, train_fraction, seed)


@dataclass
class ModularRun:
    """What a run leaves: per-step curves, the measures taken, and the final weights."""
    loss: np.ndarray
    train_acc: np.ndarray
    val_acc: np.ndarray
    grad_norm: np.ndarray
    measures: list[dict[str, Any]] = field(default_factory=list)
    state_dict: dict[str, torch.Tensor] | None = None

    def first_step_reaching(self, curve: str, threshold: float = 0.99) -> int | None:
        """First step (1-based) at which `curve` ('train_acc' or 'val_acc') reaches `threshold`."""
        hits = np.flatnonzero(getattr(self, curve) >= threshold)
        return int(hits[0]) + 1 if len(hits) else None


def train_modular(data: AlgorithmicData, steps: int, seed: int = 0, lr: float = 1e-3,
                  weight_decay: float = 1.0, betas: tuple[float, float] = (0.9, 0.98),
                  embed_dim: int = 128, hidden: int = 256, model_kind: str = "mlp",
                  clip_norm: float | None = None,
                  measure_steps: list[int] = (), measure: Callable[[int, nn.Module], dict] | None = None,
                  desc: str = "modular arithmetic", stop_at_val_acc: float | None = None,
                  min_steps: int = 0, patience: float = 0.0) -> ModularRun:
    """Full-batch AdamW on cross-entropy. Index t-1 of each curve is the value at step t
    (loss and train accuracy before that step's update, validation accuracy after it).

    With `stop_at_val_acc`, training ends at the first step t >= `min_steps` by which the
    validation accuracy has reached that value, and the curves end at step t; with `patience`,
    it goes on until step ceil((1 + patience) x t), so that what follows generalisation is seen."""
    torch.manual_seed(seed)
    model = algorithmic_model(model_kind, data.p, embed_dim, hidden)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, betas=betas)
    curves = {k: np.zeros(steps) for k in ("loss", "train_acc", "val_acc", "grad_norm")}
    loss_fn = nn.CrossEntropyLoss()

    def step(t: int) -> float:
        model.train()
        logits = model(data.train_x)
        loss = loss_fn(logits, data.train_y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        # clip_grad_norm_ returns the norm before clipping; max_norm=inf measures only.
        norm = nn.utils.clip_grad_norm_(model.parameters(), clip_norm if clip_norm else float("inf"))
        opt.step()
        with torch.no_grad():
            curves["loss"][t - 1] = loss.item()
            curves["train_acc"][t - 1] = (logits.argmax(1) == data.train_y).float().mean().item()
            curves["val_acc"][t - 1] = (model(data.val_x).argmax(1) == data.val_y).float().mean().item()
            curves["grad_norm"][t - 1] = norm.item()
        return loss.item()

    measured = set(int(s) for s in measure_steps)
    eval_steps = list(measured)
    if stop_at_val_acc is not None:
        eval_steps += list(range(max(min_steps, 1), steps + 1))
    stop_at: list[int | None] = [None]  # the step training ends at, once the accuracy is reached

    def evaluate(t: int) -> dict:
        out = measure(t, model) if measure is not None and t in measured else {}
        if stop_at_val_acc is not None and t >= 1:
            if stop_at[0] is None:
                hits = np.flatnonzero(curves["val_acc"][:t] >= stop_at_val_acc)
                if len(hits):
                    stop_at[0] = math.ceil((1 + patience) * (int(hits[0]) + 1))
            if stop_at[0] is not None and t >= stop_at[0]:
                out["stop"] = True
        return out

    history = train_loop(step, steps, eval_steps, evaluate, desc=desc)
    last = history[-1]["step"] if stop_at_val_acc is not None and history else steps
    if last < steps:
        curves = {k: v[:last] for k, v in curves.items()}
    if stop_at_val_acc is not None:
        history = [h for h in history if h["step"] in measured]
    return ModularRun(**curves, measures=history if measure is not None else [],
                      state_dict={k: v.detach().clone() for k, v in model.state_dict().items()})
