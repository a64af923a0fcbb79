"""Experiments as in the paper: train one model, evaluate it, and reproduce a table.

`reproduce` trains the paper's models on one dataset, each on every hidden-size option
of the appendix (`keras_models.presets`), keeps the option with the best validation
log-likelihood, and reports its test log-likelihood +- 2 s.e. beside the paper's number
(`paper_value`, from ``resources/paper_results.json``, typed in from Tables 1 and 2).
Budgets (``max_minutes``, ``max_epochs``) are recorded with every row, as is whether
early stopping was reached: a row whose training was cut short says so.
"""

from __future__ import annotations

import json
import platform
import time
from importlib import resources
from pathlib import Path

__all__ = ["evaluate", "load_splits", "markdown_table", "paper_value", "reproduce", "train"]


def load_splits(dataset: str, data_dir=None, seed: int = 0):
    """The dataset's splits; the Figure 1 density, which is drawn rather than read,
    takes ``seed``."""
    from keras_models import data

    return data.load(dataset, data_dir, **({"seed": seed} if dataset == "figure1" else {}))


def train(splits, model_name: str, *, conditional: bool = False, size_option: int = 0,
          hidden_units=None, seed: int = 0, batch_size: int = 100, max_epochs: int = 1000,
          max_minutes: float | None = None, patience: int = 30, jit_compile="auto",
          log_scale_bound: float | None = None, learning_rate: float | None = None, backup_dir=None,
          verbose=0, callbacks=(), protocol: str = "paper", preset: bool = True):
    """Builds ``model_name`` (``maf5``, ``made``, ...) with the paper's settings for
    ``splits`` and trains it as in the paper (``learning_rate``: Adam's step size in place
    of the paper's; ``protocol``: ``"published"`` for the published code's where the paper
    is silent, `keras_models.presets`). Returns ``(model, info)``.

    ``preset=False`` is for a user's own table (``tfp-maf train --data``): the zoo's
    default sizes (or ``hidden_units``), and the flows standardise their columns, with
    statistics from ``splits.x_train`` (and ``y_train``: then ``splits.num_classes`` is the
    width of ``y``, its columns continuous); the paper's step sizes and early stopping."""
    import keras

    from keras_models import presets, training, zoo

    keras.utils.set_random_seed(seed)
    kwargs = {"conditional_dims": splits.num_classes if conditional else None}
    if model_name != "gaussian":
        kwargs["seed"] = seed
        if preset:
            kwargs.update(presets.model_kwargs(splits.name, size_option, protocol, model=model_name))
            # The paper's protocol: its datasets come preprocessed (each pipeline
            # standardises as the paper does), and its flows have no log tails and
            # unbounded log-scales.
            kwargs.update(standardize=False, tails=None)
            if "log_scale_bound" in zoo.model_keywords(model_name):
                kwargs["log_scale_bound"] = None
        if hidden_units:
            kwargs["hidden_units"] = list(hidden_units)
    if log_scale_bound is not None:
        kwargs["log_scale_bound"] = log_scale_bound  # refused by the models without log-scales
    model = zoo.build(model_name, splits.event_size, **kwargs)
    training.compile_as_paper(model, model_name, jit_compile=jit_compile, learning_rate=learning_rate)
    pipelines = splits.pipelines(batch_size, seed=seed, conditional=conditional)
    start = time.monotonic()
    _, info = training.fit_as_paper(
        model, pipelines.train, pipelines.validation, splits.x_train,
        splits.y_train if conditional else None, max_epochs=max_epochs, patience=patience,
        max_minutes=max_minutes, verbose=verbose, backup_dir=backup_dir, callbacks=callbacks,
        shuffle_epoch=pipelines.epoch,
    )
    # A resumed run's wall time counts every process it ran in (the backup keeps it).
    info.update(hidden_units=kwargs.get("hidden_units") or getattr(model, "hidden_units", None),
                parameters=int(model.count_params()), protocol=protocol,
                # To the float32 variable's 7 digits: 1e-2, not 0.009999999776482582.
                learning_rate=float(f"{float(model.optimizer.learning_rate.numpy()):.7g}"),
                wall_time_s=info.get("train_seconds") or round(time.monotonic() - start, 1))
    return model, info


