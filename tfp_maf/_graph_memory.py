"""What traced graphs leave in TF's process-wide state: registrations, released;
traces made on purpose, not reported as retracing.

`tf.custom_gradient` registers, on every trace, a gradient function under a fresh
name in TF's gradient registry, which TF never empties; the function holds the
traced tensors and so the whole graph. Keras' optimizer makes one such function
per train-step trace (its all-reduce of the gradients, even on one device), so
every model a process trains (a sweep, the ``reproduce`` runner) stayed in memory
after it was deleted. (What TFP's bijector cache held is released in
`tfp_maf.bijectors._cache`.)
"""

from __future__ import annotations

import contextlib

import tensorflow as tf
from tensorflow.python.framework import ops

__all__ = ["custom_gradients_released", "traced_on_purpose"]

_PREFIX = "CustomGradient-"  # the names tf.custom_gradient registers under


@contextlib.contextmanager
def custom_gradients_released():
    """Unregisters the custom gradients registered within, when tracing a graph.

    For a trace that takes every gradient it needs before it ends (a train step:
    the tape's gradient, then the optimizer's update), so that nothing ever asks
    for these functions again. Eagerly, nothing is registered and this does nothing.
    """
    if tf.executing_eagerly():
        yield
        return
    registry = ops._gradient_registry._registry  # TF keeps no public way to unregister
    before = set(registry)
    try:
        yield
    finally:
        for name in [n for n in registry if n.startswith(_PREFIX) and n not in before]:
            del registry[name]


def traced_on_purpose(fn, **kwargs):
    """``tf.function(fn, **kwargs)`` without TF's "frequent retracing" warning. TF counts
    traces per Python function across instances: every model of a sweep, every MADE of a
    flow, every chunk size traces the same function once, by design and a bounded number
    of times, which TF would report as a retracing problem."""
    function = tf.function(fn, **kwargs)
    function._omit_frequent_tracing_warning = True
    return function
