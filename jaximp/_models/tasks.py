"""A model's task, from its loss and outputs: what its raw output and targets mean."""

from __future__ import annotations

from jaximp._models.ensemble import Ensemble

Task = str  # "regression" | "multiregression" | "binary" | "multiclass" | "unknown" (no loss recorded)
BINARY_LOSSES = ("Logloss", "CrossEntropy")
MULTICLASS_LOSSES = ("MultiClass", "MultiClassOneVsAll")


def task_of(ens: Ensemble, fn_name: str = "task_of") -> Task:
    """The model's output kind, from its loss and number of outputs.

    A model with no loss but one output per class (scikit-learn's tree and forest classifiers,
    whose outputs are class probabilities) is "multiclass": scorers of the highest-scoring
    class apply to it, not those that read its outputs as logits (see ``jaximp._importances.scoring.resolve_scoring``).
    Any other model without a loss is "unknown": only a scoring function can score it.
    """
    if not ens.loss_function and ens.n_outputs > 1 and len(ens.class_names) == ens.n_outputs:
        return "multiclass"
    if not ens.loss_function:
        return "unknown"
    if ens.loss_function in BINARY_LOSSES:
        return "binary"
    if ens.loss_function in MULTICLASS_LOSSES:
        return "multiclass"
    return "regression" if ens.n_outputs == 1 else "multiregression"


REGRESSION = ("regression", "multiregression")
CLASSES = ("binary", "multiclass")
