"""What every masked autoregressive bijector shares: one MADE, one elementwise map.

A masked autoregressive bijector maps each variable by a one-dimensional bijection whose
parameters the MADE gives from the variables before it (and ``y``):

    inverse (data -> noise):  u_i = g^-1(x_i; theta_i),  theta = made(x, y)    (one pass)
    forward (noise -> data):  x_i = g(u_i; theta_i(x_<i, y))                    (sequential)

A subclass says what ``g`` is: `MaskedAutoregressive` an affine map,
`MaskedRationalQuadraticSpline` a spline. It implements

- ``_head(made_outputs)``: the MADE's outputs as the map's parameters ``theta``;
- ``_map_inverse(x, theta)`` and ``_map_forward(u, theta)``: the map each way, with the
  log-det per variable;
- ``_sampling_step()``: ``(key, emit)``, one step of the sequential pass
  (`tfp_maf.sampling`) from the raw outputs ``[P, B]`` of the variable of degree t + 1.
  ``emit`` is a module-level function bound to plain values (`functools.partial`), never
  a method: the engine keeps it with its compiled loops for the life of the process,
  and a bound method would keep the bijector, its MADE and its model with it.

The sequential forward direction runs in one MADE pass spread over D steps for a
`tfp_maf.MADENetwork`, and as D full passes for any other autoregressive callable, or
within `tfp_maf.sampling.full_passes` (a graph for ONNX or LiteRT).
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from tfp_maf import _checks, sampling
from tfp_maf._platform.layer_tracking import LayerVariables
from tfp_maf.bijectors.fused import FusedBijector, dtype_of
from tfp_maf.math import broadcast_batch

__all__ = ["MaskedTransform"]


class MaskedTransform(LayerVariables, FusedBijector):
    """Base of the masked autoregressive bijectors (see the module docstring)."""

    def __init__(self, made: Callable, validate_args: bool, parameters: dict, name: str):
        self._made = made
        self._track_layers(made)
        self._event_size = getattr(made, "event_size", None)
        self._conditional_dims = getattr(made, "conditional_dims", None)
        super().__init__(
            forward_min_event_ndims=1,
            validate_args=validate_args,
            dtype=dtype_of(made),
            parameters=parameters,
            name=name,
        )

    @classmethod
    def _parameter_properties(cls, dtype):
        return {}  # The parameters live in the network.

    @property
    def made(self) -> Callable:
        """The network that gives the map's parameters, as passed to the constructor."""
        return self._made

    @property
    def conditional_dims(self) -> int | None:
        """Width ``K`` of the side information ``y`` (the MADE's), or None if unconditional."""
        return self._conditional_dims

    # -- what a subclass defines ---------------------------------------------

    def _head(self, outputs):
        raise NotImplementedError

    def _map_inverse(self, x, theta):
        raise NotImplementedError

    def _map_forward(self, u, theta):
        raise NotImplementedError

    def _sampling_step(self) -> tuple:
        raise NotImplementedError

    # -- the autoregressive wiring -------------------------------------------

    def _parameters_at(self, x, conditional_input):
        if self._event_size is not None:
            _checks.check_event_size(x, self._event_size, self.name)
        if conditional_input is None:
            outputs = self._made(x)
        else:
            outputs = self._made(x, conditional_input=conditional_input)
        self._retrack_layers()
        return self._head(outputs)

    def _inverse_and_log_det(self, x, conditional_input=None):
        conditional_input = _checks.as_conditional_input(conditional_input, self.dtype)
        u, log_det = self._map_inverse(x, self._parameters_at(x, conditional_input))
        return u, tf.reduce_sum(log_det, axis=-1)

    def _forward_and_log_det(self, u, conditional_input=None):
        conditional_input = _checks.as_conditional_input(conditional_input, self.dtype)
        if self._event_size is not None:
            _checks.check_event_size(u, self._event_size, self.name)
        # A tfp_maf MADE, unless the graph is for a converter (`tfp_maf.sampling.full_passes`).
        if sampling.can_sample(self._made) and not sampling.full_passes_active():
            return self._mask_aware_forward(u, conditional_input)
        return self._plain_forward(u, conditional_input)

    def _mask_aware_forward(self, u, conditional_input):
        """x = f(u) in one MADE pass spread over D steps (see `tfp_maf.sampling`)."""
        key, emit = self._sampling_step()
        x, log_det = sampling.sample_sequentially(self._made, emit, u, conditional_input, key=key)
        return x, tf.reduce_sum(log_det, axis=-1)

    def _plain_forward(self, u, conditional_input=None):
        """x = f(u) by D full passes: for any autoregressive callable (and as the oracle)."""
        event_size = self._event_size or u.shape[-1]
        if event_size is None:
            raise ValueError(f"{self.name}: the number of variables must be known statically.")
        if conditional_input is not None:
            # The loop state must have its final shape from the first pass.
            u, _ = broadcast_batch(u, conditional_input)

        def body(x, _):
            return self._map_forward(u, self._parameters_at(x, conditional_input))

        x, log_det = tf.while_loop(
            lambda x, _: True,
            body,
            (tf.zeros_like(u), tf.zeros_like(u)),
            maximum_iterations=event_size,
        )
        return x, tf.reduce_sum(log_det, axis=-1)
