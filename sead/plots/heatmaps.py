"""Heat maps of a quantity over joint user states (e.g. completion rate over cooperation x trust)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def state_grid(
    dims: Sequence[str], axes_values: Sequence[Sequence[int]], value: Callable[[tuple[int, ...]], float | None]
):
    """Yield (panel title, y values, x values, matrix) with the first dim on y, the last on x, one panel per
    combination of the dims in between. Missing values are NaN (drawn blank)."""
    y_vals, x_vals = axes_values[0], axes_values[-1]
    middle = list(itertools.product(*axes_values[1:-1])) if len(dims) > 2 else [()]
    for combo in middle:
        grid = np.full((len(y_vals), len(x_vals)), np.nan)
        for i, y in enumerate(y_vals):
            for j, x in enumerate(x_vals):
                state = (y, *combo, x) if len(dims) > 1 else (x,)
                v = value(state)
                grid[i, j] = np.nan if v is None else v
        title = ", ".join(f"{d}={v}" for d, v in zip(dims[1:-1], combo))
        yield title, y_vals, x_vals, grid


def draw_state_heatmaps(
    path: str | Path,
    dims: Sequence[str],
    axes_values: Sequence[Sequence[int]],
    rows: Sequence[tuple[str, Callable[[tuple[int, ...]], float | None], tuple[float, float]]],
    title: str = "",
) -> Path:
    """One row of panels per (label, value function, colour range)."""
    panels = [list(state_grid(dims, axes_values, fn)) for _, fn, _ in rows]
    ncols = len(panels[0])
    fig, axes = plt.subplots(len(rows), ncols, figsize=(3.6 * ncols + 1, 3.2 * len(rows)), squeeze=False)
    for r, ((label, _, (vmin, vmax)), row_panels) in enumerate(zip(rows, panels)):
        for c, (ptitle, ys, xs, grid) in enumerate(row_panels):
            ax = axes[r][c]
            im = ax.imshow(grid, origin="lower", cmap="viridis", vmin=vmin, vmax=vmax, aspect="auto")
            ax.set_xticks(range(len(xs)), [str(x) for x in xs])
            ax.set_yticks(range(len(ys)), [str(y) for y in ys])
            ax.set_xlabel(dims[-1])
            ax.set_ylabel(dims[0] if len(dims) > 1 else "")
            ax.set_title(f"{label}" + (f" ({ptitle})" if ptitle else ""), fontsize=9)
            for i in range(grid.shape[0]):
                for j in range(grid.shape[1]):
                    if not np.isnan(grid[i, j]):
                        v = grid[i, j]  # counts print as integers, rates with two decimals
                        ax.text(
                            j,
                            i,
                            f"{v:.0f}" if v.is_integer() else f"{v:.2f}",
                            ha="center",
                            va="center",
                            fontsize=7,
                            color="white",
                        )
            fig.colorbar(im, ax=ax, fraction=0.046)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
