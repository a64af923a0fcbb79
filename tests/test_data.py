"""The dataset loaders, on files written here in exactly the archive's formats, and on the
real MNIST and a MINIBOONE slice: the folder ``$TFP_MAF_TEST_DATA``, else the
``shared/data`` folder that CI places beside the repository.

Each preprocessing step is checked against a literal restatement of the published loader
(the oracle) and against the property it is meant to have (columns, noise ranges, split
sizes, statistics, the logit and its lambda, the flips).
"""

from __future__ import annotations

import gzip
import os
import pickle
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import tensorflow as tf

from keras_models import data
from keras_models.data import images, tabular

SHARED_DATA = Path(os.environ.get("TFP_MAF_TEST_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def _write(root: Path, folder: str, name: str) -> Path:
    (root / folder).mkdir(parents=True, exist_ok=True)
    return root / folder / name


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=np.float64)))


# ----------------------------------------------------------------------------------- POWER

def _power_oracle(raw):
    """The published loader, restated step by step."""
    n = len(raw)
    rng = np.random.RandomState(42)
    perm = rng.permutation(n)  # the same draws as rng.shuffle(rows)
    x = raw[perm][:, [0, 2, 4, 5, 6, 7]].astype(np.float64)
    voltage, active = 0.01 * rng.rand(n, 1), 0.001 * rng.rand(n, 1)
    x[:, :1] += active
    x[:, 1:2] += voltage
    x[:, 2:5] += rng.rand(n, 3)
    n_test = int(0.1 * n)
    rest, test = x[: n - n_test], x[n - n_test :]
    n_val = int(0.1 * len(rest))
    train, val = rest[: len(rest) - n_val], rest[len(rest) - n_val :]
    mu, s = rest.mean(0), rest.std(0)
    return [(a - mu) / s for a in (train, val, test)]


