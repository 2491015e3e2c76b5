"""Takens embedding, the forecasting helper and the command line."""

import csv

import numpy as np
import pytest
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV, TimeSeriesSplit
from sklearn.pipeline import make_pipeline

from bayesnet import TakensEmbedding, make_forecasting_windows
from bayesnet.cli import main
from bayesnet.datasets import load_sunspots


def test_windows_and_embedding():
    s = np.arange(20.0)
    X, y = make_forecasting_windows(s, n_lags=6)
    assert X.shape == (14, 6) and y[0] == 6 and list(X[0]) == [5, 4, 3, 2, 1, 0]
    Z = TakensEmbedding(dimension=3, delay=2).fit_transform(X)
    assert list(Z[0]) == [4, 2, 0]  # y[t-2], y[t-4], y[t-6] for t = 6
    X2, _ = make_forecasting_windows(s, n_lags=4, stride=2)  # paper 003's T = 2
    assert np.all(np.diff(X2[:, 0]) == 2)
    with pytest.raises(ValueError, match="exceeds"):
        TakensEmbedding(dimension=4, delay=2).fit(X[:, :5])
    with pytest.raises(ValueError, match="NaN"):
        make_forecasting_windows([1.0, np.nan, 2.0, 3.0], n_lags=1)


def test_gridsearch_tunes_embedding():
    X, y = make_forecasting_windows(load_sunspots(), n_lags=12)
    grid = GridSearchCV(make_pipeline(TakensEmbedding(), Ridge()),
                        {"takensembedding__dimension": [2, 4], "takensembedding__delay": [1, 3]},
                        cv=TimeSeriesSplit(3)).fit(X, y)
    assert grid.best_params_["takensembedding__dimension"] in (2, 4)


def test_cli_fit_and_predict_csv(tmp_path, capsys):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 3))
    y = np.where(X[:, 0] + X[:, 1] > 0, "yes", "no")
    path = tmp_path / "d.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["a", "b", "c", "label"])
        w.writerows([[*row, lab] for row, lab in zip(X, y)])
    model = tmp_path / "m.joblib"
    assert main(["fit", "--data", str(path), "--target", "label", "--n-draws", "10", "--burn-in", "100",
                 "--thinning", "2", "--hidden", "8", "--n-chains", "2", "--quiet", "--output", str(model)]) == 0
    out = capsys.readouterr().out
    assert "test accuracy" in out and "expected calib. error" in out and "from 2 chains" in out
    preds = tmp_path / "p.csv"
    assert main(["predict", str(model), "--data", str(path), "--output", str(preds)]) == 0
    rows = list(csv.reader(open(preds)))
    assert rows[0][:3] == ["row", "prediction", "proba_no"] and len(rows) == 121


def test_cli_forecast_bundled_sunspots(tmp_path, capsys):
    model = tmp_path / "s.joblib"
    assert main(["fit", "--dataset", "sunspots", "--n-draws", "20", "--burn-in", "300", "--thinning", "2",
                 "--quiet", "--output", str(model)]) == 0
    out = capsys.readouterr().out
    assert "test RMSE" in out and "interval coverage" in out
    series = tmp_path / "series.csv"
    with open(series, "w") as fh:
        fh.write("spots\n" + "\n".join(str(v) for v in load_sunspots()[:30]))
    assert main(["predict", str(model), "--data", str(series), "--column", "spots"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "row,prediction,std,lower,upper" and len(lines) == 1 + 30 - 4 + 1


def test_cli_predict_uses_the_fitted_column_order(tmp_path):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(80, 2))
    y = X[:, 0] * 3.0
    train = tmp_path / "train.csv"
    with open(train, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["a", "b", "y"])
        w.writerows([[*r, t] for r, t in zip(X, y)])
        fh.write("\n")  # a trailing blank line is ignored
    model = tmp_path / "m.joblib"
    assert main(["fit", "--data", str(train), "--target", "y", "--task", "regression", "--n-draws", "5",
                 "--burn-in", "50", "--thinning", "2", "--hidden", "4", "--quiet", "--output", str(model)]) == 0
    swapped = tmp_path / "swapped.csv"
    with open(swapped, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["b", "a"])
        w.writerows([[r[1], r[0]] for r in X[:5]])
    out1, out2 = tmp_path / "p1.csv", tmp_path / "p2.csv"
    main(["predict", str(model), "--data", str(train), "--output", str(out1)])
    main(["predict", str(model), "--data", str(swapped), "--output", str(out2)])
    assert list(csv.reader(open(out1)))[1:6] == list(csv.reader(open(out2)))[1:6]
