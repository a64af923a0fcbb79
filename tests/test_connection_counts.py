"""Measured parameter counts against the paper's appendix A estimates."""

from __future__ import annotations

import pytest
from conftest import zoo_model

import keras_models as km
from keras_models.connection_counts import connection_weights, paper_estimate


@pytest.mark.parametrize("name", ["made", "maf5", "realnvp5", "made-mog", "maf-mog5"])
@pytest.mark.parametrize("D,H,L", [(8, 100, 2), (43, 512, 1), (20, 64, 2)])
def test_counts_match_the_appendix(name, D, H, L):
    model = zoo_model(name, D, hidden_units=[H] * L, num_components=10)
    measured = connection_weights(model)["connections"]
    estimate = paper_estimate(name, D=D, H=H, L=L, C=10)
    if "mog" in name:
        # Our mixture head has 3 outputs per component (the formula counts 2): add
        # C/2 D H per MADE MoG before comparing.
        estimate += 0.5 * 10 * D * H
    if name != "realnvp5":
        # "Masking removes about half": a hidden-to-hidden mask with degrees 1..D-1
        # keeps (1 + 1/(D - 1)) / 2 of its connections, half only for large D.
        mades = {"made": 1, "made-mog": 1, "maf5": 5, "maf-mog5": 6}[name]
        estimate += mades * 0.5 * (L - 1) * H**2 / (D - 1)
    # Within 8%: sequential degrees cycle, so they are uniform only when D - 1 divides H.
    assert measured == pytest.approx(estimate, rel=0.08), (measured, estimate)


def test_conditional_kernels_are_counted_apart():
    model = km.MAF(5, hidden_units=[16, 16], num_layers=2, conditional_dims=3)
    counts = connection_weights(model)
    assert counts["conditional"] == 2 * 2 * 3 * 16  # two MADEs, y into both hidden layers
    unconditional = connection_weights(km.MAF(5, hidden_units=[16, 16], num_layers=2))
    assert counts["connections"] == unconditional["connections"]
    nvp = connection_weights(km.RealNVP(6, hidden_units=[16], num_layers=2, conditional_dims=3))
    assert nvp["conditional"] == 2 * 2 * 3 * 16  # two layers x two nets, y into the first
