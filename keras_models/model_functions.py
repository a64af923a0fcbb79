"""`tf.function`s kept on a model: its steps outside `fit`, `evaluate` and `predict`
(``log_prob``, ``sample``, the batch norms' statistics), traced once per model."""

from __future__ import annotations

from tfp_maf.tracing import traced_on_purpose

__all__ = ["model_function"]


def model_function(model, name: str, y, fn):
    """``fn`` as a `tf.function` kept on ``model``, one per ``name`` and rank of ``y`` (a
    relaxed rank would leave the layers' widths unknown). Its batch dimension relaxes
    to None on the second size: at most two traces each. The functions go with the
    model."""
    cache = model.__dict__.setdefault("_traced_calls", {})  # not a Keras-tracked attribute
    key = (name, None if y is None else y.shape.rank)
    if key not in cache:  # (traced_on_purpose: without AutoGraph, which could not parse these lambdas)
        cache[key] = traced_on_purpose(fn, reduce_retracing=True)
    return cache[key]
