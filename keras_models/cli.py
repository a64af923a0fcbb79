"""The ``tfp-maf`` command line: train, evaluate and sample the paper's models.

With no ``--dataset`` it uses the embedded default, the paper's Figure 1
density, whose exact expected log-likelihood is -3.531 nats::

    tfp-maf train --model maf5 --out runs/maf5
    tfp-maf evaluate --out runs/maf5
    tfp-maf sample --out runs/maf5 -n 5
    tfp-maf export --out runs/maf5
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

__all__ = ["main"]

MODEL_FILE = "model.keras"
METRICS_FILE = "metrics.json"


def _load_data(args):
    if args.dataset not in (None, "figure1"):
        raise SystemExit(
            f"tfp-maf: dataset {args.dataset!r} is not available yet; this release ships the "
            "embedded default (figure1). The benchmark loaders are tracked in issue 4."
        )
    from keras_models.data import Figure1Density

    density = Figure1Density()
    train, val, test = density.splits(seed=args.seed)
    return {
        "name": "figure1",
        "x_train": train, "x_val": val, "x_test": test,
        "y_train": None, "y_val": None, "y_test": None,
        "exact_test_log_prob": float(density.log_prob(test).mean()),
        "expected_log_prob": density.expected_log_prob,
    }


def _dataset(x, y, batch_size, shuffle, seed):
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensor_slices(x if y is None else (x, y))
    if shuffle:
        ds = ds.shuffle(len(x), seed=seed, reshuffle_each_iteration=True)
    return ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)


def _evaluate(model, data):
    from keras_models.evaluation import log_likelihoods, mean_and_two_se

    mean, two_se = mean_and_two_se(log_likelihoods(model, data["x_test"], data["y_test"]))
    return {"test_log_likelihood": mean, "test_log_likelihood_2se": two_se}


def cmd_train(args) -> dict:
    import keras

    from keras_models import training, zoo

    keras.utils.set_random_seed(args.seed)
    data = _load_data(args)
    D = data["x_train"].shape[1]
    kwargs = {}
    if args.model != "gaussian":
        kwargs = dict(hidden_units=args.hidden_units, seed=args.seed)
        if args.model == "made":
            kwargs["batch_norm"] = False
    model = zoo.build(args.model, D, **kwargs)
    training.compile_as_paper(model, args.model)
    start = time.monotonic()
    _, info = training.fit_as_paper(
        model,
        _dataset(data["x_train"], data["y_train"], args.batch_size, True, args.seed),
        _dataset(data["x_val"], data["y_val"], 10_000, False, args.seed),
        data["x_train"], data["y_train"],
        max_epochs=args.max_epochs, patience=args.patience, max_minutes=args.max_minutes,
        verbose=2 if args.verbose else 0,
    )
    metrics = {
        "dataset": data["name"], "model": args.model, **_evaluate(model, data),
        "epochs": info["epochs"], "early_stopped": info["early_stopped"],
        "wall_time_s": round(time.monotonic() - start, 1),
        "exact_test_log_likelihood": data.get("exact_test_log_prob"),
        "expected_log_likelihood": data.get("expected_log_prob"),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model.save(out / MODEL_FILE)
    (out / METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n")
    (out / "args.json").write_text(json.dumps({k: v for k, v in vars(args).items() if k != "func"}, indent=2) + "\n")
    return metrics


def _load_model(out):
    import keras

    import keras_models  # noqa: F401  (registers the model classes)

    path = Path(out) / MODEL_FILE
    if not path.exists():
        raise SystemExit(f"tfp-maf: no trained model at {path}; run `tfp-maf train --out {out}` first.")
    return keras.saving.load_model(path, safe_mode=True)


def cmd_evaluate(args) -> dict:
    saved = json.loads((Path(args.out) / "args.json").read_text())
    model = _load_model(args.out)
    data = _load_data(argparse.Namespace(**{**saved, **{"dataset": args.dataset or saved.get("dataset")}}))
    return {"dataset": data["name"], "model": saved["model"], **_evaluate(model, data)}


def cmd_sample(args) -> dict:
    model = _load_model(args.out)
    samples = model.sample(args.n, seed=args.seed).numpy()
    return {"samples": samples.tolist()}


def cmd_export(args) -> dict:
    from keras_models.export import export_saved_model

    model = _load_model(args.out)
    target = args.saved_model or str(Path(args.out) / "saved_model")
    export_saved_model(model, target)
    return {"saved_model": target, "signatures": ["log_prob", "sample"]}


def _parser() -> argparse.ArgumentParser:
    from keras_models.zoo import MODELS

    parser = argparse.ArgumentParser(prog="tfp-maf", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train a model; writes model.keras and metrics.json to --out")
    train.add_argument("--dataset", default=None, help="default: the paper's Figure 1 density")
    train.add_argument("--model", default="maf5", choices=sorted(MODELS))
    train.add_argument("--conditional", action="store_true", help="model p(x | y) (labelled data)")
    train.add_argument("--data-dir", default=os.environ.get("TFP_MAF_DATA"))
    train.add_argument("--out", default="runs/default")
    train.add_argument("--hidden-units", type=int, nargs="+", default=[100, 100])
    train.add_argument("--batch-size", type=int, default=100)
    train.add_argument("--max-epochs", type=int, default=1000)
    train.add_argument("--max-minutes", type=float, default=None)
    train.add_argument("--patience", type=int, default=30)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--verbose", action="store_true")
    train.set_defaults(func=cmd_train)

    evaluate = sub.add_parser("evaluate", help="print the test log-likelihood of a trained model")
    evaluate.add_argument("--out", required=True)
    evaluate.add_argument("--dataset", default=None)
    evaluate.set_defaults(func=cmd_evaluate)

    sample = sub.add_parser("sample", help="print samples from a trained model as JSON")
    sample.add_argument("--out", required=True)
    sample.add_argument("-n", type=int, default=10)
    sample.add_argument("--seed", type=int, default=0)
    sample.set_defaults(func=cmd_sample)

    export = sub.add_parser("export", help="write a SavedModel serving log_prob and sample")
    export.add_argument("--out", required=True)
    export.add_argument("--saved-model", default=None, help="default: <out>/saved_model")
    export.set_defaults(func=cmd_export)
    return parser


def main(argv=None) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = _parser().parse_args(argv)
    if getattr(args, "conditional", False):
        raise SystemExit("tfp-maf: --conditional needs a labelled dataset; figure1 has no labels.")
    result = args.func(args)
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
