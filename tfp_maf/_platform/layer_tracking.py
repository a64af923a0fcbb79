"""The weights of the Keras layers behind a bijector, where TFP looks for them.

TFP's training idioms (a `tf.GradientTape` loop over ``flow.trainable_variables``,
`tfp.math.minimize`, `tfp.vi.fit_surrogate_posterior`) find variables through
`tf.Module`: it walks an object's attributes and collects every `tf.Variable` and nested
`tf.Module`. A Keras 3 layer is not a `tf.Module`, and a Keras 3 variable wraps its
`tf.Variable` rather than being one, so a bijector that only holds a layer shows none of
its weights, and such a loop trains nothing, silently. `LayerVariables` keeps the
layers' `tf.Variable`s in an attribute that the walk reads.
"""

from __future__ import annotations

import keras
import tensorflow as tf

__all__ = ["LayerVariables"]


def _variables_of(layers) -> tuple:
    found = []
    for layer in layers:
        if isinstance(layer, tf.Module):
            continue  # tf.Module walks it by itself
        for v in getattr(layer, "variables", ()):
            found.append(v.value if isinstance(v, keras.Variable) else v)
    return tuple(found)


class LayerVariables:
    """Mixin for a TFP bijector or distribution whose weights live in Keras 3 layers.

    ``self._track_layers(*layers)`` in ``__init__`` exposes their variables through
    ``trainable_variables``, ``non_trainable_variables`` and ``variables`` of the object
    and of anything holding it (`tfb.Chain`, `tfb.Invert`, `tfd.TransformedDistribution`).
    `tf.Module` lists each variable once, also when one layer serves several bijectors.

    tfp-maf's layers create their weights in ``__init__`` (the event size is known), so
    a bijector sees them from the start. A layer that builds on its first call (a user's
    Keras layer, say) has none yet: ``self._retrack_layers()`` after each call of the
    layers picks them up, so they show from the first call on.
    """

    def _track_layers(self, *layers) -> None:
        self._tracked_layers = layers
        self._lazy_layers = not all(getattr(layer, "built", True) for layer in layers)
        self._layer_variables = _variables_of(layers)

    def _retrack_layers(self) -> None:
        if self._lazy_layers:
            self._lazy_layers = not all(getattr(layer, "built", True) for layer in self._tracked_layers)
            self._layer_variables = _variables_of(self._tracked_layers)


def sublayers(root, include_self: bool = True) -> list:
    """``root`` (a Keras layer or model) and every Keras layer it holds, depth first,
    each once, in the order their attributes were set.

    A layer is found where Keras tracks it: in an attribute that holds it, or a list,
    tuple or dict of layers. (Keras' own recursive walk is private;
    ``Model.layers`` lists one level only.)
    """
    found, seen = [], set()

    def walk(value):
        if isinstance(value, keras.layers.Layer):
            if id(value) in seen:
                return
            seen.add(id(value))
            found.append(value)
            for attribute in list(vars(value).values()):
                walk(attribute)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)
        elif isinstance(value, dict):
            for item in list(value.values()):
                walk(item)

    walk(root)
    return found if include_self else found[1:]
