"""The statistics a flow standardises its columns with, as a Keras 3 layer."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tfp_maf.arguments import check_int
from tfp_maf.bijectors.standardize import Standardize

__all__ = ["Standardization"]


@keras.saving.register_keras_serializable(package="tfp_maf")
class Standardization(keras.layers.Layer):
    """Holds each column's location and scale for ``x`` (and ``y``), set from data, not trained.

    `bijector` is ``x``'s `tfp_maf.bijectors.Standardize` (the data side of a flow);
    `standardize_y` maps ``y`` to ``(y - loc_y) / scale_y`` before the flow's networks
    read it. Until `set_statistics` runs the layer is the identity (location 0, scale
    1) and `adapted` is False. The statistics are weights: they save, load and export
    with the model that holds the layer.

    Args:
      event_size: ``D``, the columns of ``x``.
      conditional_dims: ``K``, the columns of ``y``, or None.
      **kwargs: Keras' layer arguments (``name``, ``dtype``).

    Example:

    >>> import numpy as np
    >>> layer = Standardization(2)
    >>> layer.set_statistics(x_loc=[1e5, 0.], x_scale=[1e3, 2.])
    >>> bool(layer.adapted)
    True
    >>> layer.bijector().inverse(np.array([[101000., 4.]], np.float32)).numpy().tolist()
    [[1.0, 2.0]]
    """

    def __init__(self, event_size: int, conditional_dims: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.event_size = check_int(event_size, "event_size")
        self.conditional_dims = check_int(conditional_dims, "conditional_dims", optional=True)
        self.x_loc = self.add_weight(name="x_loc", shape=(self.event_size,), initializer="zeros", trainable=False)
        self.x_scale = self.add_weight(name="x_scale", shape=(self.event_size,), initializer="ones",
                                       trainable=False)
        if self.conditional_dims is not None:
            K = self.conditional_dims
            self.y_loc = self.add_weight(name="y_loc", shape=(K,), initializer="zeros", trainable=False)
            self.y_scale = self.add_weight(name="y_scale", shape=(K,), initializer="ones", trainable=False)
        # 1 once statistics are set: a loaded model knows it has them.
        self.set_flag = self.add_weight(name="adapted", shape=(), initializer="zeros", trainable=False)
        self.built = True

    @property
    def adapted(self) -> bool:
        """Whether `set_statistics` has run (on this layer, or on the one saved)."""
        return bool(self.set_flag.numpy() > 0)

    def bijector(self, name: str = "standardize") -> Standardize:
        """``x``'s standardisation as a bijector reading this layer's weights at each call."""
        return Standardize(self.x_loc.value, self.x_scale.value, name=name)

    def standardize_y(self, y):
        """``(y - loc_y) / scale_y``, for ``y`` of any batch shape ``batch + [K]``."""
        y = tf.convert_to_tensor(y)
        return (y - tf.cast(self.y_loc.value, y.dtype)) / tf.cast(self.y_scale.value, y.dtype)

    def set_statistics(self, x_loc, x_scale, y_loc=None, y_scale=None) -> None:
        """Sets the locations and scales (``y``'s for a conditional layer).

        Raises:
          ValueError: for a statistic of the wrong shape, a non-finite one, a scale
            that is not positive, or ``y``'s missing or unexpected.
        """
        given = {"x_loc": x_loc, "x_scale": x_scale}
        if (y_loc is None) != (self.conditional_dims is None) or (y_scale is None) != (y_loc is None):
            raise ValueError(f"{self.name}: y_loc and y_scale are given exactly for a conditional layer "
                             f"(conditional_dims={self.conditional_dims}).")
        if y_loc is not None:
            given.update(y_loc=y_loc, y_scale=y_scale)
        checked = {}
        for key, value in given.items():
            variable = getattr(self, key)
            value = np.asarray(value, dtype=np.float64)
            if value.shape != tuple(variable.shape):
                raise ValueError(f"{self.name}: expected {key} of shape {list(variable.shape)}, "
                                 f"got {list(value.shape)}.")
            if not np.all(np.isfinite(value)) or (key.endswith("scale") and not np.all(value > 0)):
                raise ValueError(f"{self.name}: {key} must be finite{' and positive' * key.endswith('scale')}, "
                                 f"got {value.tolist()}.")
            checked[key] = value
        for key, value in checked.items():
            getattr(self, key).assign(value.astype(getattr(self, key).dtype))
        self.set_flag.assign(1.0)

    def call(self, x):
        return self.bijector().inverse(x)

    def get_config(self):
        config = super().get_config()
        config.update(event_size=self.event_size, conditional_dims=self.conditional_dims)
        return config
