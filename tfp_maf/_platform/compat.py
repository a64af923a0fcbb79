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

import contextlib
import weakref

import tensorflow as tf
import tensorflow_probability as tfp

tfb, tfd = tfp.bijectors, tfp.distributions

__all__ = [
    "CHAIN_TYPES",
    "INVERT_TYPES",
    "KERAS_ARCHIVE_WEIGHTS",
    "TRANSFORMED_DISTRIBUTION_TYPES",
    "GRAPH_LOCAL",
    "GraphLocalChain",
    "NonCompositeChain",
    "CACHE_UTIL_MODULE",
    "XLA_MUST_COMPILE_ATTRIBUTE",
    "adam_slots",
    "bijector_cache_storage",
    "cache_util",
    "disable_op_determinism",
    "gradient_registry",
    "greedy_graph_only_cache",
    "omit_retracing_warning",
    "op_determinism_enabled",
    "outermost_graph",
    "python_function",
    "read_model_record",
    "read_optimizer_arrays",
    "save_context",
    "slot_of",
    "tf_serving_xla_switch",
    "with_greedy_graph_only_cache",
    "write_optimizer_arrays",
]

# -- TFP: the bijector cache -------------------------------------------------------
# Why: `cache_util.BijectorCacheWithGreedyAttrs` (the mechanism of TFP's FFJORD) stores
# the log-det that a pass computes beside its value, so `log_prob` runs each MADE once;
# and `cache_util.BijectorCache(storage=...)` gives our chains a cache whose entries
# die with their graph (below; the design: `tfp_maf._platform.bijector_cache`). TFP has no
# public cache API.
# Fallback (None): TFP's default cache; `log_prob` then runs each network twice, and a
# model's traced graphs are kept by TFP's process-wide cache after the model is deleted.
CACHE_UTIL_MODULE = "tensorflow_probability.python.internal.cache_util"  # (the tests block it)
try:
    from tensorflow_probability.python.internal import cache_util

    # `_GreedyGraphOnlyCache` (below) subclasses the greedy cache and overrides these methods.
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


# -- TFP: the process-wide storage of its bijector cache ---------------------------
# Why: tfp-maf leaves TFP's own bijector cache as it found it (its chains keep their
# entries graph-local, above); `tests/test_compat.py` checks that importing tfp-maf does,
# and TFP exposes the cache only as the class attribute ``Bijector._cache``. For test
# processes; tfp-maf never calls this. Verified: TFP 0.25.0. Fallback (None): nothing to
# compare.


def bijector_cache_storage():
    """The storage of TFP's process-wide bijector cache, or None."""
    return getattr(vars(tfb.Bijector).get("_cache"), "storage", None)


# -- TF: turning op determinism off again, and reading it --------------------------
# Why: `tf.config.experimental.enable_op_determinism()` has neither a public inverse nor a
# public getter; a test that turns it on for itself turns it off after it, so the tests
# after it run as users do. For test processes; tfp-maf never calls these. Verified:
# TensorFlow 2.20.0 and 2.21.0. Fallbacks: False (determinism stays on for the rest of the
# process) and None (unknown).


def _determinism_config():
    try:
        from tensorflow.python.framework import config
    except ImportError:
        return None
    return config


def disable_op_determinism() -> bool:
    """Turns TF's op determinism off; False where TF has no way to (it stays on)."""
    disable = getattr(_determinism_config(), "disable_op_determinism", None)
    if disable is None:
        return False
    disable()
    return True


def op_determinism_enabled() -> bool | None:
    """Whether TF's op determinism is on; None where TF does not say."""
    enabled = getattr(_determinism_config(), "is_op_determinism_enabled", None)
    return None if enabled is None else bool(enabled())


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


# -- TF: the context tf.saved_model.save traces in ---------------------------------
# Why: `tf.saved_model.save` traces every function it writes within its save context,
# whose variable policy is part of a tf.function's cache key; a function traced before
# the save (an export reads the variables its signatures use, to track them) is traced
# again, and a sampler's trace is most of an export's time. Tracing within the same
# context (TF's `save_context.save_context(options)`) lets the save reuse the trace.
# Fallback: a context that changes nothing; the save traces the functions again, as
# TF's own exports do.


def save_context(options):
    """The context `tf.saved_model.save(..., options=options)` traces in."""
    try:
        from tensorflow.python.saved_model import save_context as context
    except ImportError:
        return contextlib.nullcontext()
    enter = getattr(context, "save_context", None)
    return enter(options) if enter is not None else contextlib.nullcontext()


