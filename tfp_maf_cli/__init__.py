"""The ``tfp-maf`` command line: train, evaluate and sample the paper's models, on the
paper's datasets or on a file of your own.

With no ``--dataset`` it uses the embedded default, the paper's Figure 1
density, whose exact expected log-likelihood is -3.531 nats::

    tfp-maf train --model maf5 --out runs/maf5
    tfp-maf evaluate --out runs/maf5
    tfp-maf sample --out runs/maf5 -n 5
    tfp-maf export --out runs/maf5

On your own table (CSV, Parquet, .npy, .npz; `tfp_maf_cli.tables`)::

    tfp-maf train --data table.csv --out runs/table
    tfp-maf score --out runs/table --data new_rows.csv > scores.csv
    tfp-maf sample --out runs/table -n 100 --format csv
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from tfp_maf_cli.runs import (
    ARGS_FILE,
    BACKUP_DIR,
    METRICS_FILE,
    MODEL_FILE,
    check_directories,
    check_not_finished,
    check_resumable,
    create_directories,
    read_json,
    save_model,
)
from tfp_maf_cli.table_runs import add_score_parser, add_table_options

__all__ = ["main"]



def _load_data(args):
    from keras_models import experiment

    if getattr(args, "data", None):
        from tfp_maf_cli.table_runs import load_table_splits

        return load_table_splits(args)[0]
    name = args.dataset or "figure1"
    splits = experiment.load_splits(name, args.data_dir, seed=args.seed)
    if args.conditional and splits.y_train is None:
        raise SystemExit(
            f"tfp-maf: --conditional needs labelled data; {name} has no labels "
            "(labelled: mnist, cifar10)."
        )
    return splits


#: The command's choices, here rather than imported so that ``--help`` needs no
#: TensorFlow (the tests check them against `keras_models.zoo.MODELS` and
#: `keras_models.data.LOADERS`).
MODEL_NAMES = ("gaussian", "made", "made-mog", "maf-mog5", "maf10", "maf5", "nsf5", "realnvp10", "realnvp5")
DATASET_NAMES = ("bsds300", "cifar10", "figure1", "gas", "hepmass", "miniboone", "mnist", "power")
# keras_models.presets.PROTOCOLS, written out: parsing the command line imports no TensorFlow.
PROTOCOLS = ("paper", "published", "published-log-scale")
PROTOCOL_HELP = ("paper (default): the paper's text and table of options; published: the authors' published "
                 "code where the paper is silent (its initialisation, MNIST at 2 x 1,024, the label into "
                 "the first hidden layer only, MADE heads that output log-precisions); published-log-scale: "
                 "published with log-scale heads")


#: The training options' defaults (``train``'s parser and `_check_model_options` share them).
BATCH_SIZE, MAX_EPOCHS, PATIENCE = 100, 1000, 30


def _check_model_options(args) -> None:
    """Refuses a model option that ``--model`` does not take, and a training option for a
    model fitted in closed form, rather than ignoring it."""
    from keras_models.zoo import MODELS, fitted_in_closed_form, model_keywords

    if fitted_in_closed_form(args.model):
        for option, given in (
            ("--learning-rate", args.learning_rate is not None), ("--batch-size", args.batch_size != BATCH_SIZE),
            ("--max-epochs", args.max_epochs != MAX_EPOCHS), ("--max-minutes", args.max_minutes is not None),
            ("--patience", args.patience != PATIENCE), ("--no-jit", args.jit_compile is False),
        ):
            if given:
                raise ValueError(f"{option} changes nothing in {args.model}: it is fitted in closed form, "
                                 "with no steps, batches or epochs.")
    takes = model_keywords(args.model)
    for option, keyword, given in (
        ("--hidden-units", "hidden_units", args.hidden_units is not None),
        ("--size-option", "hidden_units", args.size_option != 0),
        ("--log-scale-bound", "log_scale_bound", args.log_scale_bound is not None),
        ("--protocol", "hidden_units", args.protocol != "paper"),
    ):
        if given and keyword not in takes:
            others = ", ".join(name for name in MODELS if keyword in model_keywords(name))
            raise ValueError(f"{option} changes nothing in {args.model}; the models it applies to: {others}.")


def cmd_train(args) -> dict:
    import tensorflow as tf

    from keras_models import experiment
    from tfp_maf_cli.table_runs import TABLE_FILE, check_table_options, load_table_splits

    check_table_options(args)
    _check_model_options(args)
    out = Path(args.out)
    if args.restart:  # from the first epoch: an interrupted run's backup goes
        shutil.rmtree(out / BACKUP_DIR, ignore_errors=True)
    check_resumable(out, args)
    if args.deterministic:
        tf.config.experimental.enable_op_determinism()
    table = None
    if args.data:  # read and checked before anything is written
        splits, table = load_table_splits(args)
    create_directories(args, "out")
    if table is None:
        splits = _load_data(args)
    else:
        (out / TABLE_FILE).write_text(json.dumps(table, indent=2) + "\n")
    conditional = args.conditional or bool(table and table["condition_on"])
    (out / ARGS_FILE).write_text(json.dumps({k: v for k, v in vars(args).items() if k != "func"}, indent=2) + "\n")
    model, info = experiment.train(
        splits, args.model, conditional=conditional, size_option=args.size_option, preset=table is None,
        hidden_units=args.hidden_units, seed=args.seed, batch_size=args.batch_size,
        max_epochs=args.max_epochs, max_minutes=args.max_minutes, patience=args.patience,
        jit_compile=args.jit_compile, log_scale_bound=args.log_scale_bound, learning_rate=args.learning_rate,
        backup_dir=out / BACKUP_DIR, verbose=0, callbacks=_progress(args), protocol=args.protocol,
    )
    metrics = {
        "dataset": splits.name if table is None else table["file"], "model": args.model, "conditional": conditional,
        "hidden_units": info["hidden_units"], "parameters": info["parameters"],
        "learning_rate": info["learning_rate"],
        **experiment.evaluate(model, splits, conditional, labels=table is None),
        **{k: info.get(k) for k in ("epochs", "early_stopped", "resumed_from_epoch",
                                    "stopped_on_non_finite", "non_finite_val_epochs", "wall_time_s")},
    }
    # Stopped by --max-minutes before early stopping or the epoch cap: the same command
    # goes on from the backup, which stays.
    metrics["finished"] = bool(info.get("early_stopped") or info.get("closed_form") or info["epochs"] >= args.max_epochs
                               or info.get("stopped_on_non_finite"))
    save_model(model, out)
    (out / METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n")
    if metrics["finished"]:  # complete and saved: its backup is no longer needed
        shutil.rmtree(out / BACKUP_DIR, ignore_errors=True)
    elif not args.quiet:
        print(f"tfp-maf: the time budget ran out after epoch {info['epochs']}; run the same command to go on.",
              file=sys.stderr)
    return metrics


def _progress(args) -> list:
    """Progress on stderr unless ``--quiet``: a bar and a line per epoch on a
    terminal, the line alone elsewhere (`keras_models.progress`)."""
    if args.quiet:
        return []
    from keras_models.progress import TrainingProgress

    return [TrainingProgress(args.max_epochs, args.patience, args.max_minutes)]


def cmd_reproduce(args) -> dict:
    from keras_models import experiment
    from keras_models._optional import require

    if not args.no_figures:  # before hours of training, not after the first model
        require("matplotlib", "tfp-maf reproduce (without --no-figures)")
    create_directories(args, "results", "runs")
    from keras_models import figures

    models = args.models or list(experiment.TABLE_MODELS)
    figure_dir = Path(args.results) / "figures"
    kept = {}

    def on_model(name, model, splits):
        if args.dataset == "figure1":  # Figure 1 draws MADE and MAF (5) side by side
            kept[name] = model
        if not args.no_figures:
            figures.save_for_model(name, model, splits, figure_dir, conditional=args.conditional)

    result = experiment.reproduce(
        args.dataset, models, data_dir=args.data_dir, conditional=args.conditional,
        size_options=args.size_options, max_minutes=args.max_minutes, max_epochs=args.max_epochs,
        seed=args.seed, learning_rate=args.learning_rate, results_dir=args.results, runs_dir=args.runs,
        on_model=on_model, protocol=args.protocol,
        callbacks=_progress(args),
        log=None if args.quiet else (lambda text: print(f"tfp-maf: {text}", file=sys.stderr, flush=True)),
    )
    if args.dataset == "figure1" and not args.no_figures:
        figures.save_figure1(kept, figure_dir / "figure1.png")
    return result


def _load_model(out):
    import keras

    import keras_models.zoo  # noqa: F401  (registers the model classes)

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
    from keras_models import experiment

    model = _load_model(args.out)  # first: it says what to do where nothing was trained
    args_path = Path(args.out) / ARGS_FILE
    if not args_path.exists():
        raise SystemExit(f"tfp-maf: {args_path} is missing: `tfp-maf train` writes it beside {MODEL_FILE} "
                         "to say which data the model was trained on.")
    saved = read_json(args_path, "pass --dataset (and --data-dir) to say which data the model was trained on")
    overrides = {k: v for k, v in (("dataset", args.dataset), ("data_dir", args.data_dir)) if v}
    saved = argparse.Namespace(**{"data": None, **saved, **overrides})
    if saved.data and overrides:
        raise SystemExit(f"tfp-maf: this run was trained on --data {saved.data}; --dataset and --data-dir are "
                         "for runs on the paper's datasets.")
    splits = _load_data(saved)
    conditional = saved.conditional or bool(saved.data and saved.condition_on)
    return {"dataset": saved.data or splits.name, "model": saved.model, "conditional": conditional,
            **experiment.evaluate(model, splits, conditional, labels=not saved.data)}


def cmd_sample(args) -> dict | None:
    from tfp_maf_cli.table_runs import condition_rows, table_of, write_samples_csv

    model = _load_model(args.out)
    table = table_of(args.out)
    samples = model.sample(args.n, y=condition_rows(model, table, args), seed=args.seed).numpy()
    if args.format == "csv":
        write_samples_csv(samples, table["columns"] if table else [str(i) for i in range(model.event_size)])
        return None
    return {"samples": samples.tolist()}


def cmd_score(args) -> None:
    from tfp_maf_cli.table_runs import score_rows, table_of

    score_rows(_load_model(args.out), table_of(args.out), args.data, args.format)


def cmd_export(args) -> dict:
    model = _load_model(args.out)
    if args.format == "saved_model":
        target = args.saved_model or str(Path(args.out) / "saved_model")
        import tensorflow as tf

        try:
            model.export(target)
        except tf.errors.OpError as err:  # the directory cannot be written, say
            raise SystemExit(f"tfp-maf: --saved-model {target} could not be written: {err.message}") from None
        return {"saved_model": target, "signatures": ["serve", "log_prob", "sample", "sample_from_noise"]}
    if args.saved_model is not None:
        raise SystemExit("tfp-maf: --saved-model names the SavedModel's directory; "
                         f"--format {args.format} writes into --out.")
    from keras_models.portable import export_files

    return export_files(model, args.out, formats=[args.format])


def _number(kind, low, strict=False):
    """An argparse type: ``kind`` (int or float) at least ``low`` (above it if
    ``strict``), so that a bad value gets a one-line usage error, not a traceback or a
    run that trains on it (a negative step size trains until the loss is NaN)."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, "
                                             f"got {text!r}") from None
        if value < low or (strict and value == low) or value != value or value in (float("inf"), float("-inf")):
            what = "an integer" if kind is int else "a finite number"
            raise argparse.ArgumentTypeError(f"expected {what} {'above' if strict else 'at least'} {low:g}, got {text}")
        return value
    parse.__name__ = kind.__name__  # argparse names the type in its message
    return parse