def evaluate(model, splits, conditional: bool = False, split: str = "test", labels: bool = True) -> dict:
    """Mean log-likelihood +- 2 s.e. on ``split``, as in the paper: for a conditional
    model the marginal log p(x) = log sum_y p(x | y) p(y) (uniform p(y)) and
    log p(x | y); bits per pixel for images; the exact value for Figure 1.
    ``labels=False``: ``y`` is continuous columns (a user's table), and the
    log-likelihood is log p(x | y) alone."""
    from keras_models.evaluation import (
        bits_per_pixel,
        log_likelihoods,
        marginal_log_likelihoods,
        mean_and_two_se,
    )

    x, y = getattr(splits, f"x_{split}"), getattr(splits, f"y_{split}")
    key = f"{split}_log_likelihood"

    def summary(name, values):
        mean, two_se = mean_and_two_se(values)
        return {name: mean, f"{name}_2se": two_se}

    if conditional and not labels:
        log_p = log_likelihoods(model, x, y)
        out = summary(key, log_p)
    elif conditional:
        log_p = marginal_log_likelihoods(model, x, splits.num_classes)
        out = summary(key, log_p)
        out.update(summary(f"{split}_conditional_log_likelihood", log_likelihoods(model, x, y)))
    else:
        log_p = log_likelihoods(model, x)
        out = summary(key, log_p)
    if splits.logit_lambda is not None:
        out.update(summary(f"{split}_bits_per_pixel", bits_per_pixel(log_p, x, splits.logit_lambda)))
    if splits.name == "figure1":
        from keras_models.data import Figure1Density

        density = Figure1Density()
        out[f"exact_{split}_log_likelihood"] = float(density.log_prob(x).mean())
        out["expected_log_likelihood"] = density.expected_log_prob
    return out


def _paper() -> dict:
    return json.loads(resources.files("keras_models").joinpath("resources/paper_results.json").read_text())


def paper_value(dataset: str, model: str, conditional: bool = False) -> tuple[float, float] | None:
    """The paper's test log-likelihood and error bar for this cell, or ``None``.

    >>> paper_value("mnist", "gaussian", conditional=True)
    (-1344.7, 1.8)
    >>> paper_value("figure1", "maf5")   # not in the tables: the exact value
    (-3.531, 0.0)
    """
    paper = _paper()
    if dataset in paper["exact"]:
        return paper["exact"][dataset]["log_likelihood"], 0.0
    if dataset in paper["table1"]:
        cell = None if conditional else paper["table1"][dataset].get(model)
    else:
        table = paper["table2"].get(dataset, {})
        cell = table.get("conditional" if conditional else "unconditional", {}).get(model)
    return None if cell is None else (float(cell[0]), float(cell[1]))


#: The rows of the paper's tables, in their order.
TABLE_MODELS = ("gaussian", "made", "made-mog", "realnvp5", "realnvp10", "maf5", "maf10", "maf-mog5")


