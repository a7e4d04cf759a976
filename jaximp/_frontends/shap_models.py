"""What ``jaximp.TreeExplainer`` explains: the model behind any object shap's ``TreeExplainer``
takes (and model files), the rows as its model reads them, and shap's ``tree_limit``.

* A model is imported by its library: CatBoost, XGBoost and LightGBM models or Boosters,
  scikit-learn's tree models, a jaximp ensemble as it is, or a model file (what ``jaximp
  explain`` reads). An sklearn ``Pipeline`` whose last step is one of these is split into its
  transform steps, which every row and the background go through first, and the model.
* ``tree_limit`` counts trees as shap counts them on each of its paths: for XGBoost and
  LightGBM without a background shap asks the library itself (XGBoost's
  ``iteration_range=(0, tree_limit // trees_per_round)``, all rounds when that is 0; LightGBM's
  ``num_iteration=tree_limit``, rounds), and otherwise takes the first ``tree_limit`` trees of the
  model (a negative or too large limit: every tree; 0 is refused). XGBoost's default is the model's
  ``best_iteration`` (early stopping), as shap's.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np

from jaximp._frontends.explain import load_model
from jaximp._importers.catboost import from_catboost
from jaximp._importers.lightgbm import from_lightgbm
from jaximp._importers.sklearn import from_sklearn
from jaximp._importers.xgboost import from_xgboost
from jaximp._models.ensemble import Ensemble
from jaximp._models.selection import first_trees

FN = "TreeExplainer"
_IMPORTERS = {"catboost": from_catboost, "xgboost": from_xgboost, "lightgbm": from_lightgbm, "sklearn": from_sklearn}


@dataclasses.dataclass(frozen=True, eq=False)
class Explained:
    """A model as ``TreeExplainer`` holds it.

    Attributes:
        ens: the jaximp ensemble of every tree.
        library: "catboost", "xgboost", "lightgbm", "sklearn" or "" (a jaximp ensemble or a file).
        model: the library's model object (None for an ensemble or a file).
        transform: the pipeline's transform steps (an sklearn ``Pipeline``), or None.
    """

    ens: Ensemble
    library: str
    model: Any = None
    transform: Any = None

    def rows(self, X: Any) -> Any:
        """``X`` as the model reads it: through the pipeline's transform steps, if any."""
        _refuse_dmatrix(X)
        return X if self.transform is None or X is None else self.transform.transform(X)

    def feature_names_out(self) -> list[str] | None:
        """The names of the columns the transform steps give (None without steps or names)."""
        if self.transform is None or not hasattr(self.transform, "get_feature_names_out"):
            return None
        try:
            return [str(name) for name in self.transform.get_feature_names_out()]
        except (AttributeError, ValueError, TypeError):  # a step that does not name its columns
            return None

    def limited(self, tree_limit: Any, ens: Ensemble, ask_library: bool) -> Ensemble:
        """The trees of ``ens`` (the explainer's ensemble of this model) that shap's
        ``tree_limit`` keeps; ``ask_library``: shap's path that asks XGBoost or LightGBM itself
        (see the module docstring)."""
        if tree_limit is None:
            tree_limit = _default_limit(self)
        if tree_limit is None:
            return ens
        if isinstance(tree_limit, bool) or not isinstance(tree_limit, int | np.integer):
            raise TypeError(f"{FN}: tree_limit must be None or an int (-1: every tree); got "
                            f"{type(tree_limit).__name__}")
        tree_limit = int(tree_limit)
        if ask_library and self.library == "xgboost":
            rounds = tree_limit // _xgboost_trees_per_round(self.model) if tree_limit > 0 else 0
            return ens if rounds == 0 else from_xgboost(self.model, iteration_range=(0, rounds))
        if ask_library and self.library == "lightgbm":
            return ens if tree_limit <= 0 else _lightgbm_rounds(self.model, tree_limit)
        if tree_limit == 0:
            raise ValueError(f"{FN}: tree_limit=0 keeps no tree; pass a positive number of trees, or -1 or None for "
                             "every tree")
        return ens if tree_limit < 0 else first_trees(ens, tree_limit)


def explained(model: Any) -> Explained:
    """The :class:`Explained` of any model ``TreeExplainer`` takes; a TypeError for others."""
    if isinstance(model, Ensemble):
        return Explained(model, "")
    if isinstance(model, str | os.PathLike):
        return Explained(load_model(os.fspath(model)).ens, "")
    steps = getattr(model, "steps", None)
    if _library(model) == "sklearn" and type(model).__name__ == "Pipeline" and steps:
        last = steps[-1][1]
        if _library(last) not in _IMPORTERS or type(last).__name__ == "Pipeline":
            raise TypeError(f"{FN}: a Pipeline's last step must be a tree model jaximp imports (CatBoost, XGBoost, "
                            f"LightGBM or scikit-learn trees); got {type(last).__name__}")
        inner = explained(last)
        return dataclasses.replace(inner, transform=model[:-1] if len(steps) > 1 else None)
    library = _library(model)
    if library not in _IMPORTERS:
        raise TypeError(f"{FN}: model must be a CatBoost, XGBoost, LightGBM or scikit-learn tree model (or an sklearn "
                        f"Pipeline ending in one), a jaximp ensemble or a model file; got {type(model).__name__}")
    return Explained(_IMPORTERS[library](model), library, model)


def _library(model: Any) -> str:
    return type(model).__module__.split(".")[0]


def _refuse_dmatrix(X: Any) -> None:
    if type(X).__name__ in ("DMatrix", "QuantileDMatrix") and _library(X) == "xgboost":
        raise TypeError(f"{FN}: rows given as an xgboost.DMatrix cannot be read back (it drops missing values); "
                        "pass the array or DataFrame the DMatrix was built from")


def _default_limit(explained: Explained) -> int | None:
    """XGBoost's early-stopping round, as shap's default ``tree_limit`` (None otherwise)."""
    if explained.library != "xgboost":
        return None
    best = getattr(explained.model, "best_iteration", None)
    if best is None:
        return None
    return (int(best) + 1) * _xgboost_trees_per_round(explained.model)


def _xgboost_booster(model: Any) -> Any:
    return model.get_booster() if hasattr(model, "get_booster") else model


def _xgboost_trees_per_round(model: Any) -> int:
    """Trees per boosting round of an XGBoost model: outputs times parallel trees."""
    import json

    config = json.loads(_xgboost_booster(model).save_config())
    learner = config["learner"]
    outputs = max(int(learner["learner_model_param"].get("num_class", "0")), 1)
    outputs = max(outputs, int(learner["learner_model_param"].get("num_target", "1")))
    parallel = int(config["learner"]["gradient_booster"].get("gbtree_model_param", {}).get("num_parallel_tree", "1"))
    return outputs * parallel


def _lightgbm_rounds(model: Any, rounds: int) -> Ensemble:
    """The LightGBM model of its first ``rounds`` boosting rounds, as ``predict(num_iteration=...)``
    uses them (a random forest then averages those rounds' trees)."""
    import lightgbm

    booster = model.booster_ if hasattr(model, "booster_") else model
    if rounds >= booster.current_iteration():
        return from_lightgbm(booster)
    return from_lightgbm(lightgbm.Booster(model_str=booster.model_to_string(num_iteration=rounds)))
