"""The product is Keras 3 only and never uses TFP's tf_keras-based layers."""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
FORBIDDEN = re.compile(
    r"(^|[^_\w])tf\.keras|import tf_keras|from tf_keras|AutoregressiveNetwork|tfb\.BatchNormalization"
)


@pytest.mark.parametrize("package", ["tfp_maf", "keras_models"])
def test_no_tf_keras_in_product(package):
    offenders = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if FORBIDDEN.search(line)
    ]
    assert not offenders, "\n".join(offenders)
