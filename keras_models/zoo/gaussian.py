"""The paper's baseline: a full-covariance Gaussian, class-conditional with ``y``."""

from __future__ import annotations

import math

import keras
import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from keras_models.density_model import DensityModel
from tfp_maf.sampling import full_passes_active

tfd = tfp.distributions

__all__ = ["Gaussian"]


@keras.saving.register_keras_serializable(package="keras_models")
class Gaussian(DensityModel):
    """Full-covariance Gaussian fitted in closed form (class-conditional with ``conditional_dims``).

    The baseline of the paper's Tables 1 and 2:

        p(x) = N(x | m, S)                     m, S: mean and covariance of the data
        p(x | y) = N(x | m_k, S_k)             k = argmax y, one Gaussian per class

    Call `fit_closed_form(x, y)`: maximum-likelihood mean and covariance
    (one per class for the conditional model, ``y`` one-hot). Nothing is
    trained by gradient descent: `keras_models.training.fit_as_paper` fits it in
    closed form, and Keras' ``fit`` is refused (it would train nothing: the model
    has no trainable weights). Conditional, the distribution is a mixture of the
    class Gaussians with weights ``y``, which a one-hot ``y`` reduces to its class's
    Gaussian.

    Args:
      event_size: ``D``, the number of variables.
      conditional_dims: ``K``, the number of classes (``y`` one-hot), or None.
      **kwargs: Keras' model arguments (``name``, ``dtype``: ``"float32"`` or
        ``"float64"``).

    Raises:
      ValueError: if ``event_size < 1`` or the dtype policy is neither float32
        nor float64.

    Example:

    >>> import numpy as np
    >>> from keras_models import Gaussian
    >>> x = np.random.default_rng(0).standard_normal((100, 2)).astype(np.float32)
    >>> model = Gaussian(2).fit_closed_form(x)
    >>> bool(np.allclose(model.loc.numpy()[0], x.mean(0), atol=1e-6))
    True
    >>> model.log_prob(x[:3]).shape, model.sample(5, seed=0).shape
    (TensorShape([3]), TensorShape([5, 2]))

    Class-conditional, with one-hot labels:

    >>> y = np.eye(2, dtype=np.float32)[np.arange(100) % 2]
    >>> model = Gaussian(2, conditional_dims=2).fit_closed_form(x, y)
    >>> model.log_prob(x[:3], y[:3]).shape, model.sample(4, y=[1., 0.], seed=0).shape
    (TensorShape([3]), TensorShape([4, 2]))
    """

    def __init__(self, event_size: int, conditional_dims: int | None = None, **kwargs):
        super().__init__(event_size, conditional_dims, **kwargs)
        K = conditional_dims or 1
        D = self.event_size
        self.loc = self.add_weight(name="loc", shape=(K, D), initializer="zeros", trainable=False)
        self.scale_tril = self.add_weight(
            name="scale_tril", shape=(K, D, D),
            initializer=lambda shape, dtype=None: np.broadcast_to(np.eye(D), shape).astype(dtype or "float32"),
            trainable=False,
        )

    def fit(self, *args, **kwargs):
        """Refused: a Gaussian is fitted in closed form (`fit_closed_form`)."""
        raise TypeError(f"{self.name}: a Gaussian is fitted in closed form, which Keras' fit would not do (it "
                        "has no trainable weights): call fit_closed_form(x, y), as "
                        "keras_models.training.fit_as_paper does.")

    def fit_in_closed_form(self, x, y=None) -> bool:
        """`fit_closed_form` with the default jitter; returns True (it did fit).

        The hook `keras_models.training.fit_as_paper` calls before training by
        gradient (`DensityModel.fit_in_closed_form`).

        Args:
          x: the training data ``[N, D]``.
          y: one-hot labels ``[N, K]`` for the conditional model, else None.

        Returns:
          True.
        """
        self.fit_closed_form(x, y)
        return True

    def fit_closed_form(self, x, y=None, jitter: float = 1e-6) -> Gaussian:
        """Sets the maximum-likelihood mean and covariance of ``x`` (per class of ``y``).

        The covariance is the biased one (divided by N), plus ``jitter`` times each
        column's variance (1 for a constant column) on its diagonal, so that its Cholesky
        factor exists for degenerate data, in whatever units the columns are.

        Args:
          x: the training data ``[N, D]`` (array-like; computed in float64).
          y: one-hot labels ``[N, K]`` for the conditional model (the class is the
            argmax of each row), else None.
          jitter: each variance times it is added to the covariance's diagonal.

        Returns:
          The model itself, fitted.

        Raises:
          ValueError: if a class has fewer than 2 examples.
          numpy.linalg.LinAlgError: if a covariance plus ``jitter`` is not
            positive definite.
        """
        x = np.asarray(x, dtype=np.float64)
        if self.conditional_dims is None:
            groups = [x]
        else:
            labels = np.argmax(np.asarray(y), axis=-1)
            groups = [x[labels == k] for k in range(self.conditional_dims)]
            empty = [k for k, g in enumerate(groups) if len(g) < 2]
            if empty:
                raise ValueError(f"{self.name}: classes {empty} have fewer than 2 training examples.")
        locs, trils = [], []
        for g in groups:
            cov = np.cov(g, rowvar=False, bias=True).reshape(self.event_size, self.event_size)
            # Relative to each variance: the same fit in any units (a column of standard
            # deviation 1e-3 would have doubled its variance by an absolute 1e-6).
            variances = np.diag(cov)
            cov += jitter * np.diag(np.where(variances > 0, variances, 1.0))
            locs.append(g.mean(0))
            trils.append(np.linalg.cholesky(cov))
        self.loc.assign(np.stack(locs))
        self.scale_tril.assign(np.stack(trils))
        return self

    def _log_prob(self, x, y, training):
        if not full_passes_active():
            return super()._log_prob(x, y, training)
        # For ONNX and LiteRT, which take no triangular solve (TFP's route): the same
        # density, with L u = x - m solved by D sweeps of a matrix product.
        L, D = tf.convert_to_tensor(self.scale_tril), self.event_size
        diag = tf.reduce_sum(L * tf.eye(D, dtype=L.dtype), axis=-1)  # [C, D]
        below = tf.transpose(L * (1.0 - tf.eye(D, dtype=L.dtype)), [0, 2, 1])  # L's strict lower part, [C, D, D]
        residual = tf.transpose(x[:, None, :] - self.loc[None], [1, 0, 2])  # [C, n, D]
        u = tf.while_loop(lambda u: True, lambda u: [(residual - tf.matmul(u, below)) / diag[:, None, :]],
                          [tf.zeros_like(residual)], maximum_iterations=D)[0]
        log_p = (-0.5 * tf.reduce_sum(tf.square(u), -1) - tf.reduce_sum(tf.math.log(tf.abs(diag)), -1)[:, None]
                 - 0.5 * D * math.log(2 * math.pi))  # [C, n]
        if y is None:
            return log_p[0]
        return tf.reduce_logsumexp(tf.transpose(log_p) + tf.math.log(y), axis=-1)  # the mixture over classes

    def _from_noise(self, noise, y, gumbel):
        # x = m + L z, per class; a one-hot y picks its class (the weighted sum is exact).
        x = self.loc[None] + tf.tensordot(noise, self.scale_tril, [[1], [2]])  # [n, C, D]
        return x[:, 0] if y is None else tf.reduce_sum(x * y[:, :, None], axis=1)

    def _distribution(self, y, training):
        if self.conditional_dims is None:
            return tfd.MultivariateNormalTriL(loc=self.loc[0], scale_tril=self.scale_tril[0])
        # A mixture over the class Gaussians with weights y: a one-hot y selects its class
        # exactly, and memory stays K x D x D (per-example scale matrices would take
        # N x D x D: 24 GB for the MNIST test set).
        classes = tfd.MultivariateNormalTriL(loc=self.loc, scale_tril=self.scale_tril)
        return tfd.MixtureSameFamily(tfd.Categorical(probs=y), classes)
