"""attnscore.plot.show_heatmaps: d2l's layout, tensors and arrays, saving.

Run: PYTHONPATH=BUILD/python /usr/bin/python3 -m pytest tests/python
"""

import os

import matplotlib
import numpy as np
import pytest

from attnscore.plot import show_heatmaps

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def softmax_rows(shape, seed=0):
    w = np.random.default_rng(seed).random(shape)
    return (w / w.sum(axis=-1, keepdims=True)).astype(np.float32)


def close(fig):
    matplotlib.pyplot.close(fig)


def test_headless_backend():
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
            or os.environ.get("MPLBACKEND")):
        assert matplotlib.get_backend().lower() == "agg"


def test_d2l_call_on_a_tensor():
    # d2l's call: the toy's attention weights, reshaped to (1, 1, 2, 10).
    torch = pytest.importorskip("torch")
    weights = torch.zeros(2, 1, 10)
    weights[0, 0, :2], weights[1, 0, :6] = 1 / 2, 1 / 6
    weights.requires_grad_()
    fig = show_heatmaps(weights.reshape((1, 1, 2, 10)), xlabel="Keys",
                        ylabel="Queries")
    assert isinstance(fig, matplotlib.figure.Figure)
    panels, colorbar = fig.axes[:-1], fig.axes[-1]
    assert len(panels) == 1 and len(fig.axes) == 2
    assert panels[0].get_xlabel() == "Keys"
    assert panels[0].get_ylabel() == "Queries"
    assert colorbar.get_label() == "<colorbar>"
    image = panels[0].get_images()[0].get_array()
    assert image.shape == (2, 10)
    assert np.allclose(image, weights.detach().numpy().reshape(2, 10))
    assert tuple(fig.get_size_inches()) == (2.5, 2.5)
    close(fig)


def test_grid_labels_titles_and_png(tmp_path):
    matrices = softmax_rows((2, 3, 4, 6))
    path = tmp_path / "heatmaps.png"
    fig = show_heatmaps(matrices, "Keys", "Queries", titles=["a", "b", "c"],
                        figsize=(7, 5), path=str(path))
    assert len(fig.axes) == 2 * 3 + 1  # the panels, then the colour bar
    panels = fig.axes[:6]
    assert [ax.get_title() for ax in panels] == ["a", "b", "c"] * 2
    assert [ax.get_xlabel() for ax in panels] == [""] * 3 + ["Keys"] * 3
    assert [ax.get_ylabel() for ax in panels] == ["Queries", "", ""] * 2
    for ax, m in zip(panels, matrices.reshape(6, 4, 6)):
        assert np.allclose(ax.get_images()[0].get_array(), m)
    close(fig)
    with open(path, "rb") as f:
        assert f.read(8) == PNG_SIGNATURE
    image = matplotlib.image.imread(str(path))
    assert image.shape[0] > 0 and image.shape[1] > image.shape[0]  # 7 x 5 in
    assert sorted(os.listdir(tmp_path)) == ["heatmaps.png"]  # no temporary left


def test_ragged_rows_and_shared_scale(tmp_path):
    m = softmax_rows((5, 3, 4))
    rows = [list(m[:3]), list(m[3:])]
    titles = [["batch 0", "batch 1", "batch 2"], ["batch 3", "batch 4"]]
    fig = show_heatmaps(rows, "Keys", "Queries", titles=titles, vmin=0.0,
                        vmax=1.0, aspect="auto", layout="constrained",
                        suptitle="weights", path=str(tmp_path / "r.png"))
    assert len(fig.axes) == 5 + 1  # the missing cell is left out
    panels = fig.axes[:5]
    assert [ax.get_title() for ax in panels] == [f"batch {i}" for i in range(5)]
    # The lowest panel of each column carries the x label.
    assert [ax.get_xlabel() for ax in panels] == ["", "", "Keys", "Keys", "Keys"]
    assert all(ax.get_images()[0].get_clim() == (0.0, 1.0) for ax in panels)
    assert fig._suptitle.get_text() == "weights"
    close(fig)
    assert os.path.getsize(tmp_path / "r.png") > 0


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match=r"\(2, 10\)"):
        show_heatmaps(np.zeros((2, 10)), "Keys", "Queries")
    with pytest.raises(ValueError, match="no matrix"):
        show_heatmaps([], "Keys", "Queries")


def test_failed_save_leaves_nothing(tmp_path):
    missing = tmp_path / "missing" / "x.png"
    with pytest.raises(OSError):
        show_heatmaps(softmax_rows((1, 1, 2, 3)), "Keys", "Queries",
                      path=str(missing))
    assert os.listdir(tmp_path) == []
    matplotlib.pyplot.close("all")
