"""MADE as Keras 3 layers: the trainable shell behind MAF and MADE MoG.

A MADE maps ``x`` (and optionally side information ``y``) to the parameters
of every conditional ``p(x_i | x_<i, y)`` in one pass. Masks multiply the
weight matrices so that output ``i`` only sees variables before ``i`` in the
order (`tfp_maf.masks`); ``y`` is not masked: it comes before every ``x_i``.

    h_0 = x
    h_l = act(h_{l-1} @ (W_l * M_l) + y @ V_l + b_l)        l = 1..L
    out = h_L @ (W_out * M_out) + b_out                     [..., D, P]

``P`` is 2 for the Gaussian head (shift ``mu_i``, log-scale ``alpha_i``),
``3 C`` for the mixture head (``C`` logits, means, log-scales), and ``params``
for the open head (one tensor ``[..., D, P]``, as TFP's MADE gives; a spline's
``3 K - 1`` parameters, say). The head's
parameters share ONE output matmul: its mask is the output mask repeated ``P``
times, so a whole MADE costs ``L + 1`` matmuls (plus one per layer for ``y``).

Example:

>>> import numpy as np
>>> from tfp_maf.layers import MADENetwork
>>> made = MADENetwork(3, hidden_units=[8], seed=0)
>>> shift, log_scale = made(np.zeros((5, 3), np.float32))
>>> tuple(shift.shape), tuple(log_scale.shape)
((5, 3), (5, 3))

References:
  [1] Germain, Gregor, Murray, Larochelle. MADE: Masked Autoencoder for
      Distribution Estimation. ICML 2015. https://arxiv.org/abs/1502.03509
  [2] Papamakarios, Pavlakou, Murray. Masked Autoregressive Flow for Density
      Estimation. NeurIPS 2017. https://arxiv.org/abs/1705.07057
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import keras
import numpy as np
import tensorflow as tf

from tfp_maf import _checks, masks
from tfp_maf.arguments import check_int, check_ints
from tfp_maf.layers._seeds import seeded
from tfp_maf.layers.block_layout import auto_blocks, check_rule, reorder
from tfp_maf.layers.masked_dense import MaskedDense, apply_masks
from tfp_maf.math import broadcast_batch, rows_are_aligned

__all__ = ["CONDITIONAL_INPUT_LAYERS", "SCALE_PARAMETERIZATIONS", "MADENetwork", "check_conditional_input_layers",
           "check_scale_parameterization", "kernel_blocks_by_layer", "legacy_kernel_blocks"]

#: Where `MADENetwork` feeds the side information ``y`` (TFP's names for the choice).
CONDITIONAL_INPUT_LAYERS = ("all_layers", "first_layer")

#: What `MADENetwork`'s scale outputs are: log standard deviations, or log-precisions.
SCALE_PARAMETERIZATIONS = ("log_scale", "log_precision")


def check_scale_parameterization(value: str) -> str:
    """``value`` if it is one of `SCALE_PARAMETERIZATIONS`, else a ValueError naming them."""
    if value not in SCALE_PARAMETERIZATIONS:
        raise ValueError(f"scale_parameterization must be one of {SCALE_PARAMETERIZATIONS}, got {value!r}.")
    return value


def check_conditional_input_layers(value: str) -> str:
    """``value`` if it is one of `CONDITIONAL_INPUT_LAYERS`, else a ValueError naming them."""
    if value not in CONDITIONAL_INPUT_LAYERS:
        raise ValueError(f"conditional_input_layers must be one of {CONDITIONAL_INPUT_LAYERS}, got {value!r}.")
    return value


def _explicit_degrees(hidden_degrees, hidden_units, D: int) -> list[np.ndarray]:
    """Given degrees, one sequence per hidden layer, checked: as many as the layers, each
    as long as its layer, each degree in ``[1, max(D - 1, 1)]``."""
    degrees = [np.asarray(d) for d in hidden_degrees]
    top = max(D - 1, 1)
    if len(degrees) != len(hidden_units) or any(
            d.shape != (units,) or not np.issubdtype(d.dtype, np.integer) or d.size and (d.min() < 1 or d.max() > top)
            for d, units in zip(degrees, hidden_units, strict=True)):
        raise ValueError(
            f"hidden_degrees must be 'sequential', 'random' or one sequence of integers in [1, {top}] per hidden "
            f"layer, of the layer's width {list(hidden_units)}; got {hidden_degrees!r}.")
    return [d.astype(np.int64) for d in degrees]


@keras.saving.register_keras_serializable(package="tfp_maf")
class MADENetwork(keras.layers.Layer):
    """Masked autoencoder giving the parameters of each conditional of ``x``.

    Calling the layer returns, for the Gaussian head (``num_components=None``),
    ``(shift, log_scale)`` each of shape ``[..., D]``; for the mixture head,
    ``(logits, loc, log_scale)`` each of shape ``[..., D, C]``; for the open head
    (``params=P``), one tensor ``[..., D, P]``.

    Args:
      event_size: ``D``, the number of variables.
      hidden_units: sizes of the hidden layers, e.g. ``[100, 100]``.
      num_components: ``None`` for Gaussian conditionals, else ``C``, the
        number of mixture components of each conditional.
      activation: hidden activation, ``"relu"`` (the paper's default) or
        ``"tanh"`` (the paper's choice for GAS).
      order: ``"left-to-right"``, ``"right-to-left"``, ``"random"`` or an
        explicit permutation (see `tfp_maf.masks.order_permutation`).
      hidden_degrees: ``"sequential"`` (the paper) or ``"random"``
        (Germain et al.; the paper's CIFAR-10 setting), or the degrees themselves, one
        sequence of integers in ``[1, max(D - 1, 1)]`` per hidden layer. A config
        saves random ones (and a random order) as the integers drawn.
      conditional_dims: width ``K`` of the side information ``y``, or ``None``.
      conditional_input_layers: which layers ``y`` feeds (through weights of its own,
        unmasked: ``y`` precedes every ``x_i`` in the order): ``"all_layers"`` (the
        default: every hidden layer) or ``"first_layer"`` (the first hidden layer
        only, as the paper's published code wires it); the names are those of TFP's
        Keras 2 MADE layer. Without hidden layers ``y`` feeds the output either way.
      seed: seed of the random order and random degrees, and of the initial weights
        (each weight its own stream): the same seed gives the same network. None:
        random, from Keras' global seed.
      kernel_initializer: initializer of the hidden kernels.
      output_kernel_initializer: initializer of the output kernel. The default
        ``None`` means zeros for the Gaussian head, so that a MAF starts as the
        identity map (a well-conditioned start for a deep stack), and
        Glorot-uniform for the mixture head, where equal components would get
        equal gradients and never separate.
      output_bias_initializer: initializer of the output bias (zeros by default).
      kernel_regularizer: applied to every kernel, e.g. ``keras.regularizers.L2(1e-6)``.
      kernel_blocks: how the kernels are stored (`MaskedDense`'s ``blocks``): ``"auto"``
        stores the kernels of large layers in degree blocks on a CPU, where skipping
        the masks' zeros pays, and every kernel dense on a GPU
        (`tfp_maf.layers.block_layout.auto_blocks`); an int sets the blocks of every
        layer, 1 stores all dense; a sequence gives each layer's (the hidden layers',
        then the output's); a function maps a kernel's shape ``(fan_in, units)`` to its
        blocks. The values are the same. The network decides once, when it is built:
        `kernel_blocks_by_layer` holds the counts, and the config saves them, so a
        saved network loads with the storage it was saved with, on any machine and in
        later releases (its optimizer state fits it).
      kernel_blocks_device: the device kind ``"auto"`` chooses for, ``"cpu"`` or
        ``"gpu"``; None (the default): the kind TensorFlow places ops on in the
        current process. Only with ``"auto"``.
      params: None, or ``P``: the open head, ``P`` unconstrained outputs per variable
        returned as one tensor ``[..., D, P]`` (for conditionals of other families:
        `tfp_maf.MaskedRationalQuadraticSpline` reads ``3 K - 1`` of them). Its output kernel starts at
        zero, as the Gaussian head's. Not with ``num_components``.
      scale_parameterization: what the head's scale outputs are: ``"log_scale"`` (the
        default), the log standard deviation ``a`` itself, or ``"log_precision"``, a
        log-precision ``r`` read as ``a = -r / 2``, as the paper's published code has
        it. The family of densities is the same; an optimizer whose steps have a fixed
        size, as Adam's, then moves the log-scales half as far per step, and the
        initializers draw ``r``. The output layer's weights hold ``r``'s; the call
        returns ``a`` either way. Not with ``params``.
      **kwargs: Keras' layer arguments (``name``, ``dtype``, ...).

    Attributes:
      kernel_blocks_by_layer: the blocks of each layer's kernel, the hidden layers' then
        the output's, as decided when the network was built.
      sampling_tuning: None, or how `tfp_maf.sampling.sample_sequentially` schedules its
        pass (`tfp_maf.sampling.Tuning`: block size, chunk rows, parts); None chooses
        from the sizes. Not saved with the model: it changes no value.
      input_degrees: int array ``[D]``, each variable's 1-based position in the order.
      degrees: one int array of degrees per hidden layer (`tfp_maf.masks`).
      masks: the masks ``[fan_in, fan_out]``, one per hidden layer and one for the
        output (before it is repeated for the head's parameters).

    Call arguments:
      x: ``batch + [D]``.
      conditional_input: ``y``, ``batch + [K]`` (broadcast against ``x``'s batch);
        required when ``conditional_dims`` is set, refused otherwise.

    Raises:
      ValueError: at construction, if ``event_size``, ``num_components`` or
        ``conditional_dims`` or ``params`` is below 1, both ``num_components`` and
        ``params`` are set, ``kernel_blocks`` is not ``"auto"``, an int >= 1, one
        per layer or a function giving them, ``kernel_blocks_device`` is not a device
        kind or is given without ``"auto"``,
        ``scale_parameterization`` is neither ``"log_scale"`` nor ``"log_precision"``
        (or is not ``"log_scale"`` with ``params``), ``order`` is not
        an order, ``hidden_degrees`` is neither a method nor degrees of the layers'
        widths, or a hidden layer has no units; at call time, if the last axis of
        ``x`` is not ``D``, or ``y`` is missing, unexpected or of the wrong width.

    Example:

    >>> import numpy as np
    >>> made = MADENetwork(3, hidden_units=[8], seed=0)
    >>> shift, log_scale = made(np.zeros((5, 3), np.float32))
    >>> shift.shape, log_scale.shape
    (TensorShape([5, 3]), TensorShape([5, 3]))

    The mixture head gives ``C`` logits, means and log-scales per variable:

    >>> mog = MADENetwork(3, hidden_units=[8], num_components=4, seed=0)
    >>> [t.shape for t in mog(np.zeros((5, 3), np.float32))]
    [TensorShape([5, 3, 4]), TensorShape([5, 3, 4]), TensorShape([5, 3, 4])]

    The open head gives ``P`` outputs per variable in one tensor:

    >>> MADENetwork(3, hidden_units=[8], params=23, seed=0)(np.zeros((5, 3), np.float32)).shape
    TensorShape([5, 3, 23])

    Output ``i`` depends only on the variables before ``i`` in the order: changing
    ``x_1`` changes the parameters of ``x_2`` alone (the output layer starts at
    zero by default, so give it weights first; tanh units, unlike relu ones, all pass a
    change on):

    >>> made = MADENetwork(3, hidden_units=[8], activation="tanh",
    ...                    output_kernel_initializer="glorot_uniform", seed=0)
    >>> before, _ = made(np.zeros((1, 3), np.float32))
    >>> after, _ = made(np.array([[0., 1., 0.]], np.float32))
    >>> (after.numpy() != before.numpy()).tolist()
    [[False, False, True]]
    """

    def __init__(
        self,
        event_size: int,
        hidden_units: Sequence[int] = (64, 64),
        num_components: int | None = None,
        activation="relu",
        order: str | Sequence[int] = "left-to-right",
        hidden_degrees: str | Sequence[Sequence[int]] = "sequential",
        conditional_dims: int | None = None,
        conditional_input_layers: str = "all_layers",
        seed: int | None = None,
        kernel_initializer="glorot_uniform",
        output_kernel_initializer=None,
        output_bias_initializer="zeros",
        kernel_regularizer=None,
        kernel_blocks: int | str | Sequence[int] | Callable[[tuple[int, int]], int] = "auto",
        kernel_blocks_device: str | None = None,
        params: int | None = None,
        scale_parameterization: str = "log_scale",
        **kwargs,
    ):
        super().__init__(**kwargs)
        event_size = check_int(event_size, "event_size")
        num_components = check_int(num_components, "num_components", optional=True)
        conditional_dims = check_int(conditional_dims, "conditional_dims", optional=True)
        seed = check_int(seed, "seed", minimum=0, optional=True)
        if params is not None and (check_int(params, "params") < 1 or num_components is not None):
            raise ValueError(
                f"params must be >= 1 or None, and None with num_components; got params={params}, "
                f"num_components={num_components}.")
        self.scale_parameterization = check_scale_parameterization(scale_parameterization)
        if params is not None and scale_parameterization != "log_scale":
            raise ValueError(f"scale_parameterization must be 'log_scale' with the open head (params={params}), "
                             f"which has no scale outputs; got {scale_parameterization!r}.")
        self.params = None if params is None else int(params)
        self.event_size = int(event_size)
        self.hidden_units = check_ints(hidden_units, "hidden_units")
        self.num_components = None if num_components is None else int(num_components)
        self.activation = keras.activations.get(activation)
        self.order = order if isinstance(order, str) else [int(i) for i in order]
        self.hidden_degrees = hidden_degrees
        self.conditional_dims = None if conditional_dims is None else int(conditional_dims)
        self.conditional_input_layers = check_conditional_input_layers(conditional_input_layers)
        self.seed = seed
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.output_kernel_initializer = output_kernel_initializer
        self.output_bias_initializer = keras.initializers.get(output_bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)

        D = self.event_size
        self.permutation = masks.order_permutation(D, order, seed)
        self.input_degrees = masks.input_degrees(D, self.permutation)
        if isinstance(hidden_degrees, str):
            degrees, prev = [], self.input_degrees
            for layer_index, units in enumerate(self.hidden_units):
                layer_seed = None if seed is None else seed + 1 + layer_index
                prev = masks.hidden_degrees(units, D, hidden_degrees, prev, layer_seed)
                degrees.append(prev)
        else:  # the integers a config saved (`get_config`), or a user's own
            degrees = _explicit_degrees(hidden_degrees, self.hidden_units, D)
            self.hidden_degrees = [d.tolist() for d in degrees]
        self.degrees = degrees
        self.masks = masks.made_masks(self.input_degrees, degrees)

        self.params_per_dim = (self.params if self.params is not None
                               else 2 if self.num_components is None else 3 * self.num_components)
        output_mask = np.repeat(self.masks[-1], self.params_per_dim, axis=1)
        self.kernel_blocks_by_layer = kernel_blocks_by_layer(
            kernel_blocks, kernel_blocks_device, [m.shape for m in (*self.masks[:-1], output_mask)])
        self.hidden_layers = [
            MaskedDense(
                units,
                mask,
                blocks=self.kernel_blocks_by_layer[i],
                activation=None,  # applied after adding the y projection
                kernel_initializer=seeded(self.kernel_initializer, seed, i),
                kernel_regularizer=self.kernel_regularizer,
                dtype=self.dtype_policy,
                name=f"hidden_{i}",
            )
            for i, (units, mask) in enumerate(zip(self.hidden_units, self.masks[:-1], strict=True))
        ]
        if output_kernel_initializer is None:
            output_kernel_initializer = "zeros" if self.num_components is None else "glorot_uniform"
        self.output_layer = MaskedDense(
            D * self.params_per_dim,
            output_mask,
            blocks=self.kernel_blocks_by_layer[-1],
            kernel_initializer=seeded(output_kernel_initializer, seed, 1000),
            bias_initializer=seeded(self.output_bias_initializer, seed, 1001),
            kernel_regularizer=self.kernel_regularizer,
            dtype=self.dtype_policy,
            name="output",
        )
        # y feeds every hidden layer, or the first (the output layer when there is
        # none), unmasked: y precedes every x_i in the order.
        self.conditional_kernels = []
        if self.conditional_dims is not None:
            widths = self.hidden_units or [D * self.params_per_dim]
            if self.conditional_input_layers == "first_layer":
                widths = widths[:1]
            self.conditional_kernels = [
                self.add_weight(
                    name=f"conditional_kernel_{i}",
                    shape=(self.conditional_dims, w),
                    initializer=seeded(self.kernel_initializer, seed, 2000 + i),
                    regularizer=self.kernel_regularizer,
                )
                for i, w in enumerate(widths)
            ]
        self.sampling_tuning = None
        self._output_factors = self._scale_output_factors()
        self.built = True

    def _scale_output_factors(self) -> np.ndarray | None:
        """Per output unit ``[D * P]``: -1/2 on the scale outputs of a log-precision
        head, 1 elsewhere; None for a log-scale head (nothing to multiply)."""
        if self.scale_parameterization == "log_scale":
            return None
        P = self.params_per_dim
        scales = 1 if self.num_components is None else self.num_components  # the last outputs of each variable
        factors = np.ones(P)
        factors[P - scales:] = -0.5
        return np.tile(factors, self.event_size)  # output unit d * P + p (the mask's repeat)

    def to_scale_outputs(self, t):
        """``t`` ``[..., D * P]`` in output units' order, the scale outputs turned into
        log-scales (a log-precision head's ``r`` into ``-r / 2``); ``t`` itself for a
        log-scale head. The output layer's weights give raw outputs; this reads them."""
        if self._output_factors is None:
            return t
        return t * tf.constant(self._output_factors, t.dtype)

    def set_weights(self, weights):
        super().set_weights(weights)
        apply_masks(self)  # the kernels hold zeros outside their masks (`MaskedDense`)

    # -- the network ---------------------------------------------------------

    def flat_inputs(self, x, conditional_input=None):
        """``(x2d, y2d, batch_shape)``: ``x`` checked, broadcast against ``y`` and its batch
        flattened to one axis (``y2d`` None without ``y``), as `flat_params` reads them."""
        x = tf.convert_to_tensor(x, dtype=self.compute_dtype)
        _checks.check_event_size(x, self.event_size, "MADE")
        _checks.check_conditional_input(conditional_input, self.conditional_dims, "MADE")
        y = None
        if conditional_input is not None:
            y = tf.cast(conditional_input, self.compute_dtype)
            if not rows_are_aligned():
                x, y = broadcast_batch(x, y)
            y = tf.reshape(y, [-1, self.conditional_dims])
        return tf.reshape(x, [-1, self.event_size]), y, tf.shape(x)[:-1]

    def conditional_terms(self, y):
        """``y @ V_l`` for every layer that y feeds, its units in the order the layer
        gives them (`MaskedDense.output_order`), and None for a hidden layer it does not
        feed; computed once per ``y``."""
        layers = max(len(self.hidden_units), 1)
        if y is None:
            return [None] * layers
        fed = (self.hidden_layers or [self.output_layer])[:len(self.conditional_kernels)]
        terms = [tf.matmul(y, reorder(tf.cast(v, y.dtype), None, layer.output_order))
                 for v, layer in zip(self.conditional_kernels, fed, strict=True)]
        return terms + [None] * (layers - len(terms))  # layers that y does not feed

    def flat_params(self, x2d, y_terms):
        """Raw outputs ``[N, D * P]`` from flat inputs ``[N, D]``.

        The hidden units pass from layer to layer in the order each layer gives them
        (`MaskedDense.call_in_order`), and only the outputs are put back in order."""
        h, order = x2d, None
        # Without hidden layers the one y term feeds the output, and this loop is empty.
        for layer, y_term in zip(self.hidden_layers, y_terms, strict=bool(self.hidden_layers)):
            h, order = layer.call_in_order(h, order, addend=y_term)
            h = self.activation(h)
        out, order = self.output_layer.call_in_order(h, order, addend=None if self.hidden_layers else y_terms[0])
        return self.to_scale_outputs(reorder(out, order, None))

    def call(self, x, conditional_input=None):
        x2d, y, batch_shape = self.flat_inputs(x, conditional_input)
        out = self.flat_params(x2d, self.conditional_terms(y))
        return self.split_params(out, batch_shape)

    def split_params(self, out, batch_shape):
        """Splits raw outputs into the head's parameters of shape batch + [D(, C)]."""
        D, P = self.event_size, self.params_per_dim
        # A flat batch (training's) needs no shape arithmetic: each op costs in every trace.
        flat = batch_shape.shape.rank == 1 and batch_shape.shape[0] == 1
        out = tf.reshape(out, [-1, D, P] if flat else tf.concat([batch_shape, [D, P]], 0))
        if self.params is not None:
            return out
        # One split op (and one concat in the gradient), where slices trace about ten ops
        # each way.
        if self.num_components is None:
            return tuple(tf.unstack(out, num=2, axis=-1))
        C = self.num_components
        return tuple(tf.split(out, [C, C, P - 2 * C], axis=-1))

    def get_config(self):
        config = super().get_config()
        config.update(
            event_size=self.event_size,
            hidden_units=self.hidden_units,
            num_components=self.num_components,
            activation=keras.activations.serialize(self.activation),
            # A random order or random degrees are saved as the integers drawn, so that the
            # network loads as it was saved whether or not a seed drew them.
            order=self.permutation.tolist() if self.order == "random" else self.order,
            hidden_degrees=(
                [d.tolist() for d in self.degrees] if self.hidden_degrees == "random" else self.hidden_degrees),
            conditional_dims=self.conditional_dims,
            conditional_input_layers=self.conditional_input_layers,
            seed=self.seed,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            output_kernel_initializer=(
                keras.initializers.serialize(keras.initializers.get(self.output_kernel_initializer))
                if self.output_kernel_initializer is not None
                else None
            ),
            output_bias_initializer=keras.initializers.serialize(self.output_bias_initializer),
            kernel_regularizer=keras.regularizers.serialize(self.kernel_regularizer),
            kernel_blocks=list(self.kernel_blocks_by_layer),  # the storage as built
            params=self.params,
            scale_parameterization=self.scale_parameterization,
        )
        return config

    @classmethod
    def from_config(cls, config):
        return super().from_config(legacy_kernel_blocks(config))


def kernel_blocks_by_layer(kernel_blocks, device: str | None, shapes) -> tuple[int, ...]:
    """The blocks of each kernel of ``shapes`` (``[fan_in, units]``, in the layers' order)
    that ``kernel_blocks`` asks for (`MADENetwork`'s argument: ``"auto"``, an int, one per
    layer, or a function of a kernel's shape), ``"auto"`` on the ``device`` kind.

    >>> kernel_blocks_by_layer("auto", "cpu", [(784, 1024), (1024, 23520)])
    (4, 8)
    >>> kernel_blocks_by_layer(2, None, [(8, 16), (16, 4)])
    (2, 2)
    """
    if isinstance(kernel_blocks, str):
        if kernel_blocks != "auto":
            raise ValueError(f"kernel_blocks must be 'auto', an int >= 1, one per layer or a function of a "
                             f"kernel's shape; got {kernel_blocks!r}.")
        return tuple(auto_blocks(tuple(shape), device) for shape in shapes)
    if device is not None:
        raise ValueError(f"kernel_blocks_device chooses the storage of kernel_blocks='auto'; with kernel_blocks="
                         f"{kernel_blocks!r} it would change nothing. Leave it None.")
    if callable(kernel_blocks):
        counts = [kernel_blocks(tuple(shape)) for shape in shapes]
    elif isinstance(kernel_blocks, (int, np.integer)) and not isinstance(kernel_blocks, bool):
        counts = [kernel_blocks] * len(shapes)
    else:
        counts = list(kernel_blocks)
        if len(counts) != len(shapes):
            raise ValueError(f"kernel_blocks must give one count per layer ({len(shapes)}: the hidden layers', "
                             f"then the output's), got {kernel_blocks!r}.")
    return tuple(check_int(c, "kernel_blocks") for c in counts)


def legacy_kernel_blocks(config: dict) -> dict:
    """``config`` with a storage saved by 0.5.1 and before read as what it chose: they
    saved ``kernel_blocks`` as given (``"auto"`` or an int), the device kind and the rule
    "auto" followed (``kernel_blocks_rule``; none before 0.5.0, which chose by rule 1,
    `tfp_maf.layers.block_layout.AUTO_RULE`). ``"auto"`` becomes that choice, as a
    function of a kernel's shape; a config of this release passes as it is."""
    config = dict(config)
    rule = check_rule(config.pop("kernel_blocks_rule", 1))
    device = config.pop("kernel_blocks_device", None)
    blocks = config.get("kernel_blocks", "auto")
    if blocks == "auto":
        config["kernel_blocks"] = functools.partial(auto_blocks, device=device, rule=rule)
    elif device is not None and not isinstance(blocks, (int, np.integer)):
        # An int was saved with the device kind, which it never read; with counts the
        # device is a caller's, refused as given.
        config["kernel_blocks_device"] = device
    return config
