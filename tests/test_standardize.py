"""standardize_inputs: the estimators centre and scale each input feature as a StandardScaler in front would."""

import pickle
import warnings

import numpy as np
import torch
import pytest
from sklearn.datasets import load_breast_cancer, load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import StandardScaler

import bayesnet
from bayesnet import BayesianCNNClassifier, BayesianMLPClassifier, BayesianRNNRegressor
from test_io import _tamper as _rewrite  # rewrites a saved model's JSON header

SHORT = dict(n_draws=5, burn_in=40, thinning=2, random_state=0)


@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    return X[:300], y[:300], X[300:]


@pytest.fixture(autouse=True)
def quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        yield


def test_the_network_sees_what_a_standard_scaler_gives(cancer):
    """Raw breast cancer (features from 0.001 to 4,000): the map is the training rows' StandardScaler, applied
    to new rows too, and it does not depend on the features' units."""
    X, y, Xnew = cancer
    est = BayesianMLPClassifier((8,), **SHORT).fit(X, y)
    scaler = StandardScaler().fit(X)
    assert est.input_mean_.shape == est.input_scale_.shape == (30,)
    assert est.input_mean_.dtype == np.float64
    np.testing.assert_allclose(est.input_mean_, scaler.mean_, rtol=1e-6)
    np.testing.assert_allclose(est.input_scale_, scaler.scale_, rtol=1e-6)
    seen = est._validate_X(Xnew, reset=False)
    np.testing.assert_allclose(seen, scaler.transform(Xnew), atol=2e-5)
    assert np.abs(seen).max() < 50 < np.abs(Xnew).max()  # the raw features reach the thousands
    # other units (x 1000, shifted): the same network inputs up to float32 rounding
    other = BayesianMLPClassifier((8,), **SHORT).fit(1000 * X + 7, y)
    np.testing.assert_allclose(other._validate_X(1000 * Xnew + 7, reset=False), seen, atol=1e-4)


def test_a_scaled_input_passes_unchanged_and_false_feeds_it_as_given(cancer):
    X, y, Xnew = cancer
    scaler = StandardScaler().fit(X)
    Xs = scaler.transform(X)
    est = BayesianMLPClassifier((8,), **SHORT).fit(Xs, y)
    np.testing.assert_allclose(est._validate_X(Xs, reset=False), Xs, atol=1e-5)  # already standardised
    raw = BayesianMLPClassifier((8,), standardize_inputs=False, **SHORT).fit(X, y)
    assert raw.input_mean_ is None and raw.input_scale_ is None
    np.testing.assert_array_equal(raw._validate_X(Xnew, reset=False), Xnew.astype(np.float32))


def test_a_constant_feature_is_centred_not_divided_by_zero(cancer):
    X, y, Xnew = cancer
    X = np.column_stack([X, np.full(len(X), 3.0)])
    est = BayesianMLPClassifier((8,), **SHORT).fit(X, y)
    assert est.input_scale_[-1] == 1.0 and est.input_mean_[-1] == 3.0
    proba = est.predict_proba(np.column_stack([Xnew, np.full(len(Xnew), 5.0)]))
    assert np.isfinite(proba).all()


