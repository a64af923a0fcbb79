"""Bijectors of the paper (MADE with Gaussian conditionals, Real NVP coupling, batch
norm), and the spline layer of neural spline flows.

Each maps data ``x`` (the inverse direction, what ``log_prob`` uses) to noise ``u`` and
back (the forward direction, what ``sample`` uses), with ``forward_min_event_ndims=1``:

| bijector | inverse (data -> noise) | forward (noise -> data) |
|---|---|---|
| `MaskedAutoregressive` | one MADE pass | exact, sequential (about one pass) |
| `MaskedRationalQuadraticSpline` | one MADE pass | exact, sequential (about one pass) |
| `AffineCoupling` | one pass of two networks | one pass of two networks |
| `ExpGammaBatchNorm` | elementwise | elementwise |
| `Standardize` | elementwise, fixed | elementwise, fixed |
| `LogTails` | elementwise, fixed | elementwise, fixed |

`coupling_partition` gives a coupling layer's copied and transformed indices, and
`batch_moments` the minibatch statistics the batch norm uses in training.

Every one is a `FusedBijector`: one pass gives a value and its log-det, and TFP's cache
keeps both. `GraphLocalChain` is TFP's `tfb.Chain` for such parts, with a cache whose
entries die with the traces that made them (what `keras_models`' flows chain with).

Example:

>>> import numpy as np
>>> from tfp_maf.bijectors import MaskedAutoregressive
>>> from tfp_maf.layers import MADENetwork
>>> maf = MaskedAutoregressive(MADENetwork(3, hidden_units=[8], seed=0))
>>> x = np.ones((2, 3), np.float32)
>>> bool(np.all(maf.inverse(x).numpy() == x))  # a fresh MADE's output layer is zero
True
>>> maf.inverse_log_det_jacobian(x, event_ndims=1).shape  # one log-det per row
TensorShape([2])
"""

from tfp_maf._platform.bijector_cache import GraphLocalChain
from tfp_maf.bijectors.affine_coupling import AffineCoupling, coupling_partition
from tfp_maf.bijectors.exp_gamma_batch_norm import ExpGammaBatchNorm, batch_moments
from tfp_maf.bijectors.fused import FusedBijector
from tfp_maf.bijectors.log_tails import LogTails
from tfp_maf.bijectors.masked_autoregressive import MaskedAutoregressive
from tfp_maf.bijectors.masked_spline import MaskedRationalQuadraticSpline
from tfp_maf.bijectors.standardize import Standardize

__all__ = [
    "AffineCoupling",
    "ExpGammaBatchNorm",
    "FusedBijector",
    "GraphLocalChain",
    "LogTails",
    "MaskedAutoregressive",
    "MaskedRationalQuadraticSpline",
    "Standardize",
    "batch_moments",
    "coupling_partition",
]
