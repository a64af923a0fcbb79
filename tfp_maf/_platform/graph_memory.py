"""What traced graphs leave in TF's process-wide state: registrations, released;
traces made on purpose, not reported as retracing.

`tf.custom_gradient` registers, on every trace, a gradient function under a fresh
name in TF's gradient registry, which TF never empties; the function holds the
traced tensors and so the whole graph. Keras' optimizer makes one such function
per train-step trace (its all-reduce of the gradients, even on one device), so
every model a process trains (a sweep, the ``reproduce`` runner) stayed in memory
after it was deleted. (What TFP's bijector cache held is released in
`tfp_maf._platform.bijector_cache`.) TF has no public way to do either: the private names
live in `tfp_maf._platform.compat`, and where they are missing nothing is released or marked.
"""

from __future__ import annotations

import contextlib

import tensorflow as tf

from tfp_maf._platform.compat import gradient_registry, omit_retracing_warning, python_function
from tfp_maf.trace_options import trace_options, traced_with

__all__ = ["custom_gradients_free", "custom_gradients_released", "mark_traced_on_purpose", "traced_on_purpose"]

_PREFIX = "CustomGradient-"  # the names tf.custom_gradient registers under


@contextlib.contextmanager
def custom_gradients_released():
    """Unregisters the custom gradients registered within, when tracing a graph.

    For a trace that takes every gradient it needs before it ends (a train step:
    the tape's gradient, then the optimizer's update), so that nothing ever asks
    for these functions again. Eagerly, nothing is registered and this does nothing.
    """
    registry = None if tf.executing_eagerly() else gradient_registry()
    if registry is None:
        yield
        return
    before = set(registry)
    try:
        with traced_with(custom_gradients_released=True):
            yield
    finally:
        for name in [n for n in registry if n.startswith(_PREFIX) and n not in before]:
            del registry[name]


def custom_gradients_free() -> bool:
    """Whether a `tf.custom_gradient` made now leaves nothing behind: eagerly (nothing is
    registered), or while a graph is traced inside `custom_gradients_released` where TF's
    registry can be reached. Code with a cheaper written-out gradient takes it then, and
    TF's own gradients of the same expressions otherwise."""
    return tf.executing_eagerly() or trace_options().custom_gradients_released


def traced_on_purpose(fn, **kwargs):
    """``tf.function(fn, **kwargs)`` without TF's "frequent retracing" warning. TF counts
    traces per Python function across instances: every model of a sweep, every MADE of a
    flow, every chunk size traces the same function once, by design and a bounded number
    of times, which TF would report as a retracing problem.

    Without AutoGraph unless asked (``autograph=True``): our code has no tensor-dependent
    Python control flow (its loops are `tf.while_loop`s), and converting it costs about a
    second of a process's first trace."""
    kwargs.setdefault("autograph", False)
    function = tf.function(fn, **kwargs)
    omit_retracing_warning(function)
    return function


def mark_traced_on_purpose(fn, depth: int = 4) -> None:
    """Marks the `tf.function`s that ``fn`` closes over (``depth`` closures down) as
    `traced_on_purpose`.

    For the functions Keras makes for `fit`, `evaluate` and `predict`: Keras makes them
    anew for every model, from the same Python code, and TF counts their traces as one
    function's, so the fifth model a notebook trains (or a fifth input structure)
    prints TF's "triggered tf.function retracing" warning, though every trace is one a
    new model needs. Where Keras' layout differs, nothing is marked and the warning
    comes back; nothing else changes.
    """
    seen = set()

    def walk(f, level):
        if id(f) in seen or level > depth:
            return
        seen.add(id(f))
        if isinstance(f, tf.types.experimental.PolymorphicFunction):
            omit_retracing_warning(f)
            f = python_function(f)
        for cell in getattr(f, "__closure__", None) or ():
            try:
                inner = cell.cell_contents
            except ValueError:  # a cell not yet filled
                continue
            if callable(inner) and not isinstance(inner, type):
                walk(inner, level + 1)

    walk(fn, 0)