POSITIVE_INT, COUNT, POSITIVE = _number(int, 1), _number(int, 0), _number(float, 0.0, strict=True)


def _version() -> str:
    """The installed distribution's version (tfp_maf.__version__ at build time), read
    without importing TensorFlow."""
    from importlib import metadata

    try:
        return metadata.version("tfp-maf")
    except metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return "(not installed)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tfp-maf", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train a model; writes model.keras and metrics.json to --out")
    train.add_argument("--dataset", default=None, choices=DATASET_NAMES,
                       help="default: the paper's Figure 1 density (figure1)")
    add_table_options(train, POSITIVE)
    train.add_argument("--model", default="maf5", choices=MODEL_NAMES, help="default: %(default)s")
    train.add_argument("--conditional", action="store_true", help="model p(x | y) (labelled data)")
    train.add_argument("--data-dir", default=None,
                       help="data root with <dataset>/<file>; default $TFP_MAF_DATA, else ~/.tfp_maf/data")
    train.add_argument("--out", default="runs/default",
                       help="the run directory: model.keras, metrics.json, and a backup while it trains; "
                            "the same command resumes an interrupted run (default: %(default)s)")
    train.add_argument("--restart", action="store_true",
                       help="start the run in --out over, finished or interrupted (its model.keras is kept "
                            "as model.previous.keras); without it a finished run is refused and an "
                            "interrupted one resumes")
    train.add_argument("--hidden-units", type=POSITIVE_INT, nargs="+", default=None,
                       help="default: the paper's option --size-option for the dataset")
    train.add_argument("--size-option", type=COUNT, default=0,
                       help="index into the paper's hidden-size options for the dataset (0: smallest)")
    train.add_argument("--no-jit", dest="jit_compile", action="store_const", const=False, default="auto",
                       help="train without XLA (default: XLA unless the run is too short to repay "
                            "its compilation; keras_models.training.compile_as_paper)")
    train.add_argument("--protocol", choices=PROTOCOLS, default="paper", help=PROTOCOL_HELP)
    train.add_argument("--batch-size", type=POSITIVE_INT, default=BATCH_SIZE, help="default: %(default)s, the paper's")
    train.add_argument("--max-epochs", type=POSITIVE_INT, default=MAX_EPOCHS,
                       help="epoch cap (default: %(default)s: early stopping decides)")
    train.add_argument("--max-minutes", type=POSITIVE, default=None,
                       help="time budget of this call; the same command again goes on (default: none)")
    train.add_argument("--patience", type=COUNT, default=PATIENCE,
                       help="epochs without a better validation loss before stopping (default: %(default)s, "
                            "the paper's)")
    train.add_argument("--seed", type=int, default=0,
                       help="seed of the data split, the weights and the batches (default: %(default)s)")
    train.add_argument("--learning-rate", type=POSITIVE, default=None,
                       help="Adam's step size (default: the paper's, 1e-3 MADE and MADE MoG, 1e-4 flows)")
    train.add_argument("--deterministic", action="store_true",
                       help="TensorFlow op determinism: the same seed gives bit-identical weights")
    train.add_argument("--log-scale-bound", type=POSITIVE, default=None,
                       help="soft-bound the flows' log-scales to +-B "
                            "(off, as in the paper; try 10 on heavy-tailed data)")
    train.add_argument("--quiet", action="store_true", help="no progress on stderr (the JSON result only)")
    train.set_defaults(func=cmd_train)

    reproduce = sub.add_parser(
        "reproduce", help="train the paper's models on a dataset; write results/<dataset>.json, .md and figures")
    reproduce.add_argument("--dataset", default="figure1", choices=DATASET_NAMES,
                           help="default: %(default)s, the paper's Figure 1 density")
    reproduce.add_argument("--models", nargs="+", default=None, choices=MODEL_NAMES,
                           help="default: all eight of the paper's tables")
    reproduce.add_argument("--conditional", action="store_true", help="the class-conditional table (mnist, cifar10)")
    reproduce.add_argument("--data-dir", default=None,
                           help="data root with <dataset>/<file>; default $TFP_MAF_DATA, else ~/.tfp_maf/data")
    reproduce.add_argument("--results", default="results",
                           help="where <dataset>.json, .md and figures go (default: %(default)s)")
    reproduce.add_argument("--size-options", type=COUNT, nargs="+", default=None,
                           help="indices of the paper's hidden-size options to try (default: all)")
    reproduce.add_argument("--runs", default=None,
                           help="where each training run backs itself up and is kept (default: "
                                "runs/<dataset>[_conditional]); the same command again resumes from there")
    reproduce.add_argument("--max-minutes", type=POSITIVE, default=None,
                           help="budget per training run in this call; the same command again goes on")
    reproduce.add_argument("--max-epochs", type=POSITIVE_INT, default=MAX_EPOCHS,
                           help="epoch cap per training run (default 1000: early stopping decides)")
    reproduce.add_argument("--seed", type=int, default=0, help="default: %(default)s")
    reproduce.add_argument("--protocol", choices=PROTOCOLS, default="paper", help=PROTOCOL_HELP)
    reproduce.add_argument("--learning-rate", type=POSITIVE, default=None,
                           help="Adam's step size in place of the paper's (1e-3 MADE, MADE MoG; 1e-4 flows); "
                                "such rows are marked and kept beside the paper's-protocol rows")
    reproduce.add_argument("--no-figures", action="store_true", help="write the tables only (no matplotlib)")
    reproduce.add_argument("--quiet", action="store_true", help="no progress on stderr")
    reproduce.set_defaults(func=cmd_reproduce, patience=30)  # the paper's

    evaluate = sub.add_parser("evaluate", help="print the test log-likelihood of a trained model")
    evaluate.add_argument("--out", required=True, help="the run directory that tfp-maf train wrote")
    evaluate.add_argument("--dataset", default=None, choices=DATASET_NAMES,
                          help="default: the one the run was trained on")
    evaluate.add_argument("--data-dir", default=None,
                          help="data root with <dataset>/<file>; default $TFP_MAF_DATA, else ~/.tfp_maf/data")
    evaluate.set_defaults(func=cmd_evaluate)

    sample = sub.add_parser("sample", help="print samples from a trained model as JSON")
    sample.add_argument("--out", required=True, help="the run directory that tfp-maf train wrote")
    sample.add_argument("-n", type=COUNT, default=10, help="how many samples (default: %(default)s)")
    sample.add_argument("--seed", type=int, default=0, help="the same seed, the same samples (default: %(default)s)")
    sample.add_argument("--label", type=int, default=None, help="class to sample (conditional models)")
    sample.add_argument("--given", nargs="+", default=None, metavar="NAME=VALUE",
                        help="the condition of a run trained with --data and --condition-on")
    sample.add_argument("--format", choices=["json", "csv"], default="json",
                        help="json: {\"samples\": [...]}; csv: a header of the column names, a row per sample "
                             "(default: %(default)s)")
    sample.set_defaults(func=cmd_sample)
    add_score_parser(sub).set_defaults(func=cmd_score)

    export = sub.add_parser("export", help="write a SavedModel (TF Serving), ONNX or LiteRT files")
    export.add_argument("--out", required=True, help="the run directory that tfp-maf train wrote")
    export.add_argument("--format", choices=["saved_model", "onnx", "litert"], default="saved_model",
                        help="saved_model: serve, log_prob, sample, sample_from_noise; onnx: <out>/model.onnx "
                             "(log_prob) and <out>/model.sample_from_noise.onnx; litert: <out>/model.tflite, both "
                             "(onnx and litert need the portable extra; default: %(default)s)")
    export.add_argument("--saved-model", default=None, help="the SavedModel's directory (default: <out>/saved_model)")
    export.set_defaults(func=cmd_export)
    return parser


