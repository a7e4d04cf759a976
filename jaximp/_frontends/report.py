"""``jaximp explain``'s outputs for people: PNG plots (made with :mod:`jaximp.plots`) and
``report.md``, which shows them with the model, the data, a table of the top features and the
timings.

Both speak the model's library: its loss as the library names it (``objective
reg:squarederror``, ``loss RMSE``), its own importances under their own names (XGBoost's
``weight``/``gain``/..., LightGBM's ``split``/``gain``, scikit-learn's ``feature_importances_``,
CatBoost's PredictionValuesChange), and a classifier's outputs by class name. Every bar plot and
beeswarm plot lists the features in one order, that of ``importances.csv`` (mean |SHAP|)."""

from __future__ import annotations

import dataclasses
import os
import sys
from types import SimpleNamespace
from typing import Any

import numpy as np

from jaximp._frontends import plots
from jaximp._frontends.model_files import LIBRARY_IMPORTANCES
from jaximp._models.tasks import task_of

# importances.csv column -> the name shown in plots and the report (the library's importances: their column's name)
NAMES = {
    "mean_abs_shap": "mean |SHAP|",
    "prediction_values_change": "PredictionValuesChange",
    "permutation_importance": "permutation importance",
    "loss_function_change": "LossFunctionChange",
}
_TOP = 20
MAX_SUMMARIES = 10  # beeswarm plots of a multi-output model, one per output
_PER_OUTPUT_SHOWN = 5  # most outputs whose mean |SHAP| columns the report's table shows


@dataclasses.dataclass(frozen=True)
class Summary:
    """What a ``jaximp explain`` run did, for the report's tables."""

    options: Any  # the run's ``jaximp._frontends.explain.Options``
    library: str  # the model file's library: "CatBoost", "XGBoost", "LightGBM" or "scikit-learn"
    ens: Any
    n_rows: int  # rows of DATA explained
    method: str  # the SHAP method
    labels: list[str]  # the K output labels
    background_rows: int | None  # rows of --background, None without it
    target_rows: int  # rows used with --target, 0 without it (or when the model's loss is not computed)
    device: str  # the device's name, e.g. "cpu"
    plots: list[tuple[str, str]]  # [(caption, PNG file name)] in the output directory
    objective: str = ""  # the training loss as the library names it ("objective reg:squarederror"), "" unknown
    permutation: str = ""  # what permutation importance measures ("the increase of the model's loss (RMSE)")


def write_plots(out: str, columns: list[str], table: dict[str, Any], labels: list[str], shap_columns: list[list[str]],
                interaction: Any, sample: tuple[Any, Any], n_rows: int, word: str = "output",
                library: str = "CatBoost", permutation: str = "") -> list[tuple[str, str]]:
    """Save the plots as PNG files in ``out``; ``[(caption, file name)]``. Every plot lists the
    features in the table's order (mean |SHAP|, the most important on top).

    Args:
        out: the output directory.
        columns: the F feature names, in the model's order (that of ``interaction`` and ``sample``).
        table: the importance table (``importances.csv``), sorted.
        labels: the K output labels (class names of a classifier).
        shap_columns: for each output, the F columns of ``shap.parquet`` holding its SHAP values.
        interaction: CatBoost's Interaction ``f[F, F]`` or None.
        sample: ``(feature rows [sampled rows, F], shap.parquet's columns [sampled rows, F * K + ...])``
            DataFrames of the same sample of rows.
        n_rows: the rows of DATA.
        word: what an output is called: ``"class"`` for a classifier, else ``"output"``.
        library: the model's library, whose importances are compared under their names.
        permutation: what permutation importance measures (the x-axis label), "" for the default.

    Returns:
        ``[(caption, PNG file name)]`` of the plots saved, in the report's order.
    """
    if "matplotlib.pyplot" not in sys.modules:
        import matplotlib

        matplotlib.use("Agg")  # files only: no window, no display needed
    import matplotlib.pyplot as plt

    names = table["feature"]
    saved = []

    def save(ax, name: str, caption: str) -> None:
        ax.figure.savefig(os.path.join(out, name), dpi=120)
        plt.close(ax.figure)
        saved.append((caption, name))

    compared = {display_name(c): table[c] for c in _compared_columns(table, library)}
    if "permutation_importance" in table:
        compared[NAMES["permutation_importance"]] = SimpleNamespace(
            importances_mean=table["permutation_importance"], importances_std=table["permutation_importance_std"])
    if "loss_function_change" in table:
        compared[NAMES["loss_function_change"]] = table["loss_function_change"]
    if len(compared) > 1:
        means = _mean_columns(library)
        left_out = [display_name(c) for c in shown_columns(table, library) if c in means]
        save(plots.importance(compared, names, top=_TOP, title="Importances compared (each as a share of its total)"),
             "importances.png", _compared_caption(list(compared), left_out, library))
    if len(labels) > 1:
        per_output = np.stack([table[f"mean_abs_shap_{label}"] for label in labels], axis=1)
        ax = plots.importance(per_output, names, top=_TOP, class_names=labels, title=f"mean |SHAP| per {word}",
                              xlabel=f"mean |SHAP value| (the model's raw output), stacked by {word}")
    else:
        ax = plots.importance(table["mean_abs_shap"], names, top=_TOP, title="mean |SHAP|",
                              xlabel="mean |SHAP value| (the model's raw output)")
    save(ax, "shap_importance.png", "Mean |SHAP| over all rows" + (f", stacked by {word}" if len(labels) > 1 else ""))
    if "permutation_importance" in table:
        meaning = permutation or "the increase of the model's loss"
        save(plots.importance(compared[NAMES["permutation_importance"]], names, top=_TOP,
                              title="Permutation importance",
                              xlabel=f"{meaning} when the column is shuffled (error bars: std over repeats)"),
             "permutation_importance.png", f"Permutation importance: {meaning} when a column is shuffled (mean "
             "over repeats, error bars: standard deviation)")
    _summaries(columns, names, labels, shap_columns, sample, n_rows, word, save)
    if interaction is not None and len(columns) > 1:
        save(plots.interaction_heatmap(interaction, columns, top=15, title="Feature interaction",
                                       label="Interaction (CatBoost)"),
             "interaction.png", "Pairwise feature interaction of the model's trees (CatBoost's Interaction)")
    return saved


