"""Files saved by tfp-maf 0.1 load in this version, with the same densities.

0.2 renamed the layers (`MADE` -> `MADENetwork`, `ExpGammaBatchNormalization` ->
`BatchNormState`), and Keras stores a layer's weights under its class name: the files
in ``tests/data/saved_by_0.1`` (written by its ``make.py`` with 0.1) keep the old paths.
"""

from __future__ import annotations

import json
import pathlib
import warnings

import h5py
import keras
import numpy as np
import pytest

import keras_models
import tfp_maf

OLD = pathlib.Path(__file__).parent / "data" / "saved_by_0.1"
EXPECTED = json.loads((OLD / "expected.json").read_text())
NAMES = ["maf", "maf_conditional", "made_mog", "realnvp"]


def _inputs(name):
    x = np.array(EXPECTED["x"], np.float32)
    return x, (np.array(EXPECTED["y"], np.float32) if name == "maf_conditional" else None)


def _fresh(name):
    """The model as ``make.py`` built it, with this version's layer names."""
    kind, cond = {"maf": ("maf", None), "maf_conditional": ("maf", 2), "made_mog": ("made_mog", None),
                  "realnvp": ("realnvp", None)}[name]
    cls = {"maf": keras_models.MAF, "made_mog": keras_models.MADEMoG, "realnvp": keras_models.RealNVP}[kind]
    kwargs = {"num_components": 2} if kind == "made_mog" else {"num_layers": 2}
    return cls(3, hidden_units=[8], conditional_dims=cond, seed=99, **kwargs)


def _layer_groups(path):
    with h5py.File(path, "r") as f:
        return sorted(f["layers"])


@pytest.mark.parametrize("name", NAMES)
def test_a_keras_file_of_0_1_loads_with_its_densities(name, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # loading is not the user's use of an old name
        model = keras.saving.load_model(OLD / f"{name}.keras")
    x, y = _inputs(name)
    np.testing.assert_allclose(model.log_prob(x, y), EXPECTED[name], rtol=1e-5)
    # Saved again, it keeps the names its weights came with, and loads again.
    model.save(tmp_path / "again.keras")
    again = keras.saving.load_model(tmp_path / "again.keras")
    np.testing.assert_allclose(again.log_prob(x, y), EXPECTED[name], rtol=1e-5)
    # Its Adam state came along: training resumes where 0.1 left it.
    assert int(model.optimizer.iterations.numpy()) == 1


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("suffix", [".weights.h5", ".keras"])
def test_weights_of_0_1_load_into_a_model_of_this_version(name, suffix):
    model = _fresh(name)
    x, y = _inputs(name)
    model.log_prob(x, y)  # built
    model.load_weights(OLD / f"{name}{suffix}")
    np.testing.assert_allclose(model.log_prob(x, y), EXPECTED[name], rtol=1e-5)


def test_weights_of_this_version_load_into_a_model_loaded_from_0_1(tmp_path):
    old = keras.saving.load_model(OLD / "maf.keras")
    new = _fresh("maf")
    x, _ = _inputs("maf")
    new.log_prob(x)
    new.load_weights(OLD / "maf.weights.h5")
    new.save_weights(tmp_path / "new.weights.h5")
    assert "made_network" in _layer_groups(tmp_path / "new.weights.h5")
    old.load_weights(tmp_path / "new.weights.h5")
    np.testing.assert_allclose(old.log_prob(x), EXPECTED["maf"], rtol=1e-5)


def test_this_version_saves_under_the_new_names(tmp_path):
    model = _fresh("maf")
    model.log_prob(_inputs("maf")[0])
    model.save_weights(tmp_path / "m.weights.h5")
    assert _layer_groups(tmp_path / "m.weights.h5") == [
        "batch_norm_state", "batch_norm_state_1", "made_network", "made_network_1"]
    assert _layer_groups(OLD / "maf.weights.h5") == [
        "exp_gamma_batch_normalization", "exp_gamma_batch_normalization_1", "made", "made_1"]


@pytest.mark.parametrize("old_name, new", [("MADE", tfp_maf.MADENetwork),
                                           ("ExpGammaBatchNormalization", tfp_maf.BatchNormState)])
def test_the_old_layer_names_still_build_their_layers_with_a_deprecation_warning(old_name, new):
    with pytest.warns(DeprecationWarning, match=new.__name__):
        layer = getattr(tfp_maf, old_name)(3)
    assert isinstance(layer, new)
