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
import shutil
import sys
import time
from pathlib import Path

import numpy as np

__all__ = ["main"]

MODEL_FILE = "model.keras"
PREVIOUS_MODEL_FILE = "model.previous.keras"
METRICS_FILE = "metrics.json"
ARGS_FILE = "args.json"
BACKUP_DIR = "backup"


def _load_data(args):
    from keras_models import data

    name = args.dataset or "figure1"
    splits = data.load(name, args.data_dir) if name != "figure1" else data.load_figure1(seed=args.seed)
    if args.conditional and splits.y_train is None:
        raise SystemExit(
            f"tfp-maf: --conditional needs labelled data; {name} has no labels "
            "(labelled: mnist, cifar10)."
        )
    return splits


def _evaluate(model, splits, conditional) -> dict:
    from keras_models.evaluation import (
        bits_per_pixel,
        log_likelihoods,
        marginal_log_likelihoods,
        mean_and_two_se,
    )

    def summary(key, values):
        mean, two_se = mean_and_two_se(values)
        return {key: mean, f"{key}_2se": two_se}

    if conditional:
        # The paper's corrected protocol: log p(x) = log sum_y p(x | y) p(y), uniform p(y).
        log_p = marginal_log_likelihoods(model, splits.x_test, splits.num_classes)
        out = summary("test_log_likelihood", log_p)
        out.update(summary("test_conditional_log_likelihood",
                           log_likelihoods(model, splits.x_test, splits.y_test)))
    else:
        log_p = log_likelihoods(model, splits.x_test)
        out = summary("test_log_likelihood", log_p)
    if splits.logit_lambda is not None:
        out.update(summary("test_bits_per_pixel", bits_per_pixel(log_p, splits.x_test, splits.logit_lambda)))
    if splits.name == "figure1":
        from keras_models.data import Figure1Density

        density = Figure1Density()
        out["exact_test_log_likelihood"] = float(density.log_prob(splits.x_test).mean())
        out["expected_log_likelihood"] = density.expected_log_prob
    return out


#: Arguments that may change between an interrupted run and its resumption.
_RESUMABLE_CHANGES = {"verbose", "max_minutes", "func"}


def _check_resumable(out: Path, args) -> None:
    """Refuses to resume a backup made with other arguments (its weights would not fit)."""
    saved_path = out / ARGS_FILE
    if not (out / BACKUP_DIR).exists() or not saved_path.exists():
        return
    saved = json.loads(saved_path.read_text())
    current = vars(args)
    changed = sorted(k for k in set(saved) | set(current) - _RESUMABLE_CHANGES
                     if k not in _RESUMABLE_CHANGES and saved.get(k) != current.get(k))
    if changed:
        detail = ", ".join(f"--{k.replace('_', '-')} {saved.get(k)!r} then, {current.get(k)!r} now" for k in changed)
        raise SystemExit(
            f"tfp-maf: {out / BACKUP_DIR} holds an interrupted run with other arguments ({detail}). "
            f"Run the same command to resume it, or delete {out / BACKUP_DIR} to start afresh."
        )


def _save_model(model, out: Path) -> None:
    """Saves ``model.keras`` atomically; a model already there becomes
    ``model.previous.keras`` instead of being lost."""
    target = out / MODEL_FILE
    partial = out / ("partial." + MODEL_FILE)
    model.save(partial)
    if target.exists():
        os.replace(target, out / PREVIOUS_MODEL_FILE)
    os.replace(partial, target)


