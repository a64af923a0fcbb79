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

Every unit and every output is computed once (up to the padding of blocks to one width):
about the work of one forward pass, spread over D steps. Units are kept sorted by degree
so that the units of degree t are a contiguous block of rows (the state is stored
transposed, units x batch), and the loop is compiled with XLA.

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


def sequential_pass(made, emit: Callable, noise, conditional_input=None, key=None):
    """Runs the MADE once over D steps, setting the variables in order.

    Args:
      made: a `tfp_maf.layers.MADE`.
      emit: ``emit(params, t, noise) -> (value, extra)``: ``params`` are the raw outputs
        of the variable of degree t + 1, shape ``[P, B]`` (P outputs per variable, in the
        MADE's layout); returns its value ``[B]`` and one more ``[B]`` quantity to keep
        (a log-scale, say).
      noise: a tensor or tuple of tensors whose first axis is the step (degree order) and
        second the batch, e.g. ``[D, B]``; passed to ``emit``.
      conditional_input: ``[B, K]`` or None.
      key: hashable; when given, the loop is compiled with XLA once per ``key`` (and
        input shapes) and reused. Callers pass the same ``emit`` for the same key.

    Returns:
      ``(x, extra)``, both ``[B, D]`` in the variables' own order.
    """
    if key is None:
        return _sequential_loop(made, emit, noise, conditional_input, _read_weights(made))
    # XLA runs the D-step loop with in-place row updates and fused small ops: a step
    # costs microseconds, where the graph executor's copies of the state cost ~1 ms.
    cache = made.__dict__.setdefault("_compiled_sequential", {})
    if key not in cache:
        cache[key] = tf.function(
            lambda noise, y, weights: _chunked_loop(made, emit, noise, y, weights),
            jit_compile=True, reduce_retracing=True,
        )
    compiled = cache[key]
    flat = tf.nest.flatten(noise)
    has_y = conditional_input is not None
    args = [*flat, conditional_input] if has_y else flat

    # Differentiating an XLA while loop from outside XLA fails (its per-step stack is a
    # TensorList), so the compiled loop gets only stop-gradient inputs, weights included,
    # and the backward pass differentiates the same loop run by TF.
    @tf.custom_gradient
    def run(*args):
        noise_args = tf.nest.pack_sequence_as(noise, list(args[: len(flat)]))
        y = args[-1] if has_y else None
        frozen = lambda t: None if t is None else tf.stop_gradient(t)  # noqa: E731
        out = compiled(tf.nest.map_structure(frozen, noise_args), frozen(y),
                       tf.nest.map_structure(frozen, _read_weights(made)))

        def grad(*upstream, variables=None):
            variables = list(variables or [])
            with tf.GradientTape() as tape:
                tape.watch(args)
                again = _sequential_loop(made, emit, noise_args, y, _read_weights(made))
            upstream = [tf.zeros_like(o) if g is None else g for o, g in zip(again, upstream)]
            grads = tape.gradient(list(again), [*args, *variables], output_gradients=upstream)
            return grads[: len(args)], grads[len(args) :]

        return out, grad

    return run(*args)


CHUNK_BYTES = 1 << 20


def _chunk_size(made, batch=None) -> int:
    """Batch rows per chunk so that one chunk's state (inputs and every hidden layer,
    float32) is about CHUNK_BYTES: each step reads the whole state, so it should stay
    in cache for the D steps of its chunk. No larger than a (static) batch."""
    width = made.event_size + sum(made.hidden_units)
    chunk = int(max(32, 2 ** np.floor(np.log2(CHUNK_BYTES / (4 * width)))))
    return chunk if batch is None else max(1, min(chunk, int(batch)))


def _chunked_loop(made, emit, noise, conditional_input, weights):
    """`_sequential_loop` over batch chunks, one after the other."""
    flat = tf.nest.flatten(noise)
    chunk = _chunk_size(made, flat[0].shape[1])
    batch = tf.shape(flat[0])[1]
    n_chunks = (batch + chunk - 1) // chunk
    pad = n_chunks * chunk - batch

    def split(t, axis):  # pad the batch axis, then chunks first: [n_chunks, ..., chunk, ...]
        paddings = [[0, 0]] * axis + [[0, pad]] + [[0, 0]] * (t.shape.rank - axis - 1)
        t = tf.pad(t, paddings)
        shape = tf.concat([tf.shape(t)[:axis], [n_chunks, chunk], tf.shape(t)[axis + 1 :]], 0)
        return tf.experimental.numpy.moveaxis(tf.reshape(t, shape), axis, 0)

    elems = [split(t, 1) for t in flat]
    if conditional_input is not None:
        elems.append(split(conditional_input, 0))

    def one_chunk(args):
        noise_c = tf.nest.pack_sequence_as(noise, list(args[: len(flat)]))
        y_c = args[-1] if conditional_input is not None else None
        return _sequential_loop(made, emit, noise_c, y_c, weights)

    dtype = flat[0].dtype
    x, extra = tf.map_fn(one_chunk, elems, fn_output_signature=(dtype, dtype), parallel_iterations=1)
    D = made.event_size
    return tf.reshape(x, [-1, D])[:batch], tf.reshape(extra, [-1, D])[:batch]


