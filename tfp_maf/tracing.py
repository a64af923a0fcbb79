"""Functions traced in long-lived processes: what a trace leaves in TF's process-wide
state, released; traces made on purpose, not reported as retracing.

A notebook or a sweep builds many models, each tracing its steps once; TF keeps what
`tf.custom_gradient` registered per trace (and with it the traced graph) and counts
every model's traces of one Python function as retracing. `keras_models`' steps and the
sampling engine trace through these three; any loop of a user's that traces per model
may too. How they reach into TF is in ``tfp_maf._platform.graph_memory`` (the private
names in ``tfp_maf._platform.compat``); where TF lacks them, nothing is released or
marked, and results are the same.

Example:

>>> import tensorflow as tf
>>> step = traced_on_purpose(lambda x: 2 * x)
>>> float(step(tf.constant(1.0)))
2.0
"""

from tfp_maf._platform.graph_memory import (
    custom_gradients_released,
    mark_traced_on_purpose,
    traced_on_purpose,
)

__all__ = ["custom_gradients_released", "mark_traced_on_purpose", "traced_on_purpose"]
