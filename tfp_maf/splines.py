"""Monotonic rational-quadratic splines (Durkan et al. 2019): the maths, no weights.

A spline of K bins maps ``[-B, B]`` onto itself through K + 1 knots ``(x_k, y_k)``
with positive slopes ``d_k`` at them, and is the identity outside (slope 1 at the
two ends, so the tails join smoothly). In bin k, with ``xi = (x - x_k) / w_k``,
``w_k = x_(k+1) - x_k``, ``h_k = y_(k+1) - y_k`` and ``s_k = h_k / w_k``:

    s(x)  = y_k + h_k (s_k xi^2 + d_k xi (1 - xi)) / (s_k + (d_(k+1) + d_k - 2 s_k) xi (1 - xi))
    s'(x) = s_k^2 (d_(k+1) xi^2 + 2 s_k xi (1 - xi) + d_k (1 - xi)^2)
            / (s_k + (d_(k+1) + d_k - 2 s_k) xi (1 - xi))^2

and the inverse solves a quadratic in ``xi`` in closed form (the root stable for small
``4 a c``). `rational_quadratic_spline` gives the value and ``log s'`` at the spline's
input in one call, either way; `spline_parameters` maps a network's unconstrained
outputs (``3 K - 1`` per variable) to bins and slopes, with all-zero outputs giving
the identity.

TFP's `tfb.RationalQuadraticSpline` holds the same maths as a bijector, asked for the
value and the log-det in two calls that each find the bin (by `tf.searchsorted`) and
read it (by gathers); here one call gives both, the bin found by K - 1 comparisons and
read by products with its one-hot row, which XLA fuses and a plain graph runs as few ops
(``tests/test_splines.py`` checks the two agree; ``benchmarks/splines.py`` times them).

Example: all-zero outputs are the identity inside and outside the bound:

>>> import numpy as np
>>> widths, heights, slopes = spline_parameters(np.zeros((3, 23), np.float32), bins=8, bound=5.0)
>>> x = np.array([-7.0, 0.3, 4.0], np.float32)
>>> value, log_slope = rational_quadratic_spline(x, widths, heights, slopes, bound=5.0)
>>> np.round(value.numpy(), 5).tolist(), np.round(log_slope.numpy(), 5).tolist()
([-7.0, 0.3, 4.0], [0.0, 0.0, 0.0])

References:
  [1] Durkan, Bekasov, Murray, Papamakarios. Neural Spline Flows. NeurIPS 2019.
      https://arxiv.org/abs/1906.04032
  [2] Gregory, Delbourgo. Piecewise rational quadratic interpolation to monotonic
      data. IMA Journal of Numerical Analysis, 1982.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfp_maf.arguments import check_int

__all__ = ["MIN_BIN", "MIN_SLOPE", "num_spline_params", "rational_quadratic_spline", "spline_parameters"]

#: The smallest bin width and height, as fractions of the interval, and the smallest
#: slope: they keep every bin invertible in float32 (nflows' and zuko's floors).
MIN_BIN = 1e-3
MIN_SLOPE = 1e-3


def num_spline_params(bins: int) -> int:
    """Unconstrained parameters of one spline of ``bins`` bins: ``K`` widths, ``K``
    heights and the ``K - 1`` inner slopes (the two end slopes are 1).

    >>> num_spline_params(8)
    23
    """
    return 3 * check_int(bins, "bins") - 1


def _bins(raw, K: int, bound):
    """``K`` bin sizes summing to ``2 bound``, none below ``MIN_BIN`` of it: a softmax,
    floored (``K`` from the caller: ``raw``'s shape may not know it)."""
    fraction = MIN_BIN + (1.0 - MIN_BIN * K) * tf.nn.softmax(raw, axis=-1)
    return 2.0 * bound * fraction


def spline_parameters(raw, bins: int, bound: float):
    """``(widths, heights, slopes)`` of one spline per variable from raw outputs.

        widths  = 2 B (m + (1 - K m) softmax(raw[:K]))          m = MIN_BIN
        heights = 2 B (m + (1 - K m) softmax(raw[K:2K]))
        slopes  = MIN_SLOPE + softplus(raw[2K:] + c)            softplus(c) = 1 - MIN_SLOPE

    so all-zero outputs give equal bins and unit slopes: the identity map.

    Args:
      raw: ``[..., 3 K - 1]`` (a tensor or array).
      bins: ``K``.
      bound: ``B``: the spline maps ``[-B, B]`` onto itself.

    Returns:
      widths ``[..., K]``, heights ``[..., K]``, inner slopes ``[..., K - 1]``.

    Raises:
      ValueError: if the last axis of ``raw`` is not ``3 K - 1``.
    """
    raw = tf.convert_to_tensor(raw)
    P = num_spline_params(bins)
    if raw.shape[-1] is not None and raw.shape[-1] != P:
        raise ValueError(f"a spline of {bins} bins takes {P} parameters per variable, got {raw.shape[-1]}.")
    K, dtype = int(bins), raw.dtype
    bound = tf.cast(bound, dtype)
    offset = tf.cast(np.log(np.expm1(1.0 - MIN_SLOPE)), dtype)
    raw_widths, raw_heights, raw_slopes = tf.split(raw, [K, K, K - 1], axis=-1)
    slopes = MIN_SLOPE + tf.nn.softplus(raw_slopes + offset)
    return _bins(raw_widths, K, bound), _bins(raw_heights, K, bound), slopes


def _select(table, one_hot):
    """``table[..., k]`` for each entry's bin ``k``, marked by ``one_hot``.

    A product and a sum, not a gather: in a graph without XLA a gather with batch
    dimensions and its gradient cost about a hundred shape ops each, which made a
    training step of NSF (5) at D 64 a third slower and its first trace seconds longer.
    """
    return tf.reduce_sum(table * one_hot, axis=-1)


def rational_quadratic_spline(z, widths, heights, slopes, bound: float, inverse: bool = False):
    """The spline (or its inverse) at ``z``, and ``log s'`` at the spline's input.

    Args:
      z: ``[...]``: the input ``x`` (``inverse=False``) or the output ``y``
        (``inverse=True``) of the spline.
      widths: ``[..., K]`` bin widths summing to ``2 bound`` (`spline_parameters`).
      heights: ``[..., K]`` bin heights summing to ``2 bound``.
      slopes: ``[..., K - 1]`` positive slopes at the inner knots.
      bound: ``B``; outside ``[-B, B]`` the map is the identity.
      inverse: whether to invert the spline.

    Returns:
      ``(value, log_slope)``: ``s(z)`` and ``log s'(z)`` (forward), or
      ``s^-1(z)`` and ``log s'(s^-1(z))`` (inverse), both shaped as ``z``. The log-det
      of the inverse map is ``-log_slope``.
    """
    z = tf.convert_to_tensor(z)
    dtype = z.dtype
    bound = tf.cast(bound, dtype)
    K = widths.shape[-1]
    # Where each bin starts, from -bound; the slopes at each bin's two ends (1 at -B, B).
    x_left = tf.cumsum(widths, axis=-1, exclusive=True) - bound
    y_left = tf.cumsum(heights, axis=-1, exclusive=True) - bound
    ones = tf.ones_like(slopes[..., :1])
    d_left, d_right = tf.concat([ones, slopes], axis=-1), tf.concat([slopes, ones], axis=-1)
    inside = tf.abs(z) < bound
    # Outside, compute on a point inside and discard it: no NaN reaches a gradient.
    safe = tf.where(inside, z, tf.zeros_like(z))
    # The bin: how many bins after the first start at or below the point.
    starts = (y_left if inverse else x_left)[..., 1:]
    k = tf.reduce_sum(tf.cast(starts <= safe[..., None], tf.int32), axis=-1)
    one_hot = tf.cast(tf.equal(k[..., None], tf.range(K)), dtype)
    x_k, y_k = _select(x_left, one_hot), _select(y_left, one_hot)
    w_k, h_k = _select(widths, one_hot), _select(heights, one_hot)
    d_k, d_k1 = _select(d_left, one_hot), _select(d_right, one_hot)
    s_k = h_k / w_k
    curvature = d_k1 + d_k - 2.0 * s_k
    if inverse:
        rel = safe - y_k
        a = h_k * (s_k - d_k) + rel * curvature
        b = h_k * d_k - rel * curvature
        c = -s_k * rel
        # The root of a xi^2 + b xi + c = 0 in [0, 1], in the form stable for small 4ac.
        xi = (2.0 * c) / (-b - tf.sqrt(tf.maximum(b * b - 4.0 * a * c, 0.0)))
        value = x_k + xi * w_k
    else:
        xi = (safe - x_k) / w_k
    between = xi * (1.0 - xi)
    denominator = s_k + curvature * between
    if not inverse:
        value = y_k + h_k * (s_k * xi * xi + d_k * between) / denominator
    log_slope = (2.0 * tf.math.log(s_k)
                 + tf.math.log(d_k1 * xi * xi + 2.0 * s_k * between + d_k * (1.0 - xi) ** 2)
                 - 2.0 * tf.math.log(denominator))
    return tf.where(inside, value, z), tf.where(inside, log_slope, tf.zeros_like(log_slope))
