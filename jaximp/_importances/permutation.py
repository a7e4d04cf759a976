"""Permutation importance: the drop in score when a group of columns is shuffled across rows.

sklearn's definition (Breiman 2001; ``sklearn.inspection.permutation_importance``): the
importance of a feature in repeat ``r`` is the baseline score minus the score after the
feature's column has been shuffled across rows. This module checks the arguments and draws the
permutations once for every front end (:func:`permutation_setup`: in memory here, and
``jaximp.dask``), runs the permuted-prediction kernel of the model's layout (:data:`KERNELS`,
keyed by ``ens.layout``; ``jaximp._importances.permutation_kernel``), and scores the result:
block by block inside the kernel for scores that are sums over rows, else from the permuted
predictions of all rows.

Cost: with a row's other columns fixed, its prediction is a step function of column ``f``'s
value (one step per split on ``f``), so each (feature, repeat) of an oblivious model costs two
lookups in that function instead of a new prediction of every tree; a ``TreeEnsemble``'s
permuted rows are gathered on the device and predicted whole, with the same permutations and
the same scoring program. The rows (raw values, or an oblivious model's bins) go to the device
once; scores that are sums over rows (the model's loss; the MSE, RMSE, MAE, R^2, accuracy, log
loss and Brier scorers) are summed block by block inside the kernel, so only ``R (G + 1)`` sums
per block come back (added in float64 on the host: identical for any batch size or device
count). Other scores (ROC AUC, F1, functions) score the permuted predictions of all rows,
``R G N K`` floats, on the device.
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
from jaximp._importances.permutation_groups import check_groups, evaluated_groups, refeaturized_predictions
from jaximp._importances.permutation_kernel import KernelSetup
from jaximp._importances.scoring import (
    RowScore,
    as_targets,
    check_scorer_targets,
    resolve_scoring,
    row_score,
    task_of,
)
from jaximp._leaves.predict import kernels as leaf_kernels
from jaximp._models.ensemble import Ensemble, check_model, squeeze_outputs
from jaximp._rows.batching import like_rows, map_rows, on_device, sum_blocks
from jaximp._rows.inputs import as_features, as_raw_columns, as_weights, featurize

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
        take: ``i64[R, n_scored]`` the rows each repeat scores (all N, in order, when
            ``max_samples`` keeps every row).
        source: ``i64[R, n_scored]`` the rows their group values come from.
    """

    scorer: Callable
    row_score: RowScore | None
    column_groups: list[np.ndarray]
    groups: list[np.ndarray]
    straddled: list[int]
    take: np.ndarray
    source: np.ndarray


def permutation_setup(ens: Ensemble, n_rows: int, *, scoring: Any, n_repeats: Any, random_state: Any,
                      max_samples: Any, feature_groups: Any, fn_name: str,
                      targets: np.ndarray | None = None) -> PermutationSetup:
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
        targets: the checked targets (``jaximp._importances.scoring.as_targets``), when the
            caller holds them: a named scorer's needs of them are checked too.

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
    draws = _row_draws(as_key(random_state, fn_name), repeats, n_rows, n_scored)
    return PermutationSetup(scorer, row_score(scoring, ens), column_groups, groups, straddled,
                            take=np.stack([rows for rows, _ in draws]), source=np.stack([src for _, src in draws]))


def _kernel_setup(ens: Ensemble, x: Any, groups: list[np.ndarray], repeats: int, batch_size: int | None,
                  devices: Any, fn_name: str) -> KernelSetup:
    """The permuted-prediction kernel of ``ens``'s layout for G groups and R repeats, with the
    rows ``x [N, E]`` put on the device once: the one choice of a kernel by layout."""
    return KERNELS[ens.layout](ens, x, groups, repeats, batch_size, devices, fn_name)


def permuted_sums(ens: Ensemble, x: Any, groups: list[np.ndarray], own: np.ndarray, sources: np.ndarray,
                  y: np.ndarray, weight: np.ndarray, score: RowScore, *, batch_size: int | None, devices: Any,
                  fn_name: str, progress: bool = True) -> np.ndarray:
    """``f64[R, G + 1, n_terms]`` the weighted sums of ``score``'s row terms over the scored rows,
    with each group permuted (group 0: none), computed block by block on the device: only these
    sums come back. Identical for any batch size or device count
    (``jaximp._rows.batching.sum_blocks``).

    Args:
        ens: the model; x: ``[N, E]`` its checked rows; groups: G arrays of evaluated features.
        own: ``i[n]`` the rows scored; sources: ``i[n, n_sources]`` per repeat (``n_sources`` =
            R) or for all (``n_sources`` = 1), the rows their group values come from.
        y: ``[n]`` (or ``[n, K]``) their targets; weight: ``f32[n, R]`` their weight in each repeat.
    """
    kernel = _kernel_setup(ens, x, groups, weight.shape[1], batch_size, devices, fn_name)
    rows = (np.asarray(own, np.int32), np.asarray(sources, np.int32), y, np.asarray(weight, np.float32))
    return sum_blocks(kernel.kernel, kernel.params, rows, batch_size=kernel.batch_size, devices=devices,
                      fn_name=fn_name, progress=progress, score=score, **kernel.static)