def test_power_matches_the_published_steps(tmp_path):
    raw = np.random.RandomState(0).normal(size=(1000, 8)) * np.arange(1, 9)
    np.save(_write(tmp_path, "power", "data.npy"), raw)
    splits = data.load("power", tmp_path)
    assert splits.event_size == 6 and splits.sizes == (810, 90, 100)
    assert splits.x_train.dtype == np.float32
    for got, want in zip((splits.x_train, splits.x_val, splits.x_test), _power_oracle(raw), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # Standardized with train+validation statistics, not the test's.
    rest = np.concatenate([splits.x_train, splits.x_val]).astype(np.float64)
    np.testing.assert_allclose(rest.mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(rest.std(0), 1, atol=1e-5)
    # Two loads give identical arrays.
    np.testing.assert_array_equal(data.load("power", tmp_path).x_test, splits.x_test)


def test_power_noise_ranges_per_column():
    noise = tabular.power_noise(np.random.RandomState(1), 100_000)
    assert noise.shape == (100_000, 6) and noise.min() >= 0
    np.testing.assert_allclose(noise.max(0), [0.001, 0.01, 1, 1, 1, 0], atol=1e-4)
    assert noise[:, 0].max() < 0.001 and noise[:, 1].max() < 0.01 and np.all(noise[:, 5] == 0)


def test_power_drops_reactive_power_and_intensity(tmp_path):
    # Columns 1 and 3 hold huge values: if either survived, a column of the output
    # would be perfectly correlated with it.
    raw = np.random.RandomState(0).normal(size=(500, 8))
    out = tabular.preprocess_power(raw)
    perm = np.random.RandomState(42).permutation(500)
    stacked = np.concatenate(out)
    for dropped in (1, 3):
        corr = [abs(np.corrcoef(stacked[:, j], raw[perm][:, dropped])[0, 1]) for j in range(6)]
        assert max(corr) < 0.3
    kept = [0, 2, 4, 5, 6, 7]
    for j, col in enumerate(kept[:2]):  # small noise: still almost the raw column
        assert np.corrcoef(stacked[:, j], raw[perm][:, col])[0, 1] > 0.99


def test_power_split_sizes_of_the_paper(tmp_path):
    raw = np.random.RandomState(0).rand(2_049_280, 8)
    train, val, test = tabular.preprocess_power(raw)
    assert (len(train), len(val), len(test)) == (1_659_917, 184_435, 204_928)


def test_power_rejects_the_wrong_width(tmp_path):
    np.save(_write(tmp_path, "power", "data.npy"), np.zeros((10, 7)))
    with pytest.raises(ValueError, match=r"expected a matrix with 8 columns, got shape \(10, 7\)"):
        data.load("power", tmp_path)


# ------------------------------------------------------------------------------------- GAS

def _gas_frame(n, seed=0):
    rng = np.random.RandomState(seed)
    sensors = {f"S{i}": rng.normal(size=n) * (i + 1) + i for i in range(1, 17)}
    # S2 duplicates S1 and S9 duplicates S10 (correlation > 0.98): the first of each pair
    # in column order is dropped, so S1 and S9 go.
    sensors["S2"] = sensors["S1"] * 3 + 0.01 * rng.normal(size=n)
    sensors["S9"] = sensors["S10"] - 2 + 0.01 * rng.normal(size=n)
    cols = {"Time": np.arange(n, dtype=float), "Meth": rng.rand(n), "Eth": rng.rand(n), **sensors}
    return pd.DataFrame(cols)


def test_gas_drops_labels_and_correlated_columns_then_standardizes(tmp_path):
    frame = _gas_frame(1000)
    frame.to_pickle(_write(tmp_path, "gas", "ethylene_CO.pickle"))
    splits = data.load("gas", tmp_path)
    kept = [f"S{i}" for i in range(1, 17) if i not in (1, 9)]
    assert splits.event_size == len(kept) == 14
    assert splits.sizes == (810, 90, 100)
    want = ((frame[kept] - frame[kept].mean()) / frame[kept].std()).to_numpy()  # ddof=1
    got = np.concatenate([splits.x_train, splits.x_val, splits.x_test])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)  # no shuffle, tail splits


def test_gas_split_sizes_of_the_paper():
    frame = pd.DataFrame(
        np.random.RandomState(0).normal(size=(1_052_065, 5)), columns=["Time", "Meth", "Eth", "A", "B"]
    )
    train, val, test = tabular.preprocess_gas(frame)
    assert (len(train), len(val), len(test)) == (852_174, 94_685, 105_206)


def test_gas_names_missing_columns(tmp_path):
    pd.DataFrame({"A": [1.0, 2.0]}).to_pickle(_write(tmp_path, "gas", "ethylene_CO.pickle"))
    with pytest.raises(ValueError, match=r"expected a DataFrame with columns \['Meth', 'Eth', 'Time'\]"):
        data.load("gas", tmp_path)


# --------------------------------------------------------------------------------- HEPMASS

HEPMASS_COLUMNS = ["# label", *[f"f{i}" for i in range(27)], "mass"]


def _hepmass_frame(n, seed, extra_column):
    rng = np.random.RandomState(seed)
    frame = pd.DataFrame(rng.normal(size=(n, 29)).round(6), columns=HEPMASS_COLUMNS)
    frame["# label"] = rng.randint(0, 2, size=n).astype(float)
    frame.loc[:9, "# label"] = 1.0
    frame["mass"] = 1000.0  # one value: its smallest value repeats, so it goes
    frame.loc[: 9, "f3"] = frame["f3"].min() - 1  # the smallest value 10 times: goes
    frame.loc[: 9, "f5"] = frame["f5"].max() + 1  # the largest 10 times: stays (published rule)
    if extra_column:
        frame["extra"] = 0.0
    return frame


@pytest.mark.parametrize("extra_column", [True, False])
def test_hepmass_positive_class_standardized_with_training_statistics(tmp_path, extra_column):
    train = _hepmass_frame(400, 0, extra_column=False)
    test = _hepmass_frame(200, 1, extra_column=extra_column)
    train.to_csv(_write(tmp_path, "hepmass", "1000_train.csv"), index=False)
    test.to_csv(_write(tmp_path, "hepmass", "1000_test.csv"), index=False)
    splits = data.load("hepmass", tmp_path)

    kept = [c for c in HEPMASS_COLUMNS[1:] if c not in ("f3", "mass")]
    assert splits.event_size == len(kept) == 26
    pos_train = train[train["# label"] == 1][kept]
    pos_test = test[test["# label"] == 1][kept]
    n_val = int(0.1 * len(pos_train))
    assert splits.sizes == (len(pos_train) - n_val, n_val, len(pos_test))
    mu, s = pos_train.mean(), pos_train.std()
    rest = np.concatenate([splits.x_train, splits.x_val])
    np.testing.assert_allclose(rest, ((pos_train - mu) / s).to_numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(splits.x_test, ((pos_test - mu) / s).to_numpy(), rtol=1e-5, atol=1e-5)


def test_hepmass_rejects_a_file_without_labels(tmp_path):
    frame = _hepmass_frame(50, 0, extra_column=False)
    frame["# label"] = 7.0
    frame.to_csv(_write(tmp_path, "hepmass", "1000_train.csv"), index=False)
    frame.to_csv(_write(tmp_path, "hepmass", "1000_test.csv"), index=False)
    with pytest.raises(ValueError, match="expected the class label"):
        data.load("hepmass", tmp_path)


@pytest.mark.parametrize("rows", [0, 20], ids=["header only", "no positive row"])
def test_hepmass_without_positive_rows_says_so(tmp_path, rows):
    frame = _hepmass_frame(50, 0, extra_column=False)
    frame.to_csv(_write(tmp_path, "hepmass", "1000_test.csv"), index=False)
    train = frame.iloc[:rows].copy()
    train[train.columns[0]] = 0.0
    train.to_csv(_write(tmp_path, "hepmass", "1000_train.csv"), index=False)
    with pytest.raises(ValueError, match=f"1000_train.csv: expected rows of the positive class .* none of {rows} rows"):
        data.load("hepmass", tmp_path)


# ------------------------------------------------------------------------- MINIBOONE, BSDS

def test_miniboone_split_sizes_and_statistics_of_the_paper(tmp_path):
    raw = np.random.RandomState(0).normal(size=(36_488, 43)) * 5 + 3
    np.save(_write(tmp_path, "miniboone", "data.npy"), raw)
    splits = data.load("miniboone", tmp_path)
    assert splits.sizes == (29_556, 3_284, 3_648) and splits.event_size == 43
    rest = raw[: 36_488 - 3_648]
    np.testing.assert_allclose(splits.x_test, (raw[-3_648:] - rest.mean(0)) / rest.std(0), rtol=1e-5, atol=1e-5)


def test_miniboone_runs_on_the_real_slice():
    splits = tabular.load_miniboone(SHARED_DATA, folder="miniboone-head")
    assert splits.event_size == 43 and splits.sizes == (1234, 137, 152)
    assert all(np.isfinite(a).all() for a in (splits.x_train, splits.x_val, splits.x_test))


def test_bsds300_reads_the_three_datasets(tmp_path):
    import h5py

    rng = np.random.RandomState(0)
    arrays = {k: rng.normal(size=(n, 63)) for k, n in (("train", 30), ("validation", 5), ("test", 7))}
    with h5py.File(_write(tmp_path, "BSDS300", "BSDS300.hdf5"), "w") as f:
        for k, a in arrays.items():
            f.create_dataset(k, data=a)
    splits = data.load("bsds300", tmp_path)
    assert splits.sizes == (30, 5, 7) and splits.x_train.dtype == np.float32
    np.testing.assert_allclose(splits.x_val, arrays["validation"], rtol=1e-6)


def test_bsds300_names_a_missing_split(tmp_path):
    import h5py

    with h5py.File(_write(tmp_path, "BSDS300", "BSDS300.hdf5"), "w") as f:
        f.create_dataset("train", data=np.zeros((3, 63)))
    with pytest.raises(ValueError, match=r"expected datasets \['train', 'validation', 'test'\]"):
        data.load("bsds300", tmp_path)


# ----------------------------------------------------------------------------------- MNIST

def _write_mnist(root, sizes=(30, 10, 10)):
    rng = np.random.RandomState(0)
    parts = tuple(
        ((rng.randint(0, 256, size=(n, 784)) / 256.0).astype(np.float32), rng.randint(0, 10, size=n))
        for n in sizes
    )
    with gzip.open(_write(root, "mnist", "mnist.pkl.gz"), "wb") as f:
        pickle.dump(parts, f, protocol=2)
    return parts


def test_mnist_dequantizes_one_grey_level_and_applies_the_logit(tmp_path):
    parts = _write_mnist(tmp_path)
    splits = data.load("mnist", tmp_path)
    assert splits.sizes == (30, 10, 10) and splits.logit_lambda == 1e-6
    rng = np.random.RandomState(42)  # one generator for train, validation, test in order
    for x, (pixels, _) in zip((splits.x_train, splits.x_val, splits.x_test), parts, strict=True):
        noise = ((_sigmoid(x) - 1e-6) / (1 - 2e-6) - pixels) * 256
        assert noise.min() >= -1e-3 and noise.max() < 1 + 1e-3
        np.testing.assert_allclose(noise, rng.rand(*pixels.shape), atol=2e-3)
    np.testing.assert_array_equal(splits.labels("val"), parts[1][1])
    np.testing.assert_array_equal(splits.y_train.sum(1), 1)


def test_mnist_rejects_pixels_out_of_range(tmp_path):
    rng = np.random.RandomState(0)
    parts = tuple((rng.randint(0, 256, size=(4, 784)).astype(np.float32), np.zeros(4, int)) for _ in range(3))
    with gzip.open(_write(tmp_path, "mnist", "mnist.pkl.gz"), "wb") as f:
        pickle.dump(parts, f, protocol=2)
    with pytest.raises(ValueError, match=r"expected pixels = byte / 256 in \[0, 1\)"):
        data.load("mnist", tmp_path)


@pytest.mark.parametrize(("parts", "message"), [
    ({"train": 1}, "expected ((x_train, y_train), (x_val, y_val), (x_test, y_test)), got a dict"),
    ((1, 2, 3), "MNIST train split: expected a pair (images, labels), got an int"),
    (([1, 2, 3], [], []), "MNIST train split: expected a pair (images, labels), got a list of 3"),
])
def test_mnist_of_another_structure_says_what_it_expected(tmp_path, parts, message):
    with gzip.open(_write(tmp_path, "mnist", "mnist.pkl.gz"), "wb") as f:
        pickle.dump(parts, f, protocol=2)
    with pytest.raises(ValueError, match=re.escape(message)):
        data.load("mnist", tmp_path)


def test_mnist_real_file():
    splits = data.load("mnist", SHARED_DATA)
    assert splits.sizes == (50_000, 10_000, 10_000) and splits.event_size == 784
    assert set(np.unique(splits.labels("train"))) == set(range(10))
    for x in (splits.x_train, splits.x_val, splits.x_test):
        assert np.isfinite(x).all()
        # logit(1e-6) ~ -13.8 bounds the logit-space values.
        assert x.min() > -13.9 and x.max() < 13.9


def test_mnist_from_prepared_tfds():
    import tensorflow_datasets as tfds

    # tfds has no validation split: the last 10,000 training images are the validation
    # set, as in the classic pickle.
    with tfds.testing.mock_data(num_examples=10_030):
        splits = images.load_mnist(source="tfds")
    assert splits.event_size == 784 and len(splits.x_train) == 30 and len(splits.x_val) == 10_000
    assert np.isfinite(splits.x_test).all()
    with tfds.testing.mock_data(num_examples=20), pytest.raises(ValueError, match="got none"):
        images.load_mnist(source="tfds")  # nothing left to train on


def test_cifar10_from_prepared_tfds_uses_the_batch_layout():
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(num_examples=20):
        splits = images.load_cifar10(source="tfds")
        (x, _), _ = images._tfds_arrays("cifar10", None)
    assert splits.sizes == (36, 2, 20) and splits.event_size == 3072
    # Channel-major like the batches: the first 1024 values are the red plane.
    pixels = (_sigmoid(splits.x_train[0]) - 0.05) / 0.9 * 256
    red = x[0][..., 0].reshape(-1)
    assert np.all((pixels[:1024] - red >= -1e-3) & (pixels[:1024] - red < 1 + 1e-3))


# -------------------------------------------------------------------------------- CIFAR-10

def _write_cifar(root, per_batch=20, test=10):
    rng = np.random.RandomState(0)
    written = []
    for name, n in [*((f"data_batch_{i}", per_batch) for i in range(1, 6)), ("test_batch", test)]:
        batch = {
            b"batch_label": name.encode(),
            b"labels": rng.randint(0, 10, size=n).tolist(),
            b"data": rng.randint(0, 256, size=(n, 3072)).astype(np.uint8),
            b"filenames": [f"{i}.png".encode() for i in range(n)],
        }
        with open(_write(root, "cifar10", name), "wb") as f:
            pickle.dump(batch, f, protocol=2)
        written.append(batch)
    return written


def test_cifar10_splits_dequantization_logit_and_flips(tmp_path):
    batches = _write_cifar(tmp_path)
    splits = data.load("cifar10", tmp_path)
    assert splits.sizes == (180, 10, 10) and splits.logit_lambda == 0.05  # 90 + 90 flips
    train_bytes = np.concatenate([b[b"data"] for b in batches[:5]])
    labels = np.concatenate([b[b"labels"] for b in batches[:5]])

    pixels = (_sigmoid(splits.x_train[:90]) - 0.05) / 0.9 * 256
    noise = pixels - train_bytes[:90]
    assert noise.min() > -1e-3 and noise.max() < 1 + 1e-3
    val_noise = (_sigmoid(splits.x_val) - 0.05) / 0.9 * 256 - train_bytes[90:]
    assert val_noise.min() > -1e-3 and val_noise.max() < 1 + 1e-3

    # The second half of train is the first half mirrored left to right, per channel.
    flipped = splits.x_train[90:].reshape(90, 3, 32, 32)
    np.testing.assert_array_equal(flipped, splits.x_train[:90].reshape(90, 3, 32, 32)[..., ::-1])
    np.testing.assert_array_equal(splits.labels("train"), np.concatenate([labels[:90], labels[:90]]))
    np.testing.assert_array_equal(splits.labels("test"), batches[5][b"labels"])


def test_a_cifar10_batch_that_is_not_a_dict_says_so(tmp_path):
    _write_cifar(tmp_path)
    with open(tmp_path / "cifar10" / "data_batch_3", "wb") as f:
        pickle.dump([np.zeros((20, 3072), np.uint8), [0] * 20], f)
    with pytest.raises(ValueError, match=r"data_batch_3: expected a dict with 'data' and 'labels', got a list of 2"):
        data.load("cifar10", tmp_path)


def test_flip_is_horizontal():
    image = np.arange(3 * 32 * 32).reshape(1, 3, 32, 32)
    out = images.flip_horizontal(image.reshape(1, -1), 3, 32).reshape(1, 3, 32, 32)
    np.testing.assert_array_equal(out[0, 1, 5], image[0, 1, 5][::-1])  # rows reversed
    np.testing.assert_array_equal(out[0, :, :, 0], image[0, :, :, 31])  # columns swapped


def test_cifar10_split_sizes_of_the_paper():
    x = np.zeros((50_000, 3072), np.uint8)
    tr, va, te = images.preprocess_cifar10(x, np.zeros(50_000, int), x[:10_000], np.zeros(10_000, int))
    assert (len(tr[0]), len(va[0]), len(te[0])) == (90_000, 5_000, 10_000)


# ----------------------------------------------------------------------------------- errors

@pytest.mark.parametrize(
    "name,path",
    [
        ("power", "power/data.npy"),
        ("gas", "gas/ethylene_CO.pickle"),
        ("hepmass", "hepmass/1000_train.csv"),
        ("miniboone", "miniboone/data.npy"),
        ("bsds300", "BSDS300/BSDS300.hdf5"),
        ("mnist", "mnist/mnist.pkl.gz"),
        ("cifar10", "cifar10/data_batch_1"),
    ],
)
def test_missing_file_names_file_layout_and_source(tmp_path, name, path):
    with pytest.raises(data.DatasetFileNotFoundError) as err:
        data.load(name, tmp_path)
    message = str(err.value)
    assert str(tmp_path / path) in message and f"<root>/{path}" in message
    assert "https://" in message


def _write_valid(tmp_path, name):
    """A small well-formed file of each archive format; returns its path."""
    rng = np.random.RandomState(0)
    if name in ("power", "miniboone"):
        path = _write(tmp_path, name, "data.npy")
        np.save(path, rng.normal(size=(200, 8 if name == "power" else 43)))
    elif name == "gas":
        import pandas as pd

        path = _write(tmp_path, "gas", "ethylene_CO.pickle")
        pd.DataFrame(rng.normal(size=(200, 11))).to_pickle(path)
    elif name == "hepmass":
        path = _write(tmp_path, "hepmass", "1000_train.csv")
        path.write_text("# label," + ",".join(f"f{i}" for i in range(27)) + ",mass\n"
                        + "\n".join(",".join(map(str, row)) for row in rng.normal(size=(200, 29))) + "\n")
        (path.parent / "1000_test.csv").write_text(path.read_text())
    elif name == "bsds300":
        import h5py

        path = _write(tmp_path, "BSDS300", "BSDS300.hdf5")
        with h5py.File(path, "w") as f:
            for split in ("train", "validation", "test"):
                f.create_dataset(split, data=rng.normal(size=(2000, 63)))
    elif name == "mnist":
        path = _write(tmp_path, "mnist", "mnist.pkl.gz")
        with gzip.open(path, "wb") as f:
            pickle.dump(tuple((rng.rand(100, 784), np.zeros(100, int)) for _ in range(3)), f)
    else:
        path = _write(tmp_path, "cifar10", "data_batch_1")
        path.write_bytes(pickle.dumps({b"data": rng.randint(0, 256, (100, 3072)).astype(np.uint8),
                                       b"labels": [0] * 100}))
    return path


@pytest.mark.parametrize("name", ["power", "gas", "hepmass", "miniboone", "bsds300", "mnist", "cifar10"])
def test_a_truncated_file_is_reported_with_its_path(tmp_path, name):
    path = _write_valid(tmp_path, name)
    content = path.read_bytes()
    path.write_bytes(content[: len(content) // 2 + 7])  # cut mid-record
    with pytest.raises(ValueError) as err:
        data.load(name, tmp_path)
    message = str(err.value)
    assert str(path) in message or name.upper() in message.upper()
    assert any(word in message for word in ("truncated", "non-finite", "expected"))


@pytest.mark.parametrize("name", ["power", "miniboone"])
def test_an_empty_file_is_reported(tmp_path, name):
    np.save(_write(tmp_path, name, "data.npy"), np.zeros((0, 8 if name == "power" else 43)))
    with pytest.raises(ValueError, match="expected rows of data, got none"):
        data.load(name, tmp_path)


def test_data_root_order(tmp_path, monkeypatch):
    monkeypatch.setenv("TFP_MAF_DATA", str(tmp_path / "env"))
    assert data.data_root(tmp_path / "arg") == tmp_path / "arg"
    assert data.data_root() == tmp_path / "env"
    monkeypatch.delenv("TFP_MAF_DATA")
    assert data.data_root() == Path("~/.tfp_maf/data").expanduser()


def test_non_finite_values_are_reported_not_passed_on(tmp_path):
    raw = np.random.RandomState(0).normal(size=(300, 43))
    raw[7, 3] = np.nan
    np.save(_write(tmp_path, "miniboone", "data.npy"), raw)
    with pytest.raises(ValueError, match="rows hold non-finite values"):
        data.load("miniboone", tmp_path)


def test_a_constant_column_is_named_not_blamed_on_the_file(tmp_path):
    raw = np.random.RandomState(0).normal(size=(300, 43))
    raw[:, 5] = 2.0  # no spread: standardising divides by 0
    np.save(_write(tmp_path, "miniboone", "data.npy"), raw)
    with pytest.raises(ValueError, match=r"columns that vary over the training rows, got 1 constant \(column 5\)"):
        data.load("miniboone", tmp_path)


def test_labels_are_one_integer_per_row():
    from keras_models.data.images import one_hot

    assert one_hot(np.array([0, 9, 3])).shape == (3, 10)
    for bad, found in ((np.array([0.5, 1.7]), "shape [2] and dtype float64"),
                       (np.eye(10, dtype=np.int64)[[1, 2]], "shape [2, 10] and dtype int64")):
        with pytest.raises(ValueError, match=re.escape(f"expected one integer label per row, got labels of {found}")):
            one_hot(bad)


def test_unknown_dataset():
    with pytest.raises(ValueError, match="unknown dataset 'powr'; expected one of"):
        data.load("powr")


# -------------------------------------------------------------------------------- pipelines

def test_training_pipeline_visits_every_row_once_per_epoch_in_a_new_order():
    x = np.arange(1050, dtype=np.float32).reshape(-1, 1)
    ds = data.array_dataset(x, batch_size=100, shuffle=True, seed=3)
    epochs = [np.concatenate([b.numpy() for b in ds])[:, 0] for _ in range(2)]
    for e in epochs:
        np.testing.assert_array_equal(np.sort(e), x[:, 0])
    assert not np.array_equal(epochs[0], epochs[1])
    assert [b.shape[0] for b in ds][-1] == 50


def test_epoch_order_depends_on_seed_and_epoch_only():
    # What a resumed run relies on: a fresh pipeline set to epoch e replays epoch e.
    x = np.arange(300, dtype=np.float32).reshape(-1, 1)
    first = data.array_dataset(x, batch_size=64, shuffle=True, seed=5)
    orders = [np.concatenate([b.numpy() for b in first]) for _ in range(3)]
    epoch = tf.Variable(2, dtype=tf.int64)
    resumed = data.array_dataset(x, batch_size=64, shuffle=True, seed=5, epoch=epoch)
    np.testing.assert_array_equal(np.concatenate([b.numpy() for b in resumed]), orders[2])
    assert int(epoch.numpy()) == 3
    other_seed = data.array_dataset(x, batch_size=64, shuffle=True, seed=6)
    assert not np.array_equal(np.concatenate([b.numpy() for b in other_seed]), orders[0])
    assert first.cardinality().numpy() == 5


def test_pipelines_run_without_the_autotuner():
    # Its thread took a core from the training step (benchmarks/pipeline.py: epochs up to
    # 1.5x slower on 2 cores); a gather per batch needs no tuning.
    splits = data.load("figure1", n_train=50, n_val=10, n_test=10)
    for ds in splits.pipelines(batch_size=16)[:3]:
        assert ds.options().autotune.enabled is False


def test_pipelines_read_the_arrays_without_a_copy(tmp_path):
    # No copy of the data in the pipeline: a pass reads the array as it is then, and a
    # memory-mapped array trains without being read whole.
    x = np.arange(20, dtype=np.float64).reshape(10, 2)
    y = np.eye(2, dtype=np.float32)[np.arange(10) % 2]
    ds = data.array_dataset(x, y, batch_size=4)
    batches = list(ds)
    assert [tuple(b.shape) for b, _ in batches] == [(4, 2), (4, 2), (2, 2)]
    assert batches[0][0].dtype == tf.float64 and batches[0][1].dtype == tf.float32
    np.testing.assert_array_equal(np.concatenate([b for b, _ in batches]), x)
    x[0, 0] = -1.0
    assert float(next(iter(ds))[0][0, 0]) == -1.0
    np.save(tmp_path / "x.npy", x.astype(np.float32))
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    np.testing.assert_array_equal(np.concatenate(list(data.array_dataset(mapped, batch_size=3))), mapped)


def test_empty_arrays_are_refused():
    with pytest.raises(ValueError, match="at least one row, got an empty array of shape \\(0, 3\\)"):
        data.array_dataset(np.zeros((0, 3), np.float32))


def test_conditional_pipelines_yield_matching_pairs():
    splits = data.Splits(
        "toy", *(np.arange(2 * n, dtype=np.float32).reshape(n, 2) for n in (40, 10, 10)),
        *(images.one_hot(np.arange(n) % 10) for n in (40, 10, 10)), num_classes=10,
    )
    train, val, test, _ = splits.pipelines(batch_size=16, conditional=True)
    for x, y in train:
        np.testing.assert_array_equal(np.argmax(y, 1), (x[:, 0].numpy() // 2) % 10)
    assert next(iter(test))[0].shape == (10, 2)
    with pytest.raises(ValueError, match="has no labels"):
        data.load("figure1", n_train=10, n_val=10, n_test=10).pipelines(conditional=True)


# ------------------------------------------------------------------------------------- tfds

def test_tfds_builder_gives_the_loader_arrays(tmp_path):
    import tensorflow_datasets as tfds

    import keras_models.data.tfds_builders  # noqa: F401  (registers the builders)

    raw = np.random.RandomState(0).normal(size=(200, 43))
    np.save(_write(tmp_path / "manual", "miniboone", "data.npy"), raw)
    ds = tfds.load(
        "maf_miniboone", split="test", data_dir=str(tmp_path / "tfds"), batch_size=-1,
        download_and_prepare_kwargs={
            "download_config": tfds.download.DownloadConfig(manual_dir=str(tmp_path / "manual"))
        },
    )
    got = tfds.as_numpy(ds)["x"]
    want = data.load("miniboone", tmp_path / "manual").x_test
    # tfds may store examples in another order: compare as sets of rows.
    np.testing.assert_array_equal(got[np.lexsort(got.T)], want[np.lexsort(want.T)])


def test_tfds_builders_say_where_the_archive_goes():
    from keras_models.data import tfds_builders

    for cls in (tfds_builders.MafPower, tfds_builders.MafGas, tfds_builders.MafHepmass,
                tfds_builders.MafMiniboone, tfds_builders.MafBsds300):
        assert "zenodo.org/record/1161203" in cls.MANUAL_DOWNLOAD_INSTRUCTIONS
        assert cls.ARCHIVE_PATH.split()[0] in cls.MANUAL_DOWNLOAD_INSTRUCTIONS


def test_splits_are_float32_tensors_that_a_model_accepts():
    splits = data.load("figure1", n_train=100, n_val=10, n_test=10)
    batch = next(iter(splits.pipelines(batch_size=32).train))
    assert batch.dtype == tf.float32 and batch.shape == (32, 2)
