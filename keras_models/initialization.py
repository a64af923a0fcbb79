"""How the zoo's MADEs start: this library's default, or as the authors' published code.

The paper does not say how its networks were initialised. The code that made its tables
(``gpapamak/maf``, ``ml/models/mades.py``) draws every kernel, the output layer's
included, as ``randn / sqrt(fan_in + 1)`` with zero biases, and the biases of the mixture
head (means, log-precisions, mixing logits) from N(0, 1). This library's default starts
the Gaussian head's output kernel at zero (each MAF layer is then the identity) and the
other kernels Glorot-uniform, with zero biases.

Example:

>>> import numpy as np
>>> w = np.asarray(FanInNormal(seed=0)((1024, 512)))
>>> round(float(w.std() * np.sqrt(1025)), 1)
1.0
>>> sorted(made_initializers("published", num_components=10))
['kernel_initializer', 'output_bias_initializer', 'output_kernel_initializer']
"""

from __future__ import annotations

import math

import keras

__all__ = ["INITIALIZATIONS", "FanInNormal", "made_initializers"]

#: The zoo models' ``initialization`` values.
INITIALIZATIONS = ("default", "published")


@keras.saving.register_keras_serializable(package="keras_models")
class FanInNormal(keras.initializers.RandomNormal):
    """``N(0, 1) / sqrt(fan_in + 1)``, ``fan_in`` the kernel's first dimension: the
    initialisation of every kernel in the paper's published code.

    Args:
      seed: as Keras' random initializers take it.
    """

    def __init__(self, seed=None):
        super().__init__(mean=0.0, stddev=1.0, seed=seed)

    def __call__(self, shape, dtype=None):
        return super().__call__(shape, dtype) / math.sqrt(shape[0] + 1)

    def get_config(self):
        return {"seed": super().get_config()["seed"]}


def made_initializers(initialization: str, num_components: int | None = None) -> dict:
    """`tfp_maf.MADENetwork`'s initializer keywords for ``initialization``.

    Args:
      initialization: ``"default"`` (the network's own defaults) or ``"published"``
        (the paper's published code).
      num_components: the mixture head's components, or None for the Gaussian head.

    Returns:
      A dict of keywords for `tfp_maf.MADENetwork` (empty for ``"default"``).

    Raises:
      ValueError: for an unknown ``initialization``.
    """
    if initialization not in INITIALIZATIONS:
        raise ValueError(f"initialization must be one of {INITIALIZATIONS}, got {initialization!r}.")
    if initialization == "default":
        return {}
    return {
        "kernel_initializer": FanInNormal(),
        "output_kernel_initializer": FanInNormal(),
        # The mixture head's biases start apart; the Gaussian head's at zero.
        "output_bias_initializer": "zeros" if num_components is None else keras.initializers.RandomNormal(0.0, 1.0),
    }
