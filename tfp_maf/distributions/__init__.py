"""Distributions of the paper: MADE with mixture-of-Gaussians conditionals."""

from tfp_maf.distributions.made_mog import MADEMoG

__all__ = ["MADEMoG"]