def reproduce(dataset: str, models, *, data_dir=None, conditional: bool = False,
              size_options=None, max_minutes: float | None = None, max_epochs: int = 1000,
              seed: int = 0, learning_rate: float | None = None, results_dir="results", runs_dir=None,
              verbose=0, callbacks=(), log=None, on_model=None, protocol: str = "paper") -> dict:
    """Trains each model on every hidden-size option (or ``size_options``), keeps the
    best on validation data, and writes ``<results_dir>/<dataset>[_conditional].json``
    and ``.md``.

    Runs that take hours survive being killed: each training run backs itself up
    every epoch under ``runs_dir`` (default ``runs/<dataset>[_conditional]``), and the
    same call again resumes it; a finished run is kept there and not trained again
    unless a larger ``max_epochs`` (or a new ``max_minutes``) asks it to go on. The
    results file is updated row by row as each model ends: rows of models not in
    ``models`` stay as they were. ``callbacks`` go to every training run, ``log(text)``
    hears what starts and ends, and ``on_model(name, model, splits)`` is called with
    each kept model (the CLI draws figures there).

    The runs share this process, and TensorFlow frees no XLA program before the process
    ends: each run trained with XLA (`compile_as_paper`'s default for long runs) leaves
    its programs behind (about 40 MiB a model where `benchmarks/calls.py` measures it).
    A call per dataset, each in a process of its own (as each ``tfp-maf reproduce``
    command is), keeps that to one table's runs.

    ``learning_rate`` replaces the paper's step size: such rows are kept beside the
    paper-protocol rows of the same models (and their runs in directories of their own),
    marked with the step size in the table. So are the rows of ``protocol="published"``
    (the published code's protocol where the paper is silent, `keras_models.presets`).
    """
    from keras_models import presets

    splits = load_splits(dataset, data_dir, seed)
    options = size_options if size_options is not None else range(len(presets.hidden_unit_options(dataset, protocol)))
    stem = f"{dataset}_conditional" if conditional else dataset
    runs_dir = Path(runs_dir) if runs_dir is not None else Path("runs") / stem
    log = log or (lambda text: None)
    for name in models:
        tried, best = [], None
        step = _step_size_override(name, learning_rate)
        for option in ([0] if name == "gaussian" else options):
            marks = _step_suffix(step) + _protocol_suffix(name, protocol)
            run_dir = runs_dir / f"{name}-option{option}-seed{seed}{marks}"
            log(f"{stem}: {name}, hidden-size option {option} (run directory {run_dir})")
            model, info, budget = _train_or_resume(splits, name, run_dir, conditional=conditional, size_option=option,
                                           seed=seed, max_minutes=max_minutes, max_epochs=max_epochs,
                                           learning_rate=step, verbose=verbose, callbacks=callbacks,
                                           protocol=protocol)
            val = evaluate(model, splits, conditional, split="val")["val_log_likelihood"]
            log(f"{stem}: {name}, option {option}: {info['epochs']} epochs, validation log-likelihood {val:.2f}")
            tried.append({"hidden_units": info["hidden_units"], "val_log_likelihood": val,
                          "epochs": info["epochs"], "early_stopped": info["early_stopped"]})
            if best is None or val > best[0]:
                best = (val, model, info, budget)
        _, model, info, budget = best
        row = {"model": name, **evaluate(model, splits, conditional), **info, "options_tried": tried,
               "budget": budget,
               "paper_step_size": step is None, "protocol": "paper" if name == "gaussian" else protocol}
        paper = paper_value(dataset, name, conditional)
        row["paper"] = None if paper is None else {"log_likelihood": paper[0], "error_bar": paper[1]}
        if paper is not None:
            # Within the paper's error bars: the two intervals overlap.
            gap = abs(row["test_log_likelihood"] - paper[0])
            row["within_paper_error_bars"] = bool(gap <= paper[1] + row["test_log_likelihood_2se"])
        if on_model is not None:
            on_model(name + _step_suffix(step) + _protocol_suffix(name, protocol), model, splits)
        _write_row(results_dir, stem, dataset, conditional, row)
        log(f"{stem}: {name}: test log-likelihood {row['test_log_likelihood']:.2f}; "
            f"written to {Path(results_dir) / stem}.json")
    return json.loads((Path(results_dir) / f"{stem}.json").read_text())


def _step_size_override(name, learning_rate) -> float | None:
    """``learning_rate``, or ``None`` where it is the paper's step size for ``name`` (or the
    model is fitted in closed form): such a run is the paper's protocol."""
    from keras_models.presets import LEARNING_RATES

    if name == "gaussian" or learning_rate is None or learning_rate == LEARNING_RATES.get(name, 1e-4):
        return None
    return float(learning_rate)


def _step_suffix(learning_rate) -> str:
    """The run directory's mark of a step size other than the paper's."""
    return "" if learning_rate is None else f"-step{learning_rate:g}"


def _protocol_suffix(name, protocol) -> str:
    """The run directory's mark of a protocol other than the paper's (none for the
    closed-form Gaussian, the same under every protocol)."""
    return "" if protocol == "paper" or name == "gaussian" else f"-{protocol}"


def _row_key(row) -> tuple:
    """A results row's identity: its model, the step size if not the paper's, and the
    protocol."""
    return (row["model"], None if row.get("paper_step_size", True) else row["learning_rate"],
            row.get("protocol", "paper"))


def _train_or_resume(splits, name, run_dir: Path, *, max_epochs, max_minutes, **kwargs):
    """`train`, backed up in ``run_dir``; a run that already ended there under this
    budget is loaded instead of trained again. Returns the model, `train`'s info and the
    budget the run ended under (a loaded run's own, which may be larger than this call's)."""
    import keras

    from keras_models.callbacks import write_atomically

    done, saved = run_dir / "done.json", run_dir / "model.keras"
    if name != "gaussian" and done.exists() and saved.exists():
        info = json.loads(done.read_text())
        if info["early_stopped"] or (info["epochs"] >= max_epochs and info["max_minutes"] == max_minutes):
            # (files written before the cap was recorded: a run that ran out ended at it)
            budget = {"max_minutes_per_run": info["max_minutes"], "max_epochs": info.get("max_epochs", info["epochs"])}
            return keras.saving.load_model(saved, safe_mode=True), info["info"], budget
    model, info = train(splits, name, max_epochs=max_epochs, max_minutes=max_minutes,
                        backup_dir=None if name == "gaussian" else run_dir / "backup", **kwargs)
    if name != "gaussian":
        # The backup stays: a later call with a larger epoch cap continues from it.
        model.save(saved)
        write_atomically(done, json.dumps({"early_stopped": info["early_stopped"], "epochs": info["epochs"],
                                           "max_minutes": max_minutes, "max_epochs": max_epochs, "info": info},
                                          indent=2) + "\n")
    return model, info, {"max_minutes_per_run": max_minutes, "max_epochs": max_epochs}


