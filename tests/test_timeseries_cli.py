"""Takens embedding and the forecasting helper (the command line is tested in test_cli.py)."""

import numpy as np
import pytest
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV, TimeSeriesSplit
from sklearn.pipeline import make_pipeline

from bayesnet import TakensEmbedding, make_forecasting_windows
from bayesnet.datasets import load_sunspots


def test_windows_and_embedding():
    s = np.arange(20.0)
    X, y = make_forecasting_windows(s, n_lags=6)
    assert X.shape == (14, 6) and y[0] == 6 and list(X[0]) == [5, 4, 3, 2, 1, 0]
    Z = TakensEmbedding(dimension=3, delay=2).fit_transform(X)
    assert list(Z[0]) == [4, 2, 0]  # y[t-2], y[t-4], y[t-6] for t = 6
    X2, _ = make_forecasting_windows(s, n_lags=4, stride=2)  # Chandra et al. 2019's T = 2
    assert np.all(np.diff(X2[:, 0]) == 2)
    with pytest.raises(ValueError, match="exceeds"):
        TakensEmbedding(dimension=4, delay=2).fit(X[:, :5])
    with pytest.raises(ValueError, match="exceeds the 6 lag columns"):  # set since fit (before: IndexError)
        TakensEmbedding(dimension=2, delay=3).fit(X).set_params(dimension=3).transform(X)
    with pytest.raises(ValueError, match="delay"):  # (before: the last lag column, dimension times)
        TakensEmbedding(dimension=2, delay=3).fit(X).set_params(delay=0).transform(X)
    with pytest.raises(ValueError, match="NaN"):
        make_forecasting_windows([1.0, np.nan, 2.0, 3.0], n_lags=1)
    import pandas as pd

    # complex values and strings (a helper's user test: the real part was kept with a ComplexWarning, strings parsed)
    for bad in (np.sin(np.arange(20)) + 1j, np.array([str(v) for v in range(20)]), [1.0, "2", 3.0] * 5,
                np.array([np.complex64(1 + 2j)] + [float(i) for i in range(19)], dtype=object),
                # dates and durations (a helper's user test: taken as nanosecond counts; as objects, a TypeError)
                pd.Series(pd.date_range("2000", periods=20)), pd.Series(pd.to_timedelta(np.arange(20), "D")),
                np.array(list(pd.date_range("2000", periods=20)), dtype=object)):
        with pytest.raises(ValueError, match="series must hold real numbers"):
            make_forecasting_windows(bad, n_lags=2)
    assert make_forecasting_windows(np.arange(20), n_lags=2)[0].dtype == np.float64  # integers are numbers
    # input_features checked as scikit-learn's transformers check them (before: any list was taken)
    takens = TakensEmbedding(dimension=3, delay=2).fit(X)
    assert list(takens.get_feature_names_out([f"x{i}" for i in range(6)])) == ["lag_2", "lag_4", "lag_6"]
    with pytest.raises(ValueError, match="input_features should have length equal to number of features"):
        takens.get_feature_names_out(["a", "b"])
    # a series itself, where the lag matrix belongs: the way to build it (before: "Expected 2D array")
    for series in (s, pd.Series(s), list(s)):
        with pytest.raises(ValueError, match=r"not a series: .*make_forecasting_windows\(series, n_lags=...\)"):
            TakensEmbedding(dimension=3, delay=2).fit(series)
    with pytest.raises(ValueError, match="not a series"):
        takens.transform(s)
    with pytest.raises(ValueError, match="Found array with dim 3"):  # (a 3-D array: scikit-learn's own message)
        TakensEmbedding(dimension=1).fit(X[:, :, None])


def test_gridsearch_tunes_embedding():
    X, y = make_forecasting_windows(load_sunspots(), n_lags=12)
    grid = GridSearchCV(make_pipeline(TakensEmbedding(), Ridge()),
                        {"takensembedding__dimension": [2, 4], "takensembedding__delay": [1, 3]},
                        cv=TimeSeriesSplit(3)).fit(X, y)
    assert grid.best_params_["takensembedding__dimension"] in (2, 4)
