"""``jaximp explain``'s outputs for people: PNG plots (made with :mod:`jaximp.plots`) and
``report.md``, which shows them with the model, the data, a table of the top features and the
timings."""

from __future__ import annotations

import dataclasses
import os
import sys
from types import SimpleNamespace
from typing import Any

import numpy as np

from jaximp._frontends import plots

# importances.csv column -> the name shown in plots and the report
NAMES = {
    "mean_abs_shap": "mean |SHAP|",
    "prediction_values_change": "PredictionValuesChange",
    "permutation_importance": "permutation importance",
    "loss_function_change": "LossFunctionChange",
}
_TOP = 20
MAX_SUMMARIES = 10  # beeswarm plots of a multi-output model, one per output


@dataclasses.dataclass(frozen=True)
class Summary:
    """What a ``jaximp explain`` run did, for the report's tables."""

    options: Any  # the run's ``jaximp._frontends.explain.Options``
    library: str  # the model file's library: "CatBoost", "XGBoost" or "LightGBM"
    ens: Any
    n_rows: int  # rows of DATA explained
    method: str  # the SHAP method
    labels: list[str]  # the K output labels
    background_rows: int | None  # rows of --background, None without it
    target_rows: int  # rows used with --target, 0 without it (or when the model's loss is not computed)
    device: str  # the device's name, e.g. "cpu"
    plots: list[tuple[str, str]]  # [(caption, PNG file name)] in the output directory


