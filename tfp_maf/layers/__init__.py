"""Keras 3 layers that own the trainable state of the bijectors."""

from tfp_maf.layers.batch_norm import BatchNormState, ExpGammaBatchNormalization
from tfp_maf.layers.coupling import CouplingNetworks
from tfp_maf.layers.made import (
    MADE,
    MADENetwork,
    MaskedDense,
    apply_masks,
    kernels_as_stored,
    mask_gradients,
)

__all__ = [
    "MADE",  # deprecated: MADENetwork
    "BatchNormState",
    "CouplingNetworks",
    "ExpGammaBatchNormalization",  # deprecated: BatchNormState
    "MADENetwork",
    "MaskedDense",
    "apply_masks",
    "kernels_as_stored",
    "mask_gradients",
]
