"""``tfp-maf`` on a user's own file: ``train --data``, ``score`` and ``sample --format csv``.

A run trained on a file keeps ``table.json`` beside ``model.keras``: the file, the
columns modelled and conditioned on (names and types in the file), the split and its
seed, so that ``evaluate`` finds the same test rows and ``score`` refuses a file that
lacks the columns.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np

from tfp_maf_cli.runs import read_json
from tfp_maf_cli.tables import read_table, split_rows

__all__ = ["TABLE_FILE", "add_score_parser", "add_table_options", "check_table_options", "condition_rows",
           "given_row", "load_table_splits", "score_rows", "table_of", "write_samples_csv"]

TABLE_FILE = "table.json"

#: Options of ``train`` that name or shape the paper's datasets, and so do nothing for --data.
_PAPER_OPTIONS = (("dataset", "--dataset", None), ("conditional", "--conditional", False),
                  ("data_dir", "--data-dir", None), ("size_option", "--size-option", 0),
                  ("protocol", "--protocol", "paper"))


def add_table_options(train, positive) -> None:
    """``train``'s options for a file of one's own (``positive``: the parser's type of a
    number above 0)."""
    train.add_argument("--data", default=None, metavar="FILE",
                       help="train on your own table: a .csv (with a header row), .parquet, .npy or .npz file; "
                            "the flows standardise its columns")
    train.add_argument("--columns", nargs="+", default=None, metavar="NAME",
                       help="with --data: the columns to model (default: all but --condition-on's)")
    train.add_argument("--condition-on", nargs="+", default=None, metavar="NAME",
                       help="with --data: columns y to condition on, for p(x | y)")
    train.add_argument("--split", type=positive, nargs=2, default=None, metavar=("VALIDATION", "TEST"),
                       help="with --data: the validation and test shares of a split seeded by --seed "
                            "(default: 0.1 0.1)")


def add_score_parser(sub):
    """The ``score`` command's parser, among the subparsers ``sub``."""
    score = sub.add_parser("score", help="write the log-density of each row of a file (the anomaly score)")
    score.add_argument("--out", required=True, help="the run directory that tfp-maf train wrote")
    score.add_argument("--data", required=True, metavar="FILE",
                       help="rows to score, with the columns the run was trained on (.csv, .parquet, .npy, .npz)")
    score.add_argument("--format", choices=["csv", "jsonl"], default="csv",
                       help="csv: a log_prob header, then one value per row in the file's order; jsonl: "
                            "{\"row\": i, \"log_prob\": v} per line (default: %(default)s)")
    return score


def check_table_options(args) -> None:
    """Refuses the paper's dataset options beside ``--data``, and the table options without it."""
    if args.data is None:
        for dest, option in (("columns", "--columns"), ("condition_on", "--condition-on"), ("split", "--split")):
            if getattr(args, dest) is not None:
                raise ValueError(f"{option} chooses from a file of your own: pass it with --data FILE.")
        return
    for dest, option, default in _PAPER_OPTIONS:
        if getattr(args, dest) != default:
            hint = " (--condition-on NAME... conditions on columns of the file)" if dest == "conditional" else ""
            raise ValueError(f"{option} is for the paper's datasets; --data {args.data} trains on your file{hint}.")
    if args.model == "gaussian" and args.condition_on:
        raise ValueError("--model gaussian is conditional on one-hot classes only; --condition-on gives "
                         "continuous columns: pick a flow (maf5, nsf5, ...).")


def _chosen(table, columns, condition_on):
    condition_on = list(condition_on or [])
    columns = list(columns) if columns else [n for n in table.names if n not in condition_on]
    both = sorted(set(columns) & set(condition_on))
    if both:
        raise ValueError(f"--columns and --condition-on both name {', '.join(map(repr, both))}.")
    if not columns:
        raise ValueError(f"{table.path}: no column is left to model after --condition-on.")
    return columns, condition_on


def _checked(values, names, role, path):
    """Refuses non-finite rows, constant and repeated columns of a table, in one line
    naming the file's rows (1 is its first data row) and columns."""
    from keras_models.training_data import survey_columns

    label = f"{path}" if role == "x" else f"{path} (its --condition-on columns)"
    problems = survey_columns(values, label, columns=names, row_base=1).problems(columns_checked=role == "x")
    if problems:
        rows = " (row 1 is the first data row)" if "non-finite" in problems[0] else ""
        raise ValueError("; ".join(problems) + rows + ".")


def load_table_splits(args):
    """The `keras_models.data.Splits` of ``args.data``'s chosen columns, checked, split
    by ``args.seed``; and the table record for ``table.json``."""
    from keras_models.data import Splits

    table = read_table(args.data)
    columns, condition_on = _chosen(table, args.columns, args.condition_on)
    x = table.columns(columns, "--columns")
    y = table.columns(condition_on, "--condition-on") if condition_on else None
    _checked(x, columns, "x", table.path)
    if y is not None:
        _checked(y, condition_on, "y", table.path)
    fractions = tuple(args.split or (0.1, 0.1))
    train, val, test = split_rows(len(x), fractions, args.seed)
    f32 = lambda a, i: None if a is None else a[i].astype(np.float32)  # noqa: E731
    splits = Splits(Path(args.data).stem, f32(x, train), f32(x, val), f32(x, test), f32(y, train), f32(y, val),
                    f32(y, test), num_classes=None if y is None else len(condition_on))
    record = {"file": str(args.data), "columns": columns, "condition_on": condition_on,
              "dtypes": {n: table.dtypes[table.names.index(n)] for n in columns + condition_on},
              "split": {"validation": fractions[0], "test": fractions[1], "seed": args.seed,
                        "rows": [len(train), len(val), len(test)]}}
    return splits, record


