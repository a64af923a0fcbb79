"""Keras 3 layers that own the trainable state of the bijectors.

| layer | weights of | bijector or distribution |
|---|---|---|
| `MADENetwork` (built of `MaskedDense` layers) | a MADE | `tfp_maf.MaskedAutoregressive`, `tfp_maf.MADEMoG` |
| `CouplingNetworks` | a coupling layer's scale and shift networks | `tfp_maf.AffineCoupling` |
| `BatchNormState` | a batch norm | `tfp_maf.ExpGammaBatchNorm` (`BatchNormState.bijector`) |

Each creates its weights in ``__init__`` (the sizes are known), saves and loads with
Keras (``.keras``, ``.weights.h5``) and may sit in any Keras model. `apply_masks`,
`mask_gradients` and `kernels_as_stored` serve training loops that write the MADEs'
kernels themselves.

Example:

>>> import keras, numpy as np
>>> from tfp_maf.layers import MADENetwork
>>> made = MADENetwork(3, hidden_units=[8], name="made")
>>> restored = keras.layers.deserialize(keras.layers.serialize(made))
>>> restored.event_size, restored.hidden_units
(3, [8])
"""

from tfp_maf.layers.batch_norm import BatchNormState
from tfp_maf.layers.coupling import CouplingNetworks
from tfp_maf.layers.made import (
    MADENetwork,
    MaskedDense,
    apply_masks,
    kernels_as_stored,
    mask_gradients,
)

__all__ = [
    "BatchNormState",
    "CouplingNetworks",
    "MADENetwork",
    "MaskedDense",
    "apply_masks",
    "kernels_as_stored",
    "mask_gradients",
]