def _import_tensorflow_quietly() -> None:
    """Imports TensorFlow (and TFP, Keras) without its C++ start-up lines.

    TensorFlow 2.21 prints its oneDNN and CUDA-probing lines through absl before absl's
    logging is initialised, where ``TF_CPP_MIN_LOG_LEVEL`` does not reach them, so the
    only way to keep them off a user's terminal is to point file descriptor 2 elsewhere
    for the import. A user who sets ``TF_CPP_MIN_LOG_LEVEL`` below 3 sees what that level
    lets through, as usual; at 3 (the usual way to silence TensorFlow) those lines went
    through regardless, and are kept off too.
    """
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL", "3") != "3":
        import tensorflow_probability  # noqa: F401
        return
    # After start-up too: its C++ errors (no CUDA driver, say) reach Python users as
    # exceptions when they matter.
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        import keras  # noqa: F401
        import tensorflow_probability  # noqa: F401
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _use_tensorflow_backend() -> None:
    """Sets Keras' backend for this process to TensorFlow's, the one tfp-maf runs on
    (`tfp_maf._keras_backend`), before Keras is imported: ``keras.json``'s choice is a
    default for a user's own programs, and this command has no other. A ``KERAS_BACKEND``
    set to another backend is refused rather than ignored."""
    backend = os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    if backend != "tensorflow":
        raise SystemExit(
            f"tfp-maf: runs on Keras' TensorFlow backend; KERAS_BACKEND is {backend!r}. "
            "Unset it, or set it to tensorflow, for this command."
        )


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    _use_tensorflow_backend()
    check_directories(args)
    if args.command == "train":  # at once, before TensorFlow is imported
        check_not_finished(Path(args.out), args)
    _import_tensorflow_quietly()
    from keras_models._optional import MissingOptionalDependency
    from keras_models.data import DatasetFileNotFoundError

    try:
        result = args.func(args)
    except KeyboardInterrupt:
        resume = " The same command resumes it from its last epoch." if args.command in ("train", "reproduce") else ""
        print(f"\ntfp-maf: interrupted.{resume}", file=sys.stderr)
        raise SystemExit(130) from None  # the shell's code for Ctrl-C
    except BrokenPipeError:  # score or sample --format csv writing to a reader that left
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (DatasetFileNotFoundError, MissingOptionalDependency, ValueError, OSError) as err:
        # Bad input, a missing extra, a file that cannot be read or written: the message says
        # what and where; a traceback adds nothing.
        raise SystemExit(f"tfp-maf: {err}") from err
    try:
        if result is not None:  # else the command wrote its own rows (score, sample --format csv)
            json.dump(result, sys.stdout, indent=2)
            sys.stdout.write("\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader left (``| head``): the rest goes nowhere, as for any Unix filter,
        # and Python's flush at exit would fail once more.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # the shell's code for a pipe closed under a writer (128 + SIGPIPE)
    return 0
