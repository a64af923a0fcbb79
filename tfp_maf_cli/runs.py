"""The ``tfp-maf`` command's run directories: what a run leaves there, and the checks
before a command uses one (a finished run, an interrupted one resumed with other
arguments, a path that is a file or cannot be made). Imports no TensorFlow: these run
before it is imported."""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["ARGS_FILE", "BACKUP_DIR", "METRICS_FILE", "MODEL_FILE", "PREVIOUS_MODEL_FILE", "check_directories",
           "check_not_finished", "check_resumable", "create_directories", "read_json", "save_model"]

MODEL_FILE = "model.keras"
PREVIOUS_MODEL_FILE = "model.previous.keras"
METRICS_FILE = "metrics.json"
ARGS_FILE = "args.json"
BACKUP_DIR = "backup"

#: Arguments that may change between an interrupted run and its resumption (``verbose``:
#: an option of earlier versions, kept in their args.json; ``out``: the directory the backup
#: is in, however it is written; ``data_dir``: compared as the data root it resolves to).
_RESUMABLE_CHANGES = {"verbose", "quiet", "max_minutes", "restart", "func", "out", "data_dir"}

#: Arguments of ``train`` added in later versions, with the behaviour that runs made before had.
_ADDED_ARGUMENTS = {"protocol": "paper", "data": None, "columns": None, "condition_on": None, "split": None}


def check_resumable(out: Path, args) -> None:
    """Refuses to resume a backup made with other arguments (its weights would not fit)."""
    saved_path = out / ARGS_FILE
    if not (out / BACKUP_DIR).exists() or not saved_path.exists():
        return
    saved = read_json(saved_path, "delete the run directory's backup to start afresh")
    current = vars(args)
    keys = (set(saved) | set(current)) - _RESUMABLE_CHANGES
    # An argument added since the backup was made had its default then.
    changed = sorted(k for k in keys if saved.get(k, _ADDED_ARGUMENTS.get(k)) != current.get(k))
    if _resolved_data_root(saved.get("data_dir")) != _resolved_data_root(args.data_dir):
        changed.append("data_dir")  # the same root by another spelling (a trailing /, $TFP_MAF_DATA) resumes
    if changed:
        detail = ", ".join(f"--{k.replace('_', '-')} {saved.get(k)!r} then, {current.get(k)!r} now" for k in changed)
        raise SystemExit(
            f"tfp-maf: {out / BACKUP_DIR} holds an interrupted run with other arguments ({detail}). "
            f"Run the same command to resume it, or delete {out / BACKUP_DIR} to start afresh."
        )


def read_json(path: Path, remedy: str) -> dict:
    """``path``'s JSON; one that does not parse gets an error naming the file and what to do."""
    try:
        return json.loads(path.read_text())
    except ValueError as err:
        raise SystemExit(f"tfp-maf: {path} is not valid JSON ({err}); {remedy}.") from None


def _resolved_data_root(data_dir):
    from keras_models.data import data_root

    return os.path.realpath(data_root(data_dir))


def check_not_finished(out: Path, args) -> None:
    """Refuses to train over a finished run unless ``--restart`` says so: it says what is
    there and what to pass. (An interrupted run, with its backup, resumes instead.)"""
    metrics_path = out / METRICS_FILE
    if args.restart or not metrics_path.exists() or (out / BACKUP_DIR).exists():
        return
    try:
        metrics = json.loads(metrics_path.read_text())
        found = (f"{metrics['model']} on {metrics['dataset']}, {metrics['epochs']} epochs, test "
                 f"log-likelihood {metrics['test_log_likelihood']:.3f}")
    except (ValueError, KeyError, TypeError):
        found = f"its {METRICS_FILE}"
    raise SystemExit(
        f"tfp-maf: {out} holds a finished run ({found}). Pass a new --out for a new run, or "
        f"--restart to train again here ({MODEL_FILE} is kept as {PREVIOUS_MODEL_FILE})."
    )


def save_model(model, out: Path) -> None:
    """Saves ``model.keras`` atomically; a model already there becomes
    ``model.previous.keras`` instead of being lost."""
    target = out / MODEL_FILE
    partial = out / ("partial." + MODEL_FILE)
    model.save(partial)
    if target.exists():
        os.replace(target, out / PREVIOUS_MODEL_FILE)
    os.replace(partial, target)


def check_directories(args) -> None:
    """Refuses a file where an option names a directory, saying what to pass instead.

    Else ``train`` fails on ``mkdir`` with pathlib's ``FileExistsError`` after loading
    its data, and ``evaluate``, ``sample`` and ``export`` ask to train into that path
    first. Checked before TensorFlow is imported, so the answer is immediate."""
    run_dir = f"the run directory that `tfp-maf train --out DIR` wrote, which holds {MODEL_FILE}"
    wanted = {
        "train": {"out": "a directory to create, or an existing run directory to train again or resume"},
        "reproduce": {"results": "a directory to create, or an existing results directory",
                      "runs": "a directory to create, or an existing runs directory to resume"},
        "evaluate": {"out": run_dir},
        "sample": {"out": run_dir},
        "score": {"out": run_dir},
        "export": {"out": run_dir, "saved_model": "a directory to create for the SavedModel"},
    }
    for dest, instead in wanted.get(args.command, {}).items():
        path = getattr(args, dest)
        if path is None or not Path(path).is_file():
            continue
        option = "--" + dest.replace("_", "-")
        parent = Path(path).parent
        hint = f": here, {option} {parent}" if Path(path).name == MODEL_FILE and dest == "out" else ""
        raise SystemExit(f"tfp-maf: {option} {path} is a file, not a directory; pass {instead}{hint}.")


def create_directories(args, *dests: str) -> None:
    """Makes the directories that options ``dests`` of ``args`` name, before any training:
    one that cannot be made fails now, in one line, not after the work it would hold."""
    for dest in dests:
        path = getattr(args, dest)
        if path is None:
            continue
        try:
            Path(path).mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise SystemExit(f"tfp-maf: --{dest.replace('_', '-')} {path} cannot be created "
                             f"({err.strerror or err}).") from None