def _read_weights(made) -> dict:
    """The MADE's weights as tensors (masks applied), in one structure."""
    return {
        "hidden": [(layer.masked_kernel(), tf.convert_to_tensor(layer.bias)) for layer in made.hidden_layers],
        "output": (made.output_layer.masked_kernel(), tf.convert_to_tensor(made.output_layer.bias)),
        "conditional": [tf.convert_to_tensor(v) for v in made.conditional_kernels],
    }


def _sequential_loop(made, emit, noise, conditional_input, weights):
    plan = made.sequential_plan
    D, P = plan.event_size, made.params_per_dim
    L = len(made.hidden_layers)
    first = tf.nest.flatten(noise)[0]
    dtype, batch_size = first.dtype, tf.shape(first)[1]
    cast = lambda t: tf.cast(t, dtype)  # noqa: E731
    if conditional_input is None:
        y_terms = [None] * max(L, 1)
    else:  # y @ V_l, as `MADE.conditional_terms`
        y_terms = [tf.matmul(cast(conditional_input), cast(v)) for v in weights["conditional"]]

    # Weights with rows (fan-in) and columns (units) sorted by degree, then transposed:
    # W_T[l] is [H_l, fan_in], so the units of one degree are a block of rows.
    prev_order = plan.var_at
    kernels, biases, conds, starts, widths = [], [], [], [], []
    for l, (kernel, bias) in enumerate(weights["hidden"]):
        order = plan.unit_order[l]
        w = tf.gather(tf.gather(cast(kernel), prev_order, axis=0), order, axis=1)
        kernels.append(tf.transpose(w))
        biases.append(tf.gather(cast(bias), order)[:, None])
        conds.append(None if y_terms[l] is None else tf.transpose(tf.gather(y_terms[l], order, axis=1)))
        prev_order = order
        # Static shapes (for XLA): every step computes a window of the widest block's
        # size starting at its block. Extra units in the window are either final already
        # (recomputed to the same value) or of a later degree (overwritten at their own
        # step); the masks keep any reader from seeing them before they are final.
        offsets, units = plan.offsets[l], made.hidden_units[l]
        width = int(np.max(np.diff(offsets)))
        starts.append(tf.constant(np.minimum(offsets[:-1], units - width).astype(np.int32)))
        widths.append(width)
    # Output columns of variable i are i * P ... i * P + P - 1; sort them by degree too.
    out_cols = (plan.var_at[:, None] * P + np.arange(P)[None, :]).reshape(-1)
    out_kernel, out_bias = weights["output"]
    out_w = tf.gather(tf.gather(cast(out_kernel), prev_order, axis=0), out_cols, axis=1)
    out_w = tf.transpose(out_w)  # [D * P, fan_in of the output layer]
    out_b = tf.gather(cast(out_bias), out_cols)[:, None]
    out_c = None
    if L == 0 and y_terms[0] is not None:
        out_c = tf.transpose(tf.gather(y_terms[0], out_cols, axis=1))
    fan_ins = [D, *made.hidden_units]

    def body(t, x_t, states, extra_t):
        # 1. Outputs of the variable of degree t + 1 (the masks read only final units),
        #    then its value.
        last = states[-1] if L else x_t
        rows = [t * P, 0]
        params = tf.matmul(tf.slice(out_w, rows, [P, fan_ins[-1]]), last) + tf.slice(out_b, rows, [P, 1])
        if out_c is not None:
            params += tf.slice(out_c, [t * P, 0], [P, batch_size])
        value, extra = emit(params, t, noise)
        extra_t = extra_t.write(t, extra)
        x_t = tf.tensor_scatter_nd_update(x_t, [[t]], value[None])
        # 2. Each hidden layer's units of degree t + 1, now final.
        new_states, prev = [], x_t
        for l in range(L):
            start, width = starts[l][t], widths[l]
            pre = tf.matmul(tf.slice(kernels[l], [start, 0], [width, fan_ins[l]]), prev)
            pre += tf.slice(biases[l], [start, 0], [width, 1])
            if conds[l] is not None:
                pre += tf.slice(conds[l], [start, 0], [width, batch_size])
            state = tf.tensor_scatter_nd_update(
                states[l], (start + tf.range(width))[:, None], made.activation(pre)
            )
            new_states.append(state)
            prev = state
        return t + 1, x_t, new_states, extra_t

    zeros = lambda rows: tf.zeros(tf.stack([rows, batch_size]), dtype)  # noqa: E731
    extra_rows = tf.TensorArray(dtype, size=D, element_shape=tf.TensorShape([None]))
    init = (tf.constant(0), zeros(D), [zeros(h) for h in made.hidden_units], extra_rows)
    _, x_t, _, extra_t = tf.while_loop(lambda t, *_: t < D, body, init, maximum_iterations=D)
    # Back from (degree order, transposed) to [B, D] in the variables' order.
    inverse_order = np.argsort(plan.var_at)
    return (tf.gather(tf.transpose(x_t), inverse_order, axis=1),
            tf.gather(tf.transpose(extra_t.stack()), inverse_order, axis=1))
