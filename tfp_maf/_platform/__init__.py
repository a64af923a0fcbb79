"""Every workaround of TensorFlow, TFP and Keras behaviour, in one folder.

The domain modules (`tfp_maf.masks`, `tfp_maf.layers`, `tfp_maf.bijectors`, ...) say what
a MAF computes; the modules here say what TF, TFP or Keras do that a library of flows must
work around, each with its reason, the versions it was verified on, and how to tell when
it can go. An upgrade of TF, TFP or Keras can break these modules and no other; what
each reaches into is checked by ``tests/test_compat.py`` on both ends of the supported
range (``.ci/run``).

- `compat`: every private name read or set (TFP's bijector cache classes, which our
  graph-local caches subclass, and ``Bijector._cache``; TF's gradient registry and graph
  nesting; the flag of TF's retracing warning; the context `tf.saved_model.save` traces
  in; Keras' weights-file layout and Adam's moments), each behind a feature check with a
  public fallback. Can go, entry by entry, when the check finds the name gone and the
  fallback serves (``tests/test_compat.py`` tests both).
- `graph_memory`: TF keeps every `tf.custom_gradient` registration (and its graph) for
  the process's life, and counts every model's trace of one Python function as
  retracing. Can go when a process that trains and deletes models in a loop holds no
  more memory after the first without it (``tests/test_long_lived.py``).
- `bijector_cache`: the caches our bijectors and chains use, and why (their code is in
  `compat`). TFP 0.25's bijector cache is one process-wide dict that holds every
  traced graph, and looks eager results up by input tensor. Can go when TFP's cache
  releases a graph's entries with the graph and never returns a result computed
  before a weight update (``tests/test_bijectors.py``, ``tests/test_long_lived.py``).
- `layer_tracking`: a Keras 3 layer is not a `tf.Module`, so TFP's
  ``trainable_variables`` walk misses a bijector's weights; Keras' recursive layer walk
  is private. Can go when `tf.Module`'s walk finds Keras 3 layers' variables and Keras
  has a public recursive walk (``tests/test_tfp_idioms.py``).
- `keras_steps`: Keras' ``fit`` wraps a one-step function in a second `tf.function`,
  optimised once more before the first batch. Can go when Keras' first step costs no
  more (``benchmarks/small_data.py``: the first epoch against the Keras floor).

Verified on: TensorFlow 2.20.0 and 2.21.0, TensorFlow Probability 0.25.0, Keras 3.10.0
and 3.15.1.

`keras_models` uses `tfp_maf` through its public names and this folder, nothing else
private (``tests/test_conventions.py``).
"""
