"""Permutation importance: the drop in score when a group of columns is shuffled across rows.

sklearn's definition (Breiman 2001; ``sklearn.inspection.permutation_importance``): the
importance of a feature in repeat ``r`` is the baseline score minus the score after the
feature's column has been shuffled across rows. This module checks the arguments and draws the
permutations once for every front end (:func:`permutation_setup`: in memory here, and
``jaximp.dask``), runs the permuted-prediction kernel of the model's layout (:data:`KERNELS`,
keyed by ``ens.layout``; ``jaximp._importances.permutation_kernel``), and scores the result:
block by block inside the kernel for scores that are sums over rows, else from the permuted
predictions of all rows.

Everything happens on the device: the permutations are drawn there (``jaximp._importances.draws``), the
rows (raw values, or an oblivious model's bins), the targets and the weights go there once, and
the scores are computed there. Scores that are sums over rows (the model's loss; the MSE, RMSE,
MAE, R^2, accuracy, log loss and Brier scorers) are summed block by block inside the kernel and
the blocks added on the device in double-float precision, so only ``R (G + 1)`` sums are ever
held (identical for any batch size or device count); for rows in host memory they are read back
and scored in float64. Other scores (ROC AUC, F1, functions) score the permuted predictions of
all rows, ``R G N K`` floats, on the device.

Cost: with a row's other columns fixed, its prediction is a step function of column ``f``'s
value (one step per split on ``f``), so each (feature, repeat) of an oblivious model costs two
lookups in that function instead of a new prediction of every tree; a ``TreeEnsemble``'s
permuted rows are gathered on the device and predicted whole, with the same permutations and
the same scoring program.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._importances import permutation_oblivious, permutation_trees
from jaximp._importances.draws import as_key, row_draws
from jaximp._importances.permutation_groups import check_groups, evaluated_groups, refeaturized_predictions
from jaximp._importances.permutation_kernel import KernelSetup
from jaximp._importances.scoring import RowScore, check_scorer_targets, resolve_scoring, row_score
from jaximp._leaves.predict import kernels as leaf_kernels
from jaximp._models.ensemble import Ensemble, check_model, squeeze_outputs
from jaximp._models.tasks import task_of
from jaximp._rows.batching import map_rows, on_device, sum_blocks
from jaximp._rows.devices import resolve_devices
from jaximp._rows.inputs import as_features, as_raw_columns, as_weights, featurize
from jaximp._rows.targets import as_targets

if TYPE_CHECKING:
    from sklearn.utils import Bunch

# ens.layout -> (ens, x, groups, repeats, batch_size, devices, fn_name) -> KernelSetup
KERNELS = {"oblivious": permutation_oblivious.kernel_setup, "trees": permutation_trees.kernel_setup}


@dataclasses.dataclass(frozen=True)
class PermutationSetup:
    """The checked arguments of a permutation importance and its draws (host values).

    Attributes:
        scorer: ``(y, raw, w) -> score``, greater is better (``scoring`` resolved).
        row_score: the scorer as weighted sums over rows, computed block by block inside the
            kernel, or None for scores that are not sums over rows.
        column_groups: G arrays of the input columns permuted together.
        groups: G arrays of the evaluated features the kernel permutes (empty for a straddled
            group).
        straddled: the groups that a categorical combination straddles, featurized again.
        take: ``i32[R, n_scored]`` the rows each repeat scores (all N, in order, when
            ``max_samples`` keeps every row), a ``jax.Array`` on the device the draws were made on.
        source: ``i32[R, n_scored]`` the rows their group values come from (likewise).
    """

    scorer: Callable
    row_score: RowScore | None
    column_groups: list[np.ndarray]
    groups: list[np.ndarray]
    straddled: list[int]
    take: Array
    source: Array


def permutation_setup(ens: Ensemble, n_rows: int, *, scoring: Any, n_repeats: Any, random_state: Any,
                      max_samples: Any, feature_groups: Any, fn_name: str,
                      targets: Any = None, device: jax.Device | None = None) -> PermutationSetup:
    """Check the arguments of a permutation importance of N rows and draw its permutations.

    Args:
        ens: the model (checked by the caller).
        n_rows: N.
        scoring: as for :func:`permutation_importance`.
        n_repeats: as for :func:`permutation_importance`.
        random_state: as for :func:`permutation_importance`.
        max_samples: as for :func:`permutation_importance`.
        feature_groups: as for :func:`permutation_importance`.
        fn_name: the public function, for error messages.
        targets: the checked targets (``jaximp._rows.targets.as_targets``), when the
            caller holds them: a named scorer's needs of them are checked too.
        device: where the permutations are drawn (None: JAX's default device).

    Returns:
        The :class:`PermutationSetup`; the draws depend only on ``random_state``, N, R and
        ``max_samples``.

    Raises:
        TypeError, ValueError: a bad argument (the message names it).
    """
    task = task_of(ens, fn_name)
    scorer = resolve_scoring(scoring, ens, task, fn_name)
    if targets is not None:
        check_scorer_targets(scoring, targets, task, max(2, ens.n_outputs), fn_name)
    repeats = _check_repeats(n_repeats, fn_name)
    n_scored = _check_max_samples(max_samples, n_rows, fn_name)
    column_groups = check_groups(feature_groups, ens, fn_name)
    groups, straddled = evaluated_groups(ens, column_groups)
    key = as_key(random_state, fn_name)
    take, source = row_draws(key if device is None else jax.device_put(key, device), repeats, n_rows, n_scored)
    return PermutationSetup(scorer, row_score(scoring, ens), column_groups, groups, straddled, take, source)


def _kernel_setup(ens: Ensemble, x: Any, groups: list[np.ndarray], repeats: int, batch_size: int | None,
                  devices: Any, fn_name: str) -> KernelSetup:
    """The permuted-prediction kernel of ``ens``'s layout for G groups and R repeats, with the
    rows ``x [N, E]`` put on the device once: the one choice of a kernel by layout."""
    return KERNELS[ens.layout](ens, x, groups, repeats, batch_size, devices, fn_name)


def permuted_sums(ens: Ensemble, x: Any, groups: list[np.ndarray], own: Any, sources: Any, y: Any, weight: Any,
                  score: RowScore, *, batch_size: int | None, devices: Any, fn_name: str, progress: bool = True,
                  to_host: bool | None = None) -> Any:
    """``[R, G + 1, 1 + n_terms]`` the sums over the scored rows of their weights (term 0) and of
    ``score``'s weighted row terms, with each group permuted (group 0: none), computed block by
    block on the device and added there: only these sums are ever held. Identical for any batch
    size or device count (``jaximp._rows.batching.sum_blocks``).

    Args:
        ens: the model; x: ``[N, E]`` its checked rows; groups: G arrays of evaluated features.
        own: ``i32[n]`` the rows scored; sources: ``i32[n, n_sources]`` per repeat (``n_sources`` =
            R) or for all (``n_sources`` = 1), the rows their group values come from.
        y: ``[n]`` (or ``[n, K]``) their targets; weight: ``f32[n, R]`` their weight in each repeat.
        to_host: ``f64`` NumPy sums, or ``jax.Array``s on the device (as for ``sum_blocks``).
    """
    kernel = _kernel_setup(ens, x, groups, weight.shape[1], batch_size, devices, fn_name)
    return sum_blocks(kernel.kernel, kernel.params, (own, sources, y, weight), batch_size=kernel.batch_size,
                      devices=devices, fn_name=fn_name, progress=progress, to_host=to_host, score=score,
                      **kernel.static)


def permuted_predictions(ens: Ensemble, x: Any, groups: list[np.ndarray], own: Any, sources: Any, *,
                         batch_size: int | None, devices: Any, fn_name: str, progress: bool = True) -> tuple:
    """``(raw f32[n, K], permuted f32[n, n_sources, G, K])``: the scored rows' raw predictions and
    their predictions with each group permuted (arguments as :func:`permuted_sums`), where the
    index arrays are (``jax.Array``: on their device)."""
    kernel = _kernel_setup(ens, x, groups, sources.shape[1], batch_size, devices, fn_name)
    return map_rows(kernel.kernel, kernel.params, (own, sources), batch_size=kernel.batch_size, devices=devices,
                    fn_name=fn_name, progress=progress, **kernel.static)


def permutation_importance(ens: Ensemble, X: Any, y: Any, *, scoring: Any = None, n_repeats: int = 5,
                           random_state: Any = None, sample_weight: Any = None, max_samples: float = 1.0,
                           feature_groups: Any = None, batch_size: int | None = None, devices: Any = None,
                           progress: bool = True) -> Bunch:
    """Permutation importance: the drop in score when a feature's column is shuffled.

    ``importances[f, r] = score(y, raw(X)) - score(y, raw(X with column f permuted in repeat r))``:
    scikit-learn's ``sklearn.inspection.permutation_importance`` (Breiman 2001), higher is more
    important, in the same ``Bunch`` layout. With categorical features the raw column is
    permuted, and every one-hot value and CTR that reads it moves with it.

    Randomness: repeat ``r`` uses one permutation of the rows for every feature or group (as
    scikit-learn, whose features share their permutations), drawn on the device from the key
    (``jax.random.key(random_state)``) and ``r`` by a keyed bijective shuffle (a Feistel network;
    Mitchell et al., "Bandwidth-optimal random shuffling for GPUs", 2022); the result depends only on
    ``random_state``, never on ``batch_size``, ``devices`` or the platform. scikit-learn's own random
    permutations cannot be reproduced, so the two agree within sampling error.

    Args:
        ens: the model.
        X: ``[N, F]`` rows (NumPy/JAX array, pandas/polars DataFrame, ``catboost.Pool``);
            categorical columns hold their raw values.
        y: ``[N]`` targets, class labels of a classifier (matched to ``ens.class_names``), or
            ``[N, K]`` for multi-regression.
        scoring: None (minus the model's own loss, as CatBoost computes it: ``RMSE``,
            ``Logloss``, ``MultiClass``, ``MultiRMSE``, ...), a scikit-learn scorer name
            (``"neg_root_mean_squared_error"``, ``"r2"``, ``"accuracy"``, ``"neg_log_loss"``,
            ``"roc_auc"``, ``"f1"``, ..., each equal to the ``sklearn.metrics`` function of the
            same name with ``sample_weight``), or a jit-able JAX function
            ``(y, raw, sample_weight) -> score``, greater is better, with ``raw`` ``f32[n]`` when
            K == 1 else ``f32[n, K]``, ``y`` the targets (class indices for multiclass, 0/1 for
            binary) and ``sample_weight`` ``f32[n]`` (ones when None).
        n_repeats: R >= 1, times each feature is permuted.
        random_state: an int, None (fresh entropy), a ``jax.random`` key or a NumPy
            ``Generator``/``RandomState`` (one int is drawn from it).
        sample_weight: ``[N]`` non-negative row weights for the score, or None.
        max_samples: rows used per repeat, as scikit-learn's: a float in ``(0, 1]`` (a fraction
            of N) or an int in ``[1, N]``. Each repeat draws its own rows without replacement;
            unlike scikit-learn (baseline on all rows, the same subsample in every repeat), the
            baseline is scored on the same rows as the permuted score, so unused features get
            exactly 0.
        feature_groups: None (one result per feature), or a list of G lists of column indices
            or feature names: the columns of a group are permuted together (the same row
            permutation), and the result has one row per group, in the given order.
        batch_size: rows per device step; None picks one for the device.
        devices: None (default device), an int or a list of ``jax.Device`` to shard rows over.
        progress: a progress bar (tqdm) when the call lasts over 2 seconds; False silences it.

    Returns:
        sklearn.utils.Bunch: ``sklearn.utils.Bunch(importances_mean=f64[F], importances_std=f64[F],
            importances=f64[F, R])``, G in place of F with ``feature_groups``; the standard deviation
            has ddof=0, as scikit-learn's. NumPy arrays for rows in host memory; ``jax.Array`` values
            on the rows' device (float32 unless x64 is enabled) for rows given as one.

    Raises:
        TypeError: an argument of the wrong type (the message names it).
        ValueError: a bad ``X``, ``y``, ``sample_weight``, ``scoring``, ``n_repeats``,
            ``max_samples``, ``feature_groups`` or ``random_state`` (the message names it).

    Examples:
        >>> r = jaximp.permutation_importance(ens, X, y, n_repeats=5, random_state=0)
        >>> r.importances_mean.shape, r.importances.shape
        ((10,), (10, 5))
        >>> again = jaximp.permutation_importance(ens, X, y, n_repeats=5, random_state=0, batch_size=64)
        >>> np.array_equal(r.importances, again.importances)         # same draws for any batch size
        True
    """
    fn = "permutation_importance"
    check_model(ens, fn)
    raw_columns = as_raw_columns(X, ens, fn) if ens.featurizer is not None else None
    x = as_features(X, ens, fn) if raw_columns is None else featurize(ens, raw_columns)
    n = x.shape[0]
    rows_on_device = on_device(x)
    if devices is None and rows_on_device:  # computed where the rows are
        devices = list(x.devices())
    device = resolve_devices(devices, fn)[0]  # the draws, targets and scores
    targets = as_targets(y, ens, n, fn)
    weights = as_weights(sample_weight, n, fn)
    setup = permutation_setup(ens, n, scoring=scoring, n_repeats=n_repeats, random_state=random_state,
                              max_samples=max_samples, feature_groups=feature_groups, fn_name=fn, targets=targets,
                              device=device)
    shared = setup.take.shape[1] == n  # every repeat scores all rows, in order
    scored = _scored_rows(*jax.device_put((targets, weights), device), setup.take, setup.source, shared=shared)
    score = setup.row_score
    if score is not None and not setup.straddled:  # scored block by block on the device
        sums = permuted_sums(ens, x, setup.groups, *scored.kernel_rows, score, batch_size=batch_size,
                             devices=devices, fn_name=fn, progress=progress, to_host=not rows_on_device)
        stats = None if score.stats is None else _stats(score.stats, scored.y, scored.weight)
        if stats is not None and not rows_on_device:
            stats = np.asarray(jax.device_get(stats), np.float64)
        importances = (_device_importances if rows_on_device else _importances)(score, sums, stats)
    else:
        importances = _materialized(ens, x, raw_columns, setup, scored, batch_size=batch_size, devices=devices,
                                    fn_name=fn, progress=progress, to_host=not rows_on_device)
    from sklearn.utils import Bunch  # imported here: scikit-learn takes a second to import

    summarize = _device_summaries if rows_on_device else _summaries
    mean, std = summarize(importances)
    return Bunch(importances_mean=mean, importances_std=std, importances=importances)


def _summaries(importances: Any) -> tuple[Any, Any]:
    """``(mean, standard deviation)`` over the repeats of ``[G, R]`` importances (ddof=0)."""
    return importances.mean(axis=1), importances.std(axis=1)


_device_summaries = jax.jit(_summaries)


def _importances(score: RowScore, sums: Any, stats: Any) -> Any:
    """``[G, R]`` the baseline's score minus each group's, from the sums ``[R, G + 1, 1 + n_terms]``
    of :func:`permuted_sums` (term 0: the weights): NumPy float64, or ``jax.numpy`` for sums held
    on a device (:func:`_device_importances`)."""
    scores = score.final(sums[..., 1:], sums[..., 0], stats)  # [R, G + 1]
    return (scores[:, :1] - scores[:, 1:]).T


_device_importances = jax.jit(_importances, static_argnames="score")


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ScoredRows:
    """The rows a permutation importance scores, laid out for its kernels (device arrays).

    Attributes:
        own: ``i32[n]`` each kernel row's index among the rows (``n`` = N when every repeat
            scores all rows, else ``R * n_scored``, repeat by repeat).
        sources: ``i32[n, n_sources]`` the rows its group values come from, per repeat
            (``n_sources`` = R) or its own repeat's (``n_sources`` = 1).
        kernel_y: ``[n]`` (or ``[n, K]``) its targets.
        kernel_weight: ``f32[n, R]`` its weight in each repeat's score (0 outside its repeat).
        y: ``[R, n_scored]`` (or ``[R, n_scored, K]``) each repeat's scored targets.
        weight: ``f32[R, n_scored]`` their weights.
    """

    own: Array
    sources: Array
    kernel_y: Array
    kernel_weight: Array
    y: Array
    weight: Array

    @property
    def kernel_rows(self) -> tuple[Array, Array, Array, Array]:
        return self.own, self.sources, self.kernel_y, self.kernel_weight


@functools.partial(jax.jit, static_argnames="shared")
def _scored_rows(y: Array, w: Array, take: Array, source: Array, *, shared: bool) -> ScoredRows:
    """The :class:`ScoredRows` of the draws ``take``, ``source`` (``i32[R, n_scored]``)."""
    repeats, n_scored = take.shape
    w = w.astype(jnp.float32)
    if shared:
        own, sources = take[0], source.T
        weight = jnp.broadcast_to(w[:, None], (n_scored, repeats))
    else:
        own, sources = take.reshape(-1), source.reshape(-1)[:, None]
        repeat = jnp.repeat(jnp.arange(repeats), n_scored)
        weight = jnp.where(repeat[:, None] == jnp.arange(repeats)[None, :], w[own][:, None], 0.0)
    return ScoredRows(own, sources, y[own], weight, y[take], w[take])


@functools.partial(jax.jit, static_argnames="stats")
def _stats(stats: Callable, y: Array, w: Array) -> Array:
    """``[R, 1, ...]`` a score's statistics of each repeat's scored targets."""
    return jax.vmap(stats)(y, w)[:, None]


def _materialized(ens: Ensemble, x: Any, raw_columns: Any, setup: PermutationSetup, scored: ScoredRows, *,
                  batch_size: int | None, devices: Any, fn_name: str, progress: bool, to_host: bool) -> Any:
    """``[G, R]`` importances from every permuted prediction, for scores that are not sums over
    rows (ROC AUC, F1, functions) and for groups that a categorical combination straddles. The
    predictions stay on the device (``R G N K`` floats) unless a straddled group must be
    featurized again on the host; ``f64`` NumPy when ``to_host``."""
    repeats, n_scored = setup.take.shape
    shared = n_scored == x.shape[0]
    raw, permuted = permuted_predictions(ens, x, setup.groups, scored.own, scored.sources, batch_size=batch_size,
                                         devices=devices, fn_name=fn_name, progress=progress)
    if setup.straddled:  # groups that a CTR over a combination straddles: featurized again on the host
        take, source = jax.device_get((setup.take, setup.source))
        permuted = np.array(permuted)

        def predict_rows(rows):
            layout = leaf_kernels(ens, fn_name)
            return map_rows(layout.predict, layout.params(ens), np.asarray(rows), batch_size=batch_size,
                            devices=devices, fn_name=fn_name, progress=progress)

        for g in setup.straddled:
            for r in range(repeats):
                new = refeaturized_predictions(ens, raw_columns, setup.column_groups[g], take[r], source[r],
                                               predict_rows)
                if shared:
                    permuted[:, r, g] = new
                else:
                    permuted[r * n_scored:(r + 1) * n_scored, 0, g] = new
    base, scores = _scores(scored.y, scored.weight, raw, permuted, score_fn=setup.scorer, n_outputs=ens.n_outputs,
                           shared_rows=shared)
    if to_host:
        base, scores = (np.asarray(a, np.float64) for a in jax.device_get((base, scores)))
    return (_differences if to_host else _device_differences)(base, scores)  # [G, R]


def _differences(base: Any, scores: Any) -> Any:
    """``[G, R]``: the baseline's score ``[R]`` minus each group's ``[R, G]`` (NumPy, or on the
    device: :func:`_device_differences`)."""
    return base[None, :] - scores.T


_device_differences = jax.jit(_differences)


@functools.partial(jax.jit, static_argnames=("score_fn", "n_outputs", "shared_rows"))
def _scores(y: Array, w: Array, raw: Array, permuted: Array, *, score_fn: Callable, n_outputs: int,
            shared_rows: bool) -> tuple[Array, Array]:
    """``(f32[R], f32[R, G])`` the baseline's and each group's score per repeat, from results in
    the layout the kernel writes them (no host transpose of the ``R G N K`` predictions).

    ``y [R, n]`` and ``w [R, n]`` are each repeat's scored rows' targets and weights.
    ``shared_rows``: every repeat scores all N rows (``n`` = N), ``raw [N, K]``,
    ``permuted [N, R, G, K]``; else repeat r scores its own n rows, ``raw [R n, K]``,
    ``permuted [R n, 1, G, K]``. The baseline is scored as one more group, by
    the same program: an unchanged prediction vector gets a bitwise equal score, so features no
    tree uses get exactly 0.
    """

    def score(y, w, raw):
        return score_fn(y, squeeze_outputs(raw, n_outputs), w)

    def one_repeat(args):  # y [n], w [n], both [G + 1, n, K] -> [G + 1]
        y, w, both = args
        # one scorer call per group in a loop keeps each call a plain vector computation
        # (vmap over the group axis is 10x slower on CPU)
        return jax.lax.map(lambda raw: score(y, w, raw), both)

    if shared_rows:
        y, w = y[0], w[0]
        n, repeats = permuted.shape[:2]
        base = jnp.broadcast_to(raw[:, None, None], (n, repeats, 1, raw.shape[-1]))
        both = jnp.transpose(jnp.concatenate([base, permuted], axis=2), (1, 2, 0, 3))
        y, w = jnp.broadcast_to(y, (repeats,) + y.shape), jnp.broadcast_to(w, (repeats, n))
    else:
        repeats, n = y.shape[:2]
        raw, permuted = raw.reshape(repeats, n, -1), permuted.reshape(repeats, n, permuted.shape[2], -1)
        both = jnp.transpose(jnp.concatenate([raw[:, :, None], permuted], axis=2), (0, 2, 1, 3))
    scores = jax.lax.map(one_repeat, (y, w, both))  # [R, G + 1]
    return scores[:, 0], scores[:, 1:]


def _check_repeats(n_repeats: Any, fn_name: str) -> int:
    if isinstance(n_repeats, bool) or not isinstance(n_repeats, (int, np.integer)) or n_repeats < 1:
        raise ValueError(f"{fn_name}: n_repeats must be an int >= 1; got {n_repeats!r}")
    return int(n_repeats)


def _check_max_samples(max_samples: Any, n: int, fn_name: str) -> int:
    """Rows per repeat, as sklearn: ``int(max_samples * N)`` for a float, else the int itself."""
    if isinstance(max_samples, (int, np.integer)) and not isinstance(max_samples, bool):
        if not 1 <= max_samples <= n:
            raise ValueError(f"{fn_name}: max_samples must be an int in [1, {n}] (the rows of X); got {max_samples}")
        return int(max_samples)
    if isinstance(max_samples, (float, np.floating)) and 0 < max_samples <= 1:
        if int(max_samples * n) < 1:
            raise ValueError(f"{fn_name}: max_samples * N must be at least 1 row; got {max_samples} * {n}")
        return int(max_samples * n)
    raise ValueError(
        f"{fn_name}: max_samples must be a float in (0, 1] or an int in [1, {n}]; got {max_samples!r}"
    )