# -- TF: the switch TF Serving turns XLA off with -----------------------------------
# Why: TF Serving's main calls the C++ function `tensorflow::DisableXlaCompilation()`
# unless started with --xla_cpu_compilation_enabled=true, and a SavedModel holding an
# XLA program then fails on its first call. TF's Python API has no such switch; the
# tests call this one (with ctypes) to load our exports as TF Serving does. Verified:
# TensorFlow 2.20.0 and 2.21.0 on Linux. Fallback (None): the library or the symbol is not there
# (another platform, another build); the caller cannot turn XLA off.
_DISABLE_XLA_SYMBOL = "_ZN10tensorflow21DisableXlaCompilationEv"


def tf_serving_xla_switch() -> tuple[str, str] | None:
    """``(library path, symbol)`` of TF's ``DisableXlaCompilation()``, to call with
    ``ctypes.CDLL(path)[symbol]()``, or None. Calling it turns XLA's JIT off for the
    whole process, as TF Serving does: for test processes, never for tfp-maf's."""
    import ctypes
    import os

    path = os.path.join(os.path.dirname(tf.__file__), "libtensorflow_cc.so.2")
    try:
        getattr(ctypes.CDLL(path), _DISABLE_XLA_SYMBOL)
    except (OSError, AttributeError):
        return None
    return path, _DISABLE_XLA_SYMBOL


# -- TF: the function attribute that says XLA must compile it ------------------------
# Why: a `tf.function(jit_compile=True)` is saved with this attribute in its FunctionDef,
# and TF Serving, which turns XLA off, fails on such a function's first call. The tests
# read our SavedModels' graphs for it; no public API names it. Verified: TensorFlow
# 2.20.0 and 2.21.0. Fallback: none (a name; `tests/test_compat.py` checks that a
# function compiled so carries it, so a rename fails there, not silently).
XLA_MUST_COMPILE_ATTRIBUTE = "_XlaMustCompile"


# -- Keras: the layout of weights files and the names of optimizer slots ------------
# Why: a model whose MADE kernels are stored otherwise than a file's (degree blocks on
# a CPU, dense on a GPU) loads the layers' weights through Keras' public API, but Keras
# skips the optimizer state whose variables' shapes differ, and a resumed run would
# restart Adam. `keras_models.kernel_storage` rearranges that state, which Keras keeps
# in the group ``optimizer/vars`` (one dataset per variable, named by its index) of
# ``.weights.h5`` (``model.weights.h5`` inside a ``.keras`` archive), and whose slot
# variables Keras names ``<variable path, "/" as "_">_<slot>``. The storage a file was
# written with is recorded among the model's own variables (``save_own_variables``),
# which Keras keeps in the root group ``vars``. Keras documents none of these. Verified:
# Keras 3.10 to 3.15. Fallback: a file without the groups, or slots named otherwise, is
# loaded as it is, and Keras reports the state it skips.
KERAS_ARCHIVE_WEIGHTS = "model.weights.h5"
_OPTIMIZER_VARIABLES = "optimizer/vars"
_MODEL_VARIABLES = "vars"


def read_model_record(h5, key: str):
    """The array a model saved as ``key`` among its own variables in an open `h5py.File` of
    Keras weights, or None."""
    group = h5.get(_MODEL_VARIABLES)
    return None if group is None or key not in group else group[key][()]


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


# -- TFP: graph-local bijector caches -------------------------------------------------
# Why: TFP 0.25's bijectors share one process-wide cache that keeps every traced graph
# alive, and look eager results up by input tensor (`tfp_maf._platform.bijector_cache`
# says why that fails us). Our caches subclass TFP's private cache classes, override
# their private lookups and set TFP's private ``Bijector._cache``: all of it here.
# Fallback (cache_util None): `greedy_graph_only_cache` gives None, the decorator and
# `GraphLocalChain` leave TFP's default cache in place.