def test_images_per_channel_and_sequences_per_step_feature():
    """A CNN's statistics are over the rows and the pixels of each channel (a near-constant border pixel is not
    blown up); an RNN's over the rows and the steps of each per-step feature."""
    X, y = load_digits(return_X_y=True)
    X, y = X[:200].astype(np.float32), y[:200]
    cnn = BayesianCNNClassifier(channels=(4,), dense_layer_sizes=(8,), input_shape=(1, 8, 8), **SHORT).fit(X, y)
    assert cnn.input_mean_.shape == (1,)
    np.testing.assert_allclose(cnn.input_mean_[0], X.mean(), rtol=1e-5)
    np.testing.assert_allclose(cnn.input_scale_[0], X.std(), rtol=1e-5)
    assert cnn._validate_X(X[:3], reset=False).shape == (3, 1, 8, 8)

    rng = np.random.default_rng(0)
    seq = np.stack([rng.normal(100.0, 20.0, (150, 6)), rng.normal(0.0, 0.01, (150, 6))], axis=-1)  # (n, T, 2)
    target = seq[:, -1, 0] / 20.0 + rng.normal(0, 0.1, 150)
    rnn = BayesianRNNRegressor(hidden_size=4, dense_layer_sizes=(4,), **SHORT).fit(seq, target)
    assert rnn.input_mean_.shape == (2,)
    np.testing.assert_allclose(rnn.input_mean_, seq.reshape(-1, 2).mean(0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(rnn.input_scale_, seq.reshape(-1, 2).std(0), rtol=1e-4)
    seen = rnn._validate_X(seq, reset=False)
    np.testing.assert_allclose(seen.reshape(-1, 2).std(0), [1.0, 1.0], rtol=1e-4)


def test_continuing_chains_keep_the_first_fits_map_and_refuse_a_change(cancer):
    X, y, _ = cancer
    est = BayesianMLPClassifier((8,), **SHORT).fit(X, y)
    mean = est.input_mean_.copy()
    est.partial_fit(X[:150] * 2.0, y[:150])  # other data: the map stays the one the chains were started with
    np.testing.assert_array_equal(est.input_mean_, mean)
    est.set_params(standardize_inputs=False)
    with pytest.raises(ValueError, match="standardize_inputs"):
        est.partial_fit(X, y)
    with pytest.raises(Exception):  # anything but a bool is refused at fit
        BayesianMLPClassifier((8,), standardize_inputs="yes", **SHORT).fit(X, y)


def test_models_from_before_the_option_load_as_they_were_fitted(cancer, tmp_path):
    """A pickle or model file written before standardize_inputs existed fed raw inputs: it loads with
    standardize_inputs=False and predicts as before."""
    X, y, Xnew = cancer
    est = BayesianMLPClassifier((8,), standardize_inputs=False, **SHORT).fit(X, y)
    expected = est.predict_proba(Xnew)

    state = est.__getstate__()
    for key in ("standardize_inputs", "input_mean_", "input_scale_"):
        state.pop(key)
    old = BayesianMLPClassifier.__new__(BayesianMLPClassifier)
    old.__setstate__(state)
    assert old.get_params()["standardize_inputs"] is False and old.input_mean_ is None
    np.testing.assert_array_equal(old.predict_proba(Xnew), expected)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(old)).predict_proba(Xnew), expected)
    with pytest.raises(ValueError, match="standardize_inputs"):  # its chains were started on raw inputs
        old.set_params(standardize_inputs=True).partial_fit(X, y)

    est.save(tmp_path / "m.bayesnet")

    def as_before(spec):
        spec["estimator"]["params"].pop("standardize_inputs")
        for key in ("input_mean_", "input_scale_"):
            spec["estimator"]["fitted"].pop(key)

    _rewrite(tmp_path / "m.bayesnet", tmp_path / "old.bayesnet", as_before)
    back = bayesnet.load(tmp_path / "old.bayesnet")
    assert back.standardize_inputs is False
    np.testing.assert_array_equal(back.predict_proba(Xnew), expected)


def test_a_model_file_keeps_the_map(cancer, tmp_path):
    X, y, Xnew = cancer
    est = BayesianMLPClassifier((8,), **SHORT).fit(X, y)
    est.save(tmp_path / "m.bayesnet")
    back = bayesnet.load(tmp_path / "m.bayesnet")
    np.testing.assert_array_equal(back.input_mean_, est.input_mean_)
    np.testing.assert_array_equal(back.input_scale_, est.input_scale_)
    np.testing.assert_array_equal(back.predict_proba(Xnew), est.predict_proba(Xnew))


def test_a_large_offset_keeps_its_spread():
    """A feature of large offset and small spread (a timestamp): float64 input is centred before the cast to the
    network's float32, which alone would leave it two distinct values."""
    rng = np.random.default_rng(0)
    z = rng.normal(size=400)
    X = np.column_stack([1e6 + 0.01 * z, rng.normal(size=400)])
    est = BayesianMLPClassifier((8,), **SHORT).fit(X[:200], (z[:200] > 0).astype(int))
    seen = est._validate_X(X[200:], reset=False)
    assert seen.dtype == np.float32
    np.testing.assert_allclose(seen[:, 0], (z[200:] - z[:200].mean()) / z[:200].std(), atol=1e-4)


