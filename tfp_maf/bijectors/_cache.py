"""The bijector cache that lets one network pass give a value and its log-det.

TFP's `BijectorCacheWithGreedyAttrs` (the mechanism FFJORD uses) expects
``_augmented_forward`` / ``_augmented_inverse`` to return ``(value, attrs)``
and stores ``attrs`` (here the log-dets) with the cache edge, so
``TransformedDistribution.log_prob`` reads the log-det of a MADE from the same
pass that produced ``u``: each MADE runs once per ``log_prob``.

TFP keys its cache on the input tensor and on the bijector's parameters, and
two bijectors wrapping the same Keras layer compare equal. In eager mode the
same input tensor object outlives a weight update (an evaluation set held in a
variable, say), so a cache hit there would return values computed with old
weights, and no gradient. We therefore cache only while tracing (inside
`tf.function`, where every trace has fresh symbolic tensors and reads the
weights in the graph); eagerly every call recomputes.
"""

from __future__ import annotations

import tensorflow as tf
from tensorflow_probability.python.internal import cache_util

__all__ = ["GreedyGraphOnlyCache"]


class GreedyGraphOnlyCache(cache_util.BijectorCacheWithGreedyAttrs):
    """Greedy-attribute cache that is active only in graph mode."""

    def _lookup(self, input, forward_name, inverse_name, **kwargs):  # noqa: A002
        if tf.executing_eagerly():
            return self._invoke(input, forward_name, kwargs, {})
        return super()._lookup(input, forward_name, inverse_name, **kwargs)

    def _attributes(self, input, fn_name, **kwargs):  # noqa: A002
        if tf.executing_eagerly():
            return {}
        return super()._attributes(input, fn_name, **kwargs)
