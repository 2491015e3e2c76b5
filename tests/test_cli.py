"""The ``bayesnet`` command line: every bad input or fault gets an exit code and a one-line message before any
sampling (or, for a fit that stops early, a saved partial model); the MLP, CNN and RNN run end to end."""

import csv
import os
import re
import signal
import warnings

import joblib
import numpy as np
import torch
import pytest

import bayesnet
from bayesnet import BayesianMLPClassifier
from bayesnet import cli
import bayesnet.cli.commands  # noqa: F401  (cli.commands)
from bayesnet.cli import build_parser, main
from bayesnet.datasets import load_sunspots
from test_io import _flip_a_bit, _tamper  # a copy of a model file with its specification, tensors or header
# edited; one such edit, a flipped bit in a weight

TINY = ["--n-draws", "5", "--burn-in", "50", "--thinning", "1", "--quiet"]


def _write(path, header, rows):
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return str(path)


def _data(n=60, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3)).round(4)
    return X, np.where(X[:, 0] + X[:, 1] > 0, "yes", "no"), (2 * X[:, 0] - X[:, 2]).round(4)


@pytest.fixture
def good_csv(tmp_path):
    X, labels, _ = _data()
    return _write(tmp_path / "good.csv", ["a", "b", "c", "label"], [[*r, t] for r, t in zip(X, labels)])


@pytest.fixture
def fitted(tmp_path, good_csv):
    """A small fitted classifier's model file, and the CSV it was fitted on."""
    model = str(tmp_path / "m.bayesnet")
    assert main(["fit", "--data", good_csv, "--target", "label", *TINY, "--hidden", "4", "--output", model]) == 0
    return model, good_csv


# ---------------------------------------------------------------------- #
# bad files and data: `error: ...` on one line, exit code 2, no fit started
# ---------------------------------------------------------------------- #
def _rows(kind):
    """(header, rows) of the good classification data with one defect."""
    X, labels, targets = _data()
    header, rows = ["a", "b", "c", "label"], [[*map(str, r), t] for r, t in zip(X, labels)]
    if kind == "duplicate":
        header = ["a", "b", "a", "label"]
    elif kind == "empty_target":
        rows[4][3] = rows[9][3] = ""
    elif kind == "nan_target":
        header, rows = ["a", "b", "c", "y"], [[*map(str, r), str(t)] for r, t in zip(X, targets)]
        rows[26][3] = "nan"  # a test-split row (random_state=0): was "test RMSE nan", exit code 0
    elif kind == "inf_target":  # (a helper's user test: was told to use --task classification for class labels)
        header, rows = ["a", "b", "c", "y"], [[*map(str, r), str(t)] for r, t in zip(X, targets)]
        rows[3][3] = "-inf"
    elif kind == "nan_feature":
        rows[6][1] = "nan"
    elif kind == "text_feature":
        rows[6][1] = "abc"
    elif kind == "inf_feature":
        rows[10][2] = "inf"
    elif kind == "ragged_long":
        rows[7].append("9.9")
    elif kind == "ragged_short":
        rows[7] = rows[7][:2]
    elif kind == "single_class":
        rows = [[*r[:3], "yes"] for r in rows]
    elif kind == "lonely_class":
        rows[0][3] = "maybe"
    elif kind == "target_only":
        header, rows = ["label"], [[r[3]] for r in rows]
    elif kind == "unnamed_column":
        header = ["", "b", "c", "label"]
    elif kind == "semicolons":
        header, rows = [";".join(header)], [[";".join(r)] for r in rows]
    return header, rows


DATA_CASES = [
    # id, defect, extra options, message
    ("duplicate column names", "duplicate", [], r"duplicate column names: 'a' \(columns 1, 3\)"),
    ("empty target cells", "empty_target", [], r"target column 'label' .* is missing in 2 of 60 rows, the first on "
                                                r"line 6 \(an empty cell\)"),
    ("NaN target in the test split", "nan_target", ["--target", "y", "--task", "regression"],
     r"target column 'y' .* is missing in 1 of 60 rows, the first on line 28 \('nan'\)"),
    ("inf target with --task regression", "inf_target", ["--target", "y", "--task", "regression"],
     r"--task regression needs finite target values, but column 'y' holds '-inf' on line 5 \(1 such rows\); fill "
     r"or drop those rows\.$"),
    ("'nan' in a feature cell", "nan_feature", [], r"feature column 'b' .* 1 missing, non-numeric or infinite "
                                                   r"value\(s\), the first on line 8: 'nan'"),
    ("text in a feature cell", "text_feature", [], r"feature column 'b' .* the first on line 8: 'abc'"),
    ("inf in a feature cell", "inf_feature", [], r"feature column 'c' .* the first on line 12: 'inf'"),
    ("ragged row, extra field", "ragged_long", [], r"line 9 has 5 fields but the header has 4 \(ragged rows\)"),
    ("ragged row, missing field", "ragged_short", [], r"line 9 has 2 fields but the header has 4 \(ragged rows\)"),
    ("string target with --task regression", None, ["--task", "regression"],
     r"--task regression needs a numeric target, but column 'label' holds 'no' on line 2 \(60 such rows\)"),
    ("single-class target", "single_class", [], r"has a single class, 'yes'; classification needs at least two"),
    ("class with a single row", "lonely_class", [], r"1 class\(es\) have a single row \('maybe'\)"),
    ("no feature columns", "target_only", [], r"has no feature columns besides the target 'label'"),
    ("unnamed column", "unnamed_column", [], r"column\(s\) \[1\] have no name in the header row"),
    ("missing target column", None, ["--target", "lbl"], r"column 'lbl' is not in .* \(did you mean 'label'\?\)"),
    ("semicolon-separated file", "semicolons", [], r"the header reads as one column: is the file separated by ';'"),
]


@pytest.mark.parametrize("defect, extra, message", [c[1:] for c in DATA_CASES], ids=[c[0] for c in DATA_CASES])
def test_bad_data_is_refused_before_the_fit(tmp_path, capsys, defect, extra, message):
    header, rows = _rows(defect)
    path = _write(tmp_path / "d.csv", header, rows)
    args = ["fit", "--data", path, "--target", "label", *TINY, "--output", str(tmp_path / "m.bayesnet")]
    assert main(args + extra) == 2
    out, err = capsys.readouterr()
    assert re.search(r"^error: .*" + message, err), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "bayesnet:" not in out  # refused before the fit began
    assert not os.path.exists(tmp_path / "m.bayesnet")


