"""Model files for ``jaximp explain``: which library wrote a file, the loss as that library names
it, skops files read safely, and the library's own importances (``jaximp._frontends.explain.
load_model`` imports the ensemble with these).

Files read: CatBoost (``.cbm``, ``.json``), XGBoost (``.json``, ``.ubj``), LightGBM (``.txt``)
and scikit-learn models saved with skops (``skops.io.dump(model, "model.skops")``), never a
pickle. A skops file is loaded with skops' trusted-types check: the types it holds that skops
does not trust by default are listed first (``skops.io.get_untrusted_types``), those that
scikit-learn's tree, forest and boosting models hold are trusted (:data:`EXPECTED_SKOPS_TYPES`:
their tree tables, losses and links), and any other type is refused with a ``ValueError``
naming it, unless the user names it as trusted (``jaximp explain --trust-skops-type TYPE``, once
per type). Everything in a file is untrusted: each failure is a ``ValueError`` naming the file
and the fix (a missing file too).
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
from collections.abc import Sequence
from typing import Any

from jaximp._importers.ubjson import loads as ubjson_loads

# file name suffix -> the library whose model files use it
_SUFFIXES = {".cbm": "CatBoost", ".ubj": "XGBoost", ".txt": "LightGBM", ".model": "LightGBM",
             ".skops": "scikit-learn"}
# types that a skops file of a scikit-learn tree, forest or boosting model holds beyond those skops
# trusts itself (its estimators, NumPy's arrays and dtypes), trusted without asking: classes whose
# reconstruction only fills in tree tables, never a function (a trusted function could be called
# with the file's arguments)
_LOSSES = ("HalfSquaredError", "AbsoluteError", "PinballLoss", "HuberLoss", "HalfPoissonLoss", "HalfGammaLoss",
           "HalfTweedieLoss", "HalfTweedieLossIdentity", "HalfBinomialLoss", "ExponentialLoss", "HalfMultinomialLoss")
EXPECTED_SKOPS_TYPES = frozenset([
    "sklearn.tree._tree.Tree",
    "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
    "sklearn.ensemble._hist_gradient_boosting.binning._BinMapper",
    "sklearn.dummy.DummyRegressor", "sklearn.dummy.DummyClassifier",
    *(f"sklearn._loss.loss.{name}" for name in _LOSSES),
    *(f"sklearn._loss.link.{name}" for name in ("IdentityLink", "LogLink", "LogitLink", "MultinomialLogit")),
])


@dataclasses.dataclass(frozen=True)
class Model:
    """A model file, read.

    Attributes:
        ens: the ensemble (``ObliviousEnsemble`` or ``TreeEnsemble``).
        library: "CatBoost", "XGBoost", "LightGBM" or "scikit-learn".
        objective: the training loss as the library names it, with the library's word for it
            (``"loss RMSE"``, ``"objective reg:squarederror"``, ``"objective binary"``,
            ``"loss log_loss"``, ``"criterion gini"``), or "" when the file does not say.
    """

    ens: Any
    library: str
    objective: str


@dataclasses.dataclass(frozen=True)
class LibraryImportance:
    """An importance of the model alone that its library computes, as ``importances.csv`` names it.

    Attributes:
        column: the ``importances.csv`` column, the library's own name (``"total_gain"``).
        type: the :func:`jaximp.split_importance` type computing it.
        meaning: what it is, for the report's legend.
        additive: a total over the feature's splits (comparable as shares of its total), not a
            mean per split.
    """

    column: str
    type: str
    meaning: str
    additive: bool = True


LIBRARY_IMPORTANCES = {
    "CatBoost": (),  # PredictionValuesChange, Interaction, LossFunctionChange: see explain.py
    "XGBoost": (
        LibraryImportance("weight", "weight", "XGBoost's number of splits on the feature (get_score)"),
        LibraryImportance("gain", "gain", "XGBoost's mean gain of the feature's splits (get_score)", False),
        LibraryImportance("cover", "cover", "XGBoost's mean cover (hessian sum) of the feature's splits "
                                            "(get_score)", False),
        LibraryImportance("total_gain", "total_gain", "XGBoost's total gain of the feature's splits (get_score)"),
        LibraryImportance("total_cover", "total_cover", "XGBoost's total cover of the feature's splits "
                                                        "(get_score)"),
    ),
    "LightGBM": (
        LibraryImportance("split", "split", "LightGBM's number of splits on the feature (feature_importance)"),
        LibraryImportance("gain", "gain", "LightGBM's total gain of the feature's splits (feature_importance)"),
    ),
    "scikit-learn": (
        LibraryImportance("feature_importances_", "impurity", "scikit-learn's impurity-based importance (mean "
                                                              "decrease in impurity, feature_importances_), "
                                                              "summing to 1"),
    ),
}


def model_library(path: str) -> tuple[str, dict | None]:
    """``(library, XGBoost's JSON document or None)`` of a model file: "CatBoost" (.cbm, .json),
    "XGBoost" (.json, .ubj), "LightGBM" (.txt) or "scikit-learn" (.skops), told apart by the
    suffix and, for JSON, by the content (an XGBoost JSON document comes parsed).

    Raises:
        ValueError: not a model file jaximp reads (a pickle among them), or unreadable JSON.
        RecursionError: JSON nested deeper than Python's parser goes (the caller names it).
    """
    with open(path, "rb") as f:
        head = f.read(64)
    suffix = os.path.splitext(path)[1].lower()
    library, document = _SUFFIXES.get(suffix), None
    if library is None and head.startswith(b"CBM1"):
        library = "CatBoost"
    elif library is None and head.startswith(b"tree\n"):
        library = "LightGBM"
    elif library is None and head.startswith(b"PK\x03\x04"):  # a zip file: skops writes them
        library = "scikit-learn"
    elif library is None and (suffix == ".json" or head.lstrip().startswith(b"{")):
        library, document = _json_library(path)
    if library is None:
        raise ValueError(f"MODEL {path!r} is not a model file jaximp reads: CatBoost (.cbm, .json), XGBoost "
                         "(.json, .ubj), LightGBM (.txt) or scikit-learn saved with skops (.skops; pickles are "
                         "not read: save the model with skops.io.dump(model, 'model.skops'))")
    return library, document


def _json_library(path: str) -> tuple[str | None, dict | None]:
    """``("XGBoost", document)``, ``("CatBoost", None)`` or ``(None, None)`` for a JSON or
    UBJSON file, by its top-level keys."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        if path.lower().endswith(".json"):
            raise ValueError(f"MODEL {path!r} is not a readable JSON model file ({e})") from None
        if data[:1] == b"{":  # UBJSON, which only XGBoost writes
            return "XGBoost", None
        return None, None
    if isinstance(document, dict) and "learner" in document:
        return "XGBoost", document
    if isinstance(document, dict) and ({"oblivious_trees", "trees", "features_info"} & set(document)):
        return "CatBoost", None
    return None, None


def xgboost_document(path: str) -> dict:
    """The JSON document of an XGBoost JSON or UBJSON file."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        if data.lstrip()[:1] == b"{" and data.lstrip()[1:2] in (b'"', b"}", b"\n", b"\r", b" ", b"\t"):
            document = json.loads(data.decode("utf-8"))
        else:
            document = ubjson_loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"MODEL {path!r} is not a readable XGBoost JSON or UBJSON model file ({e}); save it "
                         "again with XGBoost's save_model('model.json') or 'model.ubj'") from None
    if not isinstance(document, dict):
        raise ValueError(f"MODEL {path!r} is not an XGBoost model: its document is a {type(document).__name__}, "
                         "not an object with a 'learner'")
    return document


def xgboost_objective(document: dict) -> str:
    """``"objective reg:squarederror"``: the objective's name in XGBoost's model document."""
    learner = document.get("learner")
    objective = learner.get("objective") if isinstance(learner, dict) else None
    name = objective.get("name") if isinstance(objective, dict) else None
    return f"objective {name}" if isinstance(name, str) and name else ""


def lightgbm_objective(path: str) -> str:
    """``"objective binary sigmoid:1"``: the ``objective=`` line of a LightGBM model's header."""
    with open(path, "rb") as f:
        for line in f:  # the header precedes the trees
            if line.startswith(b"objective="):
                name = line[len(b"objective="):].decode("utf-8", errors="replace").strip()
                return f"objective {name}" if name else ""
            if line.startswith(b"Tree="):
                break
    return ""


def sklearn_objective(estimator: Any) -> str:
    """``"loss squared_error"`` of a boosting model, ``"criterion gini"`` of a tree or forest."""
    for word in ("loss", "criterion"):
        value = getattr(estimator, word, None)
        if isinstance(value, str) and value:
            return f"{word} {value}"
    return ""


# --------------------------------------------------------------------------------------------
# skops


def expected_skops_type(name: str) -> bool:
    """Whether a type named by ``skops.io.get_untrusted_types`` is one that a scikit-learn tree,
    forest or boosting model holds (its trees, losses and links, init estimators): one of
    :data:`EXPECTED_SKOPS_TYPES`."""
    return name in EXPECTED_SKOPS_TYPES


def load_skops(path: str, trusted_types: Sequence[str] = ()) -> Any:
    """The scikit-learn estimator in a skops file, loaded with skops' trusted-types check.

    Args:
        path: the ``.skops`` file (``skops.io.dump(model, path)``).
        trusted_types: types trusted besides those of :func:`expected_skops_type`.

    Returns:
        The estimator.

    Raises:
        ValueError: a file skops cannot read, or one holding types not trusted (listed, with
            the option that trusts them).
        ImportError: skops is not installed.
    """
    try:
        import skops.io as sio
    except ImportError:
        raise ImportError(f"MODEL {path!r} is a skops file: reading it needs skops (pip install skops, or "
                          "pip install 'jaximp[cli]')") from None
    with open(path, "rb") as f:
        data = f.read()  # checked and loaded from the same bytes
    try:
        untrusted = sio.get_untrusted_types(data=data)
    except Exception as e:  # a damaged zip or schema: skops raises zipfile, JSON and key errors
        raise ValueError(f"MODEL {path!r} is not a readable skops file ({type(e).__name__}: {e}); save the model "
                         "with skops.io.dump(model, 'model.skops')") from None
    refused = [name for name in untrusted if not expected_skops_type(name) and name not in trusted_types]
    if refused:
        options = " ".join(f"--trust-skops-type {name}" for name in refused)
        raise ValueError(f"MODEL {path!r} holds {len(refused)} type{'s' if len(refused) > 1 else ''} that "
                         f"skops does not trust and that a scikit-learn tree model does not hold: "
                         f"{', '.join(refused)}; loading it could run code of those types. If you trust the "
                         f"file, say so with {options}")
    try:
        return sio.load(io.BytesIO(data), trusted=list(untrusted))
    except Exception as e:  # skops' loaders raise what the objects' reconstruction raises
        raise ValueError(f"MODEL {path!r} could not be loaded by skops ({type(e).__name__}: {e}); save the model "
                         "again with skops.io.dump(model, 'model.skops')") from None
