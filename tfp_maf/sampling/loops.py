"""The D-step loops: one exact pass through a MADE, setting the variables in order.

At step t the outputs of the variable of degree t + 1 are computed from the units that
are already final (the masks read no others), ``emit`` turns them into its value, and
then, in each hidden layer, the units of degree t + 1 become final. Every unit and
output is computed once (up to the padding of windows to one width): about the work
of one forward pass, spread over D steps.

`stepwise_loop` takes the steps one at a time; `blocked_loop` takes them in blocks of S
degrees, so that what the final rows contribute to a block is one matmul per layer.
Both read weights laid out by `tfp_maf.sampling.layout.lay_out`, and the degrees as
tensors (`tfp_maf.sampling.plan.LoopTables.tensors`): a loop's program depends on the
sizes alone (``structure.sizes()`` and a `LoopShape`), so MADEs that differ in their
orders share it.
"""

from __future__ import annotations

import tensorflow as tf

from tfp_maf.sampling.layout import conditional_terms
from tfp_maf.sampling.plan import LoopShape, Structure

__all__ = ["blocked_loop", "run_loop", "stepwise_loop"]


def run_loop(structure: Structure, shape: LoopShape, emit, noise, conditional_input, prepared, tables):
    """``(x, extra)`` ``[B, D]`` in the variables' order: `stepwise_loop` for blocks of
    one step, else `blocked_loop`. ``tables``: `LoopTables.tensors` of the MADE."""
    loop = stepwise_loop if shape.S == 1 else blocked_loop
    return loop(structure, shape, emit, noise, conditional_input, prepared, tables)


def _in_variable_order(structure: Structure, tables, x_rows, extra_rows):
    """Back from (degree order, transposed) to [B, D] in the variables' order."""
    D, inverse_order = structure.event_size, tables["inverse_order"]
    return (tf.gather(tf.transpose(x_rows[:D]), inverse_order, axis=1),
            tf.gather(tf.transpose(extra_rows[:D]), inverse_order, axis=1))


def stepwise_loop(structure: Structure, shape: LoopShape, emit, noise, conditional_input, prepared, tables):
    """One step a degree. At step t: the outputs of the variable of degree t + 1, from
    the whole last layer (the masks read only its final units), then that variable; then
    in each layer the window of units from the first of degree t + 1, from the whole
    layer below.

    Windows have one static width (for XLA), the most units of one degree. Extra units
    in a window are of a later degree (overwritten at their own step) or padding; the
    masks keep any reader from seeing them before they are final.
    """
    D, P, L = structure.event_size, structure.params_per_dim, len(structure.hidden_units)
    first = tf.nest.flatten(noise)[0]
    dtype, batch_size = first.dtype, tf.shape(first)[1]
    rows, widths = shape.rows, shape.widths
    kernels, biases, out_w, out_b = prepared["kernels"], prepared["biases"], prepared["out_w"], prepared["out_b"]
    conds = conditional_terms(prepared, conditional_input, dtype, L)
    out_c = conds[0] if L == 0 else None
    starts = tables["starts"]

    def body(t, x_t, states, extra_t):
        # 1. Outputs of the variable of degree t + 1, then its value.
        last = states[-1] if L else x_t
        params = tf.matmul(tf.slice(out_w, [t * P, 0], [P, rows[L]]), last) + tf.slice(out_b, [t * P, 0], [P, 1])
        if out_c is not None:
            params += tf.slice(out_c, [t * P, 0], [P, batch_size])
        value, extra = emit(params, t, noise)
        extra_t = extra_t.write(t, extra)
        x_t = tf.tensor_scatter_nd_update(x_t, [[t]], value[None])
        # 2. Each hidden layer's units of degree t + 1, now final.
        new_states, prev = [], x_t
        for l in range(L):
            start, width = starts[l + 1][t], widths[l + 1]
            pre = tf.matmul(tf.slice(kernels[l], [start, 0], [width, rows[l]]), prev)
            pre += tf.slice(biases[l], [start, 0], [width, 1])
            if conds[l] is not None:
                pre += tf.slice(conds[l], [start, 0], [width, batch_size])
            prev = tf.tensor_scatter_nd_update(
                states[l], (start + tf.range(width))[:, None], structure.activation(pre))
            new_states.append(prev)
        return t + 1, x_t, new_states, extra_t

    zeros = lambda n: tf.zeros(tf.stack([n, batch_size]), dtype)  # noqa: E731
    extra_rows = tf.TensorArray(dtype, size=D, element_shape=tf.TensorShape([None]))
    init = (tf.constant(0), zeros(rows[0]), [zeros(n) for n in rows[1:]], extra_rows)
    _, x_t, _, extra_t = tf.while_loop(lambda t, *_: t < D, body, init, maximum_iterations=D)
    return _in_variable_order(structure, tables, x_t, extra_t.stack())


