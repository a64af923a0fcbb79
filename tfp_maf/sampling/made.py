"""What the sampling engine reads of a `tfp_maf.layers.MADENetwork`: its weights and its
inputs, and the one entry the bijectors and distributions call, `sample_sequentially`.

The layers know nothing of sampling; this module reads a MADE through its public
attributes (`Structure.of`, ``hidden_layers``, ``output_layer``, ``conditional_kernels``,
``sampling_tuning``) and methods (`MADENetwork.flat_inputs`, `MADENetwork.to_scale_outputs`).
"""

from __future__ import annotations

import tensorflow as tf

from tfp_maf.sampling.plan import SequentialPlan, Structure, Tuning
from tfp_maf.sampling.runner import sequential_pass

__all__ = ["can_sample", "sample_sequentially", "weights_of"]

# What the engine reads of a MADE, besides its weights.
_READS = ("event_size", "hidden_units", "params_per_dim", "activation", "conditional_dims", "input_degrees",
          "degrees", "sampling_tuning", "flat_inputs", "to_scale_outputs")


def can_sample(made) -> bool:
    """Whether `sample_sequentially` takes ``made``: a `tfp_maf.layers.MADENetwork`, or
    anything with what the engine reads of one (any other autoregressive callable is
    sampled by D full passes)."""
    return all(hasattr(made, name) for name in _READS)


def weights_of(made) -> dict:
    """The weights as tensors, masks applied, in the structure `sequential_pass` reads."""
    conditional = [tf.convert_to_tensor(v) for v in made.conditional_kernels]
    if conditional and not made.hidden_layers:  # y feeds the output: its kernel gives outputs too
        conditional = [made.to_scale_outputs(conditional[0])]
    output = made.output_layer
    return {
        "hidden": [(layer.masked_kernel(), tf.convert_to_tensor(layer.bias)) for layer in made.hidden_layers],
        "output": (made.to_scale_outputs(output.masked_kernel()),
                   made.to_scale_outputs(tf.convert_to_tensor(output.bias))),
        "conditional": conditional,
    }


def sample_sequentially(made, emit, noise, conditional_input=None, key=None):
    """Sets the D variables of ``made`` in order, in one pass spread over D steps.

    The exact autoregressive recursion x_i = emit(outputs(x_<i), noise_i) at about
    the cost of one forward pass (`tfp_maf.sampling`), scheduled by
    ``made.sampling_tuning`` (None: `Tuning`'s defaults).

    Args:
      made: a `tfp_maf.layers.MADENetwork`.
      emit: ``emit(params, t, noise_rows) -> (value, extra)``: ``params`` ``[P, B]``
        are the outputs for the variable of degree t + 1, ``noise_rows`` the noise
        with the step first (``[D, B, ...]`` per tensor); returns its value ``[B]``
        and one more ``[B]`` quantity to keep (a log-scale, say).
      noise: ``[..., D]``, or a tuple whose first tensor is ``[..., D]`` and whose
        others have that batch shape and D after it (``[..., D, C]``, say). The
        first is broadcast against ``conditional_input``'s batch.
      conditional_input: ``y`` ``[..., K]``, or None.
      key: hashable, naming ``emit``: the loop is compiled once per key and reused.

    Returns:
      ``(x, extra)``, both ``[*batch, D]`` in the variables' own order.
    """
    flat = tf.nest.flatten(noise)
    first, y2d, batch_shape = made.flat_inputs(flat[0], conditional_input)
    var_at = SequentialPlan.of(made).var_at
    batch_rank = flat[0].shape.rank - 1
    dtype = made.compute_dtype

    def rows(t, batch_rank):  # [*batch, D, ...] -> [D, B, ...], variables in degree order
        t = tf.reshape(t, tf.concat([[-1], tf.shape(t)[batch_rank:]], 0))
        t = tf.gather(tf.cast(t, dtype), var_at, axis=1)
        return tf.transpose(t, [1, 0, *range(2, t.shape.rank)])

    # `first` is flat already ([B, D]); the others keep their batch shape.
    noise_rows = tf.nest.pack_sequence_as(noise, [rows(first, 1), *[rows(t, batch_rank) for t in flat[1:]]])
    x, extra = sequential_pass(Structure.of(made), weights_of(made), emit, noise_rows, y2d, key=key,
                               tuning=made.sampling_tuning or Tuning())
    shape = tf.concat([batch_shape, [made.event_size]], 0)
    return tf.reshape(x, shape), tf.reshape(extra, shape)
