"""A dense layer whose kernel is zero outside a fixed binary mask: MADE's building block.

``outputs = activation(inputs @ (kernel * mask) + bias)``. The layer, `MaskedDense`, holds
its kernel in one of two storages, one class each:

- `DenseKernel`: the kernel dense, zeros included; one matmul per call.
- `BlockedKernel`: a MADE mask's kernel in degree blocks (`tfp_maf.layers.block_layout`),
  without the zeros right of the mask's staircase: the matmuls and the optimizer skip
  them, which pays on CPUs at MNIST sizes.

Both hold the same values and write files the same way (the kernel dense), so saved
weights load into either. (One layer class, two storages: Keras addresses a layer in a
list by its class's name in weights files, so the class stays `MaskedDense` whatever the
storage, and files of 0.3.0 and 0.4.0 load.)

Example:

>>> import keras, numpy as np
>>> mask = np.tril(np.ones((4, 4), np.float32))
>>> init = keras.initializers.GlorotUniform(seed=0)
>>> dense = MaskedDense(4, mask, kernel_initializer=init)
>>> blocked = MaskedDense(4, mask, kernel_initializer=init, blocks=2)
>>> type(dense.storage).__name__, type(blocked.storage).__name__
('DenseKernel', 'BlockedKernel')
>>> x = np.ones((1, 4), np.float32)
>>> bool(np.allclose(dense(x), blocked(x)))  # the same draw, stored two ways
True
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tfp_maf._platform.layer_tracking import sublayers
from tfp_maf.layers.block_layout import BlockLayout, reorder
from tfp_maf.layers.gradient_masks import KernelMask, masked_gradient

__all__ = ["BlockedKernel", "DenseKernel", "MaskedDense", "apply_masks"]


class _MaskConstraint(KernelMask, keras.constraints.Constraint):
    """Projects a kernel onto its mask: the one projection behind the initializer,
    the step after every optimizer update (Keras applies constraints there) and
    `MaskedDense.apply_mask`."""

    def __call__(self, w):
        if tf.inside_function():  # a traced step: no mask-sized constant in the graph
            return w * self.tensor(w.dtype)
        return w * keras.ops.cast(self.mask, w.dtype)


class _MaskedInitializer(keras.initializers.Initializer):
    """``initializer(shape)`` projected onto the mask: the same effective weights as
    masking on each call."""

    def __init__(self, initializer, projection: _MaskConstraint):
        self.initializer, self.projection = initializer, projection

    def __call__(self, shape, dtype=None):
        return self.projection(self.initializer(shape, dtype=dtype))


class DenseKernel:
    """A `MaskedDense` kernel stored dense: one variable, ``layer.kernel``, holding
    ``kernel * mask``; one matmul per call."""

    #: The degree blocks' layout; None: the kernel is dense.
    layout = None

    def __init__(self, layer, initializer):
        projection = _MaskConstraint(layer.mask)
        self.mask = layer.mask
        layer.kernel = self.kernel = layer.add_weight(
            name="kernel", shape=layer.mask.shape, initializer=_MaskedInitializer(initializer, projection),
            regularizer=layer.kernel_regularizer, constraint=projection)

    def variables(self) -> list:
        return [self.kernel]

    def masks(self) -> list:
        return [(self.kernel, self.mask)]

    def dense(self) -> tf.Tensor:
        return masked_gradient(tf.convert_to_tensor(self.kernel), self.mask)

    def matmul(self, inputs) -> tf.Tensor:
        return tf.matmul(inputs, self.dense())

    def matmul_in_order(self, inputs, order, bias):
        """``(inputs @ kernel, bias, None)`` for inputs in ``order``: outputs in their own order."""
        return tf.matmul(reorder(inputs, order, None), self.dense()), bias, None

    def save(self, store, bias) -> None:
        store["0"] = self.kernel.numpy()
        if bias is not None:
            store["1"] = bias.numpy()

    def load(self, layer, store, bias) -> None:
        _check_store(layer, store, bias)
        self.kernel.assign(store["0"])
        if bias is not None:
            bias.assign(store["1"])


class BlockedKernel:
    """A `MaskedDense` kernel stored in the degree blocks of a MADE mask
    (`tfp_maf.layers.block_layout.BlockLayout`): ``layer.kernel_blocks``, one variable per
    block (None for a block of no rows), without the zeros right of the mask's staircase.

    `dense` still gives the dense kernel and files hold it dense. `MaskedDense.call`
    takes and gives the units in their own order; `MaskedDense.call_in_order` keeps them
    in the blocks' order, as a MADE chains its layers.
    """

    def __init__(self, layer, initializer, layout: BlockLayout):
        self.layout = layout
        # Slices of one dense draw: the initializer sees the dense kernel's fans.
        dense = _MaskedInitializer(initializer, _MaskConstraint(layer.mask))(layer.mask.shape, layer.variable_dtype)
        initial = layout.split(keras.ops.convert_to_numpy(dense))
        self.blocks = []
        for g, (value, mask) in enumerate(zip(initial, layout.block_masks, strict=True)):
            self.blocks.append(None if mask.shape[0] == 0 else layer.add_weight(
                name=f"kernel_block_{g}",
                shape=mask.shape,
                initializer=lambda shape, dtype=None, value=value: keras.ops.cast(value, dtype),
                regularizer=layer.kernel_regularizer,
                constraint=_MaskConstraint(mask),
            ))
        layer.kernel_blocks = self.blocks

    def variables(self) -> list:
        return [b for b in self.blocks if b is not None]

    def masks(self) -> list:
        """A block inside the staircase needs no mask."""
        return [(b, m) for b, m in zip(self.blocks, self.layout.block_masks, strict=True)
                if b is not None and not m.all()]

    def _masked_blocks(self) -> list:
        """The blocks as tensors, gradients masked where a block holds zeros."""
        masked = []
        for block, mask in zip(self.blocks, self.layout.block_masks, strict=True):
            if block is not None:
                block = tf.convert_to_tensor(block)
                if not mask.all():
                    block = masked_gradient(block, mask)
            masked.append(block)
        return masked

    def dense(self) -> tf.Tensor:
        return self.layout.merge(self._masked_blocks())

    def matmul(self, inputs) -> tf.Tensor:
        return self.layout.matmul(inputs, self._masked_blocks())

    def matmul_in_order(self, inputs, order, bias):
        """``(inputs @ kernel, bias, cols)`` for inputs in ``order``: outputs (and the bias)
        in the blocks' column order, ``cols``."""
        outputs = self.layout.sorted_matmul(reorder(inputs, order, self.layout.rows), self._masked_blocks())
        bias = None if bias is None else reorder(tf.convert_to_tensor(bias), None, self.layout.cols)
        return outputs, bias, self.layout.cols

    def save(self, store, bias) -> None:
        """The kernel dense: files load into either storage."""
        store["0"] = self.layout.merge([None if b is None else b.numpy() for b in self.blocks])
        if bias is not None:
            store["1"] = bias.numpy()

    def load(self, layer, store, bias) -> None:
        _check_store(layer, store, bias)
        for block, value in zip(self.blocks, self.layout.split(np.asarray(store["0"])), strict=True):
            if block is not None:
                block.assign(value)
        if bias is not None:
            bias.assign(store["1"])


