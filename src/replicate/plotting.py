"""One figure style for the whole book, and the papers' colours for the data splits."""
from __future__ import annotations

import matplotlib.pyplot as plt
import seaborn as sns

# As in the papers' figures: train green, test orange, random blue.
SPLIT_COLORS = {"train": "tab:green", "test": "tab:orange", "random": "tab:blue"}


def use_book_style() -> None:
    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind")
    plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 150, "axes.titlesize": "medium",
                         "figure.constrained_layout.use": True})


def caption(fig: plt.Figure, text: str) -> None:
    """A small grey caption under the figure: which preset and seed produced it."""
    fig.text(0.5, -0.02, text, ha="center", va="top", fontsize="small", color="0.35")


def contour(ax: plt.Axes, f, xlim: tuple[float, float], ylim: tuple[float, float],
            resolution: int = 300, levels: int = 30, colorbar: bool = True) -> None:
    """Filled contours of a 2-D function `f` (torch points (..., 2) -> values) over a box."""
    import torch

    xs = torch.linspace(*xlim, resolution, dtype=torch.float64)
    ys = torch.linspace(*ylim, resolution, dtype=torch.float64)
    grid = torch.stack(torch.meshgrid(xs, ys, indexing="xy"), dim=-1)
    with torch.no_grad():
        values = f(grid).numpy()
    filled = ax.contourf(xs.numpy(), ys.numpy(), values, levels=levels, cmap="viridis")
    if colorbar:
        ax.figure.colorbar(filled, ax=ax, shrink=0.8)
    ax.set_xlabel("$x_1$")
    ax.set_ylabel("$x_2$")
