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

import contextlib
import contextvars
import functools
from collections.abc import Sequence

import keras
import numpy as np
import tensorflow as tf

from tfp_maf import _checks, masks, sampling
from tfp_maf._devices import check_device_kind
from tfp_maf._tracking import sublayers
from tfp_maf.layers._seeds import seeded
from tfp_maf.layers.block_layout import BlockLayout, auto_blocks, reorder, staircase
from tfp_maf.math import broadcast_batch

__all__ = [
    "MADENetwork", "MaskedDense", "apply_masks", "kernels_as_stored", "mask_gradients",
    "masked_gradient",
]

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


_AS_STORED = contextvars.ContextVar("tfp_maf_kernels_as_stored", default=False)


def masked_gradient(kernel, mask):
    """``kernel * mask``: the masked kernel, and ``upstream * mask`` as its gradient.

    The kernel already holds zeros outside the mask, so the product changes no value;
    it is there for its gradient, in any training loop. (A `tf.custom_gradient` that
    skipped it registered a gradient function per trace that TF never releases, with
    the traced graph in it: every model a process traced stayed in memory.)

    Under `kernels_as_stored` the kernel comes back as it is, and a NumPy ``mask`` is
    never made a tensor: a mask-sized constant that no op reads still sits in the
    traced graph and in TF's copies of it (an MNIST MAF (5)'s `fit` graph held about
    250 MiB of them).

    Args:
      kernel: the kernel, a tensor or variable.
      mask: its mask, a NumPy array or a tensor of the kernel's shape.

    Returns:
      ``kernel * mask`` as a tensor, or ``kernel`` itself under `kernels_as_stored`.

    Example:

    >>> import numpy as np
    >>> kernel = tf.constant([[1.0, 0.0], [2.0, 3.0]])
    >>> masked_gradient(kernel, np.array([[1, 0], [1, 1]])).numpy()
    array([[1., 0.],
           [2., 3.]], dtype=float32)
    """
    if _AS_STORED.get():
        return kernel
    if isinstance(mask, np.ndarray):
        mask = _mask_tensor(mask, kernel.dtype)
    return kernel * mask


@contextlib.contextmanager
def kernels_as_stored():
    """Inside it (eagerly, or while a function is traced), `MaskedDense` layers read
    their kernels as stored, without the ``kernel * mask`` product (`masked_gradient`)
    that masks their gradients: the caller masks them itself (`mask_gradients`), or
    takes none.

    The values are the same (the kernels hold zeros outside their masks), and so are the
    masked gradients, with one pass over every kernel fewer: the product is a pass of
    its own before each matmul, where the mask applied after the tape fuses (under XLA)
    into the optimizer's update, which reads the gradient anyway (config A at batch
    100: about a tenth of a `fit` step, ``benchmarks/README.md``). `DensityModel`'s
    train, test and predict steps work this way; any other loop keeps the product and
    needs nothing.

    Example (a step of a hand-written loop, as `fit` takes it):

    >>> import numpy as np
    >>> made = MADENetwork(3, hidden_units=[8], output_kernel_initializer="glorot_uniform", seed=0)
    >>> x = np.ones((4, 3), np.float32)
    >>> with tf.GradientTape() as tape, kernels_as_stored():
    ...     loss = tf.reduce_sum(made(x)[0] ** 2)
    >>> variables = made.trainable_variables
    >>> grads = mask_gradients(made, tape.gradient(loss, variables), variables)
    >>> outside = 1 - made.hidden_layers[0].mask
    >>> float(tf.reduce_max(tf.abs(grads[0] * outside)))  # hidden_0's kernel
    0.0
    """
    token = _AS_STORED.set(True)
    try:
        yield
    finally:
        _AS_STORED.reset(token)


