"""jaximp on Dask collections: one task per chunk of rows (see :mod:`jaximp._frontends.dask`).

Needs dask (``pip install 'jaximp[dask]'``); ``import jaximp`` does not load it.
"""

from jaximp._frontends.dask import leaf_indices as leaf_indices
from jaximp._frontends.dask import permutation_importance as permutation_importance
from jaximp._frontends.dask import predict as predict
from jaximp._frontends.dask import shap_importance as shap_importance
from jaximp._frontends.dask import shap_values as shap_values

__all__ = ["leaf_indices", "permutation_importance", "predict", "shap_importance", "shap_values"]
