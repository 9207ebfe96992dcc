"""One figure style for the whole book, and the papers' colours for the data splits."""
from __future__ import annotations

import matplotlib.pyplot as plt
import seaborn as sns

from .runtime import costed

# The page build (harness.book_pages) moves what `show` attaches under this key into the cell's
# `mystnb` metadata, where MyST-NB turns the image into a numbered figure.
FIGURE_KEY = "replicate_figure"

# As in the papers' figures: train green, test orange, random blue.
SPLIT_COLORS = {"train": "tab:green", "test": "tab:orange", "random": "tab:blue"}


def use_book_style() -> None:
    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind")
    plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 150, "axes.titlesize": "medium",
                         "figure.constrained_layout.use": True})


@costed("figures shown (plotting.show)")
def show(fig: plt.Figure, name: str, caption: str, alt: str) -> None:
    """Show `fig` as a numbered figure of the book, and close it.

    `name` labels it for cross-references (`{numref}` in the text), e.g. "fig-04-accuracy";
    `caption` is the Markdown under it, first what to look at, then the run that made it;
    `alt` says what the image shows, for a reader who cannot see it. In Jupyter the figure
    shows as usual; in the book the caption is text, numbered per chapter ("Figure 4.1")."""
    from IPython.display import display

    if not name.startswith("fig-") or not name.replace("-", "").isalnum() or name != name.lower():
        raise ValueError(f"figure name {name!r}: use lowercase letters, digits and '-', "
                         "starting 'fig-'")
    if not caption.strip() or not alt.strip():
        raise ValueError(f"figure {name}: give both a caption and an alt text")
    display(fig, metadata={FIGURE_KEY: {"name": name, "caption": caption.strip(),
                                        "alt": " ".join(alt.split())}})
    plt.close(fig)


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


def panel_grid(n: int, ncols: int = 3, width: float = 8.0, row_height: float = 2.8,
               **subplot_kw) -> tuple[plt.Figure, list[plt.Axes]]:
    """`n` panels, at most `ncols` to a row, in a figure `width` inches wide; unused axes hidden."""
    ncols = max(1, min(ncols, n))
    nrows = -(-n // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, row_height * nrows), squeeze=False,
                             **subplot_kw)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def legend_below(fig: plt.Figure, axes=None, ncol: int = 3, **kwargs) -> None:
    """One legend for the figure, under its panels (never over the data); each label once."""
    seen: dict = {}
    for ax in fig.axes if axes is None else axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, handle)
    if seen:
        fig.legend(list(seen.values()), list(seen.keys()), loc="upper center",
                   bbox_to_anchor=(0.5, 0), ncol=min(ncol, len(seen)), **kwargs)


def thousands(x: float, _=None) -> str:
    """A tick label in thousands: 0, 500, 10k, 2.5k."""
    return f"{x / 1000:g}k" if abs(x) >= 1000 else f"{x:g}"


def steps_axis(ax: plt.Axes, which: str = "x", log: bool = False, nbins: int = 4) -> None:
    """An axis of steps (updates, iterations), labelled in thousands; on a log scale with ticks
    at 1, 2 and 5 of each decade."""
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    axis = ax.xaxis if which == "x" else ax.yaxis
    if log:
        (ax.set_xscale if which == "x" else ax.set_yscale)("log")
        axis.set_major_locator(LogLocator(subs=(1, 2, 5)))
        axis.set_minor_formatter(NullFormatter())
    else:
        axis.set_major_locator(MaxNLocator(nbins=nbins, steps=[1, 2, 2.5, 5, 10]))
    axis.set_major_formatter(FuncFormatter(thousands))


def crossed_legend(ax: plt.Axes, colors: dict[str, str], open_label: str = "open: not crossed, "
                   "at its cap", **kwargs) -> None:
    """A legend of filled dots, one per label and colour, and an open dot for a run that did not
    cross (its count is a lower bound); below the axes unless `loc` is given."""
    from matplotlib.lines import Line2D

    dot = dict(ls="", marker="o")
    handles = [Line2D([], [], color=c, label=label, **dot) for label, c in colors.items()]
    handles.append(Line2D([], [], color="0.3", markerfacecolor="none", label=open_label, **dot))
    kwargs = {"loc": "upper center", "bbox_to_anchor": (0.5, -0.12), "fontsize": "small", **kwargs}
    ax.legend(handles=handles, **kwargs)


def paper_band(ax: plt.Axes, number, x: float | None = None, horizontal: bool = True,
               color: str = "C3", label: str = "paper") -> None:
    """The paper's number (`config.PaperNumber`) on an axes: at `x`, a diamond with the band as
    its error bar; without `x`, a line across the axes (horizontal, or vertical) with the band
    shaded where it has a width."""
    low, high = number.band
    if x is not None:
        err = [[number.value - low], [high - number.value]] if high > low else None
        ax.errorbar(x, number.value, yerr=err, fmt="D", color=color, capsize=4, label=label)
        return
    line, span = (ax.axhline, ax.axhspan) if horizontal else (ax.axvline, ax.axvspan)
    line(number.value, color=color, lw=1, ls="-.", label=label)
    if high > low:
        span(low, high, color=color, alpha=0.12, lw=0)
