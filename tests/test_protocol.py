"""The published code's protocol (`keras_models.presets`, `keras_models.initialization`):
its initialisation and hidden sizes where the paper is silent, kept apart from the paper's."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest

import keras_models as km
from keras_models import initialization, presets


def test_the_published_protocol_changes_sizes_initialisation_label_wiring_and_heads_only():
    paper = presets.model_kwargs("mnist")
    assert paper["hidden_units"] == [1024] and "scale_parameterization" not in paper
    published = presets.model_kwargs("mnist", protocol="published")
    assert published["hidden_units"] == [1024, 1024] and published["initialization"] == "published"
    assert published["conditional_input_layers"] == "first_layer"  # y into the first hidden layer
    assert published["scale_parameterization"] == "log_precision"
    # The same protocol with log-scale heads: the one difference.
    log_scale = presets.model_kwargs("mnist", protocol="published-log-scale")
    assert log_scale == {k: v for k, v in published.items() if k != "scale_parameterization"}
    # Where the code's sizes are the table's, the options stay.
    assert presets.hidden_unit_options("power", "published") == presets.HIDDEN_UNIT_OPTIONS["power"]
    assert "initialization" not in presets.model_kwargs("power")
    with pytest.raises(ValueError, match=r"protocol must be one of \('paper', 'published', 'published-log-scale'\), "
                                         r"got 'authors'"):
        presets.model_kwargs("mnist", protocol="authors")
    with pytest.raises(ValueError, match="initialization must be one of"):
        km.MAF(2, hidden_units=[8], num_layers=1, initialization="lecun")


def test_fan_in_normal_draws_randn_over_root_fan_in_plus_one():
    keras.utils.set_random_seed(0)
    w = np.asarray(initialization.FanInNormal()((400, 300)))
    assert w.std() * np.sqrt(401) == pytest.approx(1.0, abs=0.01) and abs(w.mean()) < 0.01
    same = initialization.FanInNormal.from_config(initialization.FanInNormal(seed=3).get_config())
    np.testing.assert_array_equal(np.asarray(same((5, 4))), np.asarray(initialization.FanInNormal(seed=3)((5, 4))))


def test_published_initialisation_of_the_zoo_models():
    keras.utils.set_random_seed(0)
    maf = km.MAF(20, hidden_units=[64], num_layers=2, initialization="published", kernel_blocks=1)
    default = km.MAF(20, hidden_units=[64], num_layers=2, kernel_blocks=1)
    # The Gaussian head's output kernel starts random there (zero by default), biases zero.
    out = maf.mades[0].output_layer
    kept = out.kernel.numpy()[out.mask > 0]
    assert kept.std() * np.sqrt(65) == pytest.approx(1.0, abs=0.1)
    assert not default.mades[0].output_layer.kernel.numpy().any()
    assert not out.bias.numpy().any()
    # The mixture head's biases start from N(0, 1): the log-precisions' too, and the
    # log-scales of a log-precision head are -1/2 of them (at x = 0 the relu units are 0).
    mog = km.MADEMoG(20, hidden_units=[64], num_components=3, initialization="published", kernel_blocks=1,
                     scale_parameterization="log_precision")
    bias = mog.made.output_layer.bias.numpy()
    assert bias.std() == pytest.approx(1.0, abs=0.15)
    _, _, log_scale = mog.made(np.zeros((1, 20), np.float32))
    np.testing.assert_allclose(log_scale[0], -0.5 * bias.reshape(20, 9)[:, 6:], rtol=1e-6)
    assert not km.MADEMoG(20, hidden_units=[64], num_components=3).made.output_layer.bias.numpy().any()


def test_a_published_protocol_model_saves_and_loads(tmp_path):
    x = np.random.default_rng(0).normal(size=(50, 3)).astype(np.float32)
    model = km.MAFMoG(3, hidden_units=[8], num_layers=1, num_components=2, initialization="published",
                      scale_parameterization="log_precision")
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras", safe_mode=True)
    assert loaded.initialization == "published" and loaded.scale_parameterization == "log_precision"
    assert all(made.scale_parameterization == "log_precision" for made in [*loaded.mades, loaded.base_made])
    np.testing.assert_array_equal(loaded.log_prob(x), model.log_prob(x))


def test_reproduce_keeps_published_protocol_rows_apart(tmp_path):
    import tfp_maf_cli as cli

    common = ["reproduce", "--results", str(tmp_path), "--runs", str(tmp_path / "runs"), "--quiet",
              "--models", "made", "--max-epochs", "1", "--no-figures"]
    cli.main(common)
    cli.main([*common, "--protocol", "published"])
    cli.main([*common, "--protocol", "published-log-scale"])
    result = json.loads((tmp_path / "figure1.json").read_text())
    assert [(r["model"], r["protocol"]) for r in result["rows"]] == [
        ("made", "paper"), ("made", "published"), ("made", "published-log-scale")]
    assert len({r["test_log_likelihood"] for r in result["rows"]}) == 3
    table = (tmp_path / "figure1.md").read_text()
    assert "made (published code's protocol) " in table
    assert "made (published code's protocol, log-scale heads)" in table
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [
        "made-option0-seed0", "made-option0-seed0-published", "made-option0-seed0-published-log-scale"]


def test_a_zoo_model_saves_where_its_label_feeds():
    kwargs = presets.model_kwargs("mnist", protocol="published")
    kwargs["hidden_units"] = [8, 8]  # the wiring, at a test's size
    model = km.MAF(4, num_layers=2, conditional_dims=3, **kwargs)
    assert [len(made.conditional_kernels) for made in model.mades] == [1, 1]
    restored = km.MAF.from_config(model.get_config())
    assert restored.conditional_input_layers == "first_layer"
    assert [len(made.conditional_kernels) for made in restored.mades] == [1, 1]
    with pytest.raises(ValueError, match="conditional_input_layers must be one of"):
        km.MADE(4, conditional_dims=3, conditional_input_layers="every")
