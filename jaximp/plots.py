"""Plots of feature importances, interactions and SHAP values, with matplotlib.

Each function draws on ``ax`` (a new figure when None, sized to the number of features) and
returns the Axes; nothing is shown or saved, so the functions work under any backend, ``Agg``
included. Save a plot with ``ax.figure.savefig("plot.png")``.

Needs matplotlib, imported on first use (``import jaximp`` does not load it).
"""

from jaximp._frontends.plots import importance as importance
from jaximp._frontends.plots import interaction_heatmap as interaction_heatmap
from jaximp._frontends.plots import summary as summary

__all__ = ["importance", "interaction_heatmap", "summary"]
