"""Every private name of TensorFlow, TFP and Keras that tfp-maf uses, in one place.

Each entry says why no public API does the job, and looks its name up (a feature
check, never a version comparison). Where the name is missing the entry falls back
to public behaviour: tfp-maf stays correct, and only loses what the entry bought
(speed, memory released, a warning kept quiet). Nothing here changes TensorFlow, TFP
or Keras: entries read private names, or set them on objects made for tfp-maf (its
functions, and the ones Keras makes for its models).
`tests/test_compat.py` checks every entry, and `.ci/run` runs it on both ends of the
supported range.

Verified on: TensorFlow 2.20.0 and 2.21.0, TensorFlow Probability 0.25.0, Keras 3.10.0
and 3.15.1.
"""

from __future__ import annotations

import tensorflow_probability as tfp

tfb, tfd = tfp.bijectors, tfp.distributions

__all__ = [
    "CHAIN_TYPES",
    "INVERT_TYPES",
    "KERAS_ARCHIVE_WEIGHTS",
    "TRANSFORMED_DISTRIBUTION_TYPES",
    "NonCompositeChain",
    "adam_slots",
    "cache_util",
    "gradient_registry",
    "omit_retracing_warning",
    "outermost_graph",
    "python_function",
    "read_optimizer_arrays",
    "slot_of",
    "write_optimizer_arrays",
]

# -- TFP: the bijector cache -------------------------------------------------------
# Why: `cache_util.BijectorCacheWithGreedyAttrs` (the mechanism of TFP's FFJORD) stores
# the log-det that a pass computes beside its value, so `log_prob` runs each MADE once;
# and `cache_util.BijectorCache(storage=...)` gives our chains a cache whose entries
# die with their graph (`tfp_maf._platform.bijector_cache`). TFP has no public cache API.
# Fallback (None): TFP's default cache; `log_prob` then runs each network twice, and a
# model's traced graphs are kept by TFP's process-wide cache after the model is deleted.
try:
    from tensorflow_probability.python.internal import cache_util

    # `tfp_maf._platform.bijector_cache` subclasses the greedy cache and overrides these methods.
    if not (all(hasattr(cache_util, name) for name in ("BijectorCache", "BijectorCacheWithGreedyAttrs",
                                                       "EphemeralDict"))
            and all(hasattr(cache_util.BijectorCacheWithGreedyAttrs, name)
                    for name in ("_lookup", "_attributes", "_invoke"))):
        cache_util = None
except ImportError:
    cache_util = None

# Why: a graph-local cache keys its entries by the outermost graph being traced; a
# while-loop body or a cond branch is a `FuncGraph` nested in it, reached through its
# ``outer_graph`` (an attribute of TF's graph class that no public API exposes).
# Fallback: the graph itself (a loop body then keeps entries of its own; results are
# the same, a value computed in the loop may be computed again outside it).


def outermost_graph(graph):
    """The outermost `tf.function` graph that ``graph`` is nested in (itself if none)."""
    while getattr(getattr(graph, "outer_graph", None), "outer_graph", None) is not None:
        graph = graph.outer_graph
    return graph


# -- TFP: the classes behind tfb.Chain, tfb.Invert and tfd.TransformedDistribution ---
# Why: for parts that are not CompositeTensors (ours hold Keras layers) `tfb.Chain(...)`
# builds an instance of its non-composite base class, which is not an instance of
# `tfb.Chain`; the same for `tfb.Invert` and `tfd.TransformedDistribution`. Routing
# keywords through a flow must recognise both. The base is read off the public class
# (its first base of the same family), so no private module is imported.
# Fallback: the public class alone (a hand-built chain of ours is then not walked).


def _non_composite_base(public, family):
    base = public.__bases__[0] if public.__bases__ else public
    return base if isinstance(base, type) and issubclass(base, family) and base is not family else public


NonCompositeChain = _non_composite_base(tfb.Chain, tfb.Composition)
_NonCompositeInvert = _non_composite_base(tfb.Invert, tfb.Bijector)
_NonCompositeTransformed = _non_composite_base(tfd.TransformedDistribution, tfd.Distribution)
CHAIN_TYPES = (tfb.Chain, NonCompositeChain)
INVERT_TYPES = (tfb.Invert, _NonCompositeInvert)
TRANSFORMED_DISTRIBUTION_TYPES = (tfd.TransformedDistribution, _NonCompositeTransformed)

