"""Plots of feature importances, interactions and SHAP values (matplotlib; see
:mod:`jaximp._frontends.plots`).

Needs matplotlib, imported on first use (``import jaximp`` does not load it).
"""

from jaximp._frontends.plots import importance as importance
from jaximp._frontends.plots import interaction_heatmap as interaction_heatmap
from jaximp._frontends.plots import summary as summary

__all__ = ["importance", "interaction_heatmap", "summary"]
