"""The pictures of the README and of the documentation site, drawn from jaximp's built-in example.

Run from a clone, with the plotting extras installed (``python -m pip install -e ".[plots]"``):

    python scripts/figures.py            # writes notebooks/figures/{beeswarm,importance,interactions}.png
    python scripts/figures.py OUT_DIR    # the same three files in OUT_DIR

The model is the one ``python -m jaximp demo`` trains: CatBoost, 300 trees of depth 6, on
scikit-learn's bundled diabetes data (442 rows, 10 features; no download). The three pictures are
jaximp's own plots of it, ``jaximp.plots.summary`` (the SHAP beeswarm),
``jaximp.plots.importance`` (four importances side by side) and ``jaximp.plots.interaction_heatmap``
(mean |SHAP interaction value| of each pair of features). Everything is seeded and drawn with
matplotlib's Agg backend, so a run gives the same pictures on the same versions of the libraries;
the README and notebooks/getting-started.md show the files this script writes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no window, no display needed

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import jaximp  # noqa: E402
import jaximp.plots  # noqa: E402
from jaximp._frontends.demo import demo_model  # noqa: E402  (the model python -m jaximp demo trains)

FIGURES = Path(__file__).resolve().parents[1] / "notebooks" / "figures"
NAMES = ("beeswarm.png", "importance.png", "interactions.png")
DPI = 110
# PNG text chunks: none that names the matplotlib version, so the same pixels give the same bytes.
METADATA = {"Software": None}


def draw(ens, X, y) -> dict[str, object]:
    """The three pictures of ``ens`` explained on the rows ``X`` (targets ``y``): ``{file name: Axes}``."""
    names = ens.feature_names
    values = jaximp.shap_values(ens, X)  # f32[N, F], path-dependent
    importances = {
        "mean |SHAP|": np.abs(values).mean(axis=0),
        "PredictionValuesChange": jaximp.prediction_values_change(ens),
        "permutation (RMSE, 10 shuffles)": jaximp.permutation_importance(ens, X, y, n_repeats=10, random_state=0),
        "LossFunctionChange": jaximp.loss_function_change(ens, X, y),
    }
    return {
        "beeswarm.png": jaximp.plots.summary(values, X, names, title="SHAP values of the 442 rows"),
        "importance.png": jaximp.plots.importance(importances, names,
                                                  title="Four importances, each as a share of its total"),
        "interactions.png": jaximp.plots.interaction_heatmap(
            jaximp.shap_interaction_importance(ens, X), names, title="Pairwise SHAP interactions",
            label="mean |SHAP interaction value|"),
    }


def main(out: str | Path = FIGURES) -> list[Path]:
    """Train the demo's model, draw the three pictures and save them as PNG files in ``out``
    (created if missing); the paths written, in the order of ``NAMES``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model, X, y = demo_model()
    paths = []
    for name, ax in draw(jaximp.from_catboost(model), X, y).items():
        path = out / name
        ax.figure.savefig(path, dpi=DPI, metadata=METADATA)
        plt.close(ax.figure)
        paths.append(path)
    return paths


if __name__ == "__main__":
    if len(sys.argv) > 2 or any(arg.startswith("-") for arg in sys.argv[1:]):
        sys.exit(f"usage: python {sys.argv[0]} [OUT_DIR]   (default: {FIGURES})")
    for written in main(*sys.argv[1:]):
        print(f"{written} ({written.stat().st_size / 1024:.0f} KB)")
