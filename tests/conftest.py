"""Shared fixtures: dtypes, execution modes, and the bijectors under test."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfp_maf import (  # noqa: E402
    AffineCoupling,
    CouplingNetworks,
    ExpGammaBatchNorm,
    LogTails,
    MADENetwork,
    MaskedAutoregressive,
    MaskedRationalQuadraticSpline,
    Standardize,
    coupling_partition,
)
from tfp_maf.testing import randomize_weights  # noqa: E402

TOL = {tf.float32: dict(rtol=2e-4, atol=2e-4), tf.float64: dict(rtol=1e-9, atol=1e-9)}


@pytest.fixture(params=[tf.float32, tf.float64], ids=["float32", "float64"])
def dtype(request):
    return request.param


@pytest.fixture(params=["eager", "function"])
def mode(request):
    """Runs a zero-argument callable eagerly or inside a fresh `tf.function`."""
    if request.param == "eager":
        return lambda fn: fn()
    return lambda fn: tf.function(fn)()


def make_bijector(
    kind: str, dtype, event_size: int = 4, conditional_dims=None, seed=0, log_scale_bound=None
):
    """A bijector with random (non-identity) weights; returns (bijector, kwargs_factory)."""
    np_dtype = dtype.as_numpy_dtype
    if kind == "maf":
        made = MADENetwork(
            event_size,
            hidden_units=[16, 16],
            order="random",
            seed=seed,
            conditional_dims=conditional_dims,
            dtype=dtype.name,
        )
        randomize_weights(made, seed)
        return MaskedAutoregressive(made, name=f"maf_{seed}", log_scale_bound=log_scale_bound)
    if kind == "spline":
        made = MADENetwork(
            event_size, hidden_units=[16, 16], order="random", seed=seed, params=3 * 4 - 1,
            conditional_dims=conditional_dims, dtype=dtype.name,
        )
        # Smaller weights than the affine case's: steep bins (slopes near MIN_SLOPE) would
        # make a float32 round trip lose digits the check asks for.
        randomize_weights(made, seed, scale=0.2)
        return MaskedRationalQuadraticSpline(made, bins=4, bound=3.0, name=f"spline_{seed}")
    if kind in ("coupling_even", "coupling_odd"):
        parity = kind.split("_")[1]
        copied, transformed = coupling_partition(event_size, parity)
        nets = CouplingNetworks(
            len(copied), len(transformed), [16], conditional_dims=conditional_dims, dtype=dtype.name
        )
        randomize_weights(nets, seed)
        return AffineCoupling(
            nets, event_size, parity, name=f"coupling_{seed}", log_scale_bound=log_scale_bound
        )
    if kind == "batch_norm":
        rng = np.random.RandomState(seed)
        return ExpGammaBatchNorm(
            beta=rng.normal(size=event_size).astype(np_dtype),
            gamma=rng.normal(size=event_size).astype(np_dtype),
            mean=rng.normal(size=event_size).astype(np_dtype),
            variance=rng.uniform(0.5, 2.0, size=event_size).astype(np_dtype),
            name=f"batch_norm_{seed}",
        )
    if kind == "standardize":
        rng = np.random.RandomState(seed)
        return Standardize(rng.normal(size=event_size).astype(np_dtype) * 100,
                           rng.uniform(0.01, 50.0, size=event_size).astype(np_dtype), name=f"standardize_{seed}")
    if kind == "log_tails":  # a threshold the test data cross, both ways
        return LogTails(0.7, name=f"log_tails_{seed}")
    raise ValueError(kind)


BIJECTOR_KINDS = ["maf", "spline", "coupling_even", "coupling_odd", "batch_norm"]
#: The fixed elementwise parts of the zoo's flows: the contract's checks, not the networks'.
FIXED_KINDS = ["standardize", "log_tails"]
CONDITIONAL_KINDS = ["maf", "spline", "coupling_even", "coupling_odd"]


#: Where `written_out_gradients` runs a computation: as a `fit` step traces, and around it.
GRADIENT_PLACES = ["eager", "traced, registrations released", "traced"]


def written_out_gradients(where: str, compute):
    """``compute()`` (a loss and its gradients, through our bijectors) run eagerly, in a
    trace inside `tfp_maf.tracing.custom_gradients_released` (as a `fit` step traces), or
    in a plain trace (``where``, one of `GRADIENT_PLACES`). Checks that the bijectors take
    their written-out gradients (a `tf.custom_gradient`: IdentityN ops) in the released
    trace and not in the plain one, and that neither trace leaves anything in TF's
    gradient registry; returns what ``compute`` returned."""
    from tfp_maf._platform import compat
    from tfp_maf.tracing import custom_gradients_released

    def run():
        if where == "traced, registrations released":
            with custom_gradients_released():
                return compute()
        return compute()

    registry = compat.gradient_registry()
    before = None if registry is None else set(registry)
    if where == "eager":
        got = run()
    else:
        traced = tf.function(run, autograph=False).get_concrete_function()
        written_out = any(op.type == "IdentityN" for op in traced.graph.get_operations())
        assert written_out == (where != "traced" and registry is not None), where
        got = traced()
    if registry is not None:
        assert set(registry) == before  # the trace left nothing in TF's registry
    return got


def zoo_model(name: str, event_size: int, **kwargs):
    """`keras_models.build` of ``name``, given those of ``kwargs`` it takes: the tests' one
    set of small sizes for every family (a model refuses a keyword it does not take)."""
    import keras_models as km

    takes = km.zoo.model_keywords(name)
    return km.build(name, event_size, **{key: value for key, value in kwargs.items() if key in takes})


# The longest tests (``--durations`` on 2 cores: 20 to 100 s each, with their fixtures) start
# first, so that a parallel run (pytest-xdist) ends on short tests rather than on one worker
# finishing a long test while the others wait. Only the order changes; within a group, and
# for every other test, the collection's order stays.
_LONGEST_FIRST = (
    "tests/test_serving_runtimes.py::test_every_cell_runs_in_tensorflows_session_loader_and_saved_model_cli",
    "tests/test_reliability.py::test_maf_with_batch_norm_stays_at_the_entropy_of_a_standard_normal",
    "tests/test_reliability.py::test_a_run_killed_mid_epoch_resumes_to_the_same_result",
    "tests/test_distributed.py::",  # its module's fixture trains in a fresh process
    "tests/test_docs_blocks.py::",
    "tests/test_tutorials.py::",
    "tests/test_keras_models.py::test_cli_trains_evaluates_and_samples",
    "tests/test_properties.py::",
)


def pytest_collection_modifyitems(config, items):
    def group(item):
        return next((i for i, prefix in enumerate(_LONGEST_FIRST) if item.nodeid.startswith(prefix)),
                    len(_LONGEST_FIRST))

    items.sort(key=group)