class _GraphLocalStorage:
    """The storage of a TFP bijector cache, one `EphemeralDict` per traced graph.

    Routes every access to the dictionary of the outermost `tf.function` graph being
    traced (kept as an attribute of that graph, so it goes with it), and eagerly to the
    dictionary of TF's global graph, which lives as long as the process, as TFP's does.
    """

    _ATTRIBUTE = "_tfp_maf_bijector_cache"

    @classmethod
    def current(cls) -> cache_util.EphemeralDict:
        # A while-loop body or a cond branch is a graph nested in the trace; tensors
        # cross between them, so they share the trace's entries.
        graph = outermost_graph(tf.compat.v1.get_default_graph())
        storage = getattr(graph, cls._ATTRIBUTE, None)
        if storage is None:
            storage = cache_util.EphemeralDict()
            setattr(graph, cls._ATTRIBUTE, storage)
        return storage

    # The dictionary interface that `cache_util.BijectorCache` uses.
    @property
    def maybe_del(self):  # bound when an entry is made: a callback removes it from its own graph's
        return self.current().maybe_del

    def __getitem__(self, key):
        return self.current()[key]

    def __setitem__(self, key, value):
        self.current()[key] = value

    def __delitem__(self, key):
        del self.current()[key]

    def setdefault(self, key, default=None):
        return self.current().setdefault(key, default)

    def keys(self):
        return self.current().keys()


#: The storage of tfp_maf's bijector caches.
GRAPH_LOCAL = _GraphLocalStorage()


class GraphLocalChain(NonCompositeChain):
    """The chain of TFP's `tfb.Chain` (same routing, same results) whose cache entries
    live on `GRAPH_LOCAL`, so that a model's traces die with the model.

    For chains whose parts hold Keras layers (not CompositeTensors), for which
    `tfb.Chain(...)` builds the same class.
    """

    if cache_util is not None:
        _cache = cache_util.BijectorCache(storage=GRAPH_LOCAL)


# (id(bijector), id(output)) -> (weakref to output, bijector, function that made the
# output, its input, attrs, keyword arguments). TFP binds a fresh cache object to a bijector on each call,
# so this lives at module level; an entry goes when its output tensor is collected.
_EAGER_OUTPUTS: dict = {}


def greedy_graph_only_cache(forward_name: str, inverse_name: str):
    """A `GreedyGraphOnlyCache` calling the bijector's ``forward_name`` and
    ``inverse_name`` (which return ``(value, attrs)``), or None without TFP's cache classes."""
    return None if cache_util is None else _GreedyGraphOnlyCache(forward_name=forward_name, inverse_name=inverse_name)


if cache_util is not None:

    class _GreedyGraphOnlyCache(cache_util.BijectorCacheWithGreedyAttrs):
        """Greedy-attribute cache: TFP's in graph mode (on `GRAPH_LOCAL`), output-keyed when eager."""

        def __init__(self, *args, storage=None, **kwargs):
            super().__init__(*args, storage=GRAPH_LOCAL if storage is None else storage, **kwargs)

        def _eager_entry(self, tensor, kwargs):
            entry = _EAGER_OUTPUTS.get((id(self.bijector), id(tensor)))
            if entry is None or entry[0]() is not tensor or entry[1] is not self.bijector:
                return None
            same_kwargs = entry[5].keys() == kwargs.keys() and all(
                entry[5][k] is v for k, v in kwargs.items()  # e.g. the same conditional_input
            )
            return entry if same_kwargs else None

        def _lookup(self, input, forward_name, inverse_name, **kwargs):  # noqa: A002
            if not tf.executing_eagerly():
                return super()._lookup(input, forward_name, inverse_name, **kwargs)
            entry = self._eager_entry(input, kwargs)
            if entry is not None and entry[2] == inverse_name:
                return entry[3]  # `input` came out of the opposite direction: undo it exactly.
            attrs = {}
            output = self._invoke(input, forward_name, kwargs, attrs)
            key = (id(self.bijector), id(output))
            try:
                ref = weakref.ref(output, lambda _, k=key: _EAGER_OUTPUTS.pop(k, None))
            except TypeError:  # not weak-referenceable (a NumPy array, say): nothing to remember
                return output
            _EAGER_OUTPUTS[key] = (ref, self.bijector, forward_name, input, attrs, dict(kwargs))
            return output

        def _attributes(self, input, fn_name, **kwargs):  # noqa: A002
            if not tf.executing_eagerly():
                return super()._attributes(input, fn_name, **kwargs)
            entry = self._eager_entry(input, kwargs)
            return entry[4] if entry is not None else {}


def with_greedy_graph_only_cache(forward_name: str, inverse_name: str):
    """A class decorator: the bijector class's TFP cache (``Bijector._cache``) becomes a
    `greedy_graph_only_cache` of ``forward_name`` and ``inverse_name``; without TFP's
    cache classes, the class keeps TFP's default cache."""

    def decorate(cls):
        cache = greedy_graph_only_cache(forward_name, inverse_name)
        if cache is not None:
            cls._cache = cache
        return cls

    return decorate
