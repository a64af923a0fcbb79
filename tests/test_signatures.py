"""Honest signatures: each zoo model takes exactly the keywords that change it, refuses any
other with a TypeError naming both, and loads the configs of earlier releases, whose keys
it did not use are dropped by name."""

from __future__ import annotations

import json
import pathlib
import zipfile

import numpy as np
import pytest

import keras_models as km
import tfp_maf
from keras_models import presets
from keras_models.density_model import KERAS_KEYWORDS, keywords
from keras_models.optimizers import FusedAdam
from keras_models.zoo import MODELS, model_keywords

DATA = pathlib.Path(__file__).parent / "data"

# A value other than the default for every keyword a zoo model may take (Keras' aside).
OTHER_VALUES = {
    "hidden_units": [6], "conditional_dims": 2, "l2": 0.0, "seed": 3, "num_layers": 2,
    "batch_norm": False, "log_scale_bound": 7.0, "num_components": 2, "activation": "tanh",
    "hidden_degrees": "random", "kernel_blocks": 2, "kernel_blocks_device": "gpu",
    "initialization": "published", "conditional_input_layers": "first_layer",
    "scale_parameterization": "log_precision", "bins": 4, "bound": 3.0,
    "standardize": False, "tails": 0.5, "dequantize": [0],
}
FLOWS = {"standardize", "tails", "dequantize"}  # every flow's, for a table of its own
TAKES = {
    "gaussian": {"conditional_dims"},
    "made": FLOWS | {"hidden_units", "conditional_dims", "context_network", "l2", "seed", "log_scale_bound",
             "activation", "hidden_degrees", "kernel_blocks", "kernel_blocks_device", "initialization",
             "conditional_input_layers", "scale_parameterization"},
}
TAKES["maf5"] = TAKES["made"] | {"num_layers", "batch_norm"}
TAKES["maf10"] = TAKES["maf5"]
TAKES["maf-mog5"] = TAKES["maf5"] | {"num_components"}
TAKES["made-mog"] = TAKES["made"] | {"num_components"}
TAKES["nsf5"] = (TAKES["maf5"] - {"log_scale_bound", "scale_parameterization"}) | {"bins", "bound"}
TAKES["realnvp5"] = FLOWS | {"hidden_units", "conditional_dims", "context_network", "l2", "seed", "num_layers",
                     "log_scale_bound"}
TAKES["realnvp10"] = TAKES["realnvp5"]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_each_model_takes_its_keywords_and_refuses_every_other(name):
    assert set(model_keywords(name)) == TAKES[name] | set(KERAS_KEYWORDS)
    cls = MODELS[name][0]
    for keyword in sorted(set(OTHER_VALUES) - TAKES[name]):
        with pytest.raises(TypeError, match=f"^{cls.__name__} takes no keyword '{keyword}': it takes "):
            km.build(name, 3, **{keyword: OTHER_VALUES[keyword]})


@pytest.mark.parametrize("name", sorted(set(MODELS) - {"gaussian"}))
def test_every_keyword_a_model_takes_is_kept_in_its_config(name):
    """A keyword it takes reaches the model: set to another value, the config says so,
    and the model rebuilt from it has it."""
    # kernel_blocks_device chooses for "auto" alone (it is test_every_keyword_changes_the_model's).
    given = {k: v for k, v in OTHER_VALUES.items() if k in TAKES[name] - {"kernel_blocks_device"}}
    model = km.build(name, 4, **given)
    config = model.get_config()
    for keyword, value in given.items():
        if keyword == "kernel_blocks":  # saved as what it decided: each MADE's counts
            assert {c for counts in config[keyword].values() for c in counts} == {value}, keyword
            continue
        assert config[keyword] == value, keyword
    again = type(model).from_config(config).get_config()
    assert {k: again[k] for k in given} == {k: config[k] for k in given}
    assert set(config) - {"event_size"} <= set(keywords(type(model))) | {"context_network"}