def _summaries(columns: list[str], names: list[str], labels: list[str], shap_columns: list[list[str]],
               sample: tuple[Any, Any], n_rows: int, word: str, save: Any) -> None:
    """The beeswarm plots, one per output (the first ``MAX_SUMMARIES``), features in the order of
    ``names`` (the table's), each given to ``save(ax, file name, caption)``."""
    position = {name: i for i, name in enumerate(columns)}
    order = [position[name] for name in names]
    features, shap = sample
    for label, names_k in list(zip(labels, shap_columns))[:MAX_SUMMARIES]:
        suffix = "" if len(labels) == 1 else f"_{label}"
        values = shap[names_k].to_numpy()
        sampled = len(values) < n_rows
        rows = f"a random sample of {len(values):,} of {n_rows:,} rows" if sampled else f"{n_rows:,} rows"
        title = "SHAP values" + ("" if len(labels) == 1 else f", {word} {label}") + (f" ({rows})" if sampled else "")
        name = f"summary{_file_safe(suffix)}.png"
        save(plots.summary(values, features, columns, top=_TOP, title=title, order=order), name,
             f"SHAP summary{'' if len(labels) == 1 else f' of {word} {label}'}: one point per row ({rows}), "
             "coloured by the feature's value, features in the order of the mean |SHAP| bars")


def display_name(column: str) -> str:
    """The name of an ``importances.csv`` column in plots and the report."""
    return NAMES.get(column, column)


def shown_columns(table: dict[str, Any], library: str) -> list[str]:
    """The importance columns of ``table`` shown in the report, in order: mean |SHAP|, the
    library's own importances, permutation importance, LossFunctionChange."""
    own = [one.column for one in LIBRARY_IMPORTANCES.get(library, ())]
    order = ["mean_abs_shap", "prediction_values_change", *own, "permutation_importance", "loss_function_change"]
    return [c for c in order if c in table]


def _compared_columns(table: dict[str, Any], library: str) -> list[str]:
    """The importances of the model that are totals over rows or splits (shares of a total
    compare), without the mean-per-split ones; permutation importance and LossFunctionChange
    are added by the caller."""
    means = _mean_columns(library)
    return [c for c in shown_columns(table, library)
            if c not in means and c not in ("permutation_importance", "loss_function_change")]


def _mean_columns(library: str) -> set[str]:
    """The library's importances that are means per split (XGBoost's gain and cover), not totals."""
    return {one.column for one in LIBRARY_IMPORTANCES.get(library, ()) if not one.additive}


def _compared_caption(compared: list[str], left_out: list[str], library: str) -> str:
    """The caption of the importances compared (``importances.png``): the names of those drawn,
    and of the library's importances left out of it (means per split, which have no total)."""
    caption = f"{_joined(compared)} side by side, each as a percentage of its total, sorted by mean |SHAP|"
    if left_out:
        caption += (f" (not drawn: {_joined(left_out)}, {library}'s importances that are means per split and have "
                    "no total to share; they are in the table)")
    return caption


