"""Masked gradients for kernels that hold their masks' zeros.

A `tfp_maf.layers.MaskedDense` kernel stores ``kernel * mask``: its zeros are kept by
projecting every write onto the mask. What remains is the gradient, which must be zero
outside the mask too, or an optimizer would move the zeros. Either the call masks it
(`masked_gradient`, any training loop) or the loop does, after the tape
(`kernels_as_stored` and `mask_gradients`, what `keras_models`' steps do: one pass over
every kernel fewer).

Example (a step of a hand-written loop, as `fit` takes it):

>>> import numpy as np
>>> from tfp_maf.layers import MADENetwork
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

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfp_maf._platform.layer_tracking import sublayers
from tfp_maf.layers.block_layout import staircase
from tfp_maf.trace_options import trace_options, traced_with

__all__ = ["KernelMask", "hold_kernel_masks", "kernels_as_stored", "mask_gradients", "mask_tensor", "masked_gradient"]



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

    >>> kernel = tf.constant([[1.0, 0.0], [2.0, 3.0]])
    >>> masked_gradient(kernel, np.array([[1, 0], [1, 1]])).numpy()
    array([[1., 0.],
           [2., 3.]], dtype=float32)
    """
    if trace_options().kernels_as_stored:
        return kernel
    if isinstance(mask, np.ndarray):
        mask = mask_tensor(mask, kernel.dtype)
    return kernel * mask


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
    needs nothing. See the module's example. (A field of
    `tfp_maf.trace_options.TraceOptions`, which says why it is a context.)
    """
    return traced_with(kernels_as_stored=True)


def mask_gradients(layer, gradients, variables) -> list:
    """``gradients`` of ``variables`` with the gradient of every masked kernel in
    ``layer`` (a layer or model, itself included) multiplied by its mask: what
    `kernels_as_stored` leaves to the caller. Other gradients, and None, pass as
    they are.

    A masked kernel is one a layer lists in its ``kernel_masks()`` (`MaskedDense`'s).

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

    See the module's example.
    """
    masks = {id(v): m for sub in sublayers(layer) if hasattr(sub, "kernel_masks")
             for v, m in sub.kernel_masks()}
    return [g if g is None or id(v) not in masks else g * _step_mask(v, masks[id(v)], g.dtype)
            for g, v in zip(gradients, variables, strict=True)]


def _step_mask(variable, mask, dtype) -> tf.Tensor:
    """The mask of ``variable``'s gradient: its `KernelMask` (the variable's constraint)
    where it has one, else ``mask`` as `mask_tensor` builds it."""
    constraint = getattr(variable, "constraint", None)
    if isinstance(constraint, KernelMask):
        return constraint.tensor(dtype)
    return mask_tensor(mask, dtype)


class KernelMask:
    """A kernel's 0/1 mask, as NumPy (``mask``) and as a traced step reads it (`tensor`).

    A mask built from constants in a trace (`mask_tensor`) is folded back into a
    constant of the mask's size by TF's graph optimisation and by XLA's bridge: an
    MNIST MAF (5)'s XLA `fit` step carried 57 MB of them (each kernel's mask twice, for
    the gradient and for the projection), which the compiler copies while it compiles
    and the compiled program keeps: 110 to 160 MiB of a first `fit` call's peak, and
    about 1 s of its compilation (2 cores). Once `hold` has made a variable of it, a
    trace reads the mask from the variable: an input of the program, never a constant.
    A `tfp_maf.layers.MaskedDense` kernel's constraint is one; `hold_kernel_masks` holds
    a model's before its `fit` step is traced. The variable is no weight of the layer:
    it is neither trained nor saved.
    """

    def __init__(self, mask):
        self.mask = mask
        self._held = {}  # dtype -> tf.Variable

    def hold(self, dtype) -> None:
        """Makes the variable of the mask in ``dtype`` (once, outside any trace)."""
        dtype = tf.as_dtype(dtype)
        if dtype not in self._held:
            with tf.init_scope():
                self._held[dtype] = tf.Variable(np.asarray(self.mask, dtype.as_numpy_dtype), trainable=False,
                                                name="kernel_mask")

    def tensor(self, dtype) -> tf.Tensor:
        """The mask in ``dtype``: the held variable's value in a trace, where `hold` made one
        for ``dtype``; else as `mask_tensor` builds it."""
        held = self._held.get(tf.as_dtype(dtype))
        if held is not None and tf.inside_function():
            return held.read_value()
        return mask_tensor(self.mask, dtype)


def hold_kernel_masks(layer) -> None:
    """`KernelMask.hold` for the constraint of every trainable variable of ``layer`` (a
    layer or model) that has one, in the variable's dtype: what `keras_models`' `fit`
    does before it traces its step. Not under a `tf.distribute` strategy, whose
    variables TF places and mirrors itself: there the masks stay as `mask_tensor`
    builds them.

    Example: a trace then reads the first kernel's mask from its variable.

    >>> from tfp_maf.layers import MADENetwork
    >>> made = MADENetwork(3, hidden_units=[8], seed=0)
    >>> hold_kernel_masks(made)
    >>> mask = made.hidden_layers[0].kernel.constraint
    >>> read = tf.function(lambda: mask.tensor(tf.float32))
    >>> ops = {op.type for op in read.get_concrete_function().graph.get_operations()}
    >>> "ReadVariableOp" in ops, "Less" in ops  # read, not built from constants
    (True, False)
    >>> bool(np.all(read().numpy() == made.hidden_layers[0].mask))
    True
    """
    if tf.distribute.has_strategy():
        return
    for variable in layer.trainable_variables:
        constraint = getattr(variable, "constraint", None)
        if isinstance(constraint, KernelMask):
            constraint.hold(variable.dtype)


def mask_tensor(mask, dtype) -> tf.Tensor:
    """``mask`` as a tensor, built from two short vectors where its supports are nested
    (every MADE mask and every block of one): ``mask[i, j] = rank[i] < seen[j]``.

    A NumPy mask in a trace is a constant copied into the graph, and TF's copies of the
    graph each carry it: an MNIST MAF (5) held 4.4 GB after compiling its `fit` step
    with the gradients' and the constraints' masks as constants, 2.7 GB with them built
    so. Under XLA the comparison fuses into the optimizer's update.

    Example:

    >>> mask_tensor(np.array([[1, 0], [1, 1]]), tf.float32).numpy()
    array([[1., 0.],
           [1., 1.]], dtype=float32)
    """
    ranks = staircase(mask)
    if ranks is None:
        return tf.constant(mask, dtype)
    rank, seen = ranks
    # Shaped in NumPy: indexing the tensors would add a slice and its three constants each.
    return tf.cast(tf.constant(rank[:, None]) < tf.constant(seen[None, :]), dtype)
