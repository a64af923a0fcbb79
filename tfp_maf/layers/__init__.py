"""Keras 3 layers that own the trainable state of the bijectors.

| layer | weights of | bijector or distribution |
|---|---|---|
| `MADENetwork` (built of `MaskedDense` layers) | a MADE | `tfp_maf.MaskedAutoregressive`, `tfp_maf.MADEMoG` |
| `CouplingNetworks` | a coupling layer's scale and shift networks | `tfp_maf.AffineCoupling` |
| `BatchNormState` | a batch norm | `tfp_maf.ExpGammaBatchNorm` (`BatchNormState.bijector`) |
| `Standardization` | a flow's column statistics | `tfp_maf.Standardize` (`Standardization.bijector`) |

Each creates its weights in ``__init__`` (the sizes are known), saves and loads with
Keras (``.keras``, ``.weights.h5``) and may sit in any Keras model.

| module | what it holds |
|---|---|
| `made` | `MADENetwork`: masks, heads, call and config of a MADE |
| `masked_dense` | `MaskedDense`, its kernel dense (`DenseKernel`) or in degree blocks (`BlockedKernel`) |
| `block_layout` | the degree blocks' maths (`BlockLayout`) and how many a kernel gets (`auto_blocks`) |
| `gradient_masks` | `kernels_as_stored`, `mask_gradients`, `hold_kernel_masks`: masked gradients of kernels |
| `coupling`, `batch_norm` | `CouplingNetworks`, `BatchNormState` |

`sublayers` finds the layers inside a layer or model (Keras' own walk is private).

Example:

>>> import keras, numpy as np
>>> from tfp_maf.layers import MADENetwork
>>> made = MADENetwork(3, hidden_units=[8], name="made")
>>> restored = keras.layers.deserialize(keras.layers.serialize(made))
>>> restored.event_size, restored.hidden_units
(3, [8])
"""

from tfp_maf._platform.layer_tracking import sublayers
from tfp_maf.layers.batch_norm import BatchNormState
from tfp_maf.layers.block_layout import BlockLayout, auto_blocks
from tfp_maf.layers.coupling import CouplingNetworks
from tfp_maf.layers.gradient_masks import hold_kernel_masks, kernels_as_stored, mask_gradients
from tfp_maf.layers.made import (
    CONDITIONAL_INPUT_LAYERS,
    SCALE_PARAMETERIZATIONS,
    MADENetwork,
    check_conditional_input_layers,
    check_scale_parameterization,
)
from tfp_maf.layers.masked_dense import BlockedKernel, DenseKernel, MaskedDense, apply_masks
from tfp_maf.layers.standardization import Standardization

__all__ = [
    "CONDITIONAL_INPUT_LAYERS",
    "SCALE_PARAMETERIZATIONS",
    "BatchNormState",
    "BlockLayout",
    "BlockedKernel",
    "CouplingNetworks",
    "DenseKernel",
    "MADENetwork",
    "MaskedDense",
    "Standardization",
    "apply_masks",
    "auto_blocks",
    "check_conditional_input_layers",
    "check_scale_parameterization",
    "hold_kernel_masks",
    "kernels_as_stored",
    "mask_gradients",
    "sublayers",
]
