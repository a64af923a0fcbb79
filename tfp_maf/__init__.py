"""tfp-maf: Masked Autoregressive Flow for TensorFlow Probability and Keras 3.

Every public symbol, and where it lives:

| symbol | module |
|---|---|
| `MaskedAutoregressive` | `tfp_maf.bijectors.masked_autoregressive` |
| `MaskedRationalQuadraticSpline` | `tfp_maf.bijectors.masked_spline` |
| `AffineCoupling`, `coupling_partition` | `tfp_maf.bijectors.affine_coupling` |
| `ExpGammaBatchNorm`, `batch_moments` | `tfp_maf.bijectors.exp_gamma_batch_norm` |
| `MADEMoG` | `tfp_maf.distributions.made_mog` |
| `MADENetwork` (the MADE network) | `tfp_maf.layers.made` |
| `MaskedDense`, `apply_masks` | `tfp_maf.layers.masked_dense` |
| `CouplingNetworks` | `tfp_maf.layers.coupling` |
| `BatchNormState` (the batch norm's weights and statistics) | `tfp_maf.layers.batch_norm` |
| `flow_kwargs`, `bind_kwargs` | `tfp_maf.kwargs` |
| `masks` (orders, degrees, masks; pure NumPy) | `tfp_maf.masks` |
| `splines` (rational-quadratic splines; pure TF maths) | `tfp_maf.splines` |
| `sampling` (the one-pass sequential engine) | `tfp_maf.sampling` |
| `tracing` (functions traced in long-lived processes) | `tfp_maf.tracing` |
| `devices` (the device kind CPU-only speed tricks check) | `tfp_maf.devices` |

Workarounds of TensorFlow, TFP and Keras behaviour live in `tfp_maf._platform`, each with
its reason, the versions verified and how to tell when it can go.

The pieces follow TFP's split between maths and state: a bijector holds the maths and
calls a Keras 3 layer that owns the weights (`MADENetwork`, `CouplingNetworks`,
`BatchNormState`). A flow is a `tfd.TransformedDistribution` over a `tfb.Chain` of
them, and its ``trainable_variables`` are the layers' weights.

Example: a MAF of two autoregressive layers with a batch norm between them (TFP's
`Chain` applies its last bijector first when sampling, so the list runs from the
data side to the noise side):

>>> import numpy as np, tensorflow_probability as tfp
>>> import tfp_maf
>>> tfd, tfb = tfp.distributions, tfp.bijectors
>>> made_0 = tfp_maf.MADENetwork(2, hidden_units=[8], seed=0)
>>> made_1 = tfp_maf.MADENetwork(2, hidden_units=[8], order="right-to-left", seed=1)
>>> norm = tfp_maf.BatchNormState(2, name="norm_0")
>>> flow = tfd.TransformedDistribution(
...     tfd.MultivariateNormalDiag(loc=np.zeros(2, np.float32)),
...     tfb.Chain([tfp_maf.MaskedAutoregressive(made_0, name="maf_0"), norm.bijector(),
...                tfp_maf.MaskedAutoregressive(made_1, name="maf_1")]))
>>> flow.sample(3, seed=0).shape
TensorShape([3, 2])
>>> flow.log_prob(np.zeros((3, 2), np.float32)).shape
TensorShape([3])
>>> len(flow.trainable_variables)  # 2 x (2 kernels + 2 biases) + beta, gamma
10

In training, the batch norm normalises with the minibatch's statistics: pass
``training=True`` to it by name (`flow_kwargs` builds the dict, `bind_kwargs` binds it):

>>> tfp_maf.flow_kwargs(flow.bijector, training=True)
{'norm_0': {'training': True}}
"""

from tfp_maf import (
    _keras_backend,  # noqa: F401  first: it refuses a Keras backend other than TensorFlow's
    arguments,
    bijectors,
    devices,
    distributions,
    layers,
    masks,
    sampling,
    splines,
    tracing,
)
from tfp_maf.bijectors import (
    AffineCoupling,
    ExpGammaBatchNorm,
    LogTails,
    MaskedAutoregressive,
    MaskedRationalQuadraticSpline,
    Standardize,
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
    Standardization,
    apply_masks,
)

__version__ = "0.5.1"

__all__ = [
    "AffineCoupling",
    "BatchNormState",
    "CouplingNetworks",
    "ExpGammaBatchNorm",
    "LogTails",
    "MADEMoG",
    "MADENetwork",
    "MaskedAutoregressive",
    "MaskedDense",
    "MaskedRationalQuadraticSpline",
    "Standardization",
    "Standardize",
    "apply_masks",
    "arguments",
    "batch_moments",
    "bijectors",
    "bind_kwargs",
    "coupling_partition",
    "devices",
    "distributions",
    "flow_kwargs",
    "layers",
    "masks",
    "sampling",
    "splines",
    "tracing",
]