def cmd_train(args) -> dict:
    import keras
    import tensorflow as tf

    from keras_models import presets, training, zoo

    out = Path(args.out)
    _check_resumable(out, args)
    if args.deterministic:
        tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(args.seed)
    splits = _load_data(args)
    dataset = splits.name
    kwargs = {"conditional_dims": splits.num_classes if args.conditional else None}
    if args.model != "gaussian":
        kwargs.update(presets.model_kwargs(dataset, args.size_option), seed=args.seed)
        if args.hidden_units:
            kwargs["hidden_units"] = args.hidden_units
        if args.log_scale_bound:
            kwargs["log_scale_bound"] = args.log_scale_bound
    model = zoo.build(args.model, splits.event_size, **kwargs)
    training.compile_as_paper(model, args.model, jit_compile=args.jit_compile)
    pipelines = splits.pipelines(args.batch_size, seed=args.seed, conditional=args.conditional)
    out.mkdir(parents=True, exist_ok=True)
    (out / ARGS_FILE).write_text(json.dumps({k: v for k, v in vars(args).items() if k != "func"}, indent=2) + "\n")
    start = time.monotonic()
    _, info = training.fit_as_paper(
        model, pipelines.train, pipelines.validation, splits.x_train,
        splits.y_train if args.conditional else None,
        max_epochs=args.max_epochs, patience=args.patience, max_minutes=args.max_minutes,
        verbose=2 if args.verbose else 0, backup_dir=out / BACKUP_DIR, shuffle_epoch=pipelines.epoch,
    )
    metrics = {
        "dataset": dataset, "model": args.model, "conditional": args.conditional,
        "hidden_units": kwargs.get("hidden_units"), "parameters": int(model.count_params()),
        **_evaluate(model, splits, args.conditional),
        "epochs": info["epochs"], "early_stopped": info["early_stopped"],
        "resumed_from_epoch": info.get("resumed_from_epoch"),
        "stopped_on_non_finite": info.get("stopped_on_non_finite"),
        "wall_time_s": round(time.monotonic() - start, 1),
    }
    _save_model(model, out)
    (out / METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n")
    # The run is complete and saved: its backup is no longer needed.
    shutil.rmtree(out / BACKUP_DIR, ignore_errors=True)
    return metrics


def _load_model(out):
    import keras

    import keras_models  # noqa: F401  (registers the model classes)

    path = Path(out) / MODEL_FILE
    if not path.exists():
        raise SystemExit(f"tfp-maf: no trained model at {path}; run `tfp-maf train --out {out}` first.")
    try:
        return keras.saving.load_model(path, safe_mode=True)
    except Exception as err:  # zipfile, h5py, JSON and Keras errors alike
        raise SystemExit(
            f"tfp-maf: could not read {path} as a Keras model file ({type(err).__name__}: {err}). "
            "It may be truncated or corrupt; train again, or use model.previous.keras if it is there."
        ) from err


def cmd_evaluate(args) -> dict:
    saved = json.loads((Path(args.out) / ARGS_FILE).read_text())
    model = _load_model(args.out)
    overrides = {k: v for k, v in (("dataset", args.dataset), ("data_dir", args.data_dir)) if v}
    saved = argparse.Namespace(**{**saved, **overrides})
    splits = _load_data(saved)
    return {"dataset": splits.name, "model": saved.model, **_evaluate(model, splits, saved.conditional)}


def cmd_sample(args) -> dict:
    model = _load_model(args.out)
    y = None
    if model.conditional_dims:
        if args.label is None:
            raise SystemExit(f"tfp-maf: this model is conditional; pass --label 0..{model.conditional_dims - 1}.")
        from keras_models.data.images import one_hot

        y = one_hot(np.full(args.n, args.label), model.conditional_dims)  # checks the label
    samples = model.sample(args.n, y=y, seed=args.seed).numpy()
    return {"samples": samples.tolist()}


def cmd_export(args) -> dict:
    from keras_models.export import export_saved_model

    model = _load_model(args.out)
    target = args.saved_model or str(Path(args.out) / "saved_model")
    export_saved_model(model, target)
    return {"saved_model": target, "signatures": ["log_prob", "sample"]}


def _parser() -> argparse.ArgumentParser:
    from keras_models.data import LOADERS
    from keras_models.zoo import MODELS

    parser = argparse.ArgumentParser(prog="tfp-maf", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train a model; writes model.keras and metrics.json to --out")
    train.add_argument("--dataset", default=None, choices=sorted(LOADERS),
                       help="default: the paper's Figure 1 density (figure1)")
    train.add_argument("--model", default="maf5", choices=sorted(MODELS))
    train.add_argument("--conditional", action="store_true", help="model p(x | y) (labelled data)")
    train.add_argument("--data-dir", default=None,
                       help="data root with <dataset>/<file>; default $TFP_MAF_DATA, else ~/.tfp_maf/data")
    train.add_argument("--out", default="runs/default")
    train.add_argument("--hidden-units", type=int, nargs="+", default=None,
                       help="default: the paper's option --size-option for the dataset")
    train.add_argument("--size-option", type=int, default=0,
                       help="index into the paper's hidden-size options for the dataset (0: smallest)")
    train.add_argument("--no-jit", dest="jit_compile", action="store_false",
                       help="train without XLA (default: jit_compile=True)")
    train.add_argument("--batch-size", type=int, default=100)
    train.add_argument("--max-epochs", type=int, default=1000)
    train.add_argument("--max-minutes", type=float, default=None)
    train.add_argument("--patience", type=int, default=30)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--deterministic", action="store_true",
                       help="TensorFlow op determinism: the same seed gives bit-identical weights")
    train.add_argument("--log-scale-bound", type=float, default=None,
                       help="soft-bound the flows' log-scales to +-B (off, as in the paper; try 10 on heavy-tailed data)")
    train.add_argument("--verbose", action="store_true")
    train.set_defaults(func=cmd_train)

    evaluate = sub.add_parser("evaluate", help="print the test log-likelihood of a trained model")
    evaluate.add_argument("--out", required=True)
    evaluate.add_argument("--dataset", default=None)
    evaluate.add_argument("--data-dir", default=None)
    evaluate.set_defaults(func=cmd_evaluate)

    sample = sub.add_parser("sample", help="print samples from a trained model as JSON")
    sample.add_argument("--out", required=True)
    sample.add_argument("-n", type=int, default=10)
    sample.add_argument("--seed", type=int, default=0)
    sample.add_argument("--label", type=int, default=None, help="class to sample (conditional models)")
    sample.set_defaults(func=cmd_sample)

    export = sub.add_parser("export", help="write a SavedModel serving log_prob and sample")
    export.add_argument("--out", required=True)
    export.add_argument("--saved-model", default=None, help="default: <out>/saved_model")
    export.set_defaults(func=cmd_export)
    return parser


def main(argv=None) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = _parser().parse_args(argv)
    from keras_models.data import DatasetFileNotFoundError

    try:
        result = args.func(args)
    except (DatasetFileNotFoundError, ValueError) as err:
        # Bad input: the message names what was expected; a traceback adds nothing.
        raise SystemExit(f"tfp-maf: {err}") from err
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
