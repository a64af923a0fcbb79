"""Seeded initializers: one seed for a layer, a different stream for each of its weights."""

from __future__ import annotations

import keras

__all__ = ["seeded"]


def seeded(initializer, seed: int | None, stream: int):
    """A new instance of ``initializer`` for one weight, seeded for weight ``stream``.

    Keras' random initializers fix their seed when they are made and draw the same
    values at every call: one instance shared by two weights gives the second a scaled
    copy of the first's draws. So every weight gets its own instance, seeded from
    ``(seed, stream)``: the initializer's own int seed if it has one, else the layer's
    ``seed``; with neither, a fresh one from Keras' global seed
    (`keras.utils.set_random_seed` decides). The same seed gives the same weights, in
    any process. A plain function (any callable Keras accepts) is used as it is.

    Example:

    >>> import numpy as np
    >>> a = seeded("glorot_uniform", 7, 0)((3, 2))
    >>> same, other = seeded("glorot_uniform", 7, 0)((3, 2)), seeded("glorot_uniform", 7, 1)((3, 2))
    >>> bool(np.all(a == same)), bool(np.any(a != other))
    (True, True)
    """
    initializer = keras.initializers.get(initializer)
    if not isinstance(initializer, keras.initializers.Initializer):
        return initializer
    config = initializer.get_config()
    if "seed" in config:
        base = config["seed"] if isinstance(config["seed"], int) else seed
        config["seed"] = None if base is None else (base * 1_000_003 + stream) % 2**31
    return initializer.__class__.from_config(config)