def permuted_predictions(ens: Ensemble, x: Any, groups: list[np.ndarray], own: np.ndarray, sources: np.ndarray,
                         *, batch_size: int | None, devices: Any, fn_name: str, on_device: bool,
                         progress: bool = True) -> tuple:
    """``(raw f32[n, K], permuted f32[n, n_sources, G, K])``: the scored rows' raw predictions and
    their predictions with each group permuted (arguments as :func:`permuted_sums`), on the
    device (``jax.Array``) when ``on_device``, else NumPy."""
    kernel = _kernel_setup(ens, x, groups, sources.shape[1], batch_size, devices, fn_name)
    xp = jnp if on_device else np
    rows = (xp.asarray(own, np.int32), xp.asarray(sources, np.int32))
    return map_rows(kernel.kernel, kernel.params, rows, batch_size=kernel.batch_size, devices=devices,
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
    scikit-learn, whose features share their permutations), drawn from
    ``jax.random.fold_in(key, r)``; the result depends only on ``random_state``, never on
    ``batch_size`` or ``devices``. scikit-learn's own random permutations cannot be reproduced,
    so the two agree within sampling error.

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
        ``sklearn.utils.Bunch(importances_mean=f64[F], importances_std=f64[F],
            importances=f64[F, R])``, G in place of F with ``feature_groups``; the standard
            deviation has ddof=0, as scikit-learn's. NumPy arrays for rows in host memory;
            ``jax.Array`` values on the rows' device (float32 unless x64 is enabled) for rows given as
            one.

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
    if devices is None and on_device(x):  # computed where the rows are
        devices = list(x.devices())
    targets = as_targets(y, ens, n, fn)
    weights = as_weights(sample_weight, n, fn)
    setup = permutation_setup(ens, n, scoring=scoring, n_repeats=n_repeats, random_state=random_state,
                              max_samples=max_samples, feature_groups=feature_groups, fn_name=fn, targets=targets)
    take, source = setup.take, setup.source  # [R, n_scored] rows scored, the rows their values come from
    repeats, n_scored = take.shape
    shared = n_scored == n
    # rows scored [n] and, per repeat, where their group values come from [n, n_sources]
    own, sources = (take[0], source.T) if shared else (take.reshape(-1), source.reshape(-1)[:, None])
    score = setup.row_score
    if score is not None and not setup.straddled:  # scored block by block on the device: [R, G + 1, n_terms] back
        weight = _repeat_weights(weights, take, shared)
        sums = permuted_sums(ens, x, setup.groups, own, sources, targets[own], weight, score, batch_size=batch_size,
                             devices=devices, fn_name=fn, progress=progress)
        scores = np.stack([score.final(sums[r], weights[take[r]].astype(np.float64).sum(), targets[take[r]],
                                       weights[take[r]].astype(np.float64)) for r in range(repeats)])
        importances = (scores[:, :1] - scores[:, 1:]).T  # [G, R]
    else:
        importances = _materialized(ens, x, raw_columns, setup, own, sources, targets, weights, batch_size=batch_size,
                                    devices=devices, fn_name=fn, progress=progress)
    result = like_rows((importances.mean(axis=1), importances.std(axis=1), importances), x)
    from sklearn.utils import Bunch  # imported here: scikit-learn takes a second to import

    return Bunch(importances_mean=result[0], importances_std=result[1], importances=result[2])


def _repeat_weights(weights: np.ndarray, take: np.ndarray, shared: bool) -> np.ndarray:
    """``f32[n, R]`` each scored row's weight in each repeat's score: its own weight in every
    repeat (all rows scored), or in its repeat only (repeat ``r``'s rows at ``r * n .. r * n + n``)."""
    repeats, n_sub = take.shape
    if shared:
        return np.repeat(weights[:, None], repeats, axis=1).astype(np.float32)
    out = np.zeros((repeats * n_sub, repeats), np.float32)
    out[np.arange(repeats * n_sub), np.repeat(np.arange(repeats), n_sub)] = weights[take.reshape(-1)]
    return out




