"""The product is Keras 3 only, on its TensorFlow backend, and never uses TFP's
tf_keras-based layers."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

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


@pytest.mark.parametrize("package", ["tfp_maf", "keras_models"])
def test_importing_under_another_keras_backend_refuses_and_names_the_fix(package):
    """Under JAX or PyTorch a layer built, then failed deep inside a call or a ``fit``. The
    backend is faked here (neither is installed for the tests): importing the package must
    ask Keras which backend it runs on, and refuse before defining a layer."""
    probe = (f"import keras\nkeras.config.backend = lambda: 'jax'\n"
             f"try:\n    import {package}\nexcept ImportError as err:\n    print(err)\n"
             "else:\n    print('imported')\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Keras is set to 'jax'" in done.stdout and "KERAS_BACKEND=tensorflow" in done.stdout, done.stdout
