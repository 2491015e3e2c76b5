"""The networks behind the estimators, each evaluable for ``S`` parameter sets at once.

Every module here has the usual ``forward(X)`` and a ``forward_chains(parameters,
X)`` that evaluates ``S`` parameter sets (chains, tempering replicas, ensemble
walkers while sampling; posterior draws while predicting) together: batched
matrix products for dense layers, grouped convolutions for convolutional
ones, and for recurrent layers PyTorch's fused LSTM/GRU kernel once per member
or cells written out as batched products, whichever measured faster (see
:meth:`RNN.forward_chains`). ``parameters`` lists the module's
trainable parameters in ``named_parameters`` order, each with a leading axis
of ``S``. :func:`bayesnet.posterior.batched_outputs` calls it (and falls back
to ``torch.func.vmap`` over ``functional_call`` for modules without one).

A new architecture is a module here (``forward_chains`` optional but faster)
plus a thin estimator class in :mod:`bayesnet.estimators`.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import warnings

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["MLP", "CNN", "RNN", "linear_chains", "wide_products", "ACTIVATIONS"]

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid, "logistic": nn.Sigmoid,
               "gelu": nn.GELU, "identity": nn.Identity}


def _activation(name: str) -> nn.Module:
    if name not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {name!r}.")
    return ACTIVATIONS[name]()


#: Per activation module (as :data:`ACTIVATIONS` makes them), its forward ``(module, h)`` and its backward
#: ``(module, cotangent, pre-activation, activation) -> cotangent``: the kernels autograd itself runs for it
#: (:meth:`_DenseHead.vjp_chains`; functions, not the module's call, whose Python costs as much as the kernel here).
_ACTIVATION_VJP = {
    nn.ReLU: (lambda m, h: torch.relu(h), lambda m, g, pre, out: torch.ops.aten.threshold_backward(g, out, 0)),
    nn.Tanh: (lambda m, h: torch.tanh(h), lambda m, g, pre, out: torch.ops.aten.tanh_backward(g, out)),
    nn.Sigmoid: (lambda m, h: torch.sigmoid(h), lambda m, g, pre, out: torch.ops.aten.sigmoid_backward(g, out)),
    nn.GELU: (lambda m, h: F.gelu(h, approximate=m.approximate),
              lambda m, g, pre, out: torch.ops.aten.gelu_backward(g, pre, approximate=m.approximate)),
    nn.Identity: (lambda m, h: h, lambda m, g, pre, out: g),
}

_WIDE = contextvars.ContextVar("bayesnet_wide_products", default=False)


@contextlib.contextmanager
def wide_products():
    """Within this context (prediction), a shared input meets all members' weights in one wide product.

    Sampling never uses it, so that a member's arithmetic does not depend on how many members run beside it:
    the batched product gives every member bit for bit the result it gets alone.
    """
    token = _WIDE.set(True)
    try:
        yield
    finally:
        _WIDE.reset(token)


def linear_chains(h: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """``S`` affine maps at once: ``h`` (n, in) shared or (S, n, in); ``weight`` (S, out, in); ``bias`` (S, out).

    Returns (S, n, out). While sampling every member's map is one entry of a batched ``baddbmm``, whatever
    ``S``: a member's forward and gradient are then bit for bit those it gets alone, so chain ``k`` does not
    depend on the chains beside it. A map with one output (a regressor's head) is computed the other way round,
    ``weight (S, 1, in) x h^T (S, in, n)``: as ``h x weight^T`` its product has a single column, a
    matrix-vector product that the CPU's BLAS rounds differently for one member than for several (torch 2.13,
    from 7 rows x 64 inputs and 60 x 8 up), while the row-times-matrix form, its gradients included, is bit for
    bit the same whatever ``S`` (measured on 1-4096 rows and 1-784 inputs) and as fast (an elementwise product
    summed per member was too, but 1.2-3x slower from 784 inputs). Inside :func:`wide_products`
    (prediction) a shared input is one ``(n, in) x (in, S*out)`` product instead, 0-25 % faster there (measured
    on 784-100-10 and 30-16-2 MLPs, 4-200 members).
    """
    if h.ndim == 2 and not torch.compiler.is_compiling() and _WIDE.get():  # (compiled: sampling only)
        S, out, _ = weight.shape
        flat = torch.addmm(bias.reshape(1, S * out), h, weight.reshape(S * out, -1).t())
        return flat.view(h.shape[0], S, out).transpose(0, 1)
    if h.ndim == 2:
        h = h.expand(weight.shape[0], *h.shape)
    if weight.shape[1] == 1:  # one output (a regressor's head): a row times the inputs, see above
        return torch.baddbmm(bias.unsqueeze(-1), weight, h.transpose(1, 2)).transpose(1, 2)
    return torch.baddbmm(bias.unsqueeze(1), h, weight.transpose(1, 2))


def _positive_integers(values) -> bool:
    """Whether every entry of ``values`` is a positive whole number (not a bool or a string; 3.0 counts)."""
    try:
        return all(not isinstance(v, (bool, str, bytes)) and int(v) == v and v >= 1 for v in values)
    except (TypeError, ValueError, OverflowError):  # (None, NaN, infinity, an object without int)
        return False


def _dense_sizes(sizes, name: str) -> tuple[int, ...]:
    if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__"):
        sizes = (sizes,)
    sizes = tuple(sizes)
    if not _positive_integers(sizes):
        raise ValueError(f"{name} must be positive integers, got {sizes!r}.")
    return tuple(int(h) for h in sizes)


class _DenseHead(nn.Module):
    """``in -> sizes... -> n_outputs`` with ``activation`` after every hidden layer."""

    def __init__(self, n_in: int, sizes, n_outputs: int, activation: str, name: str = "dense_layer_sizes"):
        super().__init__()
        dims = [int(n_in), *_dense_sizes(sizes, name), int(n_outputs)]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.activation = _activation(activation)

    def forward(self, h: Tensor) -> Tensor:
        for i, layer in enumerate(self.layers):
            h = layer(h)
            if i < len(self.layers) - 1:
                h = self.activation(h)
        return h

    def forward_chains(self, parameters, h: Tensor) -> Tensor:
        for i in range(len(self.layers)):
            h = linear_chains(h, parameters[2 * i], parameters[2 * i + 1])
            if i < len(self.layers) - 1:
                h = self.activation(h)
        return h

    def vjp_chains(self, parameters, h: Tensor):
        """:meth:`forward_chains` with its vector-Jacobian product written out, for sampling: ``(outputs, vjp)``,
        ``outputs`` (S, n, out) computed without a graph and ``vjp(cotangent)`` the gradients of ``<cotangent,
        outputs>`` with respect to ``parameters`` (each shaped like its tensor), ``cotangent`` (S, n, out).

        The backward is the one autograd runs for :meth:`forward_chains` (the same batched products and the
        activations' own backward kernels), without building a graph: on a small network a step is mostly
        per-operation overhead, and autograd's engine cost half of a default fit's gradient (measured: breast
        cancer's 30-100-2 MLP at batch 128, 330 -> 190 microseconds with the categorical likelihood's closed form).
        Always the sampling layout (one batched ``baddbmm`` per layer, never :func:`wide_products`). None for an
        activation without a backward here (:data:`_ACTIVATION_VJP`) and for a subclass with its own
        ``forward_chains`` (whose backward this is not): autograd then runs.
        """
        functions = _ACTIVATION_VJP.get(type(self.activation))
        if functions is None or type(self).forward_chains is not _DenseHead.forward_chains:
            return None
        module, (forward, backward) = self.activation, functions
        n_layers = len(self.layers)
        inputs, saved = [], []
        with torch.no_grad():  # (no graph: the leaves need no detaching)
            for i in range(n_layers):
                weight, bias = parameters[2 * i], parameters[2 * i + 1]
                if h.ndim == 2:  # (expanded here, to be kept for the backward; linear_chains' batched path)
                    h = h.expand(weight.shape[0], *h.shape)
                inputs.append(h)
                h = linear_chains(h, weight, bias)
                if i < n_layers - 1:
                    pre = h
                    h = forward(module, h)
                    saved.append((pre, h))
        weights = parameters[0::2]

        def vjp(cotangent: Tensor) -> list[Tensor]:
            grads = [None] * (2 * n_layers)
            g = cotangent
            with torch.no_grad():
                for i in reversed(range(n_layers)):
                    if i < n_layers - 1:
                        g = backward(module, g, *saved[i])
                    grads[2 * i + 1] = g.sum(1)
                    if weights[i].shape[1] == 1:  # linear_chains' row-times-matrix form, as autograd runs it
                        grads[2 * i] = g.transpose(1, 2).bmm(inputs[i])
                        if i > 0:
                            g = weights[i].transpose(1, 2).bmm(g.transpose(1, 2)).transpose(1, 2)
                        continue
                    grads[2 * i] = inputs[i].transpose(1, 2).bmm(g).transpose(1, 2)
                    if i > 0:
                        g = g.bmm(weights[i])
            return grads

        return h, vjp

    def widest(self) -> int:
        return max(layer.out_features for layer in self.layers)


class MLP(nn.Module):
    """Fully connected network ``in -> hidden... -> out`` with one activation between layers.

    Parameters
    ----------
    n_features : int
    hidden_layer_sizes : tuple of int
    n_outputs : int
    activation : {"relu", "tanh", "sigmoid"/"logistic", "gelu", "identity"}

    Raises
    ------
    ValueError
        For an unknown activation or non-positive layer sizes.
    """

    def __init__(self, n_features: int, hidden_layer_sizes=(100,), n_outputs: int = 1, activation: str = "relu"):
        super().__init__()
        self.head = _DenseHead(n_features, hidden_layer_sizes, n_outputs, activation, "hidden_layer_sizes")

    def forward(self, X: Tensor) -> Tensor:
        return self.head(X)

    def forward_chains(self, parameters, X: Tensor) -> Tensor:
        """Outputs of ``S`` parameter sets at once, shape ``(S, n, n_outputs)``.

        ``X`` is ``(n, n_features)`` (shared by the members) or
        ``(S, n, n_features)``. Batched matrix products: on a CPU measurably
        faster than ``vmap`` over ``functional_call`` (benchmarks/chains_vectorised.py).
        """
        return self.head.forward_chains(list(parameters), X)

    def vjp_chains(self, parameters, X: Tensor):
        """:meth:`forward_chains` and its vector-Jacobian product without autograd, for sampling: ``(outputs,
        vjp)`` (see :meth:`_DenseHead.vjp_chains`), or None (autograd runs) for an activation it does not cover
        and for a subclass with its own ``forward_chains`` or head."""
        head_vjp = getattr(self.head, "vjp_chains", None)
        if head_vjp is None or type(self).forward_chains is not MLP.forward_chains:
            return None
        return head_vjp(list(parameters), X)

    def activations_per_row(self, sample_shape=None) -> int:
        """Widest layer: the activations one input row needs at once (prediction chunking)."""
        return self.head.widest()


class CNN(nn.Module):
    """Convolutional network for 1-D signals ``(C, L)`` or images ``(C, H, W)``.

    ``conv -> activation -> max-pool`` for every entry of ``channels``, then
    the flattened feature map through dense layers to the output: Luo et al. 2018
    Sec. 5.2's CIFAR-10 network with the defaults (two 3x3 convolutions with
    16 channels, stride 1, ReLU and 2x2 pooling, dense 100, output).
    Convolutions keep the spatial size ("same" padding), so that small inputs
    (8x8 digits, 40-sample signals) survive the pooling; pooling rounds up
    (a size-1 axis stays 1).

    Parameters
    ----------
    input_shape : tuple of int
        ``(channels, length)`` or ``(channels, height, width)`` of one sample.
    n_outputs : int
    channels : tuple of int, default=(16, 16)
        Output channels of the convolutional layers.
    kernel_size : int, default=3
        Odd side length of every (square) kernel.
    dense_layer_sizes : tuple of int, default=(100,)
    pool_size : int, default=2
        Max-pooling window and stride after each convolution (1: no pooling).
    activation : str, default="relu"

    Raises
    ------
    ValueError
        For an input shape that is not 2 or 3 positive integers, an even or
        non-positive kernel size, or non-positive sizes.
    """

    def __init__(self, input_shape, n_outputs: int, channels=(16, 16), kernel_size: int = 3,
                 dense_layer_sizes=(100,), pool_size: int = 2, activation: str = "relu"):
        super().__init__()
        input_shape = tuple(int(s) for s in input_shape)
        if len(input_shape) not in (2, 3) or min(input_shape) < 1:
            raise ValueError(f"input_shape must be (channels, length) or (channels, height, width), got {input_shape}.")
        if isinstance(kernel_size, bool) or int(kernel_size) != kernel_size or kernel_size < 1 or kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be a positive odd integer, got {kernel_size!r}.")
        if isinstance(pool_size, bool) or int(pool_size) != pool_size or pool_size < 1:
            raise ValueError(f"pool_size must be a positive integer, got {pool_size!r}.")
        channels = _dense_sizes(channels, "channels")
        if not channels:
            raise ValueError("channels must hold at least one convolutional layer's output channels, got ().")
        self.input_shape = input_shape
        self.dim = len(input_shape) - 1
        self.kernel_size = int(kernel_size)
        self.pool_size = int(pool_size)
        conv = nn.Conv1d if self.dim == 1 else nn.Conv2d
        dims = [input_shape[0], *channels]
        self.convs = nn.ModuleList(conv(a, b, self.kernel_size, padding="same") for a, b in zip(dims[:-1], dims[1:]))
        self.activation = _activation(activation)
        spatial = list(input_shape[1:])
        self._widest = input_shape[0] * math.prod(spatial)
        for c in channels:
            self._widest = max(self._widest, c * math.prod(spatial))
            spatial = [math.ceil(s / self.pool_size) for s in spatial]
        self.n_flat = channels[-1] * math.prod(spatial)
        self.head = _DenseHead(self.n_flat, dense_layer_sizes, n_outputs, activation)

    def _pool(self, h: Tensor) -> Tensor:
        if self.pool_size == 1:
            return h
        pool = F.max_pool1d if self.dim == 1 else F.max_pool2d
        # ceil_mode: a trailing partial window is kept; padding an axis shorter than the window keeps it
        pad = [0, 0] * self.dim
        for k, s in enumerate(h.shape[2:][::-1]):
            if s < self.pool_size:
                pad[2 * k + 1] = self.pool_size - s
        if any(pad):
            h = F.pad(h, pad, value=float("-inf"))
        return pool(h, self.pool_size, ceil_mode=True)

    def forward(self, X: Tensor) -> Tensor:
        h = X
        for conv in self.convs:
            h = self._pool(self.activation(conv(h)))
        return self.head(h.flatten(1))

    def forward_chains(self, parameters, X: Tensor) -> Tensor:
        """Outputs of ``S`` parameter sets at once, shape ``(S, n, n_outputs)``.

        ``X`` is ``(n, C, *spatial)`` (shared) or ``(S, n, C, *spatial)``.
        The members' feature maps ride on the channel axis, ``(n, S*C,
        *spatial)``: the first convolution of a shared input is one
        convolution with ``S*C_out`` filters, the later ones grouped
        convolutions with ``groups=S``.
        """
        parameters = list(parameters)
        S = parameters[0].shape[0]
        conv = F.conv1d if self.dim == 1 else F.conv2d
        if X.ndim == self.dim + 3:  # (S, n, C, *spatial): members on the channel axis
            h = X.transpose(0, 1).reshape(X.shape[1], S * X.shape[2], *X.shape[3:])
            groups = S
        else:
            h, groups = X, 1
        for i in range(len(self.convs)):
            weight, bias = parameters[2 * i], parameters[2 * i + 1]
            h = conv(h, weight.reshape(S * weight.shape[1], *weight.shape[2:]), bias.reshape(-1),
                     padding="same", groups=groups)
            h = self._pool(self.activation(h))
            groups = S
        n = h.shape[0]
        h = h.reshape(n, S, -1).transpose(0, 1)  # (S, n, C*spatial): each member's map flattened as in forward
        return self.head.forward_chains(parameters[2 * len(self.convs):], h)

    def activations_per_row(self, sample_shape=None) -> int:
        """Largest feature map (or dense layer) of one input row, in activations."""
        return max(self._widest, self.head.widest())


class RNN(nn.Module):
    """Recurrent network over sequences ``(n, T, n_features)``: LSTM or GRU layers, then dense layers.

    The last layer's final hidden state goes through the activation and the
    dense layers to the output: Luo et al. 2018 Sec. 5.2's RNN with the defaults
    (LSTM with 128 units, ReLU, dense 64 with ReLU, output). The cells follow
    PyTorch's ``nn.LSTM``/``nn.GRU`` equations, parameter names, gate order
    and initialisation (uniform in ``+-1/sqrt(hidden_size)``), so weights
    copy across. ``forward_chains`` evaluates ``S`` parameter sets either by
    PyTorch's fused recurrent kernel once per member (the op behind
    ``nn.LSTM``/``nn.GRU``, called with the member's own weight tensors) or
    by cells written out as batched matrix products; see
    :meth:`forward_chains` for which runs when.

    Parameters
    ----------
    n_features : int
        Inputs per time step.
    n_outputs : int
    hidden_size : int, default=128
    num_layers : int, default=1
    dense_layer_sizes : tuple of int, default=(64,)
    cell : {"lstm", "gru"}, default="lstm"
    activation : str, default="relu"

    Raises
    ------
    ValueError
        For an unknown cell or activation or non-positive sizes.
    """

    _GATES = {"lstm": 4, "gru": 3}
    KERNELS = ("auto", "fused", "batched")
    #: the fused kernels (``torch._VF.lstm``/``gru``, which return a tuple) stop TorchDynamo ("torch.* op returned
    #: non-Tensor"), and sampling runs them under autograd: a compiled transition is never tried
    #: (:func:`bayesnet.samplers.compiled.compile_decision`)
    compiles = False
    # Without autograd, a GRU with several members runs the batched cells below this many activations
    # per member and step (rows x hidden_size). The batched cells take members in groups of at most
    # _GROUP_ACTIVATIONS activations per step. Measured by benchmarks/rnn_speed.py --grid.
    _GRU_BATCHED_BELOW = 8192
    _GROUP_ACTIVATIONS = 2**17

    def __init__(self, n_features: int, n_outputs: int, hidden_size: int = 128, num_layers: int = 1,
                 dense_layer_sizes=(64,), cell: str = "lstm", activation: str = "relu"):
        super().__init__()
        if cell not in self._GATES:
            raise ValueError(f"cell must be 'lstm' or 'gru', got {cell!r}.")
        (hidden_size,) = _dense_sizes(hidden_size, "hidden_size")
        (num_layers,) = _dense_sizes(num_layers, "num_layers")
        self.cell, self.hidden_size, self.num_layers = cell, hidden_size, num_layers
        gates = self._GATES[cell] * hidden_size
        bound = 1.0 / math.sqrt(hidden_size)
        for k in range(num_layers):
            n_in = int(n_features) if k == 0 else hidden_size
            for name, shape in ((f"weight_ih_l{k}", (gates, n_in)), (f"weight_hh_l{k}", (gates, hidden_size)),
                                (f"bias_ih_l{k}", (gates,)), (f"bias_hh_l{k}", (gates,))):
                self.register_parameter(name, nn.Parameter(torch.empty(shape).uniform_(-bound, bound)))
        self.activation = _activation(activation)
        self.head = _DenseHead(hidden_size, dense_layer_sizes, n_outputs, activation)

    def forward(self, X: Tensor) -> Tensor:
        return self.forward_chains([p.unsqueeze(0) for p in self.parameters()], X)[0]

    def kernel_for(self, n_members: int, n_rows: int, grad: bool | None = None) -> str:
        """Which implementation ``forward_chains(kernel="auto")`` runs: ``"fused"`` or ``"batched"``.

        Parameters
        ----------
        n_members : int
            ``S``, the parameter sets evaluated together.
        n_rows : int
            Sequences ``n`` per member.
        grad : bool, optional
            Whether autograd records the pass (default: ``torch.is_grad_enabled()``).

        Returns
        -------
        str
            ``"batched"`` inside a ``torch.func`` transform, and without
            autograd for a GRU with ``n_members > 1`` and
            ``n_rows * hidden_size`` below 8192; ``"fused"`` otherwise, and
            always under autograd. The rule is measured: see
            :meth:`forward_chains`.
        """
        grad = torch.is_grad_enabled() if grad is None else bool(grad)
        if torch._C._functorch.maybe_current_level() is not None:
            return "batched"  # inside a torch.func transform (vmap): the fused op has no batching rule
        if not grad and n_members > 1 and self.cell == "gru" and n_rows * self.hidden_size < self._GRU_BATCHED_BELOW:
            return "batched"
        return "fused"

    def forward_chains(self, parameters, X: Tensor, kernel: str = "auto") -> Tensor:
        """Outputs of ``S`` parameter sets at once, shape ``(S, n, n_outputs)``.

        Parameters
        ----------
        parameters : sequence of Tensor
            The module's parameters in ``named_parameters`` order, each
            ``(S, *shape)``. Gradients flow back to these tensors.
        X : Tensor, shape (n, T, n_features) or (S, n, T, n_features)
            Shared by the members, or one block per member.
        kernel : {"auto", "fused", "batched"}, default="auto"
            ``"fused"``: PyTorch's fused LSTM/GRU op (``torch._VF.lstm`` /
            ``torch._VF.gru``, what ``nn.LSTM.forward`` calls) once per
            member, all layers in one call, on that member's slices ``p[s]``
            of ``parameters`` (autograd carries the gradients back to them).
            On a CPU in float32 the LSTM runs oneDNN's kernels, forward and
            backward; the GRU runs PyTorch's own step loop.
            ``"batched"``: the cells written out for the members together,
            each layer's input projection of all steps in one product, then
            one ``baddbmm`` ``(S, n, H) x (S, H, G*H)`` and the gate
            arithmetic per step; members go in groups of at most 2**17
            activations per step (``group * n * hidden_size``).
            ``"auto"`` (:meth:`kernel_for`) runs the fused kernel under
            autograd (sampling), for any ``S``: every member's recurrent
            layers are then computed alone, bit for bit as with ``S = 1``,
            so a chain does not depend on the chains run beside it. Without
            autograd (prediction) it runs the batched cells for a GRU with
            several members of fewer than 8192 activations per step
            (``n * hidden_size``), the fused kernel otherwise. Inside a ``torch.func`` transform it runs the
            batched cells (the fused op has no ``vmap`` rule). Measured by
            ``benchmarks/rnn_speed.py`` (CPU, one thread, float32; ratios
            batched / fused): the LSTM 1.0-4.3 with autograd and 1.1-13
            without, except with 16-64 members of hidden size 8 over 10
            steps (0.65-0.71); the GRU without autograd 0.3-0.9 below the
            threshold and 0.94-1.1 above it. With autograd the GRU's batched
            cells were faster for several small members (0.2-0.8 below
            16384 activations per step), a speed the fused rule gives up for
            chains independent of ``S``. At the default size (128 rows of
            hidden 128, 150 steps) the fused kernel costs per member what one
            ``nn.LSTM``/``nn.GRU`` forward and backward costs.

        Raises
        ------
        ValueError
            For an unknown ``kernel``.
        """
        if kernel not in self.KERNELS:
            raise ValueError(f"kernel must be one of {self.KERNELS}, got {kernel!r}.")
        parameters = list(parameters)
        n_cell = 4 * self.num_layers
        S, n = parameters[0].shape[0], X.shape[-3]
        if kernel == "auto":
            kernel = self.kernel_for(S, n)
        if kernel == "batched":  # members in groups of at most _GROUP_ACTIVATIONS activations per step
            group = max(1, self._GROUP_ACTIVATIONS // (n * self.hidden_size))
            h = self.activation(torch.cat([self._batched_cells([p[lo: lo + group] for p in parameters[:n_cell]],
                                                               X if X.ndim == 3 else X[lo: lo + group])
                                           for lo in range(0, S, group)]))
        else:  # the activation too per member: elementwise kernels round a tensor's tail differently
            h = torch.stack([self.activation(self._fused_member([p[s] for p in parameters[:n_cell]],
                                                                X if X.ndim == 3 else X[s]))
                             for s in range(S)])
        return self.head.forward_chains(parameters[n_cell:], h)

    def _fused_member(self, weights: list[Tensor], x: Tensor) -> Tensor:
        """The last layer's final hidden state ``(n, H)`` of one member through the fused op."""
        h0 = x.new_zeros(self.num_layers, x.shape[0], self.hidden_size)
        args = (weights, True, self.num_layers, 0.0, torch.is_grad_enabled(), False, True)
        with warnings.catch_warnings():
            if x.is_cuda:  # cuDNN copies weights that are not one flat buffer, warning each time
                warnings.filterwarnings("ignore", message="RNN module weights are not part of single contiguous")
            if self.cell == "lstm":
                _, h, _ = torch._VF.lstm(x, (h0, h0), *args)
            else:
                _, h = torch._VF.gru(x, h0, *args)
        return h[-1]

    def _batched_cells(self, parameters: list[Tensor], X: Tensor) -> Tensor:
        """The last layer's final hidden state ``(S, n, H)`` of all members through the written-out cells."""
        H = self.hidden_size
        h_seq = X
        for k in range(self.num_layers):
            w_ih, w_hh, b_ih, b_hh = parameters[4 * k: 4 * k + 4]
            S = w_ih.shape[0]
            if h_seq.ndim == 3:  # shared input (n, T, F)
                n, T, F_in = h_seq.shape
                xp = torch.matmul(h_seq.reshape(n * T, F_in), w_ih.transpose(1, 2))  # (S, n*T, G*H)
            else:
                _, n, T, F_in = h_seq.shape
                xp = torch.bmm(h_seq.reshape(S, n * T, F_in), w_ih.transpose(1, 2))
            # one view per step through unbind: indexing xp[t] instead would make every step's backward
            # scatter into a zero-filled (T, S, n, G*H) gradient (quadratic in T: 18x slower at T = 150)
            steps = (xp + b_ih.unsqueeze(1)).view(S, n, T, -1).permute(2, 0, 1, 3).contiguous().unbind(0)
            w_hh_t = w_hh.transpose(1, 2)
            b_hh = b_hh.unsqueeze(1)
            h = xp.new_zeros(S, n, H)
            c = xp.new_zeros(S, n, H) if self.cell == "lstm" else None
            last = k == self.num_layers - 1
            outputs = []
            for x_t in steps:
                gh = torch.baddbmm(b_hh, h, w_hh_t)
                if self.cell == "lstm":
                    i, f, g, o = (x_t + gh).chunk(4, dim=-1)
                    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                    h = torch.sigmoid(o) * torch.tanh(c)
                else:
                    xr, xz, xn = x_t.chunk(3, dim=-1)
                    hr, hz, hn = gh.chunk(3, dim=-1)
                    r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
                    h = torch.lerp(torch.tanh(xn + r * hn), h, z)  # (1 - z) * n + z * h
                if not last:
                    outputs.append(h)
            if not last:
                h_seq = torch.stack(outputs, dim=2)  # (S, n, T, H)
        return h

    def activations_per_row(self, sample_shape=None) -> int:
        """Activations one input row holds at once: the gate projections of all ``T`` steps dominate
        (``sample_shape`` is ``(T, n_features)``)."""
        steps = int(sample_shape[0]) if sample_shape else 1
        return max((steps + 2) * self._GATES[self.cell] * self.hidden_size, self.head.widest())