@pytest.mark.parametrize("content, message", [
    (None, r"--data: file '.*nope\.csv' not found"),
    ("", r"is empty"),
    ("a,b,label\n", r"has a header row but no data rows"),
    ("a,b,label\n\n\n", r"has a header row but no data rows"),
], ids=["missing file", "empty file", "header only", "header and blank lines"])
def test_missing_or_empty_files(tmp_path, capsys, content, message):
    path = tmp_path / "nope.csv"
    if content is not None:
        path.write_text(content)
    assert main(["fit", "--data", str(path), "--target", "label", *TINY]) == 2
    assert re.search(r"^error: .*" + message, capsys.readouterr().err)


def test_an_empty_row_inside_the_data_is_missing_values_not_a_blank_line(tmp_path, capsys):
    """A helper's user test: pandas writes NaN in a one-column CSV as an empty line, which was dropped as a blank
    one: the forecast stitched the series across the gap (295 windows from 299 values, exit 0) and predict
    numbered every later row one too low. A row of empty cells inside the data is refused with its line; blank
    lines at the end are still passed over."""
    series = np.sin(np.arange(300) / 5).astype(object)
    series[50] = ""
    path = _write(tmp_path / "s.csv", ["value"], [[v] for v in series])
    assert main(["fit", "--data", path, "--target", "value", "--task", "forecast", *TINY]) == 2
    err = capsys.readouterr().err
    assert "target column 'value'" in err and "missing in 1 of 300 rows, the first on line 52 (an empty cell)" in err
    assert "a time series' gaps: fill them" in err
    table = tmp_path / "t.csv"
    table.write_text("a,b,label\n" + "".join(f"{i},{i % 3},{i % 2}\n" for i in range(20)) + ",,\n"
                     + "".join(f"{i},{i % 3},{i % 2}\n" for i in range(20)) + "\n\n")
    assert main(["fit", "--data", str(table), "--target", "label", *TINY]) == 2
    assert "missing in 1 of 41 rows, the first on line 22" in capsys.readouterr().err
    from bayesnet.cli.data import read_csv

    table.write_text("a,b,label\n1,2,0\n3,4,1\n\n\n")
    assert read_csv(str(table))[1].shape == (2, 3)


def test_forecast_series_too_short(tmp_path, capsys):
    path = _write(tmp_path / "s.csv", ["value"], [[v] for v in np.sin(np.arange(12))])
    assert main(["fit", "--data", path, "--target", "value", "--task", "forecast", "--dimension", "20", *TINY]) == 2
    assert "too few for --dimension 20 x --delay 1 = 20 lags" in capsys.readouterr().err


@pytest.mark.parametrize("options, words", [
    (["--input-shape", "1,2,2"], "--input-shape 1,2,2"),
    # (before: the estimator's words, "X has 3 features, which input_shape=(1, 2, 2) cannot hold")
    (["--set", "input_shape=(1,2,2)"], "--set input_shape=1,2,2"),
    (["--set", "input_shape=(1,2.0,2)"], "--set input_shape=1,2,2"),  # (the estimator takes 2.0 for 2)
])
def test_input_shape_must_hold_the_feature_columns(tmp_path, capsys, good_csv, options, words):
    assert main(["fit", "--data", good_csv, "--target", "label", "--model", "cnn", *options, *TINY]) == 2
    assert f"error: {words} holds 4 values per row, but the data has 3 feature columns" in \
        capsys.readouterr().err


def test_output_folder_is_checked_before_the_fit(tmp_path, capsys, good_csv):
    assert main(["fit", "--data", good_csv, "--target", "label", *TINY,
                 "--output", str(tmp_path / "no" / "m.bayesnet")]) == 2
    out, err = capsys.readouterr()
    assert "does not exist" in err and "bayesnet:" not in out