def test_the_zoo_rejects_what_it_once_ignored():
    # The keywords 0.4.0 accepted, saved and ignored.
    for cls, keyword, value in [
        (km.RealNVP, "activation", "tanh"), (km.RealNVP, "kernel_blocks", 1), (km.RealNVP, "num_components", 3),
        (km.RealNVP, "initialization", "published"), (km.MADEMoG, "num_layers", 3),
        (km.MAF, "num_components", 3), (km.MADE, "num_components", 3),
        (km.MADE, "num_layers", 2), (km.NSF, "log_scale_bound", 5.0), (km.NSF, "scale_parameterization", "log_scale"),
        (km.Gaussian, "hidden_units", [8]), (km.Gaussian, "seed", 0),
    ]:
        with pytest.raises(TypeError, match=f"{cls.__name__} takes no keyword '{keyword}'"):
            cls(4, **{keyword: value})


def _configs(release):
    for path in sorted((DATA / f"format-{release}").glob("*.keras")):
        with zipfile.ZipFile(path) as archive:
            yield path.stem, json.loads(archive.read("config.json"))


@pytest.mark.parametrize("release", ["0.3.0", "0.4.0"])
def test_old_configs_drop_the_keys_that_changed_nothing_by_name(release):
    for stem, saved in _configs(release):
        cls = km.zoo.__dict__[saved["class_name"]]
        config = {k: v for k, v in saved["config"].items() if k != "context_network" or v is None}
        model = cls.from_config(config)
        dropped = set(config) - set(model.get_config())
        # The device kind and the rule of "auto" are read into the counts the config now
        # saves (`tfp_maf.layers.made.legacy_kernel_blocks`), not dropped unread.
        read_into_counts = {"kernel_blocks_device", "kernel_blocks_rule"}
        expected = (set(cls.retired_config_keys) | set(cls.fixed_keywords) | read_into_counts) & set(config)
        assert dropped == expected, stem
        # Only those: a key no release wrote is still refused.
        with pytest.raises(TypeError, match=f"{cls.__name__} takes no keyword 'hidden_size'"):
            cls.from_config({**config, "hidden_size": 8})


def test_a_made_saved_with_several_layers_is_not_loaded_as_one():
    config = km.MAF(3, num_layers=2, batch_norm=False, hidden_units=[4]).get_config()
    with pytest.raises(ValueError, match="load it as a MAF"):
        km.MADE.from_config(config)


def test_presets_pass_each_model_what_it_takes():
    assert presets.model_kwargs("gas", model="realnvp5") == {"hidden_units": [100]}
    assert presets.model_kwargs("gas", model="gaussian") == {}
    published = presets.model_kwargs("mnist", protocol="published", model="nsf5")
    assert "scale_parameterization" not in published and published["initialization"] == "published"
    for name in MODELS:  # each preset builds its model
        km.build(name, 3, **presets.model_kwargs("cifar10", protocol="published", model=name))


