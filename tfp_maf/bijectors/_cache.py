"""The bijector cache that lets one network pass give a value and its log-det.

TFP's `BijectorCacheWithGreedyAttrs` (the mechanism FFJORD uses) expects
``_augmented_forward`` / ``_augmented_inverse`` to return ``(value, attrs)``
and stores ``attrs`` (here the log-dets) with the cache edge, so
``TransformedDistribution.log_prob`` reads the log-det of a MADE from the same
pass that produced ``u``: each MADE runs once per ``log_prob``.

Inside `tf.function` every trace has fresh symbolic tensors and reads the
weights in the graph, so TFP's cache is used as it is.

Eagerly, TFP's cache would look results up by the *input* tensor, and two
bijectors wrapping the same Keras layer compare equal: an evaluation tensor
reused after a weight update would get values computed with the old weights.
So eagerly we never look up by an input that a user passed in; every call
computes. We only remember, for each *output* tensor while it is alive, the
input it came from and the log-dets: `TransformedDistribution.log_prob(y)`
computes ``x = inverse(y)`` and then asks for ``forward(x)`` and the forward
log-det at that very ``x``, which would otherwise re-run the D-pass forward
of a MAF. (A caller who keeps ``x`` across a weight update and then asks for
its forward log-det gets the value from before the update, as TFP would.)
"""

from __future__ import annotations

import weakref

import tensorflow as tf
from tensorflow_probability.python.internal import cache_util

__all__ = ["GreedyGraphOnlyCache"]


# (id(bijector), id(output)) -> (weakref to output, bijector, function that made the
# output, its input, attrs, keyword arguments). TFP binds a fresh cache object to a bijector on each call,
# so this lives at module level; an entry goes when its output tensor is collected.
_EAGER_OUTPUTS: dict = {}


class GreedyGraphOnlyCache(cache_util.BijectorCacheWithGreedyAttrs):
    """Greedy-attribute cache: TFP's in graph mode, output-keyed when eager."""

    def _eager_entry(self, tensor, kwargs):
        entry = _EAGER_OUTPUTS.get((id(self.bijector), id(tensor)))
        if entry is None or entry[0]() is not tensor or entry[1] is not self.bijector:
            return None
        same_kwargs = entry[5].keys() == kwargs.keys() and all(
            entry[5][k] is v for k, v in kwargs.items()  # e.g. the same conditional_input
        )
        return entry if same_kwargs else None

    def _lookup(self, input, forward_name, inverse_name, **kwargs):  # noqa: A002
        if not tf.executing_eagerly():
            return super()._lookup(input, forward_name, inverse_name, **kwargs)
        entry = self._eager_entry(input, kwargs)
        if entry is not None and entry[2] == inverse_name:
            return entry[3]  # `input` came out of the opposite direction: undo it exactly.
        attrs = {}
        output = self._invoke(input, forward_name, kwargs, attrs)
        key = (id(self.bijector), id(output))
        try:
            ref = weakref.ref(output, lambda _, k=key: _EAGER_OUTPUTS.pop(k, None))
        except TypeError:  # not weak-referenceable (a NumPy array, say): nothing to remember
            return output
        _EAGER_OUTPUTS[key] = (ref, self.bijector, forward_name, input, attrs, dict(kwargs))
        return output

    def _attributes(self, input, fn_name, **kwargs):  # noqa: A002
        if not tf.executing_eagerly():
            return super()._attributes(input, fn_name, **kwargs)
        entry = self._eager_entry(input, kwargs)
        return entry[4] if entry is not None else {}
