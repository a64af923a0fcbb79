"""Exact sequential passes through a MADE at the cost of about one forward pass.

Sampling from an autoregressive model sets x in order: the variable of degree t needs the
network's outputs for it, which depend on the variables of degree < t only. Re-running the
whole MADE at every step (what TFP, nflows, zuko and the paper's code do) costs D passes.

The masks say exactly which hidden units a step can change: a unit of degree k reads only
inputs (or units) of degree <= k, so its value is final once the variables of degree <= k
are set, and never changes afterwards. So at step t we compute

1. the outputs of the variable of degree t, from the last hidden layer's units of
   degree < t (all final), then set that variable;
2. in each hidden layer, the units of degree t, from the inputs / previous-layer units of
   degree <= t (all final).

Every unit and every output is computed exactly once: the work of one forward pass,
spread over D steps. Units are kept sorted by degree so that "degree <= t" is a prefix of
rows and "degree t" a contiguous block (the state is stored transposed, units x batch).

`sequential_pass` is shared by the Gaussian head (`MaskedAutoregressive` sampling) and the
mixture head (`MADEMoG` sampling); ``emit`` turns the outputs of one variable into its value.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tensorflow as tf

__all__ = ["SequentialPlan", "sequential_pass"]


class SequentialPlan:
    """Static (NumPy) bookkeeping of a MADE's degrees: sort orders and block offsets.

    ``var_at[t]``: the variable of degree t + 1. For hidden layer l, ``unit_order[l]``
    sorts its units by degree and ``offsets[l][k]`` counts its units of degree <= k.
    """

    def __init__(self, input_degrees: np.ndarray, hidden_degrees: list[np.ndarray]):
        self.event_size = D = len(input_degrees)
        self.var_at = np.argsort(input_degrees, kind="stable")
        self.unit_order = [np.argsort(d, kind="stable") for d in hidden_degrees]
        self.offsets = [
            np.searchsorted(np.sort(d, kind="stable"), np.arange(D + 1), side="right").astype(np.int32)
            for d in hidden_degrees
        ]


def sequential_pass(made, emit: Callable, batch_size, conditional_input=None, dtype=tf.float32):
    """Runs the MADE once over D steps, setting the variables in order.

    Args:
      made: a `tfp_maf.layers.MADE`.
      emit: ``emit(params, t) -> (value, extra)``: ``params`` are the raw outputs of the
        variable of degree t + 1, shape ``[P, B]`` (P outputs per variable, in the MADE's
        layout); returns its value ``[B]`` and one more ``[B]`` quantity to keep (a
        log-scale, say).
      batch_size: B, a scalar tensor.
      conditional_input: ``[B, K]`` or None.

    Returns:
      ``(x, extra)``, both ``[B, D]`` in the variables' own order.
    """
    plan = made.sequential_plan
    D, P = plan.event_size, made.params_per_dim
    L = len(made.hidden_layers)
    cast = lambda t: tf.cast(t, dtype)  # noqa: E731
    y_terms = made.conditional_terms(None if conditional_input is None else cast(conditional_input))

    # Weights with rows (fan-in) and columns (units) sorted by degree, then transposed:
    # W_T[l] is [H_l, fan_in], so a block of units is a block of rows.
    prev_order = plan.var_at
    weights, biases, conds = [], [], []
    for l, layer in enumerate(made.hidden_layers):
        order = plan.unit_order[l]
        w = tf.gather(tf.gather(cast(layer.masked_kernel()), prev_order, axis=0), order, axis=1)
        weights.append(tf.transpose(w))
        biases.append(tf.gather(cast(layer.bias), order)[:, None])
        conds.append(None if y_terms[l] is None else tf.transpose(tf.gather(y_terms[l], order, axis=1)))
        prev_order = order
    # Output columns of variable i are i * P ... i * P + P - 1; sort them by degree too.
    out_cols = (plan.var_at[:, None] * P + np.arange(P)[None, :]).reshape(-1)
    out_w = tf.gather(tf.gather(cast(made.output_layer.masked_kernel()), prev_order, axis=0), out_cols, axis=1)
    out_w = tf.transpose(out_w)  # [D * P, H_last]
    out_b = tf.gather(cast(made.output_layer.bias), out_cols)[:, None]
    out_c = None
    if L == 0 and y_terms[0] is not None:
        out_c = tf.transpose(tf.gather(y_terms[0], out_cols, axis=1))
    offsets = [tf.constant(o) for o in plan.offsets]

    def out_prefix(t):
        # Units of the last layer with degree < t + 1; with no hidden layer, the inputs.
        return offsets[-1][t] if L else t

    def body(t, x_t, states, extra_t):
        # 1. Outputs of the variable of degree t + 1, then its value.
        p = out_prefix(t)
        last = states[-1] if L else x_t
        params = tf.matmul(out_w[t * P : (t + 1) * P, :p], last[:p]) + out_b[t * P : (t + 1) * P]
        if out_c is not None:
            params += out_c[t * P : (t + 1) * P]
        value, extra = emit(params, t)
        extra_t = extra_t.write(t, extra)
        # Written after every reader of the old state, so TF can update the buffer in place.
        with tf.control_dependencies([params]):
            x_t = tf.tensor_scatter_nd_update(x_t, [[t]], value[None])
        # 2. Each hidden layer's units of degree t + 1, now final.
        new_states = []
        prev, prefix = x_t, t + 1
        for l in range(L):
            start, stop = offsets[l][t], offsets[l][t + 1]
            pre = tf.matmul(weights[l][start:stop, :prefix], prev[:prefix]) + biases[l][start:stop]
            if conds[l] is not None:
                pre += conds[l][start:stop]
            rows = tf.range(start, stop)[:, None]
            h = made.activation(pre)
            with tf.control_dependencies([params, h]):  # after this step's readers
                state = tf.tensor_scatter_nd_update(states[l], rows, h)
            new_states.append(state)
            prev, prefix = state, stop
        return t + 1, x_t, new_states, extra_t

    zeros = lambda rows: tf.zeros(tf.stack([rows, batch_size]), dtype)  # noqa: E731
    extra_rows = tf.TensorArray(dtype, size=D, element_shape=tf.TensorShape([None]))
    init = (tf.constant(0), zeros(D), [zeros(h) for h in made.hidden_units], extra_rows)
    _, x_t, _, extra_t = tf.while_loop(lambda t, *_: t < D, body, init, maximum_iterations=D)
    # Back from (degree order, transposed) to [B, D] in the variables' order.
    inverse_order = np.argsort(plan.var_at)
    return (tf.gather(tf.transpose(x_t), inverse_order, axis=1),
            tf.gather(tf.transpose(extra_t.stack()), inverse_order, axis=1))