def _write_row(results_dir, stem, dataset, conditional, row):
    """Puts ``row`` in the results file in place of that model's earlier row, if any."""
    out = Path(results_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{stem}.json"
    earlier = json.loads(path.read_text()) if path.exists() else {"rows": []}
    rows = [{"budget": earlier.get("budget"), **r} for r in earlier["rows"]]  # older files: one budget
    rows = [r for r in rows if _row_key(r) != _row_key(row)] + [row]
    order = {name: i for i, name in enumerate(TABLE_MODELS)}
    rows.sort(key=lambda r: (order.get(r["model"], len(order)), _row_key(r)[1] or 0, _row_key(r)[2]))
    result = {
        "dataset": dataset, "conditional": conditional,
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine()},
        "wall_time_s": round(sum(r["wall_time_s"] for r in rows), 1), "rows": rows,
    }
    from keras_models.callbacks import write_atomically

    write_atomically(path, json.dumps(result, indent=2) + "\n")  # a kill mid-write leaves the last file whole
    (out / f"{stem}.md").write_text(markdown_table(result))


def _fmt(value, two_se):
    digits = 3 if abs(value) < 100 else 1
    return f"{value:.{digits}f} +- {two_se:.{digits}f}"


def _stop_reason(row, budget) -> str:
    if row.get("closed_form"):
        return "closed form"
    if row["early_stopped"]:
        return "yes"
    if budget.get("max_minutes_per_run") and row["epochs"] < budget["max_epochs"]:
        return f"**no (budget: {budget['max_minutes_per_run']:g} min)**"
    return f"**no (cap: {budget['max_epochs']} epochs)**"


def markdown_table(result: dict) -> str:
    """Our test log-likelihood beside the paper's, with each row's budget and
    whether early stopping was reached."""
    from keras_models import presets

    title = result["dataset"] + (" (conditional)" if result["conditional"] else "")
    lines = [
        f"## {title}",
        "",
        f"Total training time {result['wall_time_s']:.0f} s, on {result['machine']['processor']}.",
        "",
        "| model | hidden units | test log-likelihood (ours) | paper | ours - paper | within error bars (or better) | "
        "bits per pixel | epochs | early stopping reached | training time (s) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        budget = row["budget"]
        paper = row.get("paper")
        paper_text = "-" if paper is None else (
            f"{paper['log_likelihood']} (exact)" if paper["error_bar"] == 0
            else _fmt(paper["log_likelihood"], paper["error_bar"]))
        gap = "-" if paper is None else f"{row['test_log_likelihood'] - paper['log_likelihood']:+.3f}"
        within = "-" if paper is None else ("yes" if row["within_paper_error_bars"] else (
            "better" if row["test_log_likelihood"] > paper["log_likelihood"] else "no"))
        bpp = _fmt(row["test_bits_per_pixel"], row["test_bits_per_pixel_2se"]) if "test_bits_per_pixel" in row else "-"
        label = row["model"] if row.get("paper_step_size", True) else (
            f"{row['model']} (step size {row['learning_rate']:g}, not the paper's)")
        if row.get("protocol", "paper") != "paper":
            label += f" ({presets.PROTOCOL_LABELS[row['protocol']].removeprefix('the ')})"
        lines.append(
            f"| {label} | {row['hidden_units'] or '-'} | "
            f"{_fmt(row['test_log_likelihood'], row['test_log_likelihood_2se'])} | {paper_text} | {gap} | {within} | "
            f"{bpp} | {row['epochs']} | {_stop_reason(row, budget)} | {row['wall_time_s']:.0f} |"
        )
    lines += ["", "Error bars are 2 standard errors of the mean test log-likelihood, as in the paper.",
              "A row whose early stopping was not reached stopped on its budget or epoch cap: its",
              "number is a lower bound on what the paper's protocol would reach.", ""]
    return "\n".join(lines)
