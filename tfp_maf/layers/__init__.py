"""Keras 3 layers that own the trainable state of the bijectors."""

from tfp_maf.layers.batch_norm import ExpGammaBatchNormalization
from tfp_maf.layers.coupling import CouplingNetworks
from tfp_maf.layers.made import MADE, MaskedDense, apply_masks

__all__ = ["MADE", "CouplingNetworks", "ExpGammaBatchNormalization", "MaskedDense", "apply_masks"]
