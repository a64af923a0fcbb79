"""How a sampler is traced: the textbook loop, TensorFlow's executor, or no gradient.

Three choices change how the autoregressive bijectors' forward direction (sampling) is
traced, never the values it gives (they are fields of `tfp_maf.trace_options.TraceOptions`,
which says why they are a context):

- `full_passes`: the one-pass engine (`tfp_maf.sampling.sequential_pass`) picks its loop
  body per step with ``tf.switch_case``, which neither tf2onnx nor LiteRT's converter
  takes. A graph meant for them (`keras_models.portable`) is traced within it: the
  forward direction then runs the MADE D times in a ``tf.while_loop``, which both
  converters take (ONNX ``Loop``, LiteRT ``WHILE``), at the cost of D passes instead of
  about one.
- `without_xla`: the engine's loop runs with TensorFlow's executor rather than as an XLA
  program, for graphs served where XLA is off (TF Serving).
- `without_gradients`: the samples carry no gradient, so no `tf.custom_gradient` is
  registered (TF never frees one, nor the graph it holds).
"""

from __future__ import annotations

from tfp_maf.trace_options import trace_options, traced_with

__all__ = ["full_passes", "full_passes_active", "without_gradients", "without_xla"]


def full_passes():
    """Within it (while a function is traced, or eagerly), the masked autoregressive
    bijectors' forward direction runs D full passes of the MADE.

    Example:

    >>> import numpy as np
    >>> from tfp_maf import MADENetwork, MaskedAutoregressive
    >>> made = MADENetwork(3, hidden_units=[8], output_kernel_initializer="glorot_uniform", seed=0)
    >>> maf = MaskedAutoregressive(made)
    >>> u = np.random.RandomState(0).standard_normal((4, 3)).astype(np.float32)
    >>> with full_passes():
    ...     x = maf.forward(u)
    >>> bool(np.allclose(x, maf.forward(u), atol=1e-5))
    True
    """
    return traced_with(full_passes=True)


def full_passes_active() -> bool:
    """Whether the caller is within `full_passes`."""
    return trace_options().full_passes


def without_xla():
    """Within it (while a function is traced, or eagerly), `sequential_pass` runs its
    loop with TensorFlow's executor rather than as an XLA program.

    For graphs that run where XLA cannot compile: TF Serving disables XLA's JIT unless
    started with ``--xla_cpu_compilation_enabled=true``, and a graph with an XLA program
    then fails on its first call ("XLA compilation disabled"); its GPU images carry no
    XLA compiler for the GPU either. The samples are the same up to rounding; the loop
    takes 1.1x to 2.5x the XLA program's time for 100 draws and 2x to 4x for 1,000
    (`benchmarks/sampling.py`). `keras_models.DensityModel.export` traces within it.

    Example:

    >>> import numpy as np, tensorflow as tf
    >>> from tfp_maf import MADENetwork, MaskedAutoregressive
    >>> made = MADENetwork(3, hidden_units=[8], output_kernel_initializer="glorot_uniform", seed=0)
    >>> maf = MaskedAutoregressive(made)
    >>> u = np.random.RandomState(0).standard_normal((4, 3)).astype(np.float32)
    >>> @tf.function
    ... def forward(u):
    ...     with without_xla():
    ...         return maf.forward(u)
    >>> bool(np.allclose(forward(u), maf.forward(u), atol=1e-5))
    True
    """
    return traced_with(xla=False)


def without_gradients():
    """Within it, `sequential_pass` gives samples that carry no gradient.

    `tf.custom_gradient`, which the differentiable path needs, registers a gradient
    function per trace in a registry TF never empties, and that function holds the
    traced graph: a process that traces samplers for many models keeps them all.
    Callers that only want values (`keras_models.DensityModel.sample`) trace under this.
    """
    return traced_with(gradients=False)
