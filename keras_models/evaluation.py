"""Evaluation as in the paper: mean test log-likelihood +- 2 standard errors."""

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
    """Mean and twice its standard error (the paper's error bars)."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        raise ValueError("cannot summarise an empty set of log-likelihoods.")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{np.sum(~np.isfinite(values))} log-likelihoods are not finite.")
    return float(values.mean()), float(2 * values.std(ddof=1) / math.sqrt(values.size)) if values.size > 1 else 0.0


def log_likelihoods(model, x, y=None, batch_size: int = 10_000) -> np.ndarray:
    """log p(x) (or log p(x | y)) per test point, in evaluation mode."""
    out = []
    for i in range(0, len(x), batch_size):
        yy = None if y is None else y[i : i + batch_size]
        out.append(model.log_prob(x[i : i + batch_size], yy, training=False).numpy())
    return np.concatenate(out).astype(np.float64)


def marginal_log_likelihoods(model, x, num_classes: int, batch_size: int = 10_000) -> np.ndarray:
    """log p(x) = log sum_y p(x | y) p(y), uniform p(y) over ``num_classes``
    one-hot labels: the paper's corrected protocol for conditional models."""
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
    """Mean of ``a - b`` on the same test points, +- 2 standard errors."""
    a, b = np.asarray(log_probs_a), np.asarray(log_probs_b)
    if a.shape != b.shape:
        raise ValueError(f"paired comparison needs the same test points, got {a.shape} and {b.shape}.")
    return mean_and_two_se(a - b)