def test_the_cli_refuses_an_option_its_model_does_not_take(tmp_path):
    import tfp_maf_cli as cli

    with pytest.raises(SystemExit, match="--log-scale-bound changes nothing in nsf5; the models it applies "
                                         "to: made, made-mog, realnvp5, realnvp10, maf5, maf10, maf-mog5"):
        cli.main(["train", "--model", "nsf5", "--log-scale-bound", "5", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="--hidden-units changes nothing in gaussian"):
        cli.main(["train", "--model", "gaussian", "--hidden-units", "8", "--out", str(tmp_path)])
    # The Gaussian is fitted in closed form: no step size, batches or epochs.
    for option in (["--learning-rate", "0.1"], ["--batch-size", "7"], ["--max-epochs", "3"], ["--patience", "2"],
                   ["--max-minutes", "1"], ["--no-jit"]):
        with pytest.raises(SystemExit, match=f"{option[0]} changes nothing in gaussian: it is fitted in closed form"):
            cli.main(["train", "--model", "gaussian", *option, "--out", str(tmp_path)])
    assert not any(tmp_path.iterdir())  # refused before anything was written


@pytest.mark.parametrize("flag, value, expected", [
    ("--batch-size", "0", "an integer at least 1, got 0"),
    ("--max-epochs", "0", "an integer at least 1, got 0"),
    ("--hidden-units", "-8", "an integer at least 1, got -8"),
    ("--patience", "-1", "an integer at least 0, got -1"),
    ("--learning-rate", "-1e-3", "a finite number above 0, got -1e-3"),
    ("--max-minutes", "nan", "a finite number above 0, got nan"),
    ("--log-scale-bound", "0", "a finite number above 0, got 0"),
    ("--batch-size", "ten", "an integer, got 'ten'"),
])
def test_the_cli_refuses_a_number_out_of_range(tmp_path, capsys, flag, value, expected):
    import tfp_maf_cli as cli

    with pytest.raises(SystemExit) as done:
        cli.main(["train", f"{flag}={value}", "--out", str(tmp_path / "run")])
    assert done.value.code == 2 and f"argument {flag}: expected {expected}" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def _fingerprint(model, x, y):
    """What a keyword may change: the weights' shapes and initial values, the penalty,
    and the density under the same random weights."""
    import numpy as np

    from tfp_maf.testing import randomize_weights

    shapes = [tuple(w.shape) for w in model.weights]
    initial = [w.numpy().copy() for w in model.weights]
    penalty = [float(v) for v in model.losses]
    randomize_weights(model, seed=1, scale=0.5)
    return shapes, initial, penalty, np.asarray(model.log_prob(x, y))


def _first_step_loss(model, x, y):
    import keras

    keras.utils.set_random_seed(0)
    model.compile(optimizer=FusedAdam(1e-3))
    return float(model.train_on_batch(x, y))


def _differ(a, b) -> bool:
    import numpy as np

    (shapes_a, initial_a, penalty_a, log_p_a), (shapes_b, initial_b, penalty_b, log_p_b) = a, b
    if shapes_a != shapes_b or penalty_a != penalty_b:
        return True
    return (any(not np.array_equal(u, v) for u, v in zip(initial_a, initial_b, strict=True))
            or not np.allclose(log_p_a, log_p_b, rtol=1e-6, atol=1e-6))


# maf10 and realnvp10 are maf5's and realnvp5's classes with another preset: the same keywords.
@pytest.mark.parametrize("name", sorted(set(MODELS) - {"gaussian", "maf10", "realnvp10"}))
def test_every_keyword_a_model_takes_changes_it(name):
    """Each keyword a model takes, set to another value, changes its weights, penalty or
    density: none is taken for nothing. The storage keywords change the kernels' layout
    only at sizes where "auto" stores blocks on a CPU: there they are checked."""
    import numpy as np

    D, K = 6, 2
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(16, D)).astype("float32"), np.eye(K, dtype="float32")[rng.integers(0, K, 16)]
    # One layer where the model takes a count (OTHER_VALUES has two): each keyword's build
    # and density cost a fraction of five layers', and every keyword still changes it.
    base = {"hidden_units": [12, 12], "conditional_dims": K,
            **({"num_layers": 1} if "num_layers" in TAKES[name] else {})}
    other = dict(OTHER_VALUES, hidden_units=[10, 10], conditional_dims=3, log_scale_bound=0.5)
    reference = _fingerprint(km.build(name, D, **base), x, y)
    for keyword in sorted(TAKES[name] - {"context_network", "kernel_blocks_device"}):
        if keyword == "conditional_dims":
            continue  # conditional_dims: y's width, checked by every conditional test
        changed = km.build(name, D, **{**base, keyword: other[keyword]})
        if keyword == "dequantize":  # the noise it adds in training: the first step's loss
            assert _first_step_loss(km.build(name, D, **base), x, y) != _first_step_loss(changed, x, y), (
                f"{name}: dequantize changed nothing")
            continue
        assert _differ(reference, _fingerprint(changed, x, y)), f"{name}: {keyword} changed nothing"
    if "kernel_blocks_device" in TAKES[name]:
        # A 1024 x 1024 kernel: "auto" stores it in degree blocks for a CPU, dense for a GPU.
        big = {"hidden_units": [1024, 1024], "num_layers": 1, "num_components": 1, "bins": 1}
        big = {key: value for key, value in big.items() if key in TAKES[name]}
        cpu, gpu = (km.build(name, 8, **big, kernel_blocks_device=kind) for kind in ("cpu", "gpu"))
        assert len(cpu.weights) != len(gpu.weights), f"{name}: kernel_blocks_device changed nothing"