def mask_gradients(layer, gradients, variables) -> list:
    """``gradients`` of ``variables`` with the gradient of every `MaskedDense` kernel in
    ``layer`` (a layer or model, itself included) multiplied by its mask: what
    `kernels_as_stored` leaves to the caller. Other gradients, and None, pass as
    they are.

    Args:
      layer: a Keras layer or model; every `MaskedDense` in it (itself included)
        is found.
      gradients: one gradient (a tensor or None) per variable, as
        `tf.GradientTape.gradient` returns them.
      variables: the variables, in the order of ``gradients``.

    Returns:
      A list of ``len(variables)`` gradients.

    Raises:
      ValueError: if ``gradients`` and ``variables`` differ in length.

    See `kernels_as_stored` for an example.
    """
    masks = {id(v): m for sub in sublayers(layer) if isinstance(sub, MaskedDense)
             for v, m in sub.kernel_masks()}
    return [g if g is None or id(v) not in masks else g * _mask_tensor(masks[id(v)], g.dtype)
            for g, v in zip(gradients, variables, strict=True)]


def _mask_tensor(mask, dtype) -> tf.Tensor:
    """``mask`` as a tensor, built from two short vectors where its supports are nested
    (every MADE mask and every block of one): ``mask[i, j] = rank[i] < seen[j]``.

    A NumPy mask in a trace is a constant copied into the graph, and TF's copies of the
    graph each carry it: an MNIST MAF (5) held 4.4 GB after compiling its `fit` step
    with the gradients' and the constraints' masks as constants, 2.7 GB with them built
    so. Under XLA the comparison fuses into the optimizer's update.
    """
    ranks = staircase(mask)
    if ranks is None:
        return tf.constant(mask, dtype)
    rank, seen = ranks
    # Shaped in NumPy: indexing the tensors would add a slice and its three constants each.
    return tf.cast(tf.constant(rank[:, None]) < tf.constant(seen[None, :]), dtype)


class _MaskConstraint(keras.constraints.Constraint):
    """Projects a kernel onto its mask: the one projection behind the initializer,
    the step after every optimizer update (Keras applies constraints there) and
    `MaskedDense.apply_mask`."""

    def __init__(self, mask):
        self.mask = mask

    def __call__(self, w):
        if tf.inside_function():  # a traced step: no mask-sized constant in the graph
            return w * _mask_tensor(self.mask, w.dtype)
        return w * keras.ops.cast(self.mask, w.dtype)


class _MaskedInitializer(keras.initializers.Initializer):
    """``initializer(shape)`` projected onto the mask: the same effective weights as
    masking on each call."""

    def __init__(self, initializer, projection: _MaskConstraint):
        self.initializer, self.projection = initializer, projection

    def __call__(self, shape, dtype=None):
        return self.projection(self.initializer(shape, dtype=dtype))


def apply_masks(layer) -> None:
    """Zeros the kernel entries outside the mask in every `MaskedDense` of ``layer``.

    Needed only after writing a kernel variable directly (``kernel.assign``);
    training, `set_weights` and loading keep the zeros themselves.

    Args:
      layer: a Keras layer or model (a `MaskedDense`, a `MADENetwork`, a
        `keras_models` model, ...); every `MaskedDense` in it, itself included,
        is projected onto its mask.

    Example:

    >>> import numpy as np
    >>> layer = MaskedDense(2, mask=[[1., 0.], [1., 1.]])
    >>> _ = layer.kernel.assign(np.ones((2, 2)))  # writes the masked-out entry too
    >>> apply_masks(layer)
    >>> layer.kernel.numpy()
    array([[1., 0.],
           [1., 1.]], dtype=float32)
    """
    for sublayer in sublayers(layer):
        if isinstance(sublayer, MaskedDense):
            sublayer.apply_mask()