def write_plots(out: str, columns: list[str], table: dict[str, Any], labels: list[str], shap_columns: list[list[str]],
                interaction: Any, sample: tuple[Any, Any], n_rows: int, word: str = "output") -> list[tuple[str, str]]:
    """Save the plots as PNG files in ``out``; ``[(caption, file name)]``.

    Args:
        out: the output directory.
        columns: the F feature names, in the model's order (that of ``interaction`` and ``sample``).
        table: the importance table (``importances.csv``), sorted.
        labels: the K output labels.
        shap_columns: for each output, the F columns of ``shap.parquet`` holding its SHAP values.
        interaction: CatBoost's Interaction ``f[F, F]`` or None.
        sample: ``(feature rows [sampled rows, F], shap.parquet's columns [sampled rows, F * K + ...])``
            DataFrames of the same sample of rows.
        n_rows: the rows of DATA.
        word: what an output is called: ``"class"`` for a classifier, else ``"output"``.
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

    compared = {NAMES[c]: table[c] for c in ("mean_abs_shap", "prediction_values_change") if c in table}
    if "permutation_importance" in table:
        compared[NAMES["permutation_importance"]] = SimpleNamespace(
            importances_mean=table["permutation_importance"], importances_std=table["permutation_importance_std"])
    if "loss_function_change" in table:
        compared[NAMES["loss_function_change"]] = table["loss_function_change"]
    if len(compared) > 1:
        save(plots.importance(compared, names, top=_TOP, title="Importances compared (each as a share of its total)"),
             "importances.png",
             "Every importance side by side, each as a percentage of its total, sorted by mean |SHAP|")
    if len(labels) > 1:
        per_output = np.stack([table[f"mean_abs_shap_{label}"] for label in labels], axis=1)
        ax = plots.importance(per_output, names, top=_TOP, class_names=labels, title=f"mean |SHAP| per {word}",
                              xlabel=f"mean |SHAP value| (the model's raw output), stacked by {word}")
    else:
        ax = plots.importance(table["mean_abs_shap"], names, top=_TOP, title="mean |SHAP|",
                              xlabel="mean |SHAP value| (the model's raw output)")
    save(ax, "shap_importance.png", "Mean |SHAP| over all rows" + (f", stacked by {word}" if len(labels) > 1 else ""))
    if "permutation_importance" in table:
        save(plots.importance(compared[NAMES["permutation_importance"]], names, top=_TOP,
                              title="Permutation importance",
                              xlabel="increase of the loss when the column is shuffled (error bars: std over repeats)"),
             "permutation_importance.png", "Permutation importance: the increase of the model's loss when a column "
             "is shuffled (mean over repeats, error bars: standard deviation)")
    features, shap = sample
    for label, names_k in list(zip(labels, shap_columns))[:MAX_SUMMARIES]:
        suffix = "" if len(labels) == 1 else f"_{label}"
        values = shap[names_k].to_numpy()
        sampled = len(values) < n_rows
        rows = f"a random sample of {len(values):,} of {n_rows:,} rows" if sampled else f"{n_rows:,} rows"
        title = "SHAP values" + ("" if len(labels) == 1 else f", {word} {label}") + (f" ({rows})" if sampled else "")
        name = f"summary{_file_safe(suffix)}.png"
        save(plots.summary(values, features, columns, top=_TOP, title=title), name,
             f"SHAP summary{'' if len(labels) == 1 else f' of {word} {label}'}: one point per row ({rows}), "
             "coloured by the feature's value")
    if interaction is not None and len(columns) > 1:
        save(plots.interaction_heatmap(interaction, columns, top=15, title="Feature interaction",
                                       label="Interaction (CatBoost)"),
             "interaction.png", "Pairwise feature interaction of the model's trees (CatBoost's Interaction)")
    return saved


def describe_model(ens: Any) -> str:
    """``"300 trees, depth 6, 10 features, 1 output, loss RMSE"``."""
    outputs = f"{ens.n_outputs} output{'s' if ens.n_outputs > 1 else ''}"
    if ens.class_names:
        outputs += f" (classes {', '.join(map(str, ens.class_names))})"
    loss = f", loss {ens.loss_function}" if ens.loss_function else ""
    return f"{ens.n_trees} trees, depth {ens.depth}, {ens.n_features} features, {outputs}{loss}"


def _file_safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


def write_report(path: str, table: dict[str, Any], run: Any, summary: Summary) -> str:
    """Write ``report.md`` of the importance table (sorted), the run's timings and notes (``run``)
    and ``summary``; its path."""
    options, ens, labels = summary.options, summary.ens, summary.labels
    lines = [f"# jaximp explain: {_code(os.path.basename(options.model))}", ""]
    rows = [
        ("model", f"{_code(options.model)} ({summary.library}): {describe_model(ens)}"),
        ("data", f"{_code(options.data)}: {summary.n_rows:,} rows"),
        ("SHAP method", summary.method + (f", background {_code(options.background)} "
                                             f"({summary.background_rows:,} rows)" if options.background else "")),
    ]
    if options.target is not None and summary.target_rows:
        rows.append(("target", f"{_code(options.target)}: permutation importance ({options.repeats} repeats, seed "
                               f"{options.seed}) and LossFunctionChange on {summary.target_rows:,} rows"))
    elif options.target is not None:
        rows.append(("target", f"{_code(options.target)}: permutation importance and LossFunctionChange not "
                               "computed (see the notes)"))
    rows.append(("device", summary.device))
    lines += ["| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows] + [""]

    shown = [c for c in ("mean_abs_shap", "prediction_values_change", "permutation_importance", "loss_function_change")
             if c in table]
    n = min(_TOP, len(table["feature"]))
    lines += [f"## Top {n} features" + (f" of {len(table['feature'])}" if n < len(table["feature"]) else ""), ""]
    header = ["rank", "feature"] + [_md(NAMES[c]) for c in shown]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for i in range(n):
        cells = [str(i + 1), _code(table["feature"][i])] + [_number(table, c, i) for c in shown]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", _legend(shown, labels), ""]

    lines += ["## Plots", ""]
    for caption, name in summary.plots:
        lines += [f"{caption}:", "", f"![{name}]({name})", ""]

    lines += ["## Timings", "", "Wall-clock seconds, each including JAX's compilation of its programs (once per "
              "process; a larger DATA mostly adds to the SHAP values' step).", "", "| step | seconds |", "|---|---|"]
    lines += [f"| {step} | {seconds:.2f} |" for step, seconds in run.timings] + [""]
    if run.notes:
        lines += ["## Notes", ""] + [f"- {_md(note)}" for note in run.notes] + [""]
    lines += ["## Files", "",
              "- `importances.csv`: every importance of every feature, sorted by mean |SHAP|"
              + (" (`mean_abs_shap_<output>`: per output)" if len(labels) > 1 else ""),
              "- `shap.parquet`: the SHAP values of every row, in DATA's order (columns `shap_<feature>`"
              + ("_<output>" if len(labels) > 1 else "") + ", named by the model's features) and the raw "
              "predictions (`prediction`" + ("_<output>" if len(labels) > 1 else "") + ")",
              "- the PNG plots above", ""]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return path


def _legend(shown: list[str], labels: list[str]) -> str:
    parts = {
        "mean_abs_shap": "mean |SHAP|: the mean absolute SHAP value over all rows, in the model's raw output"
                         + (" (summed over the outputs)" if len(labels) > 1 else ""),
        "prediction_values_change": "PredictionValuesChange: CatBoost's importance from the trees alone, in percent",
        "permutation_importance": "permutation importance: the increase of the model's loss when the column is "
                                  "shuffled, mean ± standard deviation over repeats",
        "loss_function_change": "LossFunctionChange: CatBoost's increase of the loss without the feature",
    }
    return "; ".join(parts[c] for c in shown) + "."


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