@pytest.mark.parametrize("edit, message", [
    (lambda spec: spec["params"].__setitem__("standardize_inputs", "yes"),
     "'standardize_inputs' parameter .* must be an instance of 'bool'"),
    (lambda spec: spec["params"].__setitem__("standardize_inputs", False), "standardize_inputs=False"),
    (lambda spec: spec["fitted"].__setitem__("input_scale_", 2.0), "30 finite floats"),
    (lambda spec: spec["fitted"].pop("input_mean_"), "30 finite floats"),
    (lambda spec: spec["fitted"].__setitem__("input_shape_", None), "names no input features"),
])
def test_a_model_file_with_a_malformed_map_is_refused(cancer, tmp_path, edit, message):
    X, y, _ = cancer
    est = BayesianMLPClassifier((8,), **SHORT).fit(X, y)
    est.save(tmp_path / "m.bayesnet")
    _rewrite(tmp_path / "m.bayesnet", tmp_path / "bad.bayesnet", lambda spec: edit(spec["estimator"]))
    with pytest.raises(ValueError, match="malformed model file.*" + message):
        bayesnet.load(tmp_path / "bad.bayesnet")


def test_a_model_file_with_a_scale_of_zero_is_refused(cancer, tmp_path):
    X, y, _ = cancer
    est = BayesianMLPClassifier((8,), **SHORT).fit(X, y)
    est.input_scale_ = est.input_scale_.copy()
    est.input_scale_[3] = 0.0
    est.save(tmp_path / "m.bayesnet")
    with pytest.raises(ValueError, match="not positive"):
        bayesnet.load(tmp_path / "m.bayesnet")



