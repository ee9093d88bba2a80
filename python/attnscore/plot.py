"""d2l's show_heatmaps for attention weights, drawn with matplotlib.

    from attnscore.plot import show_heatmaps
    fig = show_heatmaps(attention.attention_weights.reshape((1, 1, 2, 10)),
                        xlabel="Keys", ylabel="Queries", path="weights.png")

On Linux without a display (no DISPLAY or WAYLAND_DISPLAY, no MPLBACKEND, and
pyplot not imported yet) importing this module selects the Agg backend, so it
draws and saves on a headless server. It imports only NumPy and matplotlib:
tools/show_heatmaps.py loads it by path, without the compiled package.
"""

import os
import sys

import matplotlib
import numpy as np

if ("matplotlib.pyplot" not in sys.modules and not os.environ.get("MPLBACKEND")
        and sys.platform.startswith("linux")
        and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))):
    matplotlib.use("Agg")  # must precede the pyplot import

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

__all__ = ["show_heatmaps", "save_figure"]


def _as_array(matrix):
    """A tensor or array as a float64 NumPy array (imshow rejects float16)."""
    if hasattr(matrix, "detach"):  # a torch tensor; torch is not imported here
        matrix = matrix.detach().cpu().numpy()
    return np.asarray(matrix, dtype=np.float64)


def _rows(matrices):
    """matrices as a list of rows of 2-D float64 arrays."""
    if hasattr(matrices, "detach") or isinstance(matrices, np.ndarray):
        array = _as_array(matrices)
        if array.ndim != 4:
            raise ValueError(f"matrices has shape {array.shape}; want "
                             "(rows, columns, N, M)")
        rows = [list(row) for row in array]
    else:
        rows = [[_as_array(m) for m in row] for row in matrices]
    if not rows or not any(rows):
        raise ValueError("matrices holds no matrix")
    for i, row in enumerate(rows):
        for j, m in enumerate(row):
            if m.ndim != 2 or 0 in m.shape:
                raise ValueError(f"matrices[{i}][{j}] has shape {m.shape}; "
                                 "want a non-empty (N, M) matrix")
    return rows


def _title(titles, i, j):
    if titles is None or len(titles) == 0:
        return None
    entry = titles[i] if not isinstance(titles[0], str) else titles
    return entry[j] if j < len(entry) else None


def save_figure(fig, path, dpi=None, metadata=None):
    """fig.savefig(path) written atomically: to a temporary file beside path,
    then renamed; on failure nothing is left behind. The format follows the
    path's extension (.png, .svg, .pdf, ...)."""
    ext = os.path.splitext(path)[1]
    tmp = f"{path}.tmp.{os.getpid()}{ext}"
    try:
        fig.savefig(tmp, dpi=dpi, metadata=metadata)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except FileNotFoundError:
            pass
        raise


def show_heatmaps(matrices, xlabel, ylabel, titles=None, figsize=(2.5, 2.5),
                  cmap="Reds", *, path=None, vmin=None, vmax=None, aspect=None,
                  layout=None, suptitle=None, dpi=None, metadata=None):
    """Draws each matrix as a heatmap in a grid, as d2l.show_heatmaps does,
    and returns the figure.

    matrices: a (rows, columns, N, M) array or tensor (d2l's form), or a list
    of rows of (N, M) matrices whose rows may be shorter than the longest
    (the grid's missing cells are left out). The panels share their axes;
    xlabel goes under the lowest panel of each column, ylabel beside the
    first of each row. titles: one per column (d2l's form), or a list of rows
    of titles, one per panel. One colour bar spans the panels; it shows the
    colour scale of the last panel, which is every panel's when vmin and vmax
    are given. fig.axes holds the panels, then the colour bar.

    Beyond d2l's arguments (keyword only): path saves the figure there
    (save_figure, atomically, with dpi and metadata); vmin, vmax and aspect
    go to imshow; layout to plt.subplots (e.g. "constrained"); suptitle is a
    title over the whole figure.
    """
    rows = _rows(matrices)
    num_rows, num_cols = len(rows), max(len(row) for row in rows)
    fig, axes = plt.subplots(num_rows, num_cols, figsize=figsize, sharex=True,
                             sharey=True, squeeze=False, layout=layout)
    used, image = [], None
    for i in range(num_rows):
        for j in range(num_cols):
            ax = axes[i, j]
            if j >= len(rows[i]):
                fig.delaxes(ax)
                continue
            image = ax.imshow(rows[i][j], cmap=cmap, vmin=vmin, vmax=vmax,
                              aspect=aspect)
            # Fractional ticks between rows or columns would name no query
            # or key.
            for axis in (ax.xaxis, ax.yaxis):
                axis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
            lowest = all(j >= len(rows[r]) for r in range(i + 1, num_rows))
            if lowest:
                ax.set_xlabel(xlabel)
                ax.tick_params(labelbottom=True)  # shared x hid them
            if j == 0:
                ax.set_ylabel(ylabel)
            title = _title(titles, i, j)
            if title:
                ax.set_title(title)
            used.append(ax)
    if suptitle:
        fig.suptitle(suptitle)
    fig.colorbar(image, ax=used, shrink=0.6)
    if path is not None:
        save_figure(fig, path, dpi=dpi, metadata=metadata)
    return fig