def blocked_loop(structure: Structure, shape: LoopShape, emit, noise, conditional_input, prepared, tables):
    """The D steps in blocks of S consecutive degrees.

    Invariant at the start of a block (steps s ... s + S - 1): the state holds every
    variable and unit of degree <= s, and zeros in every later row. A unit of a later
    degree reads (final) rows of degree <= s and rows of this block, so the block

    1. starts with ONE matmul per layer over the whole state: the contribution of the
       final rows to every output and unit of the block (a GEMM, S P or W_l rows tall);
    2. then, at each of its S steps, adds the contribution of its own rows, which is
       small next to the GEMMs;
    3. and ends by writing its final rows into the state (units of a later degree that
       share the window are zeroed, keeping the invariant).
    """
    D, P, L = structure.event_size, structure.params_per_dim, len(structure.hidden_units)
    activation = structure.activation
    S, rows, widths = shape.S, shape.rows, shape.widths
    first = tf.nest.flatten(noise)[0]
    dtype, batch_size = first.dtype, tf.shape(first)[1]
    kernels, biases, out_w, out_b = prepared["kernels"], prepared["biases"], prepared["out_w"], prepared["out_b"]
    conds = conditional_terms(prepared, conditional_input, dtype, L)
    out_c = conds[0] if L == 0 else None
    starts, finals = tables["starts"], tables["finals"]

    def block(k, states, extras, steps):
        """Block k: ``steps`` (static) steps from s = k S."""
        s = k * S
        # 1. What the final rows contribute to the block's outputs and units.
        out_rows = tf.slice(out_w, [s * P, 0], [S * P, rows[L]])
        base_out = tf.matmul(out_rows, states[L]) + tf.slice(out_b, [s * P, 0], [S * P, 1])
        if out_c is not None:
            base_out += tf.slice(out_c, [s * P, 0], [S * P, batch_size])
        base, blocks = [], []
        for l in range(L):
            start, width = starts[l + 1][k], widths[l + 1]
            unit_rows = tf.slice(kernels[l], [start, 0], [width, rows[l]])
            pre = tf.matmul(unit_rows, states[l]) + tf.slice(biases[l], [start, 0], [width, 1])
            if conds[l] is not None:
                pre += tf.slice(conds[l], [start, 0], [width, batch_size])
            base.append(pre)
            # The block's own rows below: its window of the previous layer.
            blocks.append(tf.slice(unit_rows, [0, starts[l][k]], [width, widths[l]]))
        out_block = tf.slice(out_rows, [0, starts[L][k]], [S * P, widths[L]])

        # 2. Its steps (unrolled: static slices, no inner loop), each adding what the
        #    block's own rows contribute. The new variable enters the first layer (or,
        #    without hidden layers, the outputs) as a rank-1 update; deeper windows are
        #    recomputed, since every unit of the window below may have changed.
        values, extra_rows, windows = [], [], [None] * L
        for j in range(steps):
            params = base_out[j * P : (j + 1) * P]
            if L and j:  # at j = 0 the block has no final units yet
                params += tf.matmul(out_block[j * P : (j + 1) * P], windows[-1])
            value, extra = emit(params, s + j, noise)
            values.append(value)
            extra_rows.append(extra)
            if L:
                base[0] = base[0] + blocks[0][:, j : j + 1] * value[None]
                windows[0] = activation(base[0])
                for l in range(1, L):
                    windows[l] = activation(base[l] + tf.matmul(blocks[l], windows[l - 1]))
            else:
                base_out = base_out + out_block[:, j : j + 1] * value[None]

        # 3. Write the final rows; units of later degrees in the windows stay zero.
        pad = lambda r: tf.pad(tf.stack(r), [[0, S - steps], [0, 0]])  # noqa: E731
        new_states = [tf.tensor_scatter_nd_update(states[0], (s + tf.range(S))[:, None], pad(values))]
        for l in range(L):
            keep = tf.range(widths[l + 1])[:, None] < finals[l + 1][k]
            window = tf.where(keep, windows[l], tf.zeros_like(windows[l]))
            new_states.append(tf.tensor_scatter_nd_update(
                states[l + 1], (starts[l + 1][k] + tf.range(widths[l + 1]))[:, None], window))
        extras = tf.tensor_scatter_nd_update(extras, (s + tf.range(S))[:, None], pad(extra_rows))
        return new_states, extras

    zeros = lambda n: tf.zeros(tf.stack([n, batch_size]), dtype)  # noqa: E731
    full, rest = divmod(D, S)
    _, states, extras = tf.while_loop(
        lambda k, *_: k < full, lambda k, *state: (k + 1, *block(k, *state, S)),
        (tf.constant(0), [zeros(n) for n in rows], zeros(rows[0])),
        maximum_iterations=full,
    )
    if rest:  # the last, shorter block
        states, extras = block(tf.constant(full), states, extras, rest)
    return _in_variable_order(structure, tables, states[0], extras)