def test_skorch_forward_takes_raw_inputs_as_the_estimators_methods_do(cancer, tmp_path):
    """skorch's ``forward`` (through ``forward_iter``) standardises ``X`` as ``predict`` does and gives
    ``module_``'s outputs (the first chain's current position); before, it fed raw float64 rows to the float32
    network (an error) and would have skipped the map. Checked against a StandardScaler and the network by hand,
    for a classifier, a regressor (standardised target units) and a CNN; a model read from a file, which holds
    no chain position, refuses it."""
    import torch.nn.functional as F
    from sklearn.exceptions import NotFittedError

    X, y, Xnew = cancer
    est = BayesianMLPClassifier((8,), **SHORT, batch_size=64)
    with pytest.raises(NotFittedError):
        est.forward(Xnew)
    est.fit(X, y)
    out = est.forward(Xnew)
    assert out.shape == (len(Xnew), 2) and out.dtype == torch.float32 and not out.requires_grad
    Z = torch.as_tensor(StandardScaler().fit(X).transform(Xnew), dtype=torch.float32)
    (w1, b1), (w2, b2) = [(m.weight, m.bias) for m in est.module_.modules() if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        torch.testing.assert_close(out, F.linear(F.relu(F.linear(Z, w1, b1)), w2, b2), atol=2e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="features"):
        est.forward(Xnew[:, :5])
    path = tmp_path / "m.bayesnet"
    est.save(path)
    with pytest.raises(ValueError, match="loaded from a model file"):
        bayesnet.load(path).forward(Xnew)

    reg = bayesnet.BayesianMLPRegressor((8,), **SHORT).fit(X, 1000 + 100 * X[:, 0])  # a target in the thousands
    (w1, b1), (w2, b2) = [(m.weight, m.bias) for m in reg.module_.modules() if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        out = reg.forward(Xnew)
        torch.testing.assert_close(out, F.linear(F.relu(F.linear(Z, w1, b1)), w2, b2), atol=2e-4, rtol=1e-4)
    assert out.abs().max() < 50  # the standardised target's units (predict gives about 2,400)

    digits = load_digits()
    cnn = BayesianCNNClassifier(input_shape=(1, 8, 8), channels=(4,), dense_layer_sizes=(8,), **SHORT)
    cnn.fit(digits.data[:300], digits.target[:300])
    images = (digits.data[300:310] - cnn.input_mean_) / cnn.input_scale_
    with torch.no_grad():
        expected = cnn.module_(torch.as_tensor(images, dtype=torch.float32).reshape(-1, 1, 8, 8))
    torch.testing.assert_close(cnn.forward(digits.data[300:310]), expected)


def test_a_feature_constant_up_to_rounding_is_only_centred(cancer):
    """A column of 0.1 (300 rows) has a float64 standard deviation of 5e-16, a rounding error. Before, it was the
    feature's scale: a new row with 0.2 there sat 2e14 standard deviations out and every probability was 0 or 1.
    Now the feature is constant by scikit-learn's test, scaled by 1 as a StandardScaler does."""
    X, y, _ = cancer
    X = np.column_stack([X, np.full(len(X), 0.1)])
    assert X[:, -1].std() > 0
    est = BayesianMLPClassifier((8,), **SHORT).fit(X, y)
    assert est.input_scale_[-1] == StandardScaler().fit(X).scale_[-1] == 1.0
    moved = X[:20].copy()
    moved[:, -1] = 0.2
    np.testing.assert_allclose(est.predict_proba(moved), est.predict_proba(X[:20]), atol=0.05)


def test_unscaled_inputs_with_standardisation_off_warn_once_by_name():
    """standardize_inputs=False on raw breast cancer (areas in the thousands) gave a fit that stalled under a
    convergence warning that did not name the cause; fit now names the largest feature, once (not again from its
    probe). Inputs of order one, or the default, do not warn."""
    import pandas as pd  # noqa: F401 (as_frame)

    X, y = load_breast_cancer(return_X_y=True, as_frame=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        BayesianMLPClassifier((8,), standardize_inputs=False, **SHORT).fit(X, y)
    said = [str(w.message) for w in caught if "unit scale" in str(w.message)]
    assert len(said) == 1 and "feature 23 ('worst area') has mean 880.6" in said[0], said
    assert "; 3 of 30 features have a root mean square above 100" in said[0]
    for kwargs, data in [(dict(standardize_inputs=False), StandardScaler().fit_transform(X)), ({}, X)]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            BayesianMLPClassifier((8,), **kwargs, **SHORT).fit(data, y)
        assert not [w for w in caught if "unit scale" in str(w.message)]


def test_a_divergence_on_raw_inputs_names_the_inputs_first():
    """Raw inputs of 1e9 with standardize_inputs=False: the warm-up shrank the step to 1e-31 and the chain still
    diverged. The message put 'increase burn_in first' before 'or standardise the inputs'; it now leads with the
    inputs, named, then the warm-up."""
    from bayesnet import BayesianMLPRegressor, DivergenceError

    X, y = load_breast_cancer(return_X_y=True)
    with pytest.raises(DivergenceError) as err:
        BayesianMLPRegressor((8,), standardize_inputs=False, burn_in=100, random_state=0).fit(X[:200] * 1e6, y[:200])
    message = str(err.value)
    assert message.index("The inputs are far from unit scale (feature 23 has mean 9.273e+08") < \
        message.index("increase burn_in (now 100 steps).") < message.index("Reduce the step size")
    assert "first" not in message.split("scale them, first.")[1] and "or standardise the inputs" not in message


def test_workers_do_not_repeat_the_datas_warnings():
    """With n_jobs, each worker's group of chains validated the data again, and joblib relayed each worker's
    warnings: a column-vector y, unscaled inputs and a constant target warned once per worker plus once."""
    from bayesnet import BayesianMLPRegressor

    X, y = load_breast_cancer(return_X_y=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        BayesianMLPClassifier((8,), standardize_inputs=False, n_chains=2, n_jobs=2, **SHORT).fit(X, y[:, None])
        BayesianMLPRegressor((8,), n_chains=2, n_jobs=2, **SHORT).fit(X, np.full(len(X), 3.0))
    said = [str(w.message) for w in caught if not issubclass(w.category, ConvergenceWarning)]
    for words in ("column-vector y", "far from unit scale", "y is constant"):
        assert sum(words in m for m in said) == 1, (words, said)
