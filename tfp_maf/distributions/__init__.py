"""Distributions of the paper: MADE with mixture-of-Gaussians conditionals.

`MADEMoG` is a distribution in its own right (the paper's MADE MoG) and the base of
MAF MoG, a `tfd.TransformedDistribution` of MAF layers over it.

Example (MAF MoG with one MAF layer; the MADE MoG's order is reversed, as the
paper's next layer would be):

>>> import numpy as np, tensorflow_probability as tfp
>>> from tfp_maf import MADENetwork, MaskedAutoregressive
>>> from tfp_maf.distributions import MADEMoG
>>> base = MADEMoG(MADENetwork(2, hidden_units=[8], num_components=2,
...                            order="right-to-left", seed=1))
>>> maf_mog = tfp.distributions.TransformedDistribution(
...     base, MaskedAutoregressive(MADENetwork(2, hidden_units=[8], seed=0)))
>>> maf_mog.log_prob(np.zeros((3, 2), np.float32)).shape
TensorShape([3])
>>> len(maf_mog.trainable_variables)  # both MADEs' kernels and biases
8
"""

from tfp_maf.distributions.made_mog import MADEMoG

__all__ = ["MADEMoG"]
