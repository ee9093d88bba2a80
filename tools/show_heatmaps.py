#!/usr/bin/python3
"""Draw attention weights as heatmaps, in the manner of d2l's show_heatmaps.

WEIGHTS.npy is what `attnscore run dot|additive|concat --weights-out` writes: a
floating-point (float16/32/64) array of shape (B, N, M) = (batch, queries, keys). Each
selected batch entry b becomes one panel titled "batch b" whose rows are
queries and whose columns are keys; panels fill a grid of at most --columns
columns and share one colour scale (0 to the largest finite weight) with one
colour bar. NaN weights are left blank. `run multihead` writes (B, H, N, M):
then each selected entry draws one panel per head, "batch b, head h", a row
of panels per entry (up to 8 heads a row unless --columns says otherwise).

OUT.png is written atomically (a temporary file beside it, then renamed) and
carries the PNG text chunk Description = "attnscore heatmaps: P panels of
N x M". On any error nothing is written and the exit status is 2.

Draws with attnscore.plot.show_heatmaps (python/attnscore/plot.py, loaded by
path, so the compiled package is not needed). Needs Debian's python3-numpy
and python3-matplotlib.
"""

import argparse
import importlib.util
import os
import sys

import numpy as np
import matplotlib

matplotlib.use("Agg")  # no display needed; must precede the pyplot import


def _load_plot():
    # attnscore.plot by path: the package's __init__ needs the compiled
    # module, which the CLI's users need not have built.
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                        "python", "attnscore", "plot.py")
    spec = importlib.util.spec_from_file_location("attnscore_plot", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


plot = _load_plot()

PROG = "show_heatmaps.py"
MAX_DEFAULT_PANELS = 64  # beyond this, --batches must say which to draw
PANEL_WIDTH = 2.5  # inches of heatmap per panel, as wide as d2l's default
PANEL_MIN_HEIGHT, PANEL_MAX_HEIGHT = 1.0, 5.0  # keep 1 x M rows visible
DPI = 100


def fail(message):
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(2)


class Parser(argparse.ArgumentParser):
    # argparse would print the usage too; callers and tests want one line.
    def error(self, message):
        fail(message)


def batch_list(text):
    try:
        indices = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"want comma-separated batch indices such as 0,2, got {text!r}")
    for i in indices:
        if indices.count(i) > 1:
            raise argparse.ArgumentTypeError(f"batch index {i} is repeated")
    return indices


def load_weights(path):
    # np.load's own complaint about bytes that are not .npy talks about
    # pickles, so check the magic first to give a clearer message.
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
    except OSError as e:
        fail(f"{path}: cannot read: {e.strerror or e}")
    if magic != b"\x93NUMPY":
        fail(f"{path}: not a .npy file (no \\x93NUMPY magic)")
    try:
        weights = np.load(path, allow_pickle=False)
    except OSError as e:
        fail(f"{path}: cannot read: {e.strerror or e}")
    except (ValueError, EOFError) as e:
        fail(f"{path}: not a valid .npy file: {' '.join(str(e).split())}")
    if weights.ndim not in (3, 4):
        fail(f"{path}: has shape {weights.shape}, "
             "want (B, N, M) = (batch, queries, keys) or (B, H, N, M) with heads")
    if 0 in weights.shape:
        fail(f"{path}: shape {weights.shape} has a zero-size dimension")
    if not np.issubdtype(weights.dtype, np.floating):
        fail(f"{path}: dtype is {weights.dtype}, want a floating-point type such as float32")
    return weights


def draw(panels, names, columns, args):
    count, n, m = panels.shape
    # Square cells while they fit; otherwise stretch (aspect="auto") so that
    # a single query over many keys is a visible strip, not a hairline.
    height = min(max(n * PANEL_WIDTH / m, PANEL_MIN_HEIGHT), PANEL_MAX_HEIGHT)
    rows = [list(panels[i:i + columns]) for i in range(0, count, columns)]
    titles = [names[i:i + columns] for i in range(0, count, columns)]
    finite = panels[np.isfinite(panels)]
    vmax = float(finite.max()) if finite.size else 1.0
    if vmax <= 0:  # a zero-width scale would break the colour bar
        vmax = 1.0
    return plot.show_heatmaps(
        rows, args.xlabel, args.ylabel, titles=titles, cmap=args.cmap,
        figsize=(columns * (PANEL_WIDTH + 0.9) + 1.2,
                 len(rows) * (height + 0.9) + (0.4 if args.title else 0.1)),
        vmin=0.0, vmax=vmax, aspect="auto", layout="constrained",
        suptitle=args.title or None)


def main():
    parser = Parser(prog=PROG, description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("weights", metavar="WEIGHTS.npy")
    parser.add_argument("out", metavar="OUT.png")
    parser.add_argument("--xlabel", default="Keys", help="(default: Keys)")
    parser.add_argument("--ylabel", default="Queries",
                        help="(default: Queries)")
    parser.add_argument("--title", default="", metavar="TEXT",
                        help="figure title (default: none)")
    parser.add_argument("--cmap", default="Reds",
                        help="matplotlib colour map (default: Reds)")
    parser.add_argument("--columns", type=int, metavar="C",
                        help="panels per row (default: min(B, 4))")
    parser.add_argument("--batches", type=batch_list, metavar="I,J,...",
                        help="batch entries to draw, 0-based (default: all)")
    args = parser.parse_args()

    if args.columns is not None and args.columns < 1:
        fail(f"argument --columns: must be at least 1, got {args.columns}")
    if args.cmap not in matplotlib.colormaps:
        fail(f"argument --cmap: unknown colour map {args.cmap!r}")
    if not args.out.lower().endswith(".png"):
        fail(f"{args.out}: output path must end in .png")
    out_dir = os.path.dirname(args.out) or "."
    if not os.path.isdir(out_dir):
        fail(f"{args.out}: directory {out_dir} does not exist")
    if os.path.isdir(args.out):
        fail(f"{args.out}: is a directory")

    weights = load_weights(args.weights)
    heads = weights.shape[1] if weights.ndim == 4 else 1
    b, n, m = weights.shape[0], weights.shape[-2], weights.shape[-1]
    if args.batches is None:
        if b * heads > MAX_DEFAULT_PANELS:
            fail(f"{args.weights}: has {b} batch entries of {heads} head(s), too many to "
                 f"draw (at most {MAX_DEFAULT_PANELS} panels); pick some with --batches")
        batches = list(range(b))
    else:
        batches = args.batches
        for i in batches:
            if not 0 <= i < b:
                fail(f"argument --batches: index {i} is out of range "
                     f"0..{b - 1} for {args.weights} with B = {b}")
    # float64 copy of just the selected entries: imshow rejects float16.
    panels = weights[batches].astype(np.float64).reshape(-1, n, m)
    count = len(panels)
    if weights.ndim == 4:
        names = [f"batch {i}, head {h}" for i in batches for h in range(heads)]
        columns = min(count, args.columns or min(heads, 8))
    else:
        names = [f"batch {i}" for i in batches]
        columns = min(count, args.columns or min(b, 4))

    fig = draw(panels, names, columns, args)
    description = f"attnscore heatmaps: {count} panels of {n} x {m}"
    # Written beside OUT.png under a temporary .png name, then renamed.
    try:
        plot.save_figure(fig, args.out, dpi=DPI,
                         metadata={"Description": description})
    except OSError as e:
        fail(f"{args.out}: cannot write: {e.strerror or e}")
    print(f"wrote {args.out}: {count} panel(s) of {n} x {m}")


if __name__ == "__main__":
    main()
