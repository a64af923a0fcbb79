"""Connection weights of a model, counted and as the paper's appendix A estimates them.

The paper counts connection weights only (no biases, no batch norm), and assumes masking
removes about half of a MADE's connections. With D inputs, L hidden layers of H units,
C components and K layers:

=========  ==========================================
MADE       3/2 D H + 1/2 (L - 1) H^2
MADE MoG   (C + 1/2) D H + 1/2 (L - 1) H^2
Real NVP   2 K D H + 2 K (L - 1) H^2
MAF        3/2 K D H + 1/2 K (L - 1) H^2
=========  ==========================================

`connection_weights` counts what a model really has: the unmasked entries of every kernel
(conditional kernels apart). For MADE, MAF and Real NVP the two agree to within a few
percent once H >= D; for MADE MoG our head has three outputs per component (logit, mean,
log-scale), so it has about (3C/2 + 1/2) D H, which the paper's formula writes as
(C + 1/2) D H.

Example:

>>> import keras_models as km
>>> model = km.MAF(10, hidden_units=[100, 100], num_layers=5)
>>> measured = connection_weights(model)["connections"]
>>> round(measured / paper_estimate("maf5", D=10, H=100, L=2), 2)
1.0
"""

from __future__ import annotations

import numpy as np

from tfp_maf.layers import CouplingNetworks, MADENetwork, MaskedDense, sublayers

__all__ = ["connection_weights", "paper_estimate"]


def connection_weights(model) -> dict:
    """``{"connections": n, "conditional": m}``: unmasked kernel entries of the density
    network(s), and the entries of the kernels that read the conditional input ``y``."""
    connections = conditional = 0
    for layer in sublayers(model, include_self=False):
        if isinstance(layer, MaskedDense):
            connections += int(np.sum(layer.mask))
        elif isinstance(layer, MADENetwork):
            conditional += sum(int(np.prod(w.shape)) for w in layer.conditional_kernels)
        elif isinstance(layer, CouplingNetworks):
            for net in (layer.scale_net, layer.shift_net):
                for i, dense in enumerate(net):
                    fan_in, units = dense.kernel.shape
                    # The first layer reads [x_copied, y]: its y rows are conditional.
                    from_y = fan_in - layer.num_copied if i == 0 else 0
                    connections += (fan_in - from_y) * units
                    conditional += from_y * units
    return {"connections": connections, "conditional": conditional}


def paper_estimate(name: str, D: int, H: int, L: int, C: int = 10) -> float:
    """The appendix's estimate for a model by its command-line name."""
    K = {"made": 1, "made-mog": 1, "realnvp5": 5, "realnvp10": 10, "maf5": 5, "maf10": 10, "maf-mog5": 5}[name]
    made = 1.5 * D * H + 0.5 * (L - 1) * H**2
    mog = (C + 0.5) * D * H + 0.5 * (L - 1) * H**2
    if name in ("made", "maf5", "maf10"):
        return K * made
    if name == "made-mog":
        return mog
    if name == "maf-mog5":
        return K * made + mog
    return 2 * K * D * H + 2 * K * (L - 1) * H**2
