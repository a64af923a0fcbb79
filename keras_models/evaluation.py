"""Evaluation as in the paper: mean test log-likelihood +- 2 standard errors.

`log_likelihoods` gives log p per test point (`marginal_log_likelihoods` log p(x) of a
class-conditional model), `mean_and_two_se` the paper's summary of them,
`paired_comparison` the difference of two models on the same points, and
`bits_per_pixel` the image benchmarks' unit.

Example:

>>> import numpy as np
>>> from keras_models import MADE, evaluation
>>> model = MADE(2, hidden_units=[8])  # untrained: N(0, I)
>>> log_p = evaluation.log_likelihoods(model, np.zeros((100, 2), np.float32))
>>> mean, two_se = evaluation.mean_and_two_se(log_p)
>>> round(mean, 4), round(two_se, 4)  # log N(0 | 0, I) = -log(2 pi)
(-1.8379, 0.0)
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

__all__ = [
    "bits_per_pixel",
    "log_likelihoods",
    "marginal_log_likelihoods",
    "mean_and_two_se",
    "paired_comparison",
]


def mean_and_two_se(values) -> tuple[float, float]:
    """Mean and twice its standard error (the paper's error bars).

        mean +- 2 s / sqrt(N),   s the sample standard deviation (ddof = 1)

    Args:
      values: the per-point log-likelihoods (array-like).

    Returns:
      ``(mean, two_se)`` as Python floats; ``two_se`` is 0 for a single value.

    Raises:
      ValueError: if ``values`` is empty or holds a non-finite value.

    Example:

    >>> mean, two_se = mean_and_two_se([1.0, 2.0, 3.0, 4.0])
    >>> mean, round(two_se, 4)
    (2.5, 1.291)
    """
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        raise ValueError("cannot summarise an empty set of log-likelihoods.")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{np.sum(~np.isfinite(values))} log-likelihoods are not finite.")
    return float(values.mean()), float(2 * values.std(ddof=1) / math.sqrt(values.size)) if values.size > 1 else 0.0


def log_likelihoods(model, x, y=None, batch_size: int = 10_000) -> np.ndarray:
    """log p(x) (or log p(x | y)) per test point, in evaluation mode.

    Args:
      model: a `keras_models.DensityModel` (anything with ``log_prob(x, y,
        training=False)``).
      x: the test points ``[N, D]``.
      y: their side information ``[N, K]`` for a conditional model, else None.
      batch_size: rows per call of ``log_prob``.

    Returns:
      A float64 array ``[N]``.

    Example:

    >>> import numpy as np
    >>> from keras_models import MADE
    >>> log_p = log_likelihoods(MADE(2, hidden_units=[8]), np.zeros((5, 2), np.float32),
    ...                         batch_size=2)
    >>> log_p.shape, log_p.dtype
    ((5,), dtype('float64'))
    """
    out = []
    for i in range(0, len(x), batch_size):
        yy = None if y is None else y[i : i + batch_size]
        out.append(model.log_prob(x[i : i + batch_size], yy, training=False).numpy())
    return np.concatenate(out).astype(np.float64)


def marginal_log_likelihoods(model, x, num_classes: int, batch_size: int = 10_000) -> np.ndarray:
    """log p(x) = log sum_y p(x | y) p(y), uniform p(y) over ``num_classes``
    one-hot labels: the paper's corrected protocol for conditional models.

    A conditional model's log p(x | y) at the true label is not a density of ``x``
    alone; summing over the labels is, and compares with unconditional models.
    It costs ``num_classes`` passes over ``x``.

    Args:
      model: a class-conditional `keras_models.DensityModel`
        (``conditional_dims=num_classes``).
      x: the test points ``[N, D]``.
      num_classes: ``K``, the number of one-hot labels.
      batch_size: rows per call of ``log_prob``.

    Returns:
      A float64 array ``[N]``.

    Example: an untrained conditional MADE is N(0, I) whatever the label, so its
    marginal is N(0, I) too:

    >>> import numpy as np
    >>> from keras_models import MADE
    >>> model = MADE(2, hidden_units=[8], conditional_dims=3)
    >>> np.round(marginal_log_likelihoods(model, np.zeros((2, 2), np.float32), 3), 4)
    array([-1.8379, -1.8379])
    """
    per_class = []
    for k in range(num_classes):
        y = np.zeros((len(x), num_classes), dtype=np.float32)
        y[:, k] = 1.0
        per_class.append(log_likelihoods(model, x, y, batch_size))
    return tf.reduce_logsumexp(np.stack(per_class), axis=0).numpy() - math.log(num_classes)


def bits_per_pixel(log_probs, x_logit, lam: float) -> np.ndarray:
    """Appendix E: bits per pixel of images in [0, 256) from logit-space densities.

        b(x) = -log p(x) / (D log 2) - log2(1 - 2 lam) + 8
               + (1/D) sum_i (log2 sigmoid(x_i) + log2(1 - sigmoid(x_i)))

    The terms undo the data's preprocessing: the logit transform with ``lam``
    (its Jacobian) and the scaling of pixels from [0, 256) to [0, 1) (the 8 bits).

    Args:
      log_probs: log p of each image in logit space, ``[N]`` (nats).
      x_logit: the images as the model saw them, ``[N, D]``.
      lam: the ``lambda`` of the logit transform (``Splits.logit_lambda``:
        ``1e-6`` for MNIST, ``0.05`` for CIFAR-10).

    Returns:
      A float64 array ``[N]``: bits per pixel of each image (lower is better).

    Example: a logit-space density of 1 at the mid-grey image (``x = 0``):

    >>> import numpy as np
    >>> np.round(bits_per_pixel(np.array([0.0]), np.zeros((1, 4)), lam=1e-6), 4)
    array([6.])
    """
    x_logit = np.asarray(x_logit, dtype=np.float64)
    D = x_logit.shape[-1]
    log_sig = -np.logaddexp(0.0, -x_logit)  # log sigmoid(x)
    log_one_minus = -np.logaddexp(0.0, x_logit)  # log (1 - sigmoid(x))
    return (
        -np.asarray(log_probs) / (D * math.log(2))
        - math.log2(1 - 2 * lam)
        + 8
        + (log_sig + log_one_minus).sum(-1) / (D * math.log(2))
    )


def paired_comparison(log_probs_a, log_probs_b) -> tuple[float, float]:
    """Mean of ``a - b`` on the same test points, +- 2 standard errors.

    Paired differences cancel the variation the test points share, so they
    separate two models whose own error bars overlap.

    Args:
      log_probs_a: model A's log p per test point.
      log_probs_b: model B's, on the same points in the same order.

    Returns:
      ``(mean, two_se)`` of ``a - b``, as `mean_and_two_se`.

    Raises:
      ValueError: if the shapes differ, or as `mean_and_two_se`.

    Example:

    >>> mean, two_se = paired_comparison([1.0, 2.0, 3.0], [0.5, 1.0, 2.5])
    >>> round(mean, 4), round(two_se, 4)
    (0.6667, 0.3333)
    """
    a, b = np.asarray(log_probs_a), np.asarray(log_probs_b)
    if a.shape != b.shape:
        raise ValueError(f"paired comparison needs the same test points, got {a.shape} and {b.shape}.")
    return mean_and_two_se(a - b)
