"""tfp-maf: Masked Autoregressive Flow for TensorFlow Probability and Keras 3.

Every public symbol, and where it lives:

| symbol | module |
|---|---|
| `MaskedAutoregressive` | `tfp_maf.bijectors.masked_autoregressive` |
| `AffineCoupling`, `coupling_partition` | `tfp_maf.bijectors.affine_coupling` |
| `ExpGammaBatchNorm`, `batch_moments` | `tfp_maf.bijectors.exp_gamma_batch_norm` |
| `MADEMoG` | `tfp_maf.distributions.made_mog` |
| `MADENetwork` (the MADE network), `MaskedDense`, `apply_masks` | `tfp_maf.layers.made` |
| `CouplingNetworks` | `tfp_maf.layers.coupling` |
| `BatchNormState` (the batch norm's weights and statistics) | `tfp_maf.layers.batch_norm` |
| `flow_kwargs`, `bind_kwargs` | `tfp_maf.kwargs` |
| `masks` (orders, degrees, masks; pure NumPy) | `tfp_maf.masks` |
| `sampling` (the one-pass sequential engine) | `tfp_maf.sampling` |
"""

from tfp_maf import bijectors, distributions, layers, masks, sampling
from tfp_maf.bijectors import (
    AffineCoupling,
    ExpGammaBatchNorm,
    MaskedAutoregressive,
    batch_moments,
    coupling_partition,
)
from tfp_maf.distributions import MADEMoG
from tfp_maf.kwargs import bind_kwargs, flow_kwargs
from tfp_maf.layers import (
    BatchNormState,
    CouplingNetworks,
    MADENetwork,
    MaskedDense,
    apply_masks,
)

__version__ = "0.3.0"

__all__ = [
    "AffineCoupling",
    "BatchNormState",
    "CouplingNetworks",
    "ExpGammaBatchNorm",
    "MADEMoG",
    "MADENetwork",
    "MaskedAutoregressive",
    "MaskedDense",
    "apply_masks",
    "batch_moments",
    "bijectors",
    "bind_kwargs",
    "coupling_partition",
    "distributions",
    "flow_kwargs",
    "layers",
    "masks",
    "sampling",
]