def test_an_output_that_is_an_input_is_refused(tmp_path, capsys, fitted):
    """Before, each of these exited 0 and replaced its input: the data became a model file, the model a CSV
    (found by a user-test helper). '-' is standard output for predict."""
    model, data = fitted
    before = {p: open(p, "rb").read() for p in (model, data)}
    assert main(["fit", "--data", data, "--target", "label", *TINY, "--output", data]) == 2
    assert "--output: " in (err := capsys.readouterr().err) and "is the --data file" in err
    for argv, name in ((["predict", model, "--data", data, "--output", model], "MODEL"),
                       (["predict", model, "--data", data, "--output", data], "--data")):
        assert main(argv) == 2
        assert f"is the {name} file; writing it would replace the input" in capsys.readouterr().err
    assert all(open(p, "rb").read() == content for p, content in before.items())
    assert main(["predict", model, "--data", data, "--output", "-"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("row,") and not (tmp_path / "-").exists()


def test_labels_that_spell_one_number_two_ways_warn(tmp_path, capsys):
    """'1' and '1.0' are two classes to the classifier (labels are text); before, silently (a user-test find).
    Two rows of 0 and 1 are not called continuous."""
    X, _, _ = _data()
    labels = ["1" if i % 4 == 0 else "1.0" if i % 4 == 1 else "0" for i in range(len(X))]
    path = _write(tmp_path / "t.csv", ["a", "b", "c", "y"], [[*r, t] for r, t in zip(X, labels)])
    assert main(["fit", "--data", path, "--target", "y", *TINY, "--output", ""]) == 0
    assert "warning: target column 'y' in" in (err := capsys.readouterr().err) and "('1', '1.0')" in err
    tiny = _write(tmp_path / "two.csv", ["a", "y"], [[0.1, 0], [0.2, 1]])
    assert main(["fit", "--data", tiny, "--target", "y", *TINY]) == 2
    err = capsys.readouterr().err
    assert "single row" in err and "continuous" not in err


def test_a_whole_number_measurement_given_as_classes_is_called_continuous(tmp_path, capsys):
    """diabetes' target (whole numbers, 214 values in 442 rows, 84 of them once) without --task: the error named
    the single-row classes and said to drop or merge them, without the hint to use --task regression that a
    target with fractions gets (a user-test find); classes with one rare label still get no such hint."""
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    path = _write(tmp_path / "d.csv", ["a", "b", "y"], [[*r[:2], float(t)] for r, t in zip(X, y)])
    assert main(["fit", "--data", path, "--target", "y", *TINY, "--output", ""]) == 2
    err = capsys.readouterr().err
    assert "single row" in err and "looks continuous: use --task regression" in err
    labels = [str(i % 3) for i in range(60)] + ["7"]
    rare = _write(tmp_path / "r.csv", ["a", "y"], [[0.01 * i, t] for i, t in enumerate(labels)])
    assert main(["fit", "--data", rare, "--target", "y", *TINY, "--output", ""]) == 2
    err = capsys.readouterr().err
    assert "single row" in err and "continuous" not in err


def test_a_fit_that_max_epochs_cut_short_is_an_error_or_a_partial_model(tmp_path, capsys, good_csv):
    """Before: a fit that kept no draw (max_epochs shorter than the burn-in) ended in a traceback, and one that
    kept some was saved as a complete model."""
    model = str(tmp_path / "m.bayesnet")
    argv = ["fit", "--data", good_csv, "--target", "label", "--n-draws", "5", "--burn-in", "50", "--thinning", "2",
            "--batch-size", "64", "--quiet", "--output", model]  # 42 training rows: one step per epoch
    assert main([*argv, "--set", "max_epochs=10"]) == 2
    err = capsys.readouterr().err  # (the CLI prints the ConvergenceWarning as a "warning:" line)
    assert "warning: 0 of n_draws=5 draws were kept" in err
    assert "error: no posterior draw was kept in 10 sampler steps" in err and "raise or drop --set max_epochs" in err
    assert not os.path.exists(model)
    assert main([*argv, "--set", "max_epochs=54"]) == 0  # 50 + 2 draws of the 5 asked for
    assert "warning: 2 of n_draws=5 draws were kept" in capsys.readouterr().err
    assert main(["predict", model, "--data", good_csv]) == 0
    assert "is a partial fit (short: 2 of 5 draws per chain" in capsys.readouterr().err
    assert main([*argv, "--n-chains", "2", "--set", "max_epochs=54"]) == 0  # per chain, not the chains' total
    capsys.readouterr()
    assert main(["predict", model, "--data", good_csv]) == 0
    assert "is a partial fit (short: 2 of 5 draws per chain" in capsys.readouterr().err


def test_the_fit_line_says_when_the_automatic_thinning_doubled(capsys, good_csv, monkeypatch):
    """A run that thinning="auto" lengthened (forced here: every check fails) names the planned spacing."""
    from bayesnet.estimators import run as run_module

    monkeypatch.setattr(run_module, "unmixed", lambda net, conv: True)
    assert main(["fit", "--data", good_csv, "--target", "label", "--n-draws", "10", "--burn-in", "50", "--quiet",
                 "--output", ""]) == 0
    assert "thinning 40 (doubled twice from 10, as the draws had not mixed), 450 sampler steps" in capsys.readouterr().out


def test_set_reaches_the_documented_parameters_taken_through_keywords(tmp_path, capsys, good_csv):
    """Before: ``--set compile=False`` was refused ("no parameter 'compile' that the command line can set"): the
    settable names were the constructor's named parameters, and ``compile`` comes through skorch's keywords."""
    model = str(tmp_path / "m.bayesnet")
    assert main(["fit", "--data", good_csv, "--target", "label", *TINY, "--set", "compile=False",
                 "--output", model]) == 0
    capsys.readouterr()
    loaded = bayesnet.load(model)  # (the command line's model: a pipeline ending in the estimator, or the estimator)
    assert (loaded[-1] if hasattr(loaded, "steps") else loaded).get_params()["compile"] is False
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--data", good_csv, "--target", "label", *TINY, "--set", "compile='sometimes'"])
    assert exit_info.value.code == 2
    assert "--set compile must be" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["(0,)", "(10,None)"])
def test_bad_network_setting_found_when_the_network_is_built(tmp_path, capsys, good_csv, value):
    """A size inside the tuple is checked when the network is built, still before the first step."""
    assert main(["fit", "--data", good_csv, "--target", "label", *TINY, "--set", f"hidden_layer_sizes={value}",
                 "--output", ""]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --set hidden_layer_sizes: hidden_layer_sizes must be positive integers")


@pytest.mark.parametrize("model, setting, words", [
    ("mlp", "hidden_layer_sizes=10.5", "--set hidden_layer_sizes must be an array-like or an int in the range"),
    ("mlp", "hidden_layer_sizes=abc", "--set hidden_layer_sizes must be an array-like or an int in the range"),
    ("mlp", "activation=foo", "--set activation must be a str among"),
    ("rnn", "cell=foo", "--set cell must be a str among"),
    ("rnn", "hidden_size=0", "--set hidden_size must be an int in the range [1, inf)"),
    ("cnn", "kernel_size=0", "--set kernel_size must be an int in the range [1, inf)"),
])
def test_architecture_settings_are_checked_before_the_data_are_read(capsys, model, setting, words):
    """The architecture's settings are in the estimators' parameter constraints, so the command line refuses them
    with its other option errors, before reading a file that does not exist. (Before: the data were read and the
    error came when the network was built; 10.5 once gave "'float' object is not iterable", abc "invalid literal
    for int()".)"""
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--data", "no-such-file.csv", "--target", "label", "--model", model, "--set", setting])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert words in err and "no-such-file" not in err


# ---------------------------------------------------------------------- #
# bad options: argparse's usage and `bayesnet fit: error: ...`, exit code 2
# ---------------------------------------------------------------------- #
OPTION_CASES = [
    (["--level", "1.5"], "argument --level: must be strictly between 0 and 1, got 1.5"),
    (["--level", "0"], "argument --level: must be strictly between 0 and 1, got 0"),
    (["--test-size", "1.5"], "argument --test-size: must be strictly between 0 and 1"),
    (["--n-draws", "0"], "argument --n-draws: must be an integer >= 1, got 0"),
    (["--burn-in", "-1"], "argument --burn-in: must be an integer >= 0, got -1"),
    (["--burn-in", "soon"], "argument --burn-in: expected a non-negative integer or auto, got 'soon'"),
    (["--thinning", "0"], "argument --thinning: expected a positive integer or auto"),
    (["--batch-size", "0"], "argument --batch-size: expected a positive integer or auto, full"),
    (["--hidden", "0"], "argument --hidden: must be an integer >= 1, got 0"),
    (["--n-chains", "0"], "argument --n-chains: must be an integer >= 1"),
    (["--n-jobs", "0"], "argument --n-jobs: must be a positive number of workers"),
    (["--step-size", "-1"], "argument --step-size: must be > 0, got -1"),
    (["--step-size", "nan"], "argument --step-size: expected a finite number, got 'nan'"),
    (["--device", "foo"], "argument --device: expected cpu, cuda, cuda:N, mps or auto"),
    (["--random-state", "-1"], "argument --random-state: must be an integer in [0, 4294967295]"),
    (["--sampler", "nuts"], "argument --sampler: invalid choice: 'nuts'"),
    (["--model", "transformer"], "argument --model: invalid choice: 'transformer'"),
    (["--input-shape", "1,x"], "argument --input-shape: expected 2 or 3 positive integers"),
    (["--set", "prior_scale"], "argument --set: expected KEY=VALUE"),
    (["--sampler", "sgld", "--friction", "0.1"],
     "--friction: the sgld sampler has no hyperparameter 'friction'; its hyperparameters are "
     "adaptation_steps, preconditioner, step_size, temperature (set them with --set sampler__NAME=VALUE)"),
    (["--set", "step_size=1e-3"], "--set step_size: BayesianMLPClassifier has no parameter 'step_size' that the "
                                  "command line can set; step_size is a hyperparameter of the sghmc sampler: "
                                  "--set sampler__step_size=..."),
    (["--set", "prior_scal=0.5"], "did you mean --set prior_scale=...?"),
    (["--set", "lr=0.1"], "--set lr: BayesianMLPClassifier has no parameter 'lr' that the command line can set (its"),
    (["--set", "warm_start=True"], "warm_start is a setting of the Python estimator that the fit and predict "
                                   "commands do not take"),  # (before: "did you mean --set random_state=...?")
    (["--set", "sampler__frction=0.1"], "--set sampler__frction: the sghmc sampler has no hyperparameter 'frction'"),
    (["--set", "prior_scale=-1"], "--set prior_scale: prior scale must be a finite number > 0, got -1"),
    (["--set", "max_epochs=0"], "--set max_epochs must be an int in the range [1, inf) or None. Got 0 instead."),
    (["--set", "sampler__friction=-1"],  # (once: the library's message names the option already)
     "error: --set sampler__friction must be a float in the range (0.0, 1.0]. Got -1 instead."),
    (["--sampler", "sghmc", "--friction", "2"],
     "error: --friction must be a float in the range (0.0, 1.0]. Got 2.0 instead."),
    (["--set", "n_jobs=0"], "--set n_jobs must be an int in the range (-inf, -1], an int in the range [1, inf)"),
    (["--set", "sampler=nuts"], "--set sampler=nuts: unknown sampler"),
    (["--step-size", "1e-4", "--set", "sampler__step_size=1e-3"], "--set sampler__step_size repeats --step-size"),
    (["--set", "prior_scale=1", "--set", "prior_scale=2"], "--set prior_scale was given twice"),
    (["--input-shape", "1,1,3"], "--input-shape applies to --model cnn or rnn"),
    (["--model", "rnn", "--input-shape", "1,1,3"], "--input-shape for the rnn is T,F"),
    (["--dimension", "3"], "--dimension and --delay apply to forecasting only"),
    (["--dataset", "sunspots"], "give either --data or --dataset, not both"),
]


@pytest.mark.parametrize("options, message", OPTION_CASES, ids=[" ".join(c[0]) for c in OPTION_CASES])
def test_bad_options_are_refused_by_argparse(capsys, good_csv, options, message):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--data", good_csv, "--target", "label", *TINY, *options])
    assert exit_info.value.code == 2
    out, err = capsys.readouterr()
    last = err.strip().splitlines()[-1]
    assert last.startswith("bayesnet fit: error: ") and message in last, err
    assert "Traceback" not in err and out == ""


@pytest.mark.parametrize("argv, message", [
    (["fit", "--target", "label"], "--target applies to --data"),
    (["fit", "--task", "regression"], "--task applies to --data"),
    (["fit", "--data", "x.csv"], "--target is required with --data"),
    (["predict", "m.bayesnet", "--data", "x.csv", "--level", "2"], "argument --level: must be strictly between 0 and 1"),
    (["predict", "m.bayesnet"], "the following arguments are required: --data"),
])
def test_option_combinations(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_cuda_or_mps_without_them_is_refused_before_reading(capsys, good_csv, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    for device, kind in (("cuda", "CUDA"), ("mps", "MPS")):  # (mps: a traceback from torch before)
        with pytest.raises(SystemExit):
            main(["fit", "--data", good_csv, "--target", "label", *TINY, "--device", device])
        assert f"--device {device}: {kind} is not available on this machine" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # not a device at all: said so, not "CUDA is not available"
        main(["fit", "--data", good_csv, "--target", "label", *TINY, "--set", "device=xpu"])
    assert "--set device: device must be 'cpu', 'cuda', 'cuda:N', 'mps' or 'auto', got 'xpu'" in capsys.readouterr().err


def test_step_size_auto_and_the_warnings_in_command_line_words(tmp_path, capsys, good_csv):
    """--step-size auto, as the help's default and the guide say (refused as not a number before), and the
    library's warnings in the command's spelling (before: "burn_in (now ...", "n_draws or thinning")."""
    assert main(["fit", "--data", good_csv, "--target", "label", "--n-draws", "5", "--burn-in", "20", "--hidden",
                 "4", "--step-size", "auto", "--output", ""]) == 0
    err = capsys.readouterr().err
    assert "warning: " in err and "--burn-in (now 20 steps)" in err and "burn_in (now" not in err
    assert "n_draws" not in err and "thinning (now" not in err
    assert "too few to check convergence" in err and "Increase --n-draws (now 5)" in err  # (5 draws: unchecked)


def test_a_model_or_predictions_that_cannot_be_written_exit_1(tmp_path, capsys, fitted, good_csv, monkeypatch):
    """A write that fails after the checks (here: the disk refuses it) is one line and exit code 1 (before:
    safetensors' error and pandas' OSError went out as tracebacks), and leaves no partial file."""
    import builtins

    model, data = fitted
    real_open = builtins.open

    def full_disk(path, mode="r", *args, **kwargs):
        if "w" in str(mode) and str(path).startswith(str(tmp_path / "out")):
            raise OSError(28, "No space left on device")
        return real_open(path, mode, *args, **kwargs)

    capsys.readouterr()
    (tmp_path / "out.csv").write_text("precious")  # an existing file: left as it was (the review's case)
    monkeypatch.setattr(builtins, "open", full_disk)
    assert main(["predict", model, "--data", data, "--output", str(tmp_path / "out.csv")]) == 1
    err = capsys.readouterr().err
    assert err == f"error: cannot write the predictions to {tmp_path / 'out.csv'}: No space left on device.\n"
    monkeypatch.setattr(builtins, "open", real_open)
    assert (tmp_path / "out.csv").read_text() == "precious"
    (tmp_path / "out.csv").unlink()
    monkeypatch.setattr(builtins, "open", full_disk)
    assert main(["fit", "--data", good_csv, "--target", "label", *TINY, "--hidden", "4", "--output",
                 str(tmp_path / "out.bayesnet")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: cannot write the model to ") and "Traceback" not in "".join(err)
    assert not list(tmp_path.glob("out*"))


def test_help_shows_a_default_for_every_option(capsys):
    subcommands = build_parser()._subparsers._group_actions[0].choices
    for name, sub in subcommands.items():
        formatter = sub._get_formatter()
        for action in sub._actions:
            if action.option_strings and action.dest != "help":
                assert action.help, f"{name} {action.option_strings[0]} has no help"
                assert "default" in formatter._expand_help(action), f"{name} {action.option_strings[0]}"
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert exit_info.value.code == 0
    for shown in ("(default: 0.3)", "(default: breast_cancer)", "(default: sghmc)",
                  "(default: auto)", "(default: mlp)", "(default: bayesnet-model.bayesnet)",
                  "(default: 0.95)"):
        assert shown in out, shown


# ---------------------------------------------------------------------- #
# model files
# ---------------------------------------------------------------------- #
@pytest.mark.parametrize("compress", [0, "zlib", "gzip", "bz2", "xz", "lzma"])
def test_every_joblib_compressor_is_recognised_as_a_pickle(tmp_path, capsys, good_csv, compress):
    """A joblib file is refused as a pickle (the --allow-pickle message), whichever compressor wrote it; before,
    joblib's "lzma" output (the .lzma format, not .xz) was called 'not a bayesnet model file'."""
    path = tmp_path / "old.joblib"
    joblib.dump({"model": None, "meta": {}}, path, compress=(compress, 3) if compress else 0)
    assert main(["predict", str(path), "--data", good_csv]) == 2
    assert "is a joblib (pickle) file" in capsys.readouterr().err


def test_predict_refuses_a_pickle_without_allow_pickle_and_runs_no_code(tmp_path, capsys, good_csv):
    """fit writes bayesnet's own format, which holds no code; a pickle (an earlier version's file, or anyone's)
    is read only with --allow-pickle."""
    marker = tmp_path / "payload-ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    evil = tmp_path / "evil.joblib"
    joblib.dump({"model": Payload(), "meta": {}}, evil)
    assert main(["predict", str(evil), "--data", good_csv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "loading a pickle can execute arbitrary code" in err
    assert "--allow-pickle" in err and "trust" in err
    assert not marker.exists()
    # with the flag the user takes responsibility; a pickle that is no bayesnet model is still refused
    assert main(["predict", str(evil), "--data", good_csv, "--allow-pickle"]) == 2
    assert "not a bayesnet model file" in capsys.readouterr().err


def test_a_trusted_pickle_s_metadata_is_checked_as_a_model_file_s(tmp_path, capsys, fitted):
    """(Before: a pickle bundle skipped the metadata checks: no feature names gave a KeyError traceback.)"""
    model, data = fitted
    pipeline, meta = bayesnet.load(model, return_metadata=True)
    bundle = tmp_path / "old.joblib"
    joblib.dump({"model": pipeline, "meta": {k: v for k, v in meta.items() if k != "features"}}, bundle)
    capsys.readouterr()
    assert main(["predict", str(bundle), "--data", data, "--allow-pickle"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "malformed bayesnet model file" in err and "Traceback" not in err
    joblib.dump({"model": pipeline, "meta": meta}, bundle)
    assert main(["predict", str(bundle), "--data", data, "--allow-pickle"]) == 0


def test_predict_reads_a_model_whose_header_length_spells_a_pickle_magic(tmp_path, capsys, fitted):
    """Before: a model file is safetensors, whose first 8 bytes are its header's length; a header of 24,184 bytes
    starts ``x^`` (zlib's magic), and predict refused such a file written by fit as "a joblib (pickle) file". The
    header's size follows the feature names, so wide data sets met it."""
    model, data = fitted
    capsys.readouterr()
    target = 24184  # b"x^" little-endian
    path = tmp_path / "wide.bayesnet"

    def header_length(pad: int) -> int:
        _tamper(model, path, header_edit=lambda header: header.__setitem__("pad", " " * pad))
        return int.from_bytes(path.read_bytes()[:8], "little")

    start = target - header_length(0) - 16  # (each space adds a byte; the header is padded to 8 bytes)
    for pad in range(start, start + 32):
        if (length := header_length(pad)) >= target:
            break
    assert length == target and path.read_bytes()[:2] == b"x^"
    assert main(["predict", str(path), "--data", data]) == 0
    wide = capsys.readouterr().out
    assert main(["predict", model, "--data", data]) == 0
    assert capsys.readouterr().out == wide


@pytest.mark.parametrize("key,value,message", [
    ("features", ["a", "b"], "feature names ['a', 'b'] are not 3 distinct column names"),
    ("features", 5, "feature names 5 are not"),
    ("features", ["a", "c", "b"], "feature names ['a', 'c', 'b'] are not the ones the model was fitted on"),
    ("target", 5, "target 5 is not a column name"),
    ("partial", "short\x1b[2J", "partial-fit note is not printable text"),
    ("task", "regression", "task 'regression' is not the model's (BayesianMLPClassifier)"),
])
def test_predict_refuses_metadata_it_cannot_use(tmp_path, capsys, fitted, key, value, message):
    """Before: a model file's metadata was read as given: the wrong number of feature names made predict read
    other columns than the model was fitted on, a number in their place a traceback, and the partial-fit note
    went to the terminal with its escape sequences."""
    def edit(spec):
        meta = dict(spec["metadata"]["__dict__"])
        meta[key] = value
        spec["metadata"] = {"__dict__": [[k, v] for k, v in meta.items()]}

    model, data = fitted
    crafted = _tamper(model, tmp_path / "crafted.bayesnet", edit)
    capsys.readouterr()
    assert main(["predict", str(crafted), "--data", data]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "malformed bayesnet model file" in err and message in err


def test_a_saved_model_takes_a_dataframe_in_python_and_checks_its_column_names(tmp_path, fitted):
    """Before: the command fitted on arrays, so the model it saved warned "X has feature names, but
    StandardScaler was fitted without feature names" on a DataFrame, and read columns by position whatever
    their names. Now it is fitted with the CSV's column names."""
    import pandas as pd

    from bayesnet.io import load

    path, data = fitted
    model = load(path)
    assert list(model.feature_names_in_) == ["a", "b", "c"]
    frame = pd.read_csv(data)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        proba = model.predict_proba(frame[["a", "b", "c"]])
    assert proba.shape == (len(frame), 2) and np.isfinite(proba).all()
    with pytest.raises(ValueError, match="feature names"):
        model.predict_proba(frame[["a", "c", "b"]])


def test_the_bundled_data_s_model_takes_its_dataframe(tmp_path):
    """The bundled breast-cancer data's column names are numpy strings, which scikit-learn does not take for
    names: the model was fitted without them (the warning above) until they were made str."""
    from sklearn.datasets import load_breast_cancer

    from bayesnet.io import load

    path = str(tmp_path / "bc.bayesnet")
    assert main(["fit", *TINY, "--hidden", "4", "--output", path]) == 0
    frame = load_breast_cancer(as_frame=True).data
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load(path).predict(frame.iloc[:5]).shape == (5,)


def test_predict_names_a_damaged_or_newer_model_file_as_such(tmp_path, capsys, fitted):
    """A model file that fails its checksum, or comes from a newer version, is a bayesnet model file with a
    problem, not 'not a bayesnet model file' (the CLI chose between the two by the error's text before)."""
    model, data = fitted
    cases = {"damaged bayesnet model file": dict(tensor_edit=_flip_a_bit, checksum=False),
             "written by a newer bayesnet": dict(header_edit=lambda h: h.__setitem__("version", "99"))}
    for message, edit in cases.items():
        path = _tamper(model, tmp_path / "m.bayesnet", **edit)
        capsys.readouterr()
        assert main(["predict", str(path), "--data", data]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and "not a bayesnet model file" not in err
    cut = tmp_path / "cut.bayesnet"  # cut short in a transfer
    cut.write_bytes(open(model, "rb").read()[:-64])
    assert main(["predict", str(cut), "--data", data]) == 2
    err = capsys.readouterr().err
    assert "damaged bayesnet model file" in err and "not a bayesnet model file" not in err
    assert err.count(str(cut)) == 1  # (before: the path twice, the CLI's and io's)


def test_predict_on_a_model_file_it_cannot_read(tmp_path, capsys, fitted, monkeypatch):
    """An unreadable model file (permissions, a disk error) is a one-line error with exit 2 (before: a
    PermissionError traceback, exit 1)."""
    import bayesnet.cli.commands as commands

    def unreadable(*args, **kwargs):
        raise PermissionError(13, "Permission denied", args[0])

    model, data = fitted
    monkeypatch.setattr(commands, "open", unreadable, raising=False)
    capsys.readouterr()
    assert main(["predict", model, "--data", data]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot read the model file") and "Permission denied" in err


@pytest.mark.parametrize("content", [b"a,b,c\n1,2,3\n", b"", b"\x00\x01garbage"], ids=["csv", "empty", "binary"])
def test_predict_on_a_file_that_is_not_a_model(tmp_path, capsys, good_csv, content):
    path = tmp_path / "not-a-model.joblib"
    path.write_bytes(content)
    assert main(["predict", str(path), "--data", good_csv]) == 2
    assert "is not a bayesnet model file" in capsys.readouterr().err


def test_predict_missing_files_and_bad_data(tmp_path, capsys, fitted):
    model, data = fitted
    assert main(["predict", str(tmp_path / "nope.bayesnet"), "--data", data]) == 2
    assert "model file '" in capsys.readouterr().err
    assert main(["predict", model, "--data", str(tmp_path / "nope.csv")]) == 2
    assert "--data: file '" in capsys.readouterr().err
    lacking = _write(tmp_path / "lacking.csv", ["a", "c"], [[1, 2]])
    assert main(["predict", model, "--data", lacking]) == 2
    assert "lacks the feature column(s) 'b'" in capsys.readouterr().err
    header, rows = _rows("nan_feature")
    bad = _write(tmp_path / "bad.csv", header, rows)
    assert main(["predict", model, "--data", bad]) == 2
    assert "feature column 'b'" in capsys.readouterr().err
    assert main(["predict", model, "--data", data, "--column", "a"]) == 2
    assert "--column applies to forecast models" in capsys.readouterr().err


def test_save_and_load_go_through_the_two_functions(tmp_path, fitted):
    model_path, _ = fitted
    with open(model_path, "rb") as fh:
        assert b"bayesnet-model" in fh.read(4096)  # safetensors with bayesnet's JSON header, not a pickle
    model, meta = cli.load_model(model_path)
    assert meta["features"] == ["a", "b", "c"] and meta["model"] == "mlp" and meta["partial"] is None
    copy = str(tmp_path / "copy.bayesnet")
    cli.save_model(copy, model, meta)
    assert cli.load_model(copy)[1] == meta and not list(tmp_path.glob("copy.bayesnet.tmp-*"))
    legacy = tmp_path / "legacy.joblib"  # an earlier version's joblib file: only with allow_pickle
    joblib.dump({"model": model, "meta": meta}, legacy)
    with pytest.raises(cli.commands.CLIError, match="--allow-pickle"):
        cli.load_model(str(legacy), allow_pickle=False)
    assert cli.load_model(str(legacy), allow_pickle=True)[1] == meta


# ---------------------------------------------------------------------- #
# fits that stop early: a partial model is saved and the exit code says so
# ---------------------------------------------------------------------- #
def test_divergence_saves_the_draws_as_a_partial_fit(tmp_path, capsys, good_csv, monkeypatch):
    step = BayesianMLPClassifier.train_step

    def failing_step(self, batch, **kw):  # a fault injected at step 30: the position becomes NaN
        out = step(self, batch, **kw)
        if out["step"] == 30:
            with torch.no_grad():
                self.sampler_state_.position[0].fill_(float("nan"))
        return out

    monkeypatch.setattr(BayesianMLPClassifier, "train_step", failing_step)
    model = str(tmp_path / "m.bayesnet")
    code = main(["fit", "--data", good_csv, "--target", "label", "--n-draws", "50", "--burn-in", "10",
                 "--thinning", "1", "--hidden", "4", "--quiet", "--step-size", "1e-4", "--output", model])
    assert code == 3
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not line.startswith("warning: ")]  # one line per warning
    err = "\n".join(lines)
    assert err.startswith("error: the fit diverged: the sghmc chain diverged at step")
    assert "(now --step-size 0.0001)" in err and "sampler__" not in err and "trace_" not in err
    assert f"were saved to {model} as a partial fit" in err and "Traceback" not in err
    saved, meta = cli.load_model(model)
    assert meta["partial"].startswith("diverged") and saved[-1].n_draws_kept_ > 0
    assert main(["predict", model, "--data", good_csv]) == 0
    out, err = capsys.readouterr()
    assert "is a partial fit (diverged" in err and len(out.strip().splitlines()) == 61


def test_divergence_before_any_draw_saves_nothing(tmp_path, capsys, good_csv):
    model = tmp_path / "m.bayesnet"
    code = main(["fit", "--data", good_csv, "--target", "label", "--n-draws", "5", "--burn-in", "50",
                 "--thinning", "1", "--hidden", "4", "--quiet", "--step-size", "10", "--output", str(model)])
    assert code == 3 and "nothing was saved" in capsys.readouterr().err and not model.exists()


def test_ctrl_c_saves_a_partial_fit_and_exits_130(tmp_path, capsys, good_csv, monkeypatch):
    step = BayesianMLPClassifier.train_step
    calls = []

    def interrupted_step(self, batch, **kw):  # a real SIGINT, as Ctrl-C sends, in the middle of sampling
        calls.append(1)
        if len(calls) == 30:
            os.kill(os.getpid(), signal.SIGINT)
        return step(self, batch, **kw)

    monkeypatch.setattr(BayesianMLPClassifier, "train_step", interrupted_step)
    before = signal.getsignal(signal.SIGINT)
    model = str(tmp_path / "m.bayesnet")
    code = main(["fit", "--data", good_csv, "--target", "label", "--n-draws", "50", "--burn-in", "10",
                 "--thinning", "1", "--hidden", "4", "--quiet", "--output", model])
    assert code == 130 and signal.getsignal(signal.SIGINT) is before
    out, err = capsys.readouterr()
    # the signal arrives in the 30th step, which the estimator completes before stopping: 30 steps, the last
    # 20 of them after burn-in, all kept
    assert "warning: the fit was interrupted at step 30 of 60 planned" in err  # the estimator's, one line
    # in the command line's words: a saved model cannot be continued (before: "partial_fit continues ...")
    assert "partial_fit" not in err and "run the command again to fit anew" in err
    # and tacthmc's shortfall advice (the reviewer's: "Run longer (partial_fit continues the chain)")
    from bayesnet.cli.models import _cli_words

    assert _cli_words("Run longer (partial_fit continues the chain), narrow it.") == "Run longer, narrow it."
    err = "\n".join(line for line in err.splitlines() if not line.startswith("warning: "))
    assert err.startswith("interrupted (Ctrl-C) after 30 sampler steps.") and "as a partial fit" in err
    assert "test accuracy" not in out
    saved, meta = cli.load_model(model)
    assert meta["partial"] == "interrupted after 30 sampler steps; 20 draws" and saved[-1].n_draws_kept_ == 20


def test_ctrl_c_outside_the_fit(capsys, good_csv, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli.commands, "_load_csv_for_fit", interrupted)
    assert main(["fit", "--data", good_csv, "--target", "label", *TINY]) == 130
    assert "interrupted" in capsys.readouterr().err


# ---------------------------------------------------------------------- #
# happy paths
# ---------------------------------------------------------------------- #
def test_cli_fit_and_predict_csv(tmp_path, capsys):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 3))
    y = np.where(X[:, 0] + X[:, 1] > 0, "yes", "no")
    path = _write(tmp_path / "d.csv", ["a", "b", "c", "label"], [[*row, lab] for row, lab in zip(X, y)])
    model = tmp_path / "m.bayesnet"
    assert main(["fit", "--data", path, "--target", "label", "--n-draws", "10", "--burn-in", "100",
                 "--thinning", "2", "--hidden", "8", "--n-chains", "2", "--quiet", "--output", str(model)]) == 0
    out = capsys.readouterr().out
    assert "test accuracy" in out and "expected calib. error" in out and "from 2 chains" in out
    preds = tmp_path / "p.csv"
    assert main(["predict", str(model), "--data", path, "--output", str(preds)]) == 0
    rows = list(csv.reader(open(preds)))
    assert rows[0][:3] == ["row", "prediction", "proba_no"] and len(rows) == 121
    assert {r[1] for r in rows[1:]} <= {"yes", "no"}


def test_cli_forecast_bundled_sunspots(tmp_path, capsys):
    model = tmp_path / "s.bayesnet"
    assert main(["fit", "--dataset", "sunspots", "--n-draws", "20", "--burn-in", "300", "--thinning", "2",
                 "--quiet", "--level", "0.999", "--output", str(model)]) == 0
    out = capsys.readouterr().out
    assert "test RMSE" in out and "99.9% interval coverage" in out  # (the label said 100% before)
    series = _write(tmp_path / "series.csv", ["spots"], [[v] for v in load_sunspots()[:30]])
    assert main(["predict", str(model), "--data", series]) == 2
    assert "name the CSV column holding the series with --column" in capsys.readouterr().err
    assert main(["predict", str(model), "--data", series, "--column", "spot"]) == 2
    # (before: "--target: ...", an option predict does not have)
    assert capsys.readouterr().err.startswith("error: --column: column 'spot' is not in")
    assert main(["predict", str(model), "--data", series, "--column", "spots"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "row,prediction,std,lower,upper" and len(lines) == 1 + 30 - 4 + 1


def test_cli_forecast_predict_names_the_fitted_column_when_it_is_absent(tmp_path, capsys):
    """A helper's user test: without --column, a CSV lacking the series column the model was fitted on was refused
    as "--column: column 'value' is not in ...", an option the user had not given."""
    model = tmp_path / "f.bayesnet"
    series = _write(tmp_path / "s.csv", ["value"], [[v] for v in np.sin(np.arange(80) / 5)])
    assert main(["fit", "--data", series, "--target", "value", "--task", "forecast", *TINY,
                 "--output", str(model)]) == 0
    other = _write(tmp_path / "o.csv", ["level"], [[v] for v in np.sin(np.arange(30) / 5)])
    capsys.readouterr()
    assert main(["predict", str(model), "--data", other]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the series column the model was fitted on (name another with --column): column "
                          "'value' is not in"), err
    assert main(["predict", str(model), "--data", other, "--column", "level"]) == 0


def test_cli_predict_uses_the_fitted_column_order(tmp_path):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(80, 2))
    y = X[:, 0] * 3.0
    train = tmp_path / "train.csv"
    _write(train, ["a", "b", "y"], [[*r, t] for r, t in zip(X, y)])
    with open(train, "a") as fh:
        fh.write("\n")  # a trailing blank line is ignored
    model = tmp_path / "m.bayesnet"
    assert main(["fit", "--data", str(train), "--target", "y", "--task", "regression", "--n-draws", "5",
                 "--burn-in", "50", "--thinning", "2", "--hidden", "4", "--quiet", "--output", str(model)]) == 0
    swapped = _write(tmp_path / "swapped.csv", ["b", "a"], [[r[1], r[0]] for r in X[:5]])
    out1, out2 = tmp_path / "p1.csv", tmp_path / "p2.csv"
    assert main(["predict", str(model), "--data", str(train), "--output", str(out1)]) == 0
    assert main(["predict", str(model), "--data", swapped, "--output", str(out2)]) == 0
    first, second = list(csv.reader(open(out1))), list(csv.reader(open(out2)))
    assert first[0] == second[0]
    # (80 rows and 5 in one pass: the matrix products may round differently, by the CPU's vector kernels; a wrong
    # column order would move the predictions far more)
    np.testing.assert_allclose(np.array(first[1:6], dtype=float), np.array(second[1:6], dtype=float), rtol=1e-5,
                               atol=1e-6)


def _image_csv(path, task, n=60, seed=2):
    """16 features read as a 1x4x4 image or 8 steps x 2 features; the label is the sign of the top-left pixel,
    the regression target a linear function of two pixels."""
    X = np.random.default_rng(seed).normal(size=(n, 16)).round(3)
    target = [("up" if r[0] > 0 else "down") if task == "classification" else round(2 * r[0] - r[5], 3) for r in X]
    return _write(path, [f"p{i}" for i in range(16)] + ["target"], [[*r, t] for r, t in zip(X, target)])


ARCHITECTURES = [
    ("mlp", "classification", ["--hidden", "4", "--set", "activation=tanh"], "BayesianMLPClassifier",
     dict(hidden_layer_sizes=(4,), activation="tanh")),
    ("mlp", "regression", ["--hidden", "4", "3"], "BayesianMLPRegressor", dict(hidden_layer_sizes=(4, 3))),
    ("cnn", "classification", ["--input-shape", "1,4,4", "--set", "channels=(4,)", "--hidden", "8"],
     "BayesianCNNClassifier", dict(input_shape=(1, 4, 4), channels=(4,), dense_layer_sizes=(8,))),
    ("cnn", "regression", ["--set", "channels=(4,)", "--hidden", "8"], "BayesianCNNRegressor",
     dict(input_shape=None, dense_layer_sizes=(8,))),
    ("rnn", "classification", ["--input-shape", "8,2", "--set", "hidden_size=4", "--hidden", "4"],
     "BayesianRNNClassifier", dict(hidden_size=4, dense_layer_sizes=(4,))),
    ("rnn", "regression", ["--set", "hidden_size=4", "--set", "cell=gru", "--hidden", "4"], "BayesianRNNRegressor",
     dict(hidden_size=4, cell="gru")),
]


@pytest.mark.parametrize("kind, task, options, name, params", ARCHITECTURES,
                         ids=[f"{a[0]}-{a[1]}" for a in ARCHITECTURES])
def test_every_architecture_fits_and_predicts(tmp_path, capsys, kind, task, options, name, params):
    data = _image_csv(tmp_path / "img.csv", task)
    drop = _write(tmp_path / "new.csv", [f"p{i}" for i in range(16)], [list(np.arange(16) / 16.0)] * 3)
    model = str(tmp_path / "m.bayesnet")
    assert main(["fit", "--data", data, "--target", "target", "--task", task, "--model", kind, *TINY,
                 "--set", "sampler__friction=0.1", "--set", "prior_scale=0.5", *options, "--output", model]) == 0
    out = capsys.readouterr().out
    assert f"model={kind}" in out and ("test accuracy" in out if task == "classification" else "test RMSE" in out)
    pipeline, meta = cli.load_model(model)
    est = pipeline[-1]
    assert type(est).__name__ == name and est.n_draws_kept_ == 5
    got = est.get_params()
    assert got["sampler__friction"] == 0.1 and got["prior_scale"] == 0.5
    assert all(got[k] == v for k, v in params.items()), {k: got[k] for k in params}
    if kind == "rnn" and "--input-shape" in options:
        assert est.input_shape_ == (8, 2)
    elif kind == "rnn":
        assert est.input_shape_ == (16, 1)  # univariate sequences, one column per step
    assert main(["predict", model, "--data", drop]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 4 and lines[0].startswith("row,prediction,")


def test_rnn_forecast_reads_windows_oldest_first(tmp_path, capsys):
    series = _write(tmp_path / "s.csv", ["t", "value"], [[i, np.sin(i / 3)] for i in range(60)])
    model = str(tmp_path / "m.bayesnet")
    assert main(["fit", "--data", series, "--target", "value", "--task", "forecast", "--model", "rnn", *TINY,
                 "--set", "hidden_size=4", "--hidden", "4", "--dimension", "3", "--delay", "2", "--output",
                 model]) == 0
    pipeline, meta = cli.load_model(model)
    assert meta["n_lags"] == 6 and pipeline[-1].input_shape_ == (3, 1)
    reverse = pipeline[-2]  # Takens windows are newest first; the RNN reads them in time order
    assert np.array_equal(reverse.transform(np.array([[3.0, 2.0, 1.0]])), [[1.0, 2.0, 3.0]])
    capsys.readouterr()
    assert main(["predict", model, "--data", series]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 1 + 60 - 6 + 1
