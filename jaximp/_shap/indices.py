"""Cardinal interaction indices as linear maps of a game's Möbius transform.

Every index jaximp computes is a *cardinal* index: with ``m(T) = sum_{S <= T} (-1)**(|T| - |S|)
v(S)`` the Möbius transform (Harsanyi dividends) of a game ``v``, the index of a subset ``S``
of ``s = |S|`` players at order ``k`` is

    I(S) = sum_{T >= S} w(|T|, s) m(T),

with weights ``w(t, s)`` that depend on the sizes alone (Grabisch 1997; Fumagalli et al.,
"SHAP-IQ", NeurIPS 2023, Table 1). The weights are those of shapiq's ``ExactComputer`` and
``MoebiusConverter``:

* ``SII`` (Grabisch and Roubens 1999): ``1 / (t - s + 1)``; ``SV`` is its order 1.
* ``BII`` (Banzhaf interaction): ``2**-(t - s)``; ``BV`` is its order 1.
* ``STII`` (Shapley-Taylor, Sundararajan et al. 2020): ``m(S)`` below order ``k``; at ``s = k``,
  ``1 / C(t, k)``.
* ``FSII`` (Faith-Shap, Tsai et al. 2023): ``m(S)`` where ``t <= k``; beyond,
  ``(-1)**(k - s) s / (k + s) C(k, s) C(t - 1, k) / C(t + k - 1, k + s)``.
* ``Moebius``: ``m(S)`` itself.
* ``k-SII`` (Bordt and von Luxburg 2023): the SII of every subset up to order ``k``, then
  ``k-SII(S) = sum_{S <= T, |T| <= k} B_{|T| - s} SII(T)`` with the Bernoulli numbers
  (``B_1 = -1/2``), as shapiq aggregates it (:func:`aggregation_pairs`).

A tree's leaf is a *product game* over its path's players (``jaximp._shap.trees``): with
``f_j(y) = z_j + (o_j - z_j) y``, the graded sums of its Möbius transform are the coefficients
of ``prod_{j not in S} f_j(y)``. So ``I(S) = prod_{j in S} (o_j - z_j) L_s[prod_{j not in S}
f_j]`` for the linear functional ``L_s(y**n) = w(s + n, s)`` on polynomials. Each index's
functional is a point mass at 0 (the product of the ``z``, that is the Möbius part) plus, where
it has one, an integral against a polynomial density ``rho`` on ``[0, 1]``, integrated exactly by
Gauss-Legendre quadrature; ``BII`` is a point mass at 1/2. :func:`rule` finds the density from
the weights in exact rational arithmetic (the smallest degree that reproduces every weight) and
returns the nodes and weights of a :class:`Rule`.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from fractions import Fraction

import numpy as np

INDICES = ("SV", "BV", "SII", "k-SII", "STII", "FSII", "BII", "Moebius")


@dataclasses.dataclass(frozen=True)
class Rule:
    """The functional ``L_s`` of one index and subset size on polynomials of a bounded degree:
    ``L_s[p] = point p(0) + sum_i weights[i] p(nodes[i])`` (hashable: a static argument of the
    compiled kernels)."""

    point: float
    nodes: tuple[float, ...]
    weights: tuple[float, ...]


def base_index(index: str) -> str:
    """The index whose weights on the Möbius transform are computed: ``SV`` and ``k-SII`` from
    ``SII``, ``BV`` from ``BII`` (k-SII adds its aggregation after)."""
    return {"SV": "SII", "BV": "BII", "k-SII": "SII"}.get(index, index)


def weight(index: str, t: int, s: int, order: int) -> Fraction:
    """``w(t, s)``: the weight of a Möbius coefficient of ``t`` players in the index of a subset
    of ``s <= t`` of them at ``order`` (module docstring), exactly."""
    index = base_index(index)
    if index == "SII":
        return Fraction(1, t - s + 1)
    if index == "BII":
        return Fraction(1, 2 ** (t - s))
    if index == "Moebius" or (index in ("STII", "FSII") and t <= order):
        return Fraction(int(t == s))
    if index == "STII":
        return Fraction(1, math.comb(t, order)) if s == order else Fraction(0)
    if index == "FSII":
        return (Fraction((-1) ** (order - s) * s, order + s) * math.comb(order, s) * math.comb(t - 1, order)
                / math.comb(t + order - 1, order + s))
    raise ValueError(f"unknown index {index!r}")


def _solve(matrix: list[list[Fraction]], rhs: list[Fraction]) -> list[Fraction] | None:
    """The exact solution of a square system, or None when it is singular."""
    n = len(rhs)
    a = [row[:] + [b] for row, b in zip(matrix, rhs)]
    for col in range(n):
        pivot = next((r for r in range(col, n) if a[r][col] != 0), None)
        if pivot is None:
            return None
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(n):
            if r != col and a[r][col] != 0:
                f = a[r][col] / a[col][col]
                a[r] = [x - f * y for x, y in zip(a[r], a[col])]
    return [a[r][n] / a[r][r] for r in range(n)]


def _density(moments: list[Fraction]) -> tuple[Fraction, list[Fraction]]:
    """``(point, rho)``: a point mass at 0 and the coefficients of a polynomial density of the
    smallest degree with ``point [n == 0] + integral_0^1 y**n rho(y) dy = moments[n]`` for every
    ``n`` (at most ``len(moments) - 1`` coefficients: then always exact)."""
    for degree in range(len(moments)):
        if degree == 0:
            rho: list[Fraction] = []
        else:  # the moments n = 1..degree fix the degree coefficients
            hilbert = [[Fraction(1, n + c + 1) for c in range(degree)] for n in range(1, degree + 1)]
            solved = _solve(hilbert, moments[1:degree + 1])
            if solved is None:
                continue
            rho = solved
        got = [sum((c / (n + i + 1) for i, c in enumerate(rho)), Fraction(0)) for n in range(len(moments))]
        point = moments[0] - got[0]
        if all(g == m for g, m in zip(got[1:], moments[1:])):
            return point, rho
    raise AssertionError("a density of len(moments) - 1 coefficients always exists")


@functools.cache
def rule(index: str, order: int, s: int, degree: int) -> Rule:
    """The :class:`Rule` of ``L_s`` for ``index`` at ``order`` on polynomials of ``degree`` (a
    leaf's slots less ``s``), exact: its sums reproduce ``w(s + n, s)`` for ``n <= degree``."""
    if base_index(index) == "BII":
        return Rule(0.0, (0.5,), (1.0,))
    moments = [weight(index, s + n, s, order) for n in range(degree + 1)]
    point, rho = _density(moments)
    if not rho or all(c == 0 for c in rho):
        return Rule(float(point), (), ())
    n_nodes = max(1, -(-(degree + len(rho)) // 2))  # exact for degree + deg(rho) < 2 n_nodes
    t, w = np.polynomial.legendre.leggauss(n_nodes)
    y, w = (t + 1) / 2, w / 2
    density = np.polynomial.polynomial.polyval(y, [float(c) for c in rho])
    return Rule(float(point), tuple(y.tolist()), tuple((w * density).tolist()))


@functools.cache
def local_subsets(d: int, order: int) -> tuple[np.ndarray, ...]:
    """Per size ``s = 1..min(order, d)``, ``i32[C(d, s), s]`` every ``s``-subset of ``d`` slots
    (sorted, lexicographic)."""
    return tuple(np.array(list(itertools.combinations(range(d), s)), np.int32).reshape(-1, s)
                 for s in range(1, min(order, d) + 1))


@functools.cache
def bernoulli(n: int) -> tuple[Fraction, ...]:
    """The Bernoulli numbers ``B_0..B_n`` with ``B_1 = -1/2`` (``scipy.special.bernoulli``'s)."""
    b = [Fraction(1)]
    for m in range(1, n + 1):
        b.append(-sum((math.comb(m + 1, j) * b[j] for j in range(m)), Fraction(0)) / (m + 1))
    return tuple(b)


def encode(rows: np.ndarray, base: int) -> np.ndarray:
    """``i64[M]`` keys of sorted tuples ``rows i[M, s]`` of players in ``[0, base)``, in the
    tuples' lexicographic order (``sum_i rows[:, i] base**(s - 1 - i)``)."""
    key = np.zeros(len(rows), np.int64)
    for column in rows.T:
        key = key * base + column
    return key


def aggregation_pairs(subsets: list[np.ndarray], n_players: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(target i32[nnz], source i32[nnz], weight f64[nnz])``: k-SII from SII over the listed
    subsets (per size ``s = 1..k``, ``i[M_s, s]`` sorted tuples in lexicographic order: the order
    of ``Interactions.subsets``), ``k-SII[target] += weight SII[source]`` for every ``source`` and
    every nonempty subset ``target`` of it, with ``weight = B_{|source| - |target|}``. The listed
    subsets are closed under nonempty subsets (every subset of a path's players is on the
    path)."""
    offsets = np.cumsum([0] + [len(rows) for rows in subsets])
    keys = [encode(rows, n_players) for rows in subsets]
    b = bernoulli(len(subsets))
    target, source, w = [], [], []
    for size, rows in enumerate(subsets, start=1):
        for r in range(1, size + 1):
            for positions in itertools.combinations(range(size), r):
                found = np.searchsorted(keys[r - 1], encode(rows[:, list(positions)], n_players))
                target.append(offsets[r - 1] + found)
                source.append(offsets[size - 1] + np.arange(len(rows)))
                w.append(np.full(len(rows), float(b[size - r])))
    if not target:
        return np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.float64)
    return np.concatenate(target).astype(np.int32), np.concatenate(source).astype(np.int32), np.concatenate(w)
