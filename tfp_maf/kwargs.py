"""Routing call-time keywords (``conditional_input``, ``training``) through a flow.

`tfb.Chain` passes keyword arguments to its parts by *name*:
``chain.forward(x, **{"made_0": {"conditional_input": y}})``. Building that
dict by hand is error-prone, so `flow_kwargs` walks a bijector and builds it.
`bind_kwargs` goes one step further: it returns the distribution p(x | y) with
``y`` (and ``training``) bound once, so that ``log_prob(x)`` and ``sample(n)``
need no keywords at all (zuko's ``flow(c)``).
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_probability as tfp

from tfp_maf._checks import as_conditional_input

# TFP builds a non-composite base of `tfb.Chain` / `tfb.Invert` /
# `tfd.TransformedDistribution` (not the public class) when the parts are not
# CompositeTensors, as ours (holding Keras layers) are not.
from tfp_maf._platform.compat import CHAIN_TYPES, INVERT_TYPES, TRANSFORMED_DISTRIBUTION_TYPES
from tfp_maf.bijectors._autoregressive import MaskedTransform
from tfp_maf.bijectors.affine_coupling import AffineCoupling
from tfp_maf.bijectors.exp_gamma_batch_norm import ExpGammaBatchNorm
from tfp_maf.distributions.made_mog import MADEMoG

tfd = tfp.distributions

__all__ = ["bind_kwargs", "flow_kwargs"]

_CONDITIONAL = (MaskedTransform, AffineCoupling)  # the affine and spline MADE layers, the couplings


@tf.autograph.experimental.do_not_convert  # as TFP's own code: nothing here branches on a tensor
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
        route the same keywords to both, silently), or a conditional part
        finds no ``conditional_input``.

    Example:

    >>> import numpy as np, tensorflow_probability as tfp
    >>> from tfp_maf import ExpGammaBatchNorm, flow_kwargs
    >>> bn = ExpGammaBatchNorm(np.zeros(2), np.zeros(2), np.zeros(2), np.ones(2), name="bn")
    >>> flow_kwargs(tfp.bijectors.Chain([bn]), training=True)
    {'bn': {'training': True}}

    A conditional MAF layer gets ``y``; an unconditional TFP bijector gets nothing:

    >>> from tfp_maf import BatchNormState, MADENetwork, MaskedAutoregressive
    >>> maf = MaskedAutoregressive(MADENetwork(2, [8], conditional_dims=1), name="maf")
    >>> bn = BatchNormState(2, name="bn").bijector()
    >>> chain = tfp.bijectors.Chain([tfp.bijectors.Shift(1.), maf, bn])
    >>> kw = flow_kwargs(chain, conditional_input=[[1.]], training=False)
    >>> kw
    {'maf': {'conditional_input': [[1.0]]}, 'bn': {'training': False}}
    >>> chain.inverse(np.zeros((1, 2), np.float32), **kw).shape
    TensorShape([1, 2])
    """
    seen: dict[str, object] = {}
    return _route(bijector, conditional_input, training, seen)


def _route(bijector, conditional_input, training, seen) -> dict:
    if isinstance(bijector, INVERT_TYPES):
        return _route(bijector.bijector, conditional_input, training, seen)
    if isinstance(bijector, CHAIN_TYPES):
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


@tf.autograph.experimental.do_not_convert  # as TFP's own code: nothing here branches on a tensor
def bind_kwargs(distribution, conditional_input=None, training=None):
    """``distribution`` with ``conditional_input`` and ``training`` bound to every part.

    Args:
      distribution: a `tfd.TransformedDistribution` over tfp_maf bijectors (any
        `tfb.Chain` / `tfb.Invert` nesting, other TFP bijectors beside them), whose
        base may be a `tfp_maf.MADEMoG`; or a `tfp_maf.MADEMoG`.
      conditional_input: ``y``, given to every conditional part (a tensor, a NumPy
        array or a list whose batch shape broadcasts against the samples').
      training: given to every `ExpGammaBatchNorm` (``None``: their default, the
        stored statistics).

    Returns:
      A distribution of the same kind over the same bijector and layers, whose
      `log_prob`, `sample`, `experimental_sample_and_log_prob`, ... route the bound
      keywords with no ``bijector_kwargs``. Keywords a call passes are added to the
      bound ones, and win where both name the same part. Bound to ``y`` of shape
      ``batch + [K]``, it has batch shape ``batch`` (broadcast with the base's), as
      TFP's distributions have their parameters': ``sample(m)`` gives
      ``[m, *batch, D]`` of independent draws, and ``log_prob`` broadcasts ``x``
      against ``batch``. A conditional base (a `tfp_maf.MADEMoG`) is bound too.

    Raises:
      TypeError: if ``distribution`` is neither a `tfd.TransformedDistribution`
        nor a `tfp_maf.MADEMoG`.
      ValueError: as `flow_kwargs` (two parts of one name, or a conditional
        part without ``conditional_input``).

    Example:

    >>> import numpy as np, tensorflow_probability as tfp
    >>> from tfp_maf import MADENetwork, MaskedAutoregressive, bind_kwargs
    >>> made = MADENetwork(2, hidden_units=[8], conditional_dims=3, seed=0)
    >>> flow = tfp.distributions.TransformedDistribution(
    ...     tfp.distributions.MultivariateNormalDiag(loc=np.zeros(2, np.float32)),
    ...     MaskedAutoregressive(made, name="maf"))
    >>> given_y = bind_kwargs(flow, conditional_input=np.eye(3, dtype=np.float32)[[0, 2]])
    >>> given_y.batch_shape, given_y.sample(seed=1).shape, given_y.sample(3, seed=1).shape
    (TensorShape([2]), TensorShape([2, 2]), TensorShape([3, 2, 2]))
    >>> given_y.log_prob(np.zeros((2, 2), np.float32)).shape
    TensorShape([2])
    """
    # One tensor for every part and every call (TFP's cache matches keywords by identity).
    conditional_input = as_conditional_input(conditional_input, distribution.dtype)
    if isinstance(distribution, MADEMoG):
        if conditional_input is None:
            return distribution
        return distribution.copy(conditional_input=conditional_input)
    if not isinstance(distribution, TRANSFORMED_DISTRIBUTION_TYPES):
        raise TypeError(
            "bind_kwargs expects a tfd.TransformedDistribution or a tfp_maf.MADEMoG, got "
            f"{type(distribution).__name__}."
        )
    bound = flow_kwargs(distribution.bijector, conditional_input, training)
    base = distribution.distribution
    if isinstance(base, (MADEMoG, *TRANSFORMED_DISTRIBUTION_TYPES)):
        base = bind_kwargs(base, conditional_input, training)
    elif conditional_input is not None and base.batch_shape != conditional_input.shape[:-1]:
        # p(x | y) has y's batch shape, as a TFP distribution has its parameters': one
        # independent draw per row of y (a base of batch [] would give every row the same).
        base = tfd.BatchBroadcast(base, with_shape=tf.shape(conditional_input)[:-1])

    def split(kwargs):
        return (
            kwargs.get("distribution_kwargs", {}),
            _merge(bound, kwargs.get("bijector_kwargs", {})),
        )

    return tfd.TransformedDistribution(
        base, distribution.bijector, kwargs_split_fn=split,
        validate_args=distribution.validate_args, name=distribution.name,
    )


def _merge(bound: dict, given: dict) -> dict:
    """Nested routing dicts merged, ``given`` winning on the same keyword."""
    out = dict(bound)
    for key, value in given.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out