# -- TF: the gradient registry -----------------------------------------------------
# Why: `tf.custom_gradient` registers a gradient function under a fresh name on every
# trace and TF never removes it; the function holds its graph, so every train step a
# process traced (every model of a sweep) stays in memory. TF has no public way to
# unregister. Fallback (None): nothing is released.


def gradient_registry() -> dict | None:
    """TF's registry of gradient functions (name -> function), or None."""
    try:
        from tensorflow.python.framework import ops
    except ImportError:
        return None
    registry = getattr(getattr(ops, "_gradient_registry", None), "_registry", None)
    return registry if isinstance(registry, dict) else None


# -- TF: the retracing warning of a tf.function -------------------------------------
# Why: TF counts traces per Python function across instances, so the fifth model of a
# notebook (each tracing Keras' train step once, as it must) prints "triggered
# tf.function retracing". TF sets this flag on its own functions for the same reason;
# we set it only on functions of our models. Fallback: the warning is printed.


def omit_retracing_warning(function) -> None:
    """Marks ``function`` (a `tf.function` of ours) as traced once per model by design."""
    if hasattr(function, "_omit_frequent_tracing_warning"):
        function._omit_frequent_tracing_warning = True


# Why: Keras wraps its train / test / predict step in closures around `tf.function`s; to
# mark those (`omit_retracing_warning`) we walk from a tf.function to the Python
# function it traces. Fallback (None): the walk stops, the warning is printed.


def python_function(function):
    """The Python function a `tf.function` traces, or None."""
    return getattr(function, "_python_function", None)


# -- Keras: the layout of weights files and the names of optimizer slots ------------
# Why: a model whose MADE kernels are stored otherwise than a file's (degree blocks on
# a CPU, dense on a GPU) loads the layers' weights through Keras' public API, but Keras
# skips the optimizer state whose variables' shapes differ, and a resumed run would
# restart Adam. `keras_models.kernel_storage` rearranges that state, which Keras keeps
# in the group ``optimizer/vars`` (one dataset per variable, named by its index) of
# ``.weights.h5`` (``model.weights.h5`` inside a ``.keras`` archive), and whose slot
# variables Keras names ``<variable path, "/" as "_">_<slot>``. Keras documents
# neither. Fallback: a file without the group, or slots named otherwise, is loaded as
# it is, and Keras reports the state it skips.
KERAS_ARCHIVE_WEIGHTS = "model.weights.h5"
_OPTIMIZER_VARIABLES = "optimizer/vars"


def read_optimizer_arrays(h5) -> list:
    """The optimizer variables saved in an open `h5py.File` of Keras weights, in order."""
    group = h5.get(_OPTIMIZER_VARIABLES)
    return [] if group is None else [group[str(i)][()] for i in range(len(group))]


def write_optimizer_arrays(h5, arrays) -> None:
    """Replaces the optimizer variables saved in an open, writable `h5py.File`."""
    if _OPTIMIZER_VARIABLES in h5:
        del h5[_OPTIMIZER_VARIABLES]
    group = h5.create_group(_OPTIMIZER_VARIABLES)
    for i, value in enumerate(arrays):
        group[str(i)] = value


def slot_of(slot_variable_name: str, variable_name: str) -> str | None:
    """The slot (``"momentum"``, ...) that an optimizer variable named
    ``slot_variable_name`` holds for the model variable named ``variable_name``, or None."""
    prefix = variable_name.replace("/", "_") + "_"
    return slot_variable_name[len(prefix):] or None if slot_variable_name.startswith(prefix) else None


# -- Keras: Adam's moment variables -------------------------------------------------
# Why: `keras_models.optimizers.FusedAdam` updates each variable with TF's one-op Adam
# kernel, which takes the variable's first and second moments. `keras.optimizers.Adam`
# keeps them in ``_momentums`` and ``_velocities``, indexed by ``_get_variable_index``
# (what its own ``update_step`` reads); Keras has no public accessor. Fallback (None):
# the moments are not found and `FusedAdam` runs Keras' own update, op by op.


def adam_slots(optimizer, variable) -> tuple | None:
    """``(m, v)``: the Keras variables holding ``variable``'s Adam moments, or None."""
    try:
        index = optimizer._get_variable_index(variable)
        return optimizer._momentums[index], optimizer._velocities[index]
    except (AttributeError, KeyError, IndexError, TypeError):
        return None