@pytest.mark.parametrize("build, error, message", [
    (lambda: km.MAF(2, hidden_units="128"), TypeError, "hidden_units must be a list of integers >= 1, got '128'"),
    (lambda: km.MAF(2, hidden_units=[8, 2.5]), TypeError, "each of hidden_units must be an integer >= 1, got 2.5"),
    (lambda: km.MAF(2, num_layers=0), ValueError, "num_layers must be >= 1, got 0"),
    (lambda: km.RealNVP(2, num_layers=1.5), TypeError, "num_layers must be an integer >= 1, got 1.5"),
    (lambda: km.MADEMoG(2.5), TypeError, "event_size must be an integer >= 1, got 2.5"),
    (lambda: km.MADEMoG(2, num_components=2.5), TypeError, "num_components must be an integer >= 1, got 2.5"),
    (lambda: km.MAF(2, log_scale_bound=0.0), ValueError, "log_scale_bound must be finite and > 0 or None, got 0.0"),
    (lambda: km.RealNVP(2, log_scale_bound=float("nan")), ValueError, "log_scale_bound must be finite and > 0"),
    (lambda: km.MAF(2, log_scale_bound="5"), TypeError, "log_scale_bound must be a number > 0 or None, got '5'"),
    (lambda: km.MAF(2, batch_norm="yes"), TypeError, "batch_norm must be True or False, got 'yes'"),
    (lambda: km.NSF(2, bound=float("inf")), ValueError, "bound must be finite and > 0, got inf"),
    (lambda: km.NSF(2, bins=2.5), TypeError, "bins must be an integer >= 1, got 2.5"),
    (lambda: km.MAF(2, seed=1.5), TypeError, "seed must be an integer >= 0, got 1.5"),
    (lambda: km.MAF(2, conditional_dims=2.0), TypeError, "conditional_dims must be an integer >= 1 or None"),
    (lambda: km.Gaussian(2, conditional_dims=0), ValueError, "conditional_dims must be >= 1 or None, got 0"),
    (lambda: km.MAF(2, l2=-1e-6), ValueError, "l2 must be finite and >= 0, got -1e-06"),
    (lambda: tfp_maf.BatchNormState(4, epsilon=-1.0), ValueError, "epsilon must be finite and > 0, got -1.0"),
    (lambda: tfp_maf.BatchNormState(0), ValueError, "event_size must be >= 1, got 0"),
    (lambda: tfp_maf.MaskedAutoregressive(5), TypeError, "MaskedAutoregressive needs a MADE .a callable"),
    (lambda: tfp_maf.MADENetwork(2, hidden_units=8), TypeError, "hidden_units must be a list of integers >= 1, got 8"),
], ids=lambda case: None)
def test_constructors_refuse_what_they_would_truncate_or_misread(build, error, message):
    # int() truncated 2.5 to 2 and read "128" as three layers; bool("yes") was True; a
    # log-scale bound of 0 gave NaN at the first step.
    with pytest.raises(error, match=message):
        build()


def test_constructors_take_numpy_integers():
    model = km.MAF(np.int64(2), hidden_units=[np.int32(8)], num_layers=np.int64(1), seed=np.uint8(3))
    assert (model.event_size, model.hidden_units, model.num_layers, model.seed) == (2, [8], 1, 3)
    assert all(type(v) is int for v in (model.event_size, *model.hidden_units, model.num_layers, model.seed))
