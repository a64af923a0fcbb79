"""The bijector cache that lets one network pass give a value and its log-det.

TFP's `BijectorCacheWithGreedyAttrs` (the mechanism FFJORD uses) expects
``_augmented_forward`` / ``_augmented_inverse`` to return ``(value, attrs)``
and stores ``attrs`` (here the log-dets) with the cache edge, so
``TransformedDistribution.log_prob`` reads the log-det of a MADE from the same
pass that produced ``u``: each MADE runs once per ``log_prob``.

Inside `tf.function` every trace has fresh symbolic tensors and reads the
weights in the graph, so TFP's cache is used as it is.

Eagerly, TFP's cache would look results up by the *input* tensor, and two
bijectors wrapping the same Keras layer compare equal: an evaluation tensor
reused after a weight update would get values computed with the old weights.
So eagerly we never look up by an input that a user passed in; every call
computes. We only remember, for each *output* tensor while it is alive, the
input it came from and the log-dets: `TransformedDistribution.log_prob(y)`
computes ``x = inverse(y)`` and then asks for ``forward(x)`` and the forward
log-det at that very ``x``, which would otherwise re-run the D-pass forward
of a MAF. (A caller who keeps ``x`` across a weight update and then asks for
its forward log-det gets the value from before the update, as TFP would.)

Graph entries live on the graph they belong to (`GRAPH_LOCAL`). TFP 0.25's bijectors
share one process-wide dictionary, keyed by weak references to input tensors, with
values that hold the log-det tensors: a value holds its graph, the graph holds the
input, so the weak key never dies and every graph ever traced (a deleted model's train
step, its samplers) stays in memory. Our bijectors, and the chain that the zoo's models
build (`GraphLocalChain`), keep their entries on `GRAPH_LOCAL` instead; TFP's own
bijectors keep theirs where TFP does. Lookups behave as TFP's: entries made anywhere
within one `tf.function` trace (nested loop and branch graphs included) are found
anywhere within it; traces never share symbolic tensors.

TFP's cache classes are private (`tfp_maf._platform.compat.cache_util`); without them our
bijectors use TFP's default cache, and `log_prob` runs each network twice.
"""

from __future__ import annotations

import weakref

import tensorflow as tf

from tfp_maf._platform.compat import NonCompositeChain, cache_util, outermost_graph

__all__ = ["GRAPH_LOCAL", "GraphLocalChain", "greedy_graph_only_cache"]


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
