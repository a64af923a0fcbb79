"""Bijectors of the paper: MADE (Gaussian), Real NVP coupling, batch norm."""

from tfp_maf.bijectors.affine_coupling import AffineCoupling, coupling_partition
from tfp_maf.bijectors.exp_gamma_batch_norm import ExpGammaBatchNorm, batch_moments
from tfp_maf.bijectors.masked_autoregressive import MaskedAutoregressive

__all__ = [
    "AffineCoupling",
    "ExpGammaBatchNorm",
    "MaskedAutoregressive",
    "batch_moments",
    "coupling_partition",
]