def _check_store(layer, store, bias) -> None:
    kernel = np.asarray(store["0"]) if "0" in store else None
    if len(store.keys()) != (2 if bias is not None else 1) or kernel is None or kernel.shape != layer.mask.shape:
        raise ValueError(
            f"Layer '{layer.name}' expected a kernel of shape {layer.mask.shape}"
            f"{' and a bias' if bias is not None else ''}; the file holds "
            f"{[tuple(np.shape(store[k])) for k in store.keys()]}."
        )


def apply_masks(layer) -> None:
    """Zeros the kernel entries outside the mask in every `MaskedDense` of ``layer``.

    Needed only after writing a kernel variable directly (``kernel.assign``);
    training, `set_weights` and loading keep the zeros themselves.

    Args:
      layer: a Keras layer or model (a `MaskedDense`, a `MADENetwork`, a
        `keras_models` model, ...); every `MaskedDense` in it, itself included,
        is projected onto its mask.

    Example:

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

    The kernel variables themselves hold ``kernel * mask``, so a call reads them as
    they are instead of multiplying by the mask again: that product on every call was
    a third of the time of a small-batch ``log_prob`` of a MAF (5) of
    2 x 512 units, and 4% of it at 10,000 rows. The zeros are kept by every path
    that writes the kernel:

    - the initializer draws ``initializer(shape) * mask``;
    - the gradient of a call is masked (`tfp_maf.layers.gradient_masks`), so no
      optimizer state sees the entries outside the mask, and a constraint projects
      the kernel back onto the mask after every optimizer step, for optimizers that
      mix entries;
    - `set_weights` (here, on `MADENetwork` and on the `keras_models` models)
      and loading (`.keras`, `.weights.h5`) project what they write, so weights
      with values outside the mask load as the same network.

    Assigning a variable directly (``layer.kernel.assign(w)``) writes ``w``
    as given: follow it with `apply_masks`. (TFP's own MADE makes the same
    contract, with a masked initializer and constraint.)

    The kernel is stored dense (`DenseKernel`, ``layer.kernel``), or, with ``blocks > 1``
    and a MADE mask (nested supports), in degree blocks (`BlockedKernel`,
    ``layer.kernel_blocks``); files hold it dense (``"0"``, then the bias), so saved
    weights load into either storage.

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
      blocks: column groups of the degree-block storage; 1 stores the kernel dense,
        and so does a mask that is not a MADE mask or that one block would store whole.
      **kwargs: Keras' layer arguments (``name``, ``dtype``, ...).

    Raises:
      ValueError: if ``mask`` is not a matrix with ``units`` columns.

    Example:

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
        layout = BlockLayout.of(self.mask, self.blocks) if self.blocks > 1 else None
        self.storage = (DenseKernel(self, self.kernel_initializer) if layout is None
                        else BlockedKernel(self, self.kernel_initializer, layout))
        self.bias = (
            self.add_weight(name="bias", shape=(self.units,), initializer=self.bias_initializer)
            if use_bias
            else None
        )
        self.built = True

    @property
    def layout(self) -> BlockLayout | None:
        """The degree blocks the kernel is stored in, or None for a dense kernel."""
        return self.storage.layout

    def masked_kernel(self) -> tf.Tensor:
        """The dense kernel, which holds zeros outside the mask, with its gradient masked."""
        return self.storage.dense()

    def kernel_variables(self) -> list:
        """The variables that store the kernel (one, or one per non-empty block)."""
        return self.storage.variables()

    def kernel_masks(self) -> list:
        """``(variable, mask)`` for every kernel variable whose gradient the mask must
        cover: what `tfp_maf.layers.mask_gradients` applies."""
        return self.storage.masks()

    def apply_mask(self) -> None:
        """Sets the kernel's entries outside the mask to zero (after a direct assign)."""
        for kernel in self.kernel_variables():
            kernel.assign(kernel.constraint(kernel))

    def set_weights(self, weights):
        super().set_weights(weights)
        self.apply_mask()

    def save_own_variables(self, store):
        self.storage.save(store, self.bias)

    def load_own_variables(self, store):
        self.storage.load(self, store, self.bias)
        self.apply_mask()

    def call(self, inputs, addend=None):
        """``activation(inputs @ kernel + addend + bias)``; ``addend`` (a conditional
        MADE's ``y @ V``) is added before the bias: TF's oneDNN graph rewrite turns
        MatMul + BiasAdd + Add + Relu into a node without an op (it logs errors on
        every trace and runs the graph unoptimised), MatMul + Add + BiasAdd it leaves."""
        return self._finish(self.storage.matmul(inputs), addend, self.bias)

    @property
    def output_order(self):
        """The order in which `call_in_order` gives the units: the blocks' column order,
        or None (the units' own order) for a dense kernel."""
        return None if self.layout is None else self.layout.cols

    def call_in_order(self, inputs, order, addend=None):
        """`call` on inputs whose last axis holds this layer's input units in ``order``
        (None: their own order); returns ``(outputs, output_order)``, ``addend`` given in
        `output_order` and of the outputs' shape. A MADE chains its layers this way, so
        that its hidden units go from one blocked layer to the next without a gather
        (`block_layout.reorder`)."""
        outputs, bias, order = self.storage.matmul_in_order(inputs, order, self.bias)
        if addend is not None:
            # AddN, not `+`: in a MADE the two have one shape (it broadcasts x and y before
            # its layers), and AddN's gradient passes through where AddV2's reduces over
            # the broadcast (5 ops a layer in every train step).
            outputs = tf.math.add_n([outputs, addend])
        return self._finish(outputs, None, bias), order

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
