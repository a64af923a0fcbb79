"""Keras' train and test functions, replaced where Keras' own cost time for nothing.

Why: for ``steps_per_execution=1`` on one device, Keras 3 (3.10 to 3.15.1 verified) wraps
its traced step in a second `tf.function` that reads the iterator in the graph, and TF
optimises the step's graph once for each when it first runs it. `one_step_function`
reads the batch in Python and calls one trace, as Keras itself does for iterators that
are not `tf.data` ones. Uses only public Keras and TF API.

It can go when Keras' first ``fit`` step of a MAF (5) costs no more than this one's
(``benchmarks/small_data.py`` times the first epoch against a plain Keras model's).
"""

from __future__ import annotations

import tensorflow as tf

from tfp_maf._platform.graph_memory import traced_on_purpose

__all__ = ["one_step_function"]


def one_step_function(model, step):
    """For one step per call on one device, ``function(iterator)``: the next batch,
    read in Python, through one traced ``step``; else None (Keras' own function).

    Keras wraps its traced step in a second `tf.function` that reads the iterator in
    the graph, and TensorFlow optimises the step's graph once for each when it first
    runs it: 0.6 s more before a MAF (5)'s first batch (2 cores), for nothing at one
    step a call. This is the function Keras itself runs for an iterator that is not
    a `tf.data` one. Several steps a call, a distribution strategy, or
    ``run_eagerly`` get Keras' function.
    """
    if (model.run_eagerly or model.steps_per_execution != 1 or tf.distribute.has_strategy()
            or model.distribute_strategy is not tf.distribute.get_strategy()):
        return None
    traced = {}  # by the iterator's element spec

    def function(iterator):
        # Traced for the iterator's spec (any number of rows), not the first batch's
        # shape: a short last batch would be a second trace.
        spec = getattr(iterator, "element_spec", None)
        key = None if spec is None else repr(spec)
        if key not in traced:
            if spec is None:
                traced[key] = traced_on_purpose(step, jit_compile=model.jit_compile, reduce_retracing=True)
            else:
                # Its one trace, called directly: a `tf.function` call first looks the trace
                # up, hashing the call's signature with its captured variables, 0.6 to 0.9
                # ms of a MAF (5)'s 4 ms step (2 cores).
                traced[key] = traced_on_purpose(
                    step, jit_compile=model.jit_compile, input_signature=[spec]).get_concrete_function()
        return traced[key](next(iterator))  # StopIteration ends the epoch, as Keras expects

    return function