@keras.saving.register_keras_serializable(package="tfp_maf")
class MaskedDense(keras.layers.Layer):
    """Dense layer whose kernel is zero outside a fixed binary mask.

    ``outputs = activation(inputs @ (kernel * mask) + bias)``. The mask is a
    constant of the layer, not a weight: the autoregressive structure must
    never be trained away.

    The kernel variable itself holds ``kernel * mask``, so a call reads it as
    is instead of multiplying by the mask again: that product on every call was
    a third of the time of a small-batch ``log_prob`` of a MAF (5) of
    2 x 512 units, and 4% of it at 10,000 rows. The zeros are kept by every path
    that writes the kernel:

    - the initializer draws ``initializer(shape) * mask``;
    - the gradient of a call is masked (`masked_gradient`; a `fit` step masks
      it after the tape instead, `kernels_as_stored`), so no optimizer state
      sees the entries outside the mask, and a constraint projects the kernel
      back onto the mask after every optimizer step, for optimizers that mix
      entries;
    - `set_weights` (here, on `MADENetwork` and on the `keras_models` models)
      and loading (`.keras`, `.weights.h5`) project what they write, so weights
      with values outside the mask load as the same network.

    Assigning the variable directly (``layer.kernel.assign(w)``) writes ``w``
    as given: follow it with `apply_masks`. (TFP's own MADE makes the same
    contract, with a masked initializer and constraint.)

    With ``blocks > 1`` and a MADE mask (nested supports), the kernel is stored in
    degree blocks instead (`tfp_maf.layers.block_layout`): ``kernel_blocks``, one
    variable per block, without the zeros right of the mask's staircase, so the
    matmuls and the optimizer skip them. `masked_kernel` still gives the dense
    kernel, and files hold it dense (``"0"``, then the bias), so saved weights load
    into either storage. `call` takes and gives the units in their own order;
    `call_in_order` keeps them in the blocks' order, as a MADE chains its layers.

    Args:
      units: number of outputs.
      mask: array ``[fan_in, units]`` of zeros and ones. The layer is built at
        construction: ``fan_in`` comes from the mask.
      activation: a Keras activation name or callable.
      use_bias: whether to add a bias.
      kernel_initializer: as in `keras.layers.Dense`; what it draws is projected
        onto the mask.
      bias_initializer: as in `keras.layers.Dense`.
      kernel_regularizer: as in `keras.layers.Dense`.
      blocks: column groups of the degree-block storage; 1 stores the kernel dense.
        A mask that is not a MADE mask is stored dense whatever the value.
      **kwargs: Keras' layer arguments (``name``, ``dtype``, ...).

    Raises:
      ValueError: if ``mask`` is not a matrix with ``units`` columns.

    Example:

    >>> import numpy as np
    >>> layer = MaskedDense(2, mask=[[1., 0.], [1., 1.]], kernel_initializer="ones")
    >>> layer.kernel.numpy()  # zero where the mask is
    array([[1., 0.],
           [1., 1.]], dtype=float32)
    >>> layer(np.array([[2., 3.]], np.float32)).numpy()  # output 0 sees input 0 only
    array([[5., 3.]], dtype=float32)
    """

    def __init__(
        self,
        units: int,
        mask,
        activation=None,
        use_bias: bool = True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        blocks: int = 1,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.units = int(units)
        self.mask = np.asarray(mask, dtype=np.float32)
        if self.mask.ndim != 2 or self.mask.shape[1] != self.units:
            raise ValueError(
                f"mask must have shape [fan_in, {self.units}], got {self.mask.shape}."
            )
        self.activation = keras.activations.get(activation)
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.blocks = int(blocks)
        self.layout = BlockLayout.of(self.mask, self.blocks) if self.blocks > 1 else None
        projection = _MaskConstraint(self.mask)
        initializer = _MaskedInitializer(self.kernel_initializer, projection)
        if self.layout is None:
            self.kernel = self.add_weight(
                name="kernel",
                shape=self.mask.shape,
                initializer=initializer,
                regularizer=self.kernel_regularizer,
                constraint=projection,
            )
        else:
            self.kernel_blocks = self._add_blocks(initializer)
        self.bias = (
            self.add_weight(name="bias", shape=(self.units,), initializer=self.bias_initializer)
            if use_bias
            else None
        )
        self.built = True

    def _add_blocks(self, initializer) -> list:
        """One variable per degree block (None for a block of no rows), drawn as
        slices of one dense draw: the initializer sees the dense kernel's fans."""
        initial = self.layout.split(keras.ops.convert_to_numpy(initializer(self.mask.shape, self.variable_dtype)))
        blocks = []
        for g, (value, mask) in enumerate(zip(initial, self.layout.block_masks, strict=True)):
            blocks.append(None if mask.shape[0] == 0 else self.add_weight(
                name=f"kernel_block_{g}",
                shape=mask.shape,
                initializer=lambda shape, dtype=None, value=value: keras.ops.cast(value, dtype),
                regularizer=self.kernel_regularizer,
                constraint=_MaskConstraint(mask),
            ))
        return blocks

    def _masked_blocks(self) -> list:
        """The blocks as tensors, gradients masked where a block holds zeros."""
        masked = []
        for block, mask in zip(self.kernel_blocks, self.layout.block_masks, strict=True):
            if block is not None:
                block = tf.convert_to_tensor(block)
                if not mask.all():
                    block = masked_gradient(block, mask)
            masked.append(block)
        return masked

    def masked_kernel(self) -> tf.Tensor:
        """The dense kernel, which holds zeros outside the mask, with its gradient masked."""
        if self.layout is not None:
            return self.layout.merge(self._masked_blocks())
        kernel = tf.convert_to_tensor(self.kernel)
        return masked_gradient(kernel, self.mask)

    def _kernel_variables(self) -> list:
        return [self.kernel] if self.layout is None else [b for b in self.kernel_blocks if b is not None]

    def kernel_masks(self) -> list:
        """``(variable, mask)`` for every kernel variable whose gradient the mask must
        cover (a block inside the staircase has none): what `mask_gradients` applies."""
        if self.layout is None:
            return [(self.kernel, self.mask)]
        return [(b, m) for b, m in zip(self.kernel_blocks, self.layout.block_masks, strict=True)
                if b is not None and not m.all()]

    def apply_mask(self) -> None:
        """Sets the kernel's entries outside the mask to zero (after a direct assign)."""
        for kernel in self._kernel_variables():
            kernel.assign(kernel.constraint(kernel))

    def set_weights(self, weights):
        super().set_weights(weights)
        self.apply_mask()

    def save_own_variables(self, store):
        """The kernel dense, whatever the storage: files load into either."""
        if self.layout is None:
            return super().save_own_variables(store)
        store["0"] = self.layout.merge([None if b is None else b.numpy() for b in self.kernel_blocks])
        if self.bias is not None:
            store["1"] = self.bias.numpy()

    def load_own_variables(self, store):
        if self.layout is None:
            super().load_own_variables(store)
        else:
            expected = 2 if self.bias is not None else 1
            kernel = np.asarray(store["0"]) if "0" in store else None
            if len(store.keys()) != expected or kernel is None or kernel.shape != self.mask.shape:
                raise ValueError(
                    f"Layer '{self.name}' expected a kernel of shape {self.mask.shape}"
                    f"{' and a bias' if self.bias is not None else ''}; the file holds "
                    f"{[tuple(np.shape(store[k])) for k in store.keys()]}."
                )
            for block, value in zip(self.kernel_blocks, self.layout.split(kernel), strict=True):
                if block is not None:
                    block.assign(value)
            if self.bias is not None:
                self.bias.assign(store["1"])
        self.apply_mask()

    def call(self, inputs, addend=None):
        """``activation(inputs @ kernel + addend + bias)``; ``addend`` (a conditional
        MADE's ``y @ V``) is added before the bias: TF's oneDNN graph rewrite turns
        MatMul + BiasAdd + Add + Relu into a node without an op (it logs errors on
        every trace and runs the graph unoptimised), MatMul + Add + BiasAdd it leaves."""
        if self.layout is None:
            outputs = tf.matmul(inputs, self.masked_kernel())
        else:
            outputs = self.layout.matmul(inputs, self._masked_blocks())
        return self._finish(outputs, addend, self.bias)

    @property
    def output_order(self):
        """The order in which `call_in_order` gives the units: the blocks' column order,
        or None (the units' own order) for a dense kernel."""
        return None if self.layout is None else self.layout.cols

    def call_in_order(self, inputs, order, addend=None):
        """`call` on inputs whose last axis holds this layer's input units in ``order``
        (None: their own order); returns ``(outputs, output_order)``, ``addend`` given in
        `output_order`. A MADE chains its layers this way, so that its hidden units go
        from one blocked layer to the next without a gather (`block_layout.reorder`)."""
        if self.layout is None:
            return self.call(reorder(inputs, order, None), addend), None
        outputs = self.layout.sorted_matmul(reorder(inputs, order, self.layout.rows), self._masked_blocks())
        bias = None if self.bias is None else reorder(tf.convert_to_tensor(self.bias), None, self.layout.cols)
        return self._finish(outputs, addend, bias), self.layout.cols

    def _finish(self, outputs, addend, bias):
        if addend is not None:
            outputs = outputs + addend
        if bias is not None:
            # BiasAdd (not AddV2), so that grappler fuses MatMul + BiasAdd (+ Relu).
            outputs = tf.nn.bias_add(outputs, bias)
        return self.activation(outputs)

    def get_config(self):
        config = super().get_config()
        config.update(
            units=self.units,
            mask=self.mask.astype(int).tolist(),
            activation=keras.activations.serialize(self.activation),
            use_bias=self.use_bias,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
            kernel_regularizer=keras.regularizers.serialize(self.kernel_regularizer),
            blocks=self.blocks,
        )
        return config


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
        (Germain et al.; the paper's CIFAR-10 setting).
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
      kernel_blocks: ``"auto"`` stores the kernels of large layers in degree blocks
        (`MaskedDense`'s ``blocks``) on a CPU, where skipping the masks' zeros pays,
        and every kernel dense on a GPU (`tfp_maf.layers.block_layout.auto_blocks`);
        an int sets the blocks of every layer, 1 stores all dense. The values are
        the same.
      kernel_blocks_device: the device kind ``"auto"`` chooses for, ``"cpu"`` or
        ``"gpu"``; None (the default): the kind TensorFlow places ops on in the
        current process. The config records the kind, so a saved network loads with
        the storage it was saved with, on any machine (its optimizer state fits it).
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
      sampling_tuning: how `sample_sequentially` schedules its pass
        (`tfp_maf.sampling.Tuning`: block size, chunk rows, parts); the default chooses
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
        ``params`` are set, ``kernel_blocks`` is neither ``"auto"`` nor
        an int >= 1, ``kernel_blocks_device`` is not a device kind,
        ``scale_parameterization`` is neither ``"log_scale"`` nor ``"log_precision"``
        (or is not ``"log_scale"`` with ``params``), ``order`` is not
        an order, ``hidden_degrees`` is not a method, or a hidden layer has no
        units; at call time, if the last axis of ``x`` is not ``D``, or ``y`` is
        missing, unexpected or of the wrong width.

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
        hidden_degrees: str = "sequential",
        conditional_dims: int | None = None,
        conditional_input_layers: str = "all_layers",
        seed: int | None = None,
        kernel_initializer="glorot_uniform",
        output_kernel_initializer=None,
        output_bias_initializer="zeros",
        kernel_regularizer=None,
        kernel_blocks: int | str = "auto",
        kernel_blocks_device: str | None = None,
        params: int | None = None,
        scale_parameterization: str = "log_scale",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if int(event_size) < 1:
            raise ValueError(f"event_size must be >= 1, got {event_size}.")
        if num_components is not None and int(num_components) < 1:
            raise ValueError(f"num_components must be >= 1 or None, got {num_components}.")
        if conditional_dims is not None and int(conditional_dims) < 1:
            raise ValueError(f"conditional_dims must be >= 1 or None, got {conditional_dims}.")
        if params is not None and (int(params) < 1 or num_components is not None):
            raise ValueError(
                f"params must be >= 1 or None, and None with num_components; got params={params}, "
                f"num_components={num_components}.")
        self.scale_parameterization = check_scale_parameterization(scale_parameterization)
        if params is not None and scale_parameterization != "log_scale":
            raise ValueError(f"scale_parameterization must be 'log_scale' with the open head (params={params}), "
                             f"which has no scale outputs; got {scale_parameterization!r}.")
        self.params = None if params is None else int(params)
        self.event_size = int(event_size)
        self.hidden_units = [int(h) for h in hidden_units]
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
        if kernel_blocks != "auto" and int(kernel_blocks) < 1:
            raise ValueError(f"kernel_blocks must be 'auto' or an int >= 1, got {kernel_blocks!r}.")
        self.kernel_blocks = kernel_blocks if kernel_blocks == "auto" else int(kernel_blocks)
        self.kernel_blocks_device = check_device_kind(kernel_blocks_device)

        D = self.event_size
        self.permutation = masks.order_permutation(D, order, seed)
        self.input_degrees = masks.input_degrees(D, self.permutation)
        degrees, prev = [], self.input_degrees
        for layer_index, units in enumerate(self.hidden_units):
            layer_seed = None if seed is None else seed + 1 + layer_index
            prev = masks.hidden_degrees(units, D, hidden_degrees, prev, layer_seed)
            degrees.append(prev)
        self.degrees = degrees
        self.masks = masks.made_masks(self.input_degrees, degrees)

        self.params_per_dim = (self.params if self.params is not None
                               else 2 if self.num_components is None else 3 * self.num_components)
        self.hidden_layers = [
            MaskedDense(
                units,
                mask,
                activation=None,  # applied after adding the y projection
                kernel_initializer=seeded(self.kernel_initializer, seed, i),
                kernel_regularizer=self.kernel_regularizer,
                blocks=self._blocks(mask),
                dtype=self.dtype_policy,
                name=f"hidden_{i}",
            )
            for i, (units, mask) in enumerate(zip(self.hidden_units, self.masks[:-1], strict=True))
        ]
        if output_kernel_initializer is None:
            output_kernel_initializer = "zeros" if self.num_components is None else "glorot_uniform"
        output_mask = np.repeat(self.masks[-1], self.params_per_dim, axis=1)
        self.output_layer = MaskedDense(
            D * self.params_per_dim,
            output_mask,
            kernel_initializer=seeded(output_kernel_initializer, seed, 1000),
            bias_initializer=seeded(self.output_bias_initializer, seed, 1001),
            kernel_regularizer=self.kernel_regularizer,
            blocks=self._blocks(output_mask),
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
        self.sampling_tuning = sampling.Tuning()
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

    def _to_scale_outputs(self, t):
        """``t`` ``[..., D * P]`` in output units' order, the scale outputs turned into log-scales."""
        if self._output_factors is None:
            return t
        return t * tf.constant(self._output_factors, t.dtype)

    def _blocks(self, mask) -> int:
        """`MaskedDense`'s ``blocks`` for a layer of this mask."""
        if self.kernel_blocks != "auto":
            return self.kernel_blocks
        return auto_blocks(mask.shape, self.kernel_blocks_device)

    def set_weights(self, weights):
        super().set_weights(weights)
        apply_masks(self)  # the kernels hold zeros outside their masks (`MaskedDense`)

    @functools.cached_property
    def sequential_plan(self) -> sampling.SequentialPlan:
        """Degree bookkeeping for exact one-pass sequential sampling (`tfp_maf.sampling`)."""
        return sampling.SequentialPlan(self.input_degrees, self.degrees)

    # -- the network ---------------------------------------------------------

    def _flatten(self, x, conditional_input):
        """Broadcasts x against y and flattens the batch to one axis."""
        x = tf.convert_to_tensor(x, dtype=self.compute_dtype)
        _checks.check_event_size(x, self.event_size, "MADE")
        _checks.check_conditional_input(conditional_input, self.conditional_dims, "MADE")
        y = None
        if conditional_input is not None:
            x, y = broadcast_batch(x, tf.cast(conditional_input, self.compute_dtype))
            y = tf.reshape(y, [-1, self.conditional_dims])
        return tf.reshape(x, [-1, self.event_size]), y, tf.shape(x)[:-1]

    def sample_sequentially(self, emit, noise, conditional_input=None, key=None):
        """Sets the D variables in order, in one pass of the network spread over D steps.

        The exact autoregressive recursion x_i = emit(outputs(x_<i), noise_i) at about
        the cost of one forward pass (`tfp_maf.sampling`), scheduled by
        ``self.sampling_tuning``.

        Args:
          emit: ``emit(params, t, noise_rows) -> (value, extra)``: ``params`` ``[P, B]``
            are the outputs for the variable of degree t + 1, ``noise_rows`` the noise
            with the step first (``[D, B, ...]`` per tensor); returns its value ``[B]``
            and one more ``[B]`` quantity to keep (a log-scale, say).
          noise: ``[..., D]``, or a tuple whose first tensor is ``[..., D]`` and whose
            others have that batch shape and D after it (``[..., D, C]``, say). The
            first is broadcast against ``conditional_input``'s batch.
          conditional_input: ``y`` ``[..., K]``, or None.
          key: hashable, naming ``emit``: the loop is compiled once per key and reused.

        Returns:
          ``(x, extra)``, both ``[*batch, D]`` in the variables' own order.
        """
        flat = tf.nest.flatten(noise)
        first, y2d, batch_shape = self._flatten(flat[0], conditional_input)
        var_at = self.sequential_plan.var_at
        batch_rank = flat[0].shape.rank - 1

        def rows(t, batch_rank):  # [*batch, D, ...] -> [D, B, ...], variables in degree order
            t = tf.reshape(t, tf.concat([[-1], tf.shape(t)[batch_rank:]], 0))
            t = tf.gather(tf.cast(t, self.compute_dtype), var_at, axis=1)
            return tf.transpose(t, [1, 0, *range(2, t.shape.rank)])

        # `first` is flat already ([B, D]); the others keep their batch shape.
        noise_rows = tf.nest.pack_sequence_as(
            noise, [rows(first, 1), *[rows(t, batch_rank) for t in flat[1:]]]
        )
        x, extra = sampling.sequential_pass(sampling.Structure.of(self), self.sampling_weights(), emit,
                                            noise_rows, y2d, key=key, tuning=self.sampling_tuning)
        shape = tf.concat([batch_shape, [self.event_size]], 0)
        return tf.reshape(x, shape), tf.reshape(extra, shape)

    def sampling_weights(self) -> dict:
        """The weights as tensors, masks applied, in the structure `tfp_maf.sampling` reads."""
        conditional = [tf.convert_to_tensor(v) for v in self.conditional_kernels]
        if conditional and not self.hidden_layers:  # y feeds the output: its kernel gives outputs too
            conditional = [self._to_scale_outputs(conditional[0])]
        return {
            "hidden": [(layer.masked_kernel(), tf.convert_to_tensor(layer.bias)) for layer in self.hidden_layers],
            "output": (self._to_scale_outputs(self.output_layer.masked_kernel()),
                       self._to_scale_outputs(tf.convert_to_tensor(self.output_layer.bias))),
            "conditional": conditional,
        }

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
        return self._to_scale_outputs(reorder(out, order, None))

    def call(self, x, conditional_input=None):
        x2d, y, batch_shape = self._flatten(x, conditional_input)
        out = self.flat_params(x2d, self.conditional_terms(y))
        return self.split_params(out, batch_shape)

    def split_params(self, out, batch_shape):
        """Splits raw outputs into the head's parameters of shape batch + [D(, C)]."""
        D, P = self.event_size, self.params_per_dim
        out = tf.reshape(out, tf.concat([batch_shape, [D, P]], 0))
        if self.params is not None:
            return out
        if self.num_components is None:
            return out[..., 0], out[..., 1]
        C = self.num_components
        return out[..., :C], out[..., C : 2 * C], out[..., 2 * C :]

    def get_config(self):
        config = super().get_config()
        config.update(
            event_size=self.event_size,
            hidden_units=self.hidden_units,
            num_components=self.num_components,
            activation=keras.activations.serialize(self.activation),
            order=self.order,
            hidden_degrees=self.hidden_degrees,
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
            kernel_blocks=self.kernel_blocks,
            kernel_blocks_device=self.kernel_blocks_device,
            params=self.params,
            scale_parameterization=self.scale_parameterization,
        )
        return config
