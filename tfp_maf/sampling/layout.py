"""A MADE's weights laid out as the loops read them: once a call, for every chunk.

The state is stored transposed (units x batch) with units sorted by degree, so that
the units a step or block sets are one contiguous slice of rows. So each kernel is
transposed to ``[fan_out, fan_in]``, its rows and columns sorted by degree and
zero-padded to the `LoopShape`'s rows (padded columns meet padded state rows, and
add nothing). The sort orders come as tensors (`LoopTables.tensors`), so that one traced
graph lays out the weights of every MADE of the same sizes.
"""

from __future__ import annotations

import tensorflow as tf

from tfp_maf.sampling.plan import LoopShape, Structure

__all__ = ["conditional_terms", "lay_out"]


def lay_out(structure: Structure, shape: LoopShape, weights: dict, dtype, tables: dict) -> dict:
    """The weights (``{"hidden": [(kernel, bias)], "output": (kernel, bias),
    "conditional": [V_l]}``, masks applied) in the loop's layout, sorted by the orders
    in ``tables`` (`LoopTables.tensors`)."""
    rows, L = shape.rows, len(structure.hidden_units)

    def sorted_padded(matrix, row_order, col_order, n_rows, n_cols):
        m = tf.transpose(tf.gather(tf.gather(tf.cast(matrix, dtype), row_order, axis=0), col_order, axis=1))
        return tf.pad(m, [[0, n_rows - m.shape[0]], [0, n_cols - m.shape[1]]])

    def sorted_cols(matrix, col_order, n_cols):  # y's kernels and the biases: only units are sorted
        m = tf.gather(tf.cast(matrix, dtype), col_order, axis=1)
        return tf.pad(m, [[0, 0], [0, n_cols - m.shape[1]]])

    out = {"kernels": [], "biases": []}
    prev_order = tables["var_at"]
    for l, (kernel, bias) in enumerate(weights["hidden"]):
        order = tables["unit_order"][l]
        out["kernels"].append(sorted_padded(kernel, prev_order, order, rows[l + 1], rows[l]))
        out["biases"].append(tf.transpose(sorted_cols(bias[None], order, rows[l + 1])))
        prev_order = order
    n_out = shape.n_blocks * shape.S * structure.params_per_dim
    out_kernel, out_bias = weights["output"]
    out["out_w"] = sorted_padded(out_kernel, prev_order, tables["out_cols"], n_out, rows[L])
    out["out_b"] = tf.transpose(sorted_cols(out_bias[None], tables["out_cols"], n_out))
    # y feeds every hidden layer or the first (the outputs when there is none), one
    # kernel each from the first; an unconditional MADE has none.
    y_orders = list(zip(tables["unit_order"], rows[1:], strict=True)) or [(tables["out_cols"], n_out)]
    y_kernels = weights["conditional"]
    out["conditional"] = [sorted_cols(v, o, r) for v, (o, r) in zip(y_kernels, y_orders[:len(y_kernels)], strict=True)]
    return out


def conditional_terms(prepared: dict, conditional_input, dtype, num_layers: int) -> list:
    """``(y @ V_l)^T`` in the loop's layout for each layer y feeds, None for the others
    (as `tfp_maf.layers.MADENetwork.conditional_terms`, transposed); Nones without y."""
    layers = max(num_layers, 1)
    if conditional_input is None:
        return [None] * layers
    y = tf.cast(conditional_input, dtype)
    terms = [tf.matmul(v, y, transpose_a=True, transpose_b=True) for v in prepared["conditional"]]
    return terms + [None] * (layers - len(terms))
