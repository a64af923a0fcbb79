"""Optimizer state saved for dense MADE kernels, given to a model that stores them in blocks.

`tfp_maf.MaskedDense` writes and reads its kernel dense whatever its storage
(`tfp_maf.layers.block_layout`), so layer weights load into either. The optimizer's
state does not go through the layers: Keras saves it as one list, a slot per
variable (Adam: a momentum and a velocity), so a file written by a model with dense
kernels (tfp-maf 0.2 and older, or ``kernel_blocks=1``) holds one slot per kernel
where a blocked model has one per block, and Keras would skip the whole state with
a warning: a resumed run would restart Adam. `optimizer_arrays` rearranges the
file's list for the model: each dense slot split into the blocks' slots, the same
split as the kernel's.
"""

from __future__ import annotations

import re

import keras
import numpy as np

from tfp_maf.layers.made import MaskedDense

__all__ = ["optimizer_arrays", "weights_list"]


def _blocked_layers(model) -> dict:
    """``{id(block variable): (layer, block index)}`` over the model's blocked kernels."""
    return {
        id(block): (layer, g)
        for layer in model._flatten_layers(include_self=False)
        if isinstance(layer, MaskedDense) and layer.layout is not None
        for g, block in enumerate(layer.kernel_blocks)
        if block is not None
    }


def optimizer_arrays(model, arrays: list) -> list | None:
    """The file's optimizer ``arrays`` (saved with dense kernels) in the order and
    shapes of ``model.optimizer``'s variables; None when they already fit, or when
    they are not that model's state with dense kernels either (Keras then reports)."""
    optimizer = getattr(model, "optimizer", None)
    live = list(getattr(optimizer, "variables", []))
    fits = len(arrays) == len(live) and all(tuple(a.shape) == tuple(v.shape) for a, v in zip(arrays, live, strict=True))
    blocked = _blocked_layers(model)
    if fits or not live or not blocked:
        return None
    # Keras names a slot by its variable's path and the slot's name, and paths repeat
    # across a model's MADEs; so both lists are rebuilt on stand-ins with unique names:
    # "model_j" for the model's j-th variable, "dense_k" for the file's k-th.
    model_stand_ins, dense_stand_ins, dense_index, first = [], [], [], {}
    for j, v in enumerate(model.trainable_variables):
        model_stand_ins.append(keras.Variable(np.zeros(v.shape, v.dtype), name=f"model_{j}"))
        layer, _ = blocked.get(id(v), (None, None))
        if layer is not None and id(layer) in first:
            dense_index.append(first[id(layer)])
            continue
        shape = layer.mask.shape if layer is not None else v.shape
        dense_stand_ins.append(keras.Variable(np.zeros(shape, v.dtype), name=f"dense_{len(dense_stand_ins)}"))
        dense_index.append(len(dense_stand_ins) - 1)
        if layer is not None:
            first[id(layer)] = len(dense_stand_ins) - 1
    as_saved, as_model = (optimizer.__class__.from_config(optimizer.get_config()) for _ in range(2))
    as_saved.build(dense_stand_ins)
    as_model.build(model_stand_ins)
    if len(as_saved.variables) != len(arrays) or len(as_model.variables) != len(live):
        return None
    saved = {w.name: a for w, a in zip(as_saved.variables, arrays, strict=True)}
    out = []
    for w in as_model.variables:
        match = re.fullmatch(r"model_(\d+)_(.+)", w.name)
        if match is None:  # the iteration count, the learning rate
            out.append(saved[w.name])
            continue
        j = int(match[1])
        value = saved[f"dense_{dense_index[j]}_{match[2]}"]
        layer, g = blocked.get(id(model.trainable_variables[j]), (None, None))
        out.append(value if layer is None else layer.layout.split(value)[g])
    return out


def weights_list(model, arrays: list) -> list:
    """A `get_weights` list saved with dense kernels (a run's best epoch from before
    blocks) in the model's layout: each dense kernel split into the blocks. A list that
    already fits is returned as is."""
    weights = model.weights
    if len(arrays) == len(weights) and all(tuple(np.shape(a)) == tuple(v.shape) for a, v in
                                           zip(arrays, weights, strict=True)):
        return list(arrays)
    blocked = _blocked_layers(model)
    out, source, split = [], iter(arrays), {}
    for v in weights:
        layer, g = blocked.get(id(v), (None, None))
        if layer is None:
            out.append(next(source))
            continue
        if id(layer) not in split:  # the layer's first block: its dense kernel comes next
            split[id(layer)] = layer.layout.split(next(source))
        out.append(split[id(layer)][g])
    return out
