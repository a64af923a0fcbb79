"""Toy densities with exact log densities; first of all the paper's Figure 1."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["Figure1Density", "load_figure1"]


class Figure1Density:
    """p(x1, x2) = N(x2 | 0, 4) N(x1 | x2^2 / 4, 1)  (Figure 1 of the paper).

    The exact expected log-likelihood is -(entropy) = -(log(2 pi e) + log 2)
    = -3.531 nats: a model within ~0.05 nats of it has learned the density.

    Example:

    >>> d = Figure1Density()
    >>> round(d.expected_log_prob, 3)
    -3.531
    """

    event_size = 2

    @property
    def expected_log_prob(self) -> float:
        # -H = -(0.5 log(2 pi e 4) + 0.5 log(2 pi e 1))
        return -(math.log(2 * math.pi * math.e) + math.log(2.0))

    def sample(self, n: int, seed: int = 0) -> np.ndarray:
        """``n`` draws ``[n, 2]`` (float32), the same for the same ``seed``."""
        rng = np.random.RandomState(seed)
        x2 = 2.0 * rng.standard_normal(n)
        x1 = x2**2 / 4.0 + rng.standard_normal(n)
        return np.stack([x1, x2], axis=-1).astype(np.float32)

    def log_prob(self, x) -> np.ndarray:
        """The exact log-density of ``x`` ``[..., 2]``, float64 ``[...]``."""
        x = np.asarray(x, dtype=np.float64)
        x1, x2 = x[..., 0], x[..., 1]
        log_n = lambda v, m, var: -0.5 * ((v - m) ** 2 / var + math.log(2 * math.pi * var))  # noqa: E731
        return log_n(x2, 0.0, 4.0) + log_n(x1, x2**2 / 4.0, 1.0)

    def splits(self, n_train=10_000, n_val=2_000, n_test=10_000, seed=0):
        """Train / validation / test arrays from disjoint seeds."""
        return self.sample(n_train, seed), self.sample(n_val, seed + 1), self.sample(n_test, seed + 2)


def load_figure1(n_train: int = 10_000, n_val: int = 2_000, n_test: int = 10_000, seed: int = 0):
    """The Figure 1 density as ``Splits`` (the command line's embedded default).

    Args:
      n_train: rows of the training split.
      n_val: rows of the validation split.
      n_test: rows of the test split.
      seed: the training draw's seed; the validation and test draws use
        ``seed + 1`` and ``seed + 2``.

    Returns:
      `keras_models.data.Splits` named ``"figure1"``, without labels.

    Example:

    >>> load_figure1(n_train=100, n_val=10, n_test=10).sizes
    (100, 10, 10)
    """
    from keras_models.data.splits import Splits

    return Splits("figure1", *Figure1Density().splits(n_train, n_val, n_test, seed))
