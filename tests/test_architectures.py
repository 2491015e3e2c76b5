"""The CNN and RNN networks and estimators: batched evaluation, input layouts, every sampler, devices."""

import copy
import pickle

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.pipeline import make_pipeline
from torch import nn

from bayesnet import (BayesianCNNClassifier, BayesianMLPClassifier, BayesianRNNClassifier,
                      DivergenceError,
                      BayesianRNNRegressor, TakensEmbedding, available_samplers, make_forecasting_windows)
from bayesnet.datasets import make_chaotic_series
from bayesnet.metrics import interval_coverage
import sampler_settings
from bayesnet.predictive import PosteriorPredictive
from bayesnet.networks import CNN, MLP, RNN
from bayesnet.posterior import batched_outputs

SMALL_CNN = dict(channels=(4, 4), dense_layer_sizes=(16,))
SMALL_RNN = dict(hidden_size=8, dense_layer_sizes=(8,))
SHORT = dict(n_draws=10, burn_in=100, thinning=2, batch_size=64, random_state=0)


def _members(module, S, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [0.3 * torch.randn(S, *p.shape, generator=gen) for p in module.parameters()]


@pytest.mark.parametrize("module,X", [
    (MLP(5, (7, 6), 3), torch.randn(11, 5)),
    (CNN((2, 9), 4), torch.randn(11, 2, 9)),
    (CNN((3, 5, 7), 2, channels=(4, 5, 6), kernel_size=5, dense_layer_sizes=(8, 9), pool_size=2), torch.randn(11, 3, 5, 7)),
    (CNN((1, 1), 2), torch.randn(4, 1, 1)),
    (RNN(3, 2, hidden_size=6, cell="lstm", num_layers=2), torch.randn(11, 7, 3)),
    (RNN(3, 2, hidden_size=6, cell="gru", num_layers=2, dense_layer_sizes=(5, 4)), torch.randn(11, 7, 3)),
], ids=["mlp", "cnn1d", "cnn2d", "cnn-1x1", "lstm", "gru"])
def test_forward_chains_equals_each_member_alone(module, X):
    """The batched kernels (shared input, per-member input, one member) give each member's own forward."""
    names = [n for n, _ in module.named_parameters()]
    params = _members(module, 3)
    alone = torch.stack([torch.func.functional_call(module, dict(zip(names, [p[s] for p in params])), (X,))
                         for s in range(3)])
    torch.testing.assert_close(module.forward_chains(params, X), alone, atol=1e-5, rtol=1e-5)
    with torch.no_grad():  # prediction's path (a shared input's first layer as one wide product)
        torch.testing.assert_close(module.forward_chains(params, X), alone, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(module.forward_chains(params, X.expand(3, *X.shape).contiguous()), alone,
                               atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(module.forward_chains([p[:1] for p in params], X), alone[:1], atol=1e-6, rtol=1e-6)
    # the vmap fallback of batched_outputs (any module without forward_chains) agrees too
    vmapped = torch.func.vmap(lambda ps: torch.func.functional_call(module, dict(zip(names, ps)), (X,)))(params)
    torch.testing.assert_close(vmapped, alone, atol=1e-5, rtol=1e-5)
    assert batched_outputs(module, names, params, X).shape == alone.shape


@pytest.mark.parametrize("cell,layers", [("lstm", 1), ("lstm", 2), ("gru", 1), ("gru", 2)])
def test_recurrent_cells_are_pytorchs(cell, layers):
    """Same names, gate order and equations as nn.LSTM/nn.GRU: their weights copy across, outputs agree."""
    torch.manual_seed(0)
    ours = RNN(3, 2, hidden_size=6, num_layers=layers, cell=cell)
    ref = (nn.LSTM if cell == "lstm" else nn.GRU)(3, 6, num_layers=layers, batch_first=True)
    ref.load_state_dict({k: v for k, v in ours.state_dict().items() if not k.startswith("head")})
    X = torch.randn(11, 7, 3)
    with torch.no_grad():
        expected = ours.head(torch.relu(ref(X)[0][:, -1]))
        torch.testing.assert_close(ours(X), expected, atol=1e-6, rtol=1e-6)
    # forward (one member, the fused kernel) gives the module's own parameters nn.LSTM's gradients
    head = copy.deepcopy(ours.head)
    ours_grads = torch.autograd.grad(ours(X).sum(), list(ours.parameters()))
    ref_grads = torch.autograd.grad(head(torch.relu(ref(X)[0][:, -1])).sum(), [*ref.parameters(), *head.parameters()])
    for a, b in zip(ours_grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def _reference_members(net, packed, X):
    """Each member through its own nn.LSTM/nn.GRU and dense head: outputs (S, n, k) and gradients of their sum
    shaped like ``packed``."""
    names = [n for n, _ in net.named_parameters()]
    outputs, grads = [], []
    for s in range(packed[0].shape[0]):
        state = {n: p[s] for n, p in zip(names, packed)}
        rnn = (nn.LSTM if net.cell == "lstm" else nn.GRU)(X.shape[-1], net.hidden_size, num_layers=net.num_layers,
                                                         batch_first=True)
        rnn.load_state_dict({k: v for k, v in state.items() if not k.startswith("head.")})
        head = copy.deepcopy(net.head)
        head.load_state_dict({k[len("head."):]: v for k, v in state.items() if k.startswith("head.")})
        params = {**dict(rnn.named_parameters()), **{f"head.{k}": v for k, v in head.named_parameters()}}
        out = head(torch.relu(rnn(X if X.ndim == 3 else X[s])[0][:, -1]))
        outputs.append(out.detach())
        grads.append(torch.autograd.grad(out.sum(), [params[n] for n in names]))
    return torch.stack(outputs), [torch.stack(g) for g in zip(*grads)]


@pytest.mark.parametrize("shared", [True, False], ids=["shared-input", "per-member-input"])
@pytest.mark.parametrize("S", [1, 3])
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_fused_and_batched_kernels_equal_pytorchs_modules(cell, layers, S, shared):
    """Both kernels give each member nn.LSTM/nn.GRU's outputs, and the packed (S, ...) leaves each member's own
    gradient (the fused kernel reaches them through the slices p[s])."""
    torch.manual_seed(0)
    net = RNN(3, 2, hidden_size=6, num_layers=layers, cell=cell, dense_layer_sizes=(5,))
    packed = _members(net, S)
    X = torch.randn(11, 7, 3) if shared else torch.randn(S, 11, 7, 3)
    expected, expected_grads = _reference_members(net, packed, X)
    results = {}
    for kernel in ("fused", "batched"):
        leaves = [p.clone().requires_grad_(True) for p in packed]
        out = net.forward_chains(leaves, X, kernel=kernel)
        grads = torch.autograd.grad(out.sum(), leaves)
        torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-5)
        for g, e in zip(grads, expected_grads, strict=True):
            torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)
        with torch.no_grad():  # prediction's path
            torch.testing.assert_close(net.forward_chains(packed, X, kernel=kernel), expected, atol=1e-6, rtol=1e-5)
        results[kernel] = out, grads
    torch.testing.assert_close(results["fused"][0], results["batched"][0], atol=1e-6, rtol=1e-5)
    for a, b in zip(results["fused"][1], results["batched"][1]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("shared", [True, False], ids=["shared-input", "per-member-input"])
def test_batched_cells_in_member_groups(shared, monkeypatch):
    """Many members run the batched cells in groups (here 2 + 2 + 1): the same outputs and gradients."""
    torch.manual_seed(0)
    net = RNN(3, 2, hidden_size=6, num_layers=2, cell="gru")
    packed = _members(net, 5)
    X = torch.randn(11, 7, 3) if shared else torch.randn(5, 11, 7, 3)
    results = []
    for group_activations in (RNN._GROUP_ACTIVATIONS, 2 * 11 * 6):
        monkeypatch.setattr(RNN, "_GROUP_ACTIVATIONS", group_activations)
        leaves = [p.clone().requires_grad_(True) for p in packed]
        out = net.forward_chains(leaves, X, kernel="batched")
        results.append((out, torch.autograd.grad(out.sum(), leaves)))
    expected, expected_grads = _reference_members(net, packed, X)
    for out, grads in results:
        torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-5)
        for g, e in zip(grads, expected_grads, strict=True):
            torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("shared", [True, False], ids=["shared-input", "per-member-input"])
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_a_member_does_not_depend_on_the_members_beside_it(cell, shared):
    """Under autograd (sampling) member 0 of 1, 3 or 5 gets bit for bit the same outputs and gradients: chain k
    of an estimator with several chains is the chain it would be alone (odd sizes, where elementwise kernels
    round a tensor's tail differently, and sigmoid, whose vectorised and scalar forms differ; no hidden dense
    layer, whose activation runs on all members at once)."""
    torch.manual_seed(0)
    net = RNN(3, 2, hidden_size=6, num_layers=2, cell=cell, activation="sigmoid", dense_layer_sizes=())
    packed = _members(net, 5)
    X = torch.randn(11, 7, 3) if shared else torch.randn(5, 11, 7, 3)
    first = []
    for S in (1, 3, 5):
        leaves = [p[:S].clone().requires_grad_(True) for p in packed]
        out = net.forward_chains(leaves, X if shared else X[:S])
        first.append((out[0, :, :], [g[0] for g in torch.autograd.grad(out.sum(), leaves)]))
    for out, grads in first[1:]:
        assert torch.equal(out, first[0][0])
        assert all(torch.equal(g, g0) for g, g0 in zip(grads, first[0][1]))


def test_kernel_rule():
    """forward_chains(kernel="auto") runs what kernel_for documents; an unknown kernel is refused."""
    lstm, gru = RNN(1, 2, cell="lstm"), RNN(1, 2, hidden_size=8, cell="gru")
    for grad in (True, False):
        assert lstm.kernel_for(1, 4, grad) == lstm.kernel_for(16, 4, grad) == lstm.kernel_for(16, 10**4, grad) \
            == gru.kernel_for(1, 4, grad) == "fused"
    below = RNN._GRU_BATCHED_BELOW // gru.hidden_size
    assert gru.kernel_for(4, 1, grad=True) == "fused"  # sampling: always fused
    assert gru.kernel_for(4, below - 1, grad=False) == "batched"
    assert gru.kernel_for(4, below, grad=False) == "fused"
    with torch.no_grad():
        assert gru.kernel_for(4, below - 1) == "batched"
    assert gru.kernel_for(4, below - 1) == "fused"
    inside_vmap = torch.func.vmap(lambda x: torch.tensor(lstm.kernel_for(1, 4) == "batched"))(torch.zeros(2))
    assert inside_vmap.all()
    params = [p.unsqueeze(0) for p in gru.parameters()]
    with pytest.raises(ValueError, match="kernel must be one of"):
        gru.forward_chains(params, torch.randn(3, 5, 1), kernel="cudnn")


def test_network_argument_errors():
    with pytest.raises(ValueError, match="kernel_size"):
        CNN((1, 8), 2, kernel_size=2)
    with pytest.raises(ValueError, match="input_shape"):
        CNN((8,), 2)
    with pytest.raises(ValueError, match="cell"):
        RNN(1, 2, cell="elman")
    with pytest.raises(ValueError, match="hidden_size"):
        RNN(1, 2, hidden_size=0)
    with pytest.raises(ValueError, match="activation"):
        CNN((1, 8), 2, activation="swish")
    with pytest.raises(ValueError, match="channels must hold at least one"):  # (before: IndexError)
        CNN((1, 8), 2, channels=())


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return train_test_split((X / 16.0).astype(np.float32), y, test_size=0.3, stratify=y, random_state=0)


@pytest.fixture(scope="module")
def fitted_cnn(digits):
    Xtr, Xte, ytr, yte = digits
    return BayesianCNNClassifier(**SMALL_CNN, input_shape=(1, 8, 8), sampler="sgnht", sampler__step_size=2e-5,
                                 prior_scale=0.2, n_draws=20, burn_in=400, thinning=5, random_state=0).fit(Xtr, ytr)


@pytest.fixture(scope="module")
def henon():
    s = make_chaotic_series("henon", 400)
    X, y = make_forecasting_windows((s - s.min()) / (s.max() - s.min()), n_lags=4)
    return X[:300], y[:300], X[300:], y[300:]


def test_cnn_classifies_digits_with_intervals(fitted_cnn, digits):
    Xtr, Xte, ytr, yte = digits
    assert fitted_cnn.input_shape_ == (1, 8, 8)
    assert fitted_cnn.score(Xte, yte) > 0.85
    proba, lower, upper = fitted_cnn.predict_proba(Xte, return_interval=True)
    assert proba.shape == lower.shape == upper.shape == (len(Xte), 10)
    np.testing.assert_allclose(proba.sum(1), 1.0, atol=1e-9)
    assert np.all(lower <= proba + 1e-12) and np.all(proba <= upper + 1e-12)


def test_vectorised_prediction_equals_a_loop_over_draws_in_any_chunking(fitted_cnn, digits, monkeypatch):
    """predict_proba evaluates all draws at once, in row chunks: it must equal loading each draw in turn."""
    Xte = digits[1][:40]
    module = fitted_cnn.module_
    names = [n for n, _ in module.named_parameters()]
    draws = fitted_cnn._draw_parameters()
    expected = 0
    with torch.no_grad():
        for d in range(fitted_cnn.n_draws_kept_):
            module.load_state_dict({n: p[d] for n, p in zip(names, draws)}, strict=False)
            # the network sees the inputs as the estimator gives them: shaped and standardised
            inputs = torch.as_tensor(fitted_cnn._validate_X(Xte, reset=False))
            expected = expected + torch.softmax(module(inputs).double(), -1)
    fitted_cnn._sync_module()
    expected = (expected / fitted_cnn.n_draws_kept_).numpy()
    np.testing.assert_allclose(fitted_cnn.predict_proba(Xte), expected, atol=1e-6)
    monkeypatch.setattr(PosteriorPredictive, "block_shape", lambda self, n, a: (7, 5))  # uneven blocks
    np.testing.assert_allclose(fitted_cnn.predict_proba(Xte), expected, atol=1e-6)
    monkeypatch.setattr(PosteriorPredictive, "block_shape", lambda self, n, a: (1, 1))  # one draw, one row
    np.testing.assert_allclose(fitted_cnn.predict_proba(Xte), expected, atol=1e-6)


def test_block_shape_fits_the_budget():
    module = CNN((1, 8, 8), 3)
    names = [n for n, _ in module.named_parameters()]

    def predictive(n_draws):
        return PosteriorPredictive(module, names, [p.detach()[None].expand(n_draws, *p.shape)
                                                   for p in module.parameters()], "cpu")

    big = predictive(200)
    budget = big.budget()
    draws, rows = big.block_shape(10_000, 100)  # a few draws, at least 1024 rows, within the budget
    assert draws == budget // (1024 * 100) and rows >= 1024 and draws * rows * 100 <= budget
    assert big.block_shape(10_000, 10**6) == (1, 1024)  # a huge row: one draw at a time
    assert predictive(4).block_shape(50, 10) == (4, 50)  # small: everything in one block


def test_cnn_input_layouts_and_errors(digits):
    Xtr, _, ytr, _ = digits
    est = BayesianCNNClassifier(**SMALL_CNN, **SHORT)
    assert est.fit(Xtr[:200], ytr[:200]).input_shape_ == (1, 64)  # 2-D without input_shape: signals
    assert est.fit(Xtr[:200].reshape(-1, 2, 32), ytr[:200]).input_shape_ == (2, 32)
    with pytest.raises(ValueError, match=r"samples of shape \(2, 16\)"):
        est.predict(Xtr[:5].reshape(-1, 2, 16, 2)[..., 0])
    with pytest.raises(ValueError, match="cannot hold"):
        est.set_params(input_shape=(1, 7, 7)).fit(Xtr[:200], ytr[:200])
    with pytest.raises(ValueError, match="input_shape must be"):
        est.set_params(input_shape=(64,)).fit(Xtr[:200], ytr[:200])
    with pytest.raises(ValueError, match="expects X of shape"):
        est.set_params(input_shape=None).fit(Xtr[:200].reshape(-1, 1, 1, 8, 8), ytr[:200])
    bad = Xtr[:200].copy()
    bad[3, 5] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        est.fit(bad, ytr[:200])


def test_cnn_predicts_on_samples_flat_or_in_its_layout(digits):
    """Samples flattened or in the network's layout, whichever fit saw (before: "X has 1 features, but ... is
    expecting 64" for the images of a fit on flattened ones); another count of flattened values names the
    fitted shape. (Found by a helper's user test.)"""
    Xtr, Xte, ytr, _ = digits
    flat = BayesianCNNClassifier(**SMALL_CNN, **SHORT, input_shape=(1, 8, 8)).fit(Xtr[:200], ytr[:200])
    np.testing.assert_array_equal(flat.predict_proba(Xte[:5].reshape(-1, 1, 8, 8)), flat.predict_proba(Xte[:5]))
    images = BayesianCNNClassifier(**SMALL_CNN, **SHORT).fit(Xtr[:200].reshape(-1, 1, 8, 8), ytr[:200])
    np.testing.assert_array_equal(images.predict_proba(Xte[:5]), images.predict_proba(Xte[:5].reshape(-1, 1, 8, 8)))
    with pytest.raises(ValueError, match=r"X has 50 features, but BayesianCNNClassifier was fitted with samples of "
                                         r"shape \(1, 8, 8\) \(64 values"):
        images.predict(Xte[:5, :50])
    # signals of one sample axis of length 1 (the reviewer's catch: flattened ones went to the 2-D default layout)
    columns = BayesianCNNClassifier(**SMALL_CNN, **SHORT).fit(Xtr[:200, :8, None], ytr[:200])
    np.testing.assert_array_equal(columns.predict_proba(Xte[:5, :8]), columns.predict_proba(Xte[:5, :8, None]))
    # samples of another layout name both shapes (before: "X has 1 features, but ... is expecting 64"), and an
    # input_shape set after fit applies at the next fit, not to predict (before: the same message on the
    # training rows themselves). (Found by a helper's user test.)
    with pytest.raises(ValueError, match=r"samples of shape \(1, 64\), but .* fitted with samples of shape \(1, 8, 8\)"):
        flat.predict(Xte[:5].reshape(-1, 1, 64))
    before = flat.predict_proba(Xte[:5])
    np.testing.assert_array_equal(flat.set_params(input_shape=(2, 32)).predict_proba(Xte[:5]), before)


def test_empty_sample_axes_are_refused():
    """Sequences with no features or no steps (before: an RNN fitted on (n, 5, 0) predicted one row for every
    input; (n, 0, 2) failed inside torch)."""
    X, y = np.random.default_rng(0).normal(size=(40, 5, 2)), np.arange(40) % 2
    est = BayesianRNNClassifier(hidden_size=4, dense_layer_sizes=(4,), **SHORT)
    for bad, shape in ((X[:, :, :0], r"\(5, 0\)"), (X[:, :0, :], r"\(0, 2\)")):
        with pytest.raises(ValueError, match=rf"samples of shape {shape} .*every axis needs at least one entry"):
            est.fit(bad, y)


def test_rnn_takes_windows_and_takens_pipelines(henon):
    """2-D windows are univariate sequences; a TakensEmbedding pipeline feeds the regressor directly."""
    s = np.sin(0.3 * np.arange(500)) + 0.05 * np.random.default_rng(0).normal(size=500)
    X, y = make_forecasting_windows(s, n_lags=6)
    Xtr, ytr, Xte, yte = X[:350], y[:350], X[350:], y[350:]
    pipe = make_pipeline(TakensEmbedding(dimension=3, delay=2),
                         BayesianRNNRegressor(**SMALL_RNN, n_draws=30, burn_in=600,
                                              thinning=5, batch_size=64, random_state=0))
    pipe.fit(Xtr, ytr)
    reg = pipe[-1]
    assert reg.input_shape_ == (3, 1)
    mean, lower, upper = pipe.predict(Xte, return_interval=True)
    assert mean.shape == yte.shape
    assert np.sqrt(np.mean((mean - yte) ** 2)) < 0.5 * np.std(yte)  # learns the map (a constant: 1.0)
    assert interval_coverage(yte, lower, upper) > 0.8
    Xtr, ytr, Xte, yte = henon
    seq = BayesianRNNClassifier(**SMALL_RNN, **SHORT).fit(np.stack([Xtr, Xtr ** 2], axis=2), ytr > np.median(ytr))
    assert seq.input_shape_ == (4, 2) and seq.predict_proba(np.stack([Xte, Xte ** 2], axis=2)).shape == (len(Xte), 2)
    with pytest.raises(ValueError, match=r"samples of shape \(4, 1\)"):
        seq.predict(Xte[:, :, None])
    with pytest.raises(ValueError, match=r"samples of shape \(3, 2\), but .* fitted with samples of shape \(4, 2\)"):
        seq.predict(np.stack([Xte, Xte ** 2], axis=2)[:, :3])  # (before: "X has 3 features, ... expecting 4")
    with pytest.raises(ValueError, match="expecting 3 features as input: a 2-D X holds one univariate sequence per "
                                         "row, so these are sequences of 4 time steps where the fit's had 3"):
        reg.predict(Xte)  # (scikit-learn's words, which its checks read, and what they count)
    with pytest.raises(ValueError, match=r"expecting 4 features as input: .*sequences of shape \(4, 2\) "
                                         r"\(n_timesteps, n_features\): pass X of shape \(n_samples, 4, 2\)"):
        seq.predict(np.stack([Xte, Xte ** 2], axis=2).reshape(len(Xte), -1))  # flattened multivariate sequences
    with pytest.raises(ValueError, match=r"X is 2-D, which BayesianRNNClassifier reads as one univariate sequence "
                                         r"per row .*sequences of shape \(4, 2\): pass X of shape \(n_samples, 4, 2\)"):
        seq.predict(Xte)  # one feature of two (before: "X has samples of shape (4, 1)", not why)
    with pytest.raises(ValueError, match="sequences of 2 different lengths .*pad or cut"):
        BayesianRNNClassifier(**SMALL_RNN, **SHORT).fit([np.zeros((3, 1)), np.zeros((4, 1))] * 10, np.arange(20) % 2)
    with pytest.raises(ValueError, match="n_lags must be a positive integer, got True"):
        make_forecasting_windows(s, n_lags=True)
    with pytest.raises(ValueError, match="expects X of shape"):
        seq.fit(Xtr[:, :, None, None], ytr > 0.5)
    # one window, or a series, as a 1-D X: not scikit-learn's "reshape(-1, 1)", which makes n one-step sequences
    for one in (Xte[0], list(Xte[0])):
        with pytest.raises(ValueError, match=r"got a 1-D X of 4 values. Reshape your data: for one sequence, pass "
                                             r"X.reshape\(1, -1\)"):
            seq.predict(one)
    with pytest.raises(ValueError, match="make_forecasting_windows"):
        BayesianRNNRegressor(**SMALL_RNN, **SHORT).fit(s, s)


@pytest.mark.parametrize("sampler", available_samplers())
@pytest.mark.parametrize("kind", ["cnn-classifier", "rnn-regressor"])
def test_every_sampler_runs_each_architecture(sampler, kind, digits, henon):
    kwargs = {**SHORT, "n_draws": 4, "burn_in": 20, "thinning": 1, "sampler": sampler,
              **sampler_settings.ESTIMATOR[sampler]}
    if kind == "cnn-classifier":
        Xtr, Xte, ytr, _ = digits
        est = BayesianCNNClassifier(**SMALL_CNN, input_shape=(1, 8, 8), **kwargs).fit(Xtr[:256], ytr[:256])
        out = est.predict_proba(Xte[:20])
        assert out.shape == (20, 10)
    else:
        Xtr, ytr, Xte, _ = henon
        est = BayesianRNNRegressor(**SMALL_RNN, cell="gru", **kwargs).fit(Xtr, ytr)
        out = est.predict(Xte[:20], return_std=True)[1]
    assert np.all(np.isfinite(out))
    assert np.isfinite(est.diagnostics_["potential"]) and est.n_draws_kept_ > 0


def test_gridsearch_clone_and_pickle(digits):
    Xtr, Xte, ytr, yte = digits
    base = BayesianCNNClassifier(**SMALL_CNN, input_shape=(1, 8, 8), **SHORT)
    grid = GridSearchCV(base, {"sampler": ["sgld", "sghmc"], "sampler__step_size": [1e-5, 3e-5]}, cv=2)
    grid.fit(Xtr[:300], ytr[:300])
    assert set(grid.best_params_) == {"sampler", "sampler__step_size"}
    est = grid.best_estimator_
    assert clone(est).get_params()["input_shape"] == (1, 8, 8)
    again = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(again.predict_proba(Xte), est.predict_proba(Xte))


def test_several_chains_of_a_recurrent_net(henon):
    """The chain axis serves the RNN as it serves the MLP: one batched pass, per-chain draws and R-hat."""
    Xtr, ytr, Xte, _ = henon
    est = BayesianRNNRegressor(**SMALL_RNN, n_chains=3, **SHORT).fit(Xtr, ytr)
    assert est.trace_.n_slots == 3 and est.n_draws_kept_ == 30
    assert est.predict_draws(Xte).shape == (30, len(Xte))
    assert "potential" in est.convergence_


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("sampler", available_samplers())
@pytest.mark.parametrize("cls", [BayesianMLPClassifier, BayesianCNNClassifier, BayesianRNNRegressor])
def test_cuda_every_sampler_each_architecture_and_cpu_reload(cls, sampler, digits, henon):
    kwargs = {**SHORT, "n_draws": 4, "burn_in": 20, "thinning": 1, "sampler": sampler, "device": "cuda",
              **sampler_settings.ESTIMATOR[sampler]}
    if cls is BayesianRNNRegressor:
        Xtr, ytr, Xte, _ = henon
        est = cls(**SMALL_RNN, **kwargs)
    else:
        Xtr, Xte, ytr, _ = digits
        Xtr, ytr = Xtr[:256], ytr[:256]
        est = cls(**SMALL_CNN, **kwargs) if cls is BayesianCNNClassifier else cls((16,), **kwargs)
    est.fit(Xtr, ytr)
    assert est.sampler_state_.position[0].device.type == "cuda"
    assert est.trace_.draws().device.type == "cpu"  # draws are stored on the CPU
    # probabilities, not labels: after 24 steps a class can win by less than the GPU's and the CPU's float32
    # rounding differ (at the second GPU lease one CNN label of 50 flipped between the two devices)
    predict = "predict" if cls is BayesianRNNRegressor else "predict_proba"
    expected = getattr(est, predict)(Xte[:50])
    blob = pickle.dumps(est)
    again = pickle.loads(blob)
    np.testing.assert_allclose(getattr(again, predict)(Xte[:50]), expected, atol=1e-4)
    # a CUDA-fitted model predicts on the CPU where there is no GPU (simulated by its unpickling hook)
    state = again.__getstate__()
    again.device_ = torch.device("cpu")
    again.module_.to("cpu")
    # cuDNN convolves in TF32 by default (torch.backends.cudnn.allow_tf32): the CNN's probabilities differed
    # from the CPU's by up to 1.9e-4 at the second GPU lease
    np.testing.assert_allclose(getattr(again, predict)(Xte[:50]), expected, atol=1e-3)
    assert state is not None


def test_a_chain_that_runs_hot_stops_as_a_divergence(henon):
    """A finite but exploding chain (found while building this: SGHMC at its default step on a CNN regressor
    climbed from a potential of 1e3 to 1e8, predictions 1e12, without overflowing) stops once, after its
    warm-up, its kinetic temperature passes temperature_tolerance times its target; during the warm-up only a
    temperature held above warmup_temperature_limit for warmup_patience steps counts (the sklearn checks' raw
    data gives a first kick of 1e6 that decays). Shown on a healthy chain (kinetic temperature about 1) by
    setting the limits below it; the draws before are kept."""
    Xtr, ytr, _, _ = henon
    # an explicit step size: no warm-up (a warmed-up sampler guards its own warm-up, and the monitor starts after)
    est = BayesianRNNRegressor(**SMALL_RNN, n_draws=50, burn_in=10, thinning=1, random_state=0,
                               sampler__step_size=1e-4, callbacks__divergence__temperature_tolerance=0.01)
    with pytest.raises(DivergenceError, match=r"kinetic temperature far above its target.*Reduce the step"):
        est.fit(Xtr, ytr)
    # found at the first read after the warm-up (every check_every = 50 steps), which judges steps 11-50
    assert est.fit_status_["diverged_chains"][0]["step"] == 50 and est.sampler_state_.step == 50
    # a run that ends between two reads is judged at its end: here a user's callback interrupts it at step 30
    from skorch.callbacks import Callback

    class StopAt30(Callback):
        def on_batch_end(self, net, training=False, **kwargs):
            if training and net.sampler_state_.step == 30:
                raise KeyboardInterrupt

    est.set_params(callbacks=[("stop", StopAt30())])
    with pytest.raises(DivergenceError, match="kinetic temperature far above"):
        est.fit(Xtr, ytr)
    assert est.fit_status_["diverged_chains"][0]["step"] == 30 and est.sampler_state_.step == 30
    # ... and so is one that an error ends (skorch calls on_train_end only after an interrupt): the diverging
    # chain's steps are judged and recorded, its draws from steps 11-30 discarded, and the error itself propagates
    class FailAt30(Callback):
        def on_batch_end(self, net, training=False, **kwargs):
            if training and net.sampler_state_.step == 30:
                raise RuntimeError("a user's callback failed")

    est.set_params(callbacks=[("fail", FailAt30())])
    with pytest.raises(RuntimeError, match="a user's callback failed"):
        est.fit(Xtr, ytr)
    status = est.fit_status_
    assert status["status"] == "diverged" and status["diverged_chains"][0]["step"] == 30
    assert status["diverged_chains"][0]["draws_discarded"] > 0 and len(est.trace_) == 0
    est.set_params(callbacks=None, callbacks__divergence__temperature_tolerance=50.0,
                   callbacks__divergence__warmup_temperature_limit=0.01, callbacks__divergence__warmup_patience=5,
                   burn_in=20)
    with pytest.raises(DivergenceError, match="kinetic temperature far above"):
        est.fit(Xtr, ytr)
    # held for 5 steps within the warm-up; found at the next read (step 50)
    assert est.sampler_state_.step == 50
    est.set_params(callbacks__divergence__warmup_patience=10**6)
    est.fit(Xtr, ytr)  # below the patience the warm-up's heat is tolerated
    assert est.fit_status_["status"] == "complete"




def test_a_cnn_refuses_a_1d_x_with_its_own_layouts():
    """Stop 54's user finding: a 1-D X got scikit-learn's "reshape(-1, 1) if your data has a single feature", which
    makes one-value samples of the one sample a user meant; the CNN names its own layouts, at fit and at predict."""
    import warnings

    from bayesnet import BayesianCNNClassifier

    X = np.random.default_rng(0).normal(size=(40, 8))
    y = (X[:, 0] > 0).astype(int)
    est = BayesianCNNClassifier(input_shape=(1, 8), burn_in=20, n_draws=2, random_state=0)
    with pytest.raises(ValueError, match=r"expects X of shape \(n_samples, prod\(input_shape\)\) or \(n_samples, "
                                         r"\*input_shape\), got a 1-D X of 40 values. Reshape your data: for one "
                                         r"sample, pass X.reshape\(1, -1\)"):
        est.fit(X[:, 0], y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    for one in (X[0], list(X[0])):
        with pytest.raises(ValueError, match="got a 1-D X of 8 values"):
            est.predict(one)
    assert est.predict(X[:1]).shape == (1,)