def _materialized(ens: Ensemble, x: Any, raw_columns: Any, setup: PermutationSetup, own: np.ndarray,
                  sources: np.ndarray, targets: np.ndarray, weights: np.ndarray, *, batch_size: int | None,
                  devices: Any, fn_name: str, progress: bool) -> np.ndarray:
    """``f64[G, R]`` importances from every permuted prediction, for scores that are not sums over
    rows (ROC AUC, F1, functions) and for groups that a categorical combination straddles. The
    predictions stay on the device (``R G N K`` floats) unless a straddled group must be
    featurized again on the host."""
    take, source = setup.take, setup.source
    repeats, n_scored = take.shape
    shared = n_scored == x.shape[0]
    raw, permuted = permuted_predictions(ens, x, setup.groups, own, sources, batch_size=batch_size,
                                         devices=devices, fn_name=fn_name, on_device=not setup.straddled,
                                         progress=progress)
    for g in setup.straddled:  # groups that a CTR over a combination straddles: featurize again
        def predict_rows(rows):
            layout = leaf_kernels(ens, fn_name)
            return map_rows(layout.predict, layout.params(ens), np.asarray(rows), batch_size=batch_size,
                            devices=devices, fn_name=fn_name, progress=progress)
        for r in range(repeats):
            new = refeaturized_predictions(ens, raw_columns, setup.column_groups[g], take[r], source[r], predict_rows)
            if shared:
                permuted[:, r, g] = new
            else:
                permuted[r * n_scored:(r + 1) * n_scored, 0, g] = new
    if shared:  # raw [N, K], permuted [N, R, G, K]
        y_scored, w_scored = targets, weights
    else:  # raw [R n_scored, K], permuted [R n_scored, 1, G, K]
        y_scored, w_scored = targets[take], weights[take]
        raw = raw.reshape(repeats, n_scored, -1)
        permuted = permuted.reshape(repeats, n_scored, len(setup.groups), -1)
    base, scores = _scores(y_scored, w_scored, raw, permuted, score_fn=setup.scorer, n_outputs=ens.n_outputs,
                           shared_rows=shared)
    return np.asarray(base, np.float64)[None, :] - np.asarray(scores, np.float64).T  # [G, R]


@functools.partial(jax.jit, static_argnames=("score_fn", "n_outputs", "shared_rows"))
def _scores(y: Array, w: Array, raw: Array, permuted: Array, *, score_fn: Callable, n_outputs: int,
            shared_rows: bool) -> tuple[Array, Array]:
    """``(f32[R], f32[R, G])`` the baseline's and each group's score per repeat, from results in
    the layout the kernel writes them (no host transpose of the ``R G N K`` predictions).

    ``shared_rows``: every repeat scores all N rows: ``y [N]``, ``w [N]``, ``raw [N, K]``,
    ``permuted [N, R, G, K]``; else repeat r scores its own n rows: ``y [R, n]``, ``w [R, n]``,
    ``raw [R, n, K]``, ``permuted [R, n, G, K]``. The baseline is scored as one more group, by
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
        n, repeats = permuted.shape[:2]
        base = jnp.broadcast_to(raw[:, None, None], (n, repeats, 1, raw.shape[-1]))
        both = jnp.transpose(jnp.concatenate([base, permuted], axis=2), (1, 2, 0, 3))
        y, w = jnp.broadcast_to(y, (repeats,) + y.shape), jnp.broadcast_to(w, (repeats, n))
    else:
        both = jnp.transpose(jnp.concatenate([raw[:, :, None], permuted], axis=2), (0, 2, 1, 3))
    scores = jax.lax.map(one_repeat, (y, w, both))  # [R, G + 1]
    return scores[:, 0], scores[:, 1:]


def _row_draws(key: Array, repeats: int, n: int, n_sub: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per repeat: the rows scored and, for each, the row whose values it receives.

    Repeat ``r`` seeds NumPy's PCG64 with ``fold_in(key, r)``: a shuffle of N rows costs a
    fraction of a millisecond there, against a sort of N random keys in XLA.
    """
    seeds = np.asarray(_repeat_seeds(key, np.arange(repeats, dtype=np.uint32))).reshape(repeats, -1)
    draws = []
    for seed in seeds.tolist():  # R draws of index vectors; all row work is vectorized
        rng = np.random.default_rng(seed)
        rows = np.arange(n) if n_sub == n else np.sort(rng.choice(n, n_sub, replace=False))
        draws.append((rows, rows[rng.permutation(n_sub)]))
    return draws


@jax.jit
def _repeat_seeds(key: Array, repeats: Array) -> Array:
    """``u32[R, ...]``: the data of ``fold_in(key, r)`` for each repeat, in one dispatch."""
    return jax.random.key_data(jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, repeats))


def as_key(random_state: Any, fn_name: str) -> Array:
    """A typed ``jax.random`` key from an int, None, a JAX key or a NumPy generator.

    An int ``s < 2**32`` gives ``jax.random.key(s)``; larger ints fold their high word in.
    """
    if random_state is None:
        random_state = int(np.random.default_rng().integers(2**63))
    elif isinstance(random_state, np.random.RandomState):
        random_state = int(random_state.randint(2**31))
    elif isinstance(random_state, np.random.Generator):
        random_state = int(random_state.integers(2**63))
    if isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool):
        if not 0 <= random_state < 2**64:
            raise ValueError(f"{fn_name}: random_state must be an int in [0, 2**64); got {random_state}")
        seed = int(random_state)
        key = jax.random.key(seed & 0xFFFFFFFF)
        return key if seed < 2**32 else jax.random.fold_in(key, seed >> 32)
    if isinstance(random_state, jax.Array):
        if jnp.issubdtype(random_state.dtype, jax.dtypes.prng_key) and random_state.shape == ():
            return random_state
        if random_state.dtype == jnp.uint32 and random_state.ndim == 1:  # a raw (legacy) key
            return jax.random.wrap_key_data(random_state)
    raise TypeError(
        f"{fn_name}: random_state must be an int, None, a jax.random key or a NumPy Generator; "
        f"got {type(random_state).__name__}"
    )


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
