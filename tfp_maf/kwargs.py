"""Routing call-time keywords (``conditional_input``, ``training``) through a flow.

`tfb.Chain` passes keyword arguments to its parts by *name*:
``chain.forward(x, **{"made_0": {"conditional_input": y}})``. Building that
dict by hand is error-prone, so `flow_kwargs` walks a bijector and builds it.
"""

from __future__ import annotations

# TFP builds a `_Chain` / `_Invert` (not the public subclass) when the parts
# are not CompositeTensors, as ours (holding Keras layers) are not.
from tensorflow_probability.python.bijectors.chain import _Chain
from tensorflow_probability.python.bijectors.invert import _Invert

from tfp_maf.bijectors.affine_coupling import AffineCoupling
from tfp_maf.bijectors.exp_gamma_batch_norm import ExpGammaBatchNorm
from tfp_maf.bijectors.masked_autoregressive import MaskedAutoregressive

__all__ = ["flow_kwargs"]

_CONDITIONAL = (MaskedAutoregressive, AffineCoupling)


def flow_kwargs(bijector, conditional_input=None, training=None) -> dict:
    """Keyword arguments for ``bijector``'s methods, routed to every part.

    Args:
      bijector: a tfp_maf bijector, or a `tfb.Chain` / `tfb.Invert` (nested
        to any depth) of them and of other TFP bijectors.
      conditional_input: ``y``, given to every conditional part.
      training: given to every `ExpGammaBatchNorm` (``None``: not passed).

    Returns:
      A dict to splat into ``bijector.forward(x, **kw)`` or to pass as
      ``bijector_kwargs=kw`` to a `tfd.TransformedDistribution`.

    Raises:
      ValueError: if two parts that take keywords share a name (TFP would
        route the same keywords to both, silently).

    Example:

    >>> import numpy as np, tensorflow_probability as tfp
    >>> from tfp_maf import ExpGammaBatchNorm, flow_kwargs
    >>> bn = ExpGammaBatchNorm(np.zeros(2), np.zeros(2), np.zeros(2), np.ones(2), name="bn")
    >>> flow_kwargs(tfp.bijectors.Chain([bn]), training=True)
    {'bn': {'training': True}}
    """
    seen: dict[str, object] = {}
    return _route(bijector, conditional_input, training, seen)


def _route(bijector, conditional_input, training, seen) -> dict:
    if isinstance(bijector, _Invert):
        return _route(bijector.bijector, conditional_input, training, seen)
    if isinstance(bijector, _Chain):
        routed = {}
        for part in bijector.bijectors:
            kw = _route(part, conditional_input, training, seen)
            if kw:
                name = part.name
                if name in routed or (name in seen and seen[name] is not part):
                    raise ValueError(
                        f"two bijectors in this chain are both named {name!r}; "
                        "give every conditional or batch-norm bijector a unique name."
                    )
                seen[name] = part
                routed[name] = kw
        return routed
    if isinstance(bijector, _CONDITIONAL) and bijector.conditional_dims is not None:
        if conditional_input is None:
            raise ValueError(
                f"{bijector.name} is conditional on y of width {bijector.conditional_dims}: "
                "pass conditional_input=y."
            )
        return {"conditional_input": conditional_input}
    if isinstance(bijector, ExpGammaBatchNorm) and training is not None:
        return {"training": training}
    return {}