def _joined(names: list[str]) -> str:
    """``"a"``, ``"a and b"``, ``"a, b and c"``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def output_word(ens: Any) -> str:
    """What one output of the model is called: ``"class"`` for a classifier, else ``"output"``."""
    return "class" if ens.class_names or task_of(ens) == "multiclass" else "output"


def describe_model(ens: Any, objective: str | None = None) -> str:
    """``"300 trees, depth 6, 10 features, 1 output, loss RMSE"``; ``objective`` names the loss
    as the model's library does (``"objective reg:squarederror"``), None: CatBoost's name
    ``ens.loss_function``."""
    outputs = f"{ens.n_outputs} output{'s' if ens.n_outputs > 1 else ''}"
    if ens.class_names:
        outputs += f" (classes {', '.join(map(str, ens.class_names))})"
    if objective is None:
        objective = f"loss {ens.loss_function}" if ens.loss_function else ""
    return f"{ens.n_trees} trees, depth {ens.depth}, {ens.n_features} features, {outputs}" + (
        f", {objective}" if objective else "")


def _file_safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


def write_report(path: str, table: dict[str, Any], run: Any, summary: Summary) -> str:
    """Write ``report.md`` of the importance table (sorted), the run's timings and notes (``run``)
    and ``summary``; its path."""
    options, ens, labels = summary.options, summary.ens, summary.labels
    lines = [f"# jaximp explain: {_code(os.path.basename(options.model))}", ""]
    rows = [
        ("model", f"{_code(options.model)} ({summary.library}): {_md(describe_model(ens, summary.objective))}"),
        ("data", f"{_code(options.data)}: {summary.n_rows:,} rows"),
        ("SHAP method", summary.method + (f", background {_code(options.background)} "
                                             f"({summary.background_rows:,} rows)" if options.background else "")),
    ]
    change = " and LossFunctionChange" if summary.library == "CatBoost" else ""
    if options.target is not None and summary.target_rows:
        rows.append(("target", f"{_code(options.target)}: permutation importance ({options.repeats} repeats, seed "
                               f"{options.seed}){change} on {summary.target_rows:,} rows"))
    elif options.target is not None:
        rows.append(("target", f"{_code(options.target)}: permutation importance{change} not "
                               "computed (see the notes)"))
    rows.append(("device", summary.device))
    lines += ["| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows] + [""]

    shown = shown_columns(table, summary.library)
    word = output_word(ens)
    per_output = {f"mean_abs_shap_{label}": f"mean |SHAP| of {word} {label}" for label in labels}
    if 1 < len(labels) <= _PER_OUTPUT_SHOWN:  # each output's column, titled by its class name
        shown[1:1] = list(per_output)
    n = min(_TOP, len(table["feature"]))
    lines += [f"## Top {n} features" + (f" of {len(table['feature'])}" if n < len(table["feature"]) else ""), ""]
    header = ["rank", "feature"] + [_md(per_output.get(c) or display_name(c)) for c in shown]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for i in range(n):
        cells = [str(i + 1), _code(table["feature"][i])] + [_number(table, c, i) for c in shown]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", _legend(shown, labels, summary), ""]

    lines += ["## Plots", ""]
    for caption, name in summary.plots:
        lines += [f"{caption}:", "", f"![{name}]({name})", ""]

    lines += ["## Timings", "", "Wall-clock seconds, each including JAX's compilation of its programs (once per "
              "process; a larger DATA mostly adds to the SHAP values' step).", "", "| step | seconds |", "|---|---|"]
    lines += [f"| {step} | {seconds:.2f} |" for step, seconds in run.timings] + [""]
    if run.notes:
        lines += ["## Notes", ""] + [f"- {_md(note)}" for note in run.notes] + [""]
    suffix = f"_<{word}>" if len(labels) > 1 else ""
    lines += ["## Files", "",
              "- `importances.csv`: every importance of every feature, sorted by mean |SHAP|"
              + (f" (`mean_abs_shap_<{word}>`: per {word})" if len(labels) > 1 else ""),
              f"- `shap.parquet`: the SHAP values of every row, in DATA's order (columns `shap_<feature>{suffix}`, "
              f"named by the model's features) and the raw predictions (`prediction{suffix}`)",
              "- the PNG plots above", ""]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return path


def _legend(shown: list[str], labels: list[str], summary: Summary) -> str:
    """What each column of the top features' table is, in one paragraph."""
    word = output_word(summary.ens)
    parts = {
        "mean_abs_shap": "mean |SHAP|: the mean absolute SHAP value over all rows, in the model's raw output"
                         + (f" (summed over the {word}es)" if word == "class" and len(labels) > 1 else
                            " (summed over the outputs)" if len(labels) > 1 else ""),
        "prediction_values_change": "PredictionValuesChange: CatBoost's importance from the trees alone, in percent",
        "permutation_importance": f"permutation importance: {summary.permutation or 'the increase of the loss'} "
                                  "when the column is shuffled, mean ± standard deviation over repeats",
        "loss_function_change": "LossFunctionChange: CatBoost's increase of the loss without the feature",
    }
    parts.update({one.column: f"{one.column}: {one.meaning}" for one in LIBRARY_IMPORTANCES.get(summary.library, ())})
    parts["mean_abs_shap_"] = f"mean |SHAP| of {word} ...: the same for one {word}'s output"
    keys = dict.fromkeys("mean_abs_shap_" if c.startswith("mean_abs_shap_") else c for c in shown)  # in order, once
    return "; ".join(parts[key] for key in keys) + "."


def _number(table: dict, column: str, i: int) -> str:
    text = f"{table[column][i]:.4g}"
    if column == "permutation_importance":
        text += f" ± {table['permutation_importance_std'][i]:.2g}"
    return text


def _md(text: str) -> str:
    """Text for a Markdown table or paragraph: ``|`` escaped."""
    return str(text).replace("|", "\\|")


def _code(text: str) -> str:
    return "`" + str(text).replace("`", "'").replace("|", "\\|") + "`"
