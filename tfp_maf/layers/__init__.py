"""Keras 3 layers that own the trainable state of the bijectors."""

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