def table_of(out) -> dict | None:
    """The run's ``table.json``, or None for a run on one of the paper's datasets."""
    path = Path(out) / TABLE_FILE
    return read_json(path, f"train the run in {out} again") if path.exists() else None


def _rows_for(model, record, path):
    """``(x, y)`` of a file to score, in the run's columns; refused naming what is missing."""
    table = read_table(path)
    x = table.columns(record["columns"], "a column the run models")
    conditions = record["condition_on"]
    y = table.columns(conditions, "a column the run conditions on") if conditions else None
    for values, names in ((x, record["columns"]), (y, record["condition_on"])):
        if values is None:
            continue
        bad = np.flatnonzero(~np.isfinite(values).all(axis=1))
        if bad.size:
            rows = ", ".join(str(r + 1) for r in bad[:5]) + (f" and {bad.size - 5} more" if bad.size > 5 else "")
            raise ValueError(f"{path}: {bad.size} row{'s' * (bad.size > 1)} with a non-finite value in "
                             f"{', '.join(map(repr, names))}: row{'s' * (bad.size > 1)} {rows} (1 is the first data "
                             "row); a density needs every value.")
    return x, y


def score_rows(model, record, path, output_format: str, stream=None) -> None:
    """Writes log p(x) (log p(x | y)) of each row of ``path``, in its order, to ``stream``
    (stdout): CSV with a ``log_prob`` header, or JSON lines ``{"row": i, "log_prob": v}``
    (``i`` from 1, the file's first data row). ``record``: the run's ``table.json``, or
    None for a run on a paper's dataset (columns ``"0"``, ``"1"``, ...; unconditional)."""
    from keras_models.evaluation import log_likelihoods

    if record is None:
        if model.conditional_dims:
            raise ValueError("score reads the columns a run was trained on with --data; this run's model is "
                             "conditional on the classes of a paper's dataset.")
        record = {"columns": [str(i) for i in range(model.event_size)], "condition_on": []}
    stream = stream or sys.stdout
    x, y = _rows_for(model, record, path)
    log_p = log_likelihoods(model, x.astype(model.compute_dtype),
                            None if y is None else y.astype(model.compute_dtype))
    if output_format == "csv":
        writer = csv.writer(stream, lineterminator="\n")
        writer.writerow(["log_prob"])
        writer.writerows([[repr(float(v))] for v in log_p])
    else:
        for i, v in enumerate(log_p, start=1):
            stream.write(json.dumps({"row": i, "log_prob": float(v)}) + "\n")


def condition_rows(model, record, args):
    """``y`` for ``tfp-maf sample``: ``--given`` for a run on a file with ``--condition-on``,
    ``--label`` (one-hot) for a class-conditional run on a paper's dataset, else None;
    each option refused where it does not apply."""
    if record is not None and (args.label is not None or record["condition_on"] or args.given):
        if args.label is not None:
            raise ValueError(f"--label picks a class of the paper's labelled datasets; this run was trained on "
                             f"{record['file']}" + (": pass --given NAME=VALUE." if record["condition_on"]
                                                     else ", unconditionally."))
        if not record["condition_on"]:
            raise ValueError("this model is unconditional; --given is for a run with --condition-on.")
        return np.repeat(given_row(record, args.given), args.n, axis=0).astype(model.compute_dtype)
    if args.given:
        raise ValueError("--given is for a run trained with --data and --condition-on; "
                         + ("pass --label." if model.conditional_dims else "this model is unconditional."))
    if not model.conditional_dims:
        if args.label is not None:
            raise ValueError("this model is unconditional; --label is for a conditional one.")
        return None
    if args.label is None:
        raise ValueError(f"this model is conditional; pass --label 0..{model.conditional_dims - 1}.")
    from keras_models.data.images import one_hot

    return one_hot(np.full(args.n, args.label), model.conditional_dims)  # checks the label


def given_row(record, given) -> np.ndarray:
    """``--given NAME=VALUE ...`` as one row ``[1, K]`` in the run's ``condition_on`` order."""
    names = record["condition_on"]
    if not given:
        raise ValueError(f"this run is conditional on {', '.join(map(repr, names))}: pass --given "
                         + " ".join(f"{n}=VALUE" for n in names) + ".")
    values = {}
    for item in given or []:
        name, sep, text = item.partition("=")
        if not sep:
            raise ValueError(f"--given {item!r}: expected NAME=VALUE.")
        try:
            values[name] = float(text)
        except ValueError:
            raise ValueError(f"--given {item!r}: {text!r} is not a number.") from None
    unknown, missing = sorted(set(values) - set(names)), [n for n in names if n not in values]
    if unknown or missing:
        raise ValueError(f"--given: this run conditions on {', '.join(map(repr, names))}; "
                         + (f"got unknown {', '.join(map(repr, unknown))}" if unknown else "")
                         + ("; " if unknown and missing else "")
                         + (f"missing {', '.join(map(repr, missing))}" if missing else "") + ".")
    return np.array([[values[n] for n in names]])


def write_samples_csv(samples, names, stream=None) -> None:
    """Samples ``[n, D]`` as CSV with a header of the column names."""
    writer = csv.writer(stream or sys.stdout, lineterminator="\n")
    writer.writerow(names)
    writer.writerows([[repr(float(v)) for v in row] for row in samples])
