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

TFP's cache classes are private: the code that subclasses them lives in
`tfp_maf._platform.compat`, with every other private name; this module names what the
bijectors use. Without those classes our bijectors use TFP's default cache, and
`log_prob` runs each network twice.
"""

from tfp_maf._platform.compat import (
    GRAPH_LOCAL,
    GraphLocalChain,
    greedy_graph_only_cache,
    with_greedy_graph_only_cache,
)

__all__ = ["GRAPH_LOCAL", "GraphLocalChain", "greedy_graph_only_cache", "with_greedy_graph_only_cache"]
