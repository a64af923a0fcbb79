"""Real NVP (Dinh et al. 2017): affine coupling layers with batch norms between them."""

from __future__ import annotations

import keras

import tfp_maf
from keras_models.zoo.base import LOG_SCALE_BOUND, FlowModel, regularizer
from tfp_maf.arguments import check_bound, check_int

__all__ = ["RealNVP"]


@keras.saving.register_keras_serializable(package="keras_models")
class RealNVP(FlowModel):
    """Real NVP (K): K coupling layers alternating parity, a batch norm after each.

    The paper's general-purpose Real NVP (Dinh et al. 2017; section 3.3): each
    layer is a `tfp_maf.AffineCoupling` that copies half the variables and scales
    and shifts the other half,

        x_t' = x_t exp(alpha(x_c)) + mu(x_c)

    where ``alpha`` is a network with tanh hidden units and ``mu`` one with relu
    hidden units (`tfp_maf.CouplingNetworks`); layer ``k`` copies the even
    positions when ``k`` is even, the odd ones otherwise. Both directions cost one
    pass of each layer's networks. The paper trains Real NVP (5) and (10) with
    Adam at ``1e-4``.

    Args:
      event_size: ``D``, the number of variables, at least 2.
      num_layers: ``K``, the coupling layers (5 or 10 in the paper).
      log_scale_bound: a soft bound ``B`` on the log-scales, 8 by default (as `MAF`);
        None: unbounded, as in the paper.
      **kwargs: the flows' keywords (``hidden_units`` of every network;
        ``conditional_dims``: ``y`` is concatenated to the copied half;
        ``context_network``; ``l2``; ``seed``: coupling ``i`` gets ``seed + i``),
        and Keras' ``name``, ``dtype``, ``trainable``.

    Raises:
      TypeError: for any other keyword: the MADE options (``activation`` among
        them: the networks' activations are the paper's, fixed) and
        ``num_components``.
      ValueError: if ``event_size < 2`` or the dtype policy is neither float32
        nor float64.

    Example:

    >>> import keras, numpy as np
    >>> from keras_models import RealNVP
    >>> x = np.random.default_rng(0).standard_normal((32, 2)).astype(np.float32)
    >>> model = RealNVP(2, num_layers=2, hidden_units=[8])
    >>> model.compile(optimizer=keras.optimizers.Adam(1e-3))
    >>> history = model.fit(x, batch_size=16, epochs=1, verbose=0)
    >>> bool(np.isfinite(history.history["loss"][0]))
    True
    >>> model.log_prob(x[:4]).shape, model.sample(3, seed=0).shape
    (TensorShape([4]), TensorShape([3, 2]))

    #### References

    [1] Dinh, Sohl-Dickstein, Bengio. Density estimation using Real NVP.
        ICLR 2017. https://arxiv.org/abs/1605.08803
    """

    # Saved by 0.3.0 and 0.4.0, which took the zoo's common keywords and used none of these.
    retired_config_keys = (
        "activation", "hidden_degrees", "kernel_blocks", "kernel_blocks_device", "initialization",
        "conditional_input_layers", "scale_parameterization", "num_components",
    )

    def __init__(self, event_size: int, *, num_layers: int = 5, log_scale_bound: float | None = LOG_SCALE_BOUND,
                 **kwargs):
        super().__init__(event_size, **kwargs)
        if self.event_size < 2:
            raise ValueError(f"Real NVP needs at least 2 variables, got {self.event_size}.")
        self.num_layers = check_int(num_layers, "num_layers")
        self.log_scale_bound = check_bound(log_scale_bound, "log_scale_bound")
        self.parities = ["even" if i % 2 == 0 else "odd" for i in range(self.num_layers)]
        self.couplings = []
        for i, parity in enumerate(self.parities):
            copied, transformed = tfp_maf.coupling_partition(self.event_size, parity)
            self.couplings.append(
                tfp_maf.CouplingNetworks(
                    len(copied), len(transformed), self.hidden_units,
                    conditional_dims=self.context_dims,
                    kernel_regularizer=regularizer(self.l2), seed=self.seed + i, dtype=self.dtype_policy,
                    name=f"coupling_{i}",
                )
            )
        self.norms = [self._batch_norm(i) for i in range(self.num_layers)]

    def _bijectors(self):
        bijectors = []
        for i, (nets, parity) in enumerate(zip(self.couplings, self.parities, strict=True)):
            bijectors.append(
                tfp_maf.AffineCoupling(
                    nets, self.event_size, parity, name=f"coupling_{i}",
                    log_scale_bound=self.log_scale_bound,
                )
            )
            bijectors.append(self.norms[i].bijector(keep_epoch_moments=self._keeps_epoch_moments))
        return bijectors

    def get_config(self):
        config = super().get_config()
        config.update(num_layers=self.num_layers, log_scale_bound=self.log_scale_bound)
        return config
