"""Docstring sections shared by the estimators (numpydoc)."""

CLASSIFIER_DOC = """

    The likelihood is categorical on the network's logits; ``predict_proba``
    averages the class probabilities of the retained posterior draws.
    """

REGRESSOR_DOC = """

    The likelihood is Gaussian with an observation-noise variance that is
    sampled too (inverse-gamma prior, Karagiannis's SGLD notes Sec. 4, Chandra et al. 2019 eq. 5), so
    predictive intervals include aleatoric noise. Targets are standardised
    internally and predictions mapped back.
    """

NOISE_DOC = """    noise_shape, noise_scale : float, default=1.0, 0.1
        Inverse-gamma prior ``IG(noise_shape, noise_scale)`` on the noise
        variance of the *standardised* targets.
"""

SAMPLING_DOC = """    sampler : str, Sampler instance or class, default="sghmc"
        One of :func:`bayesnet.available_samplers`. Its hyperparameters are
        set as ``sampler__<name>=value`` keyword arguments, e.g.
        ``sampler__step_size=1e-4`` (also through ``set_params`` and
        ``GridSearchCV``).
    n_draws : int, default=100
        Number of posterior draws kept per chain (per temperature-1 replica
        or walker for pt-langevin and eqn) for prediction; predictions average
        the draws of all chains.
    burn_in : int or "auto", default="auto"
        Sampler steps (mini-batches) discarded at the start. "auto" is 200
        epochs (passes over the training rows, ``ceil(N / batch)`` steps
        each), at least 1000 and at most 20,000 steps: 1000 up to 640 rows
        at the default 128-row batches, 6,400 for 4,000 rows (the resolved
        number is ``trace_.burn_in``). A fixed 1000 steps was 32 epochs of
        MNIST-1D, and its CNN's and RNN's draws were still improving. They are the
        warm-up (:mod:`bayesnet.samplers.warmup`): with the samplers'
        default ``step_size="auto"`` the diagonal mass matrix and each
        chain's step size are adapted during them and frozen afterwards,
        so the kept draws come from one fixed kernel. Below 200 steps the
        warm-up cannot settle and a ``ConvergenceWarning`` says so (at 0
        none runs: the chains take the sampler's fallback step, 1e-4 for
        sgld, sghmc, sgnht and tacthmc, 0.01 for baoab, eqn and hmc, 0.025
        for pt-langevin, with a unit mass, and the warning says that). An
        explicit ``sampler__step_size`` is used as given (no mass matrix
        unless ``sampler__preconditioner`` asks for one), except by
        ``hmc`` and ``pt-langevin``, which tune it from there on their
        acceptance rate during the burn-in (``sampler__adaptation_steps=0``
        keeps it fixed).
    thinning : int or "auto", default="auto"
        Keep every ``thinning``-th candidate step after burn-in (every step
        is a candidate, except for tacthmc, which offers only the steps at
        unit temperature that are multiples of its ``steps_per_sample``, and
        hmc, where a step is a whole trajectory). "auto" spaces the draws
        like the burn-in: after ``burn_in="auto"`` the ``n_draws`` draws span
        about as many steps as the burn-in, ``floor(burn_in / (n_draws *
        steps_per_draw))`` steps apart but at least the sampler's
        ``default_thinning`` (10; 1 for tacthmc, whose candidates are
        already ``steps_per_sample * wall / plateau`` steps apart, 124 for
        803 weights); after an explicit ``burn_in``, the
        sampler's ``default_thinning``.
    n_chains : int, default=1
        Independent chains. On one device they advance together in one
        batched forward and backward pass (batched matrix products and grouped
        convolutions, :mod:`bayesnet.networks`), all on the same mini-batch; each starts
        from its own random initialisation. pt-langevin runs ``n_replicas``
        tempering replicas per chain, eqn ``n_walkers`` walkers per chain.
        ``convergence_`` reports split R-hat and bulk ESS across them.
    n_jobs : int or None, default=None
        With ``n_chains > 1``: fit groups of chains in ``n_jobs`` joblib
        worker processes (loky by default; inside
        ``joblib.parallel_config(backend="dask")`` on a dask cluster) and
        merge their draws; None keeps all chains vectorised in this process.
        Each group is vectorised in its worker. The layout is the fit's:
        ``partial_fit`` continues a grouped fit in its groups, and chains
        started in this process here (a changed ``n_jobs`` takes effect when
        a ``fit`` starts new chains).
    prior_scale : {"auto", "hierarchical", "fan_in"}, float or prior object, default="auto"
        The prior on the network's weights (:mod:`bayesnet.priors`).
        "hierarchical": a precision with a ``Gamma(1, 1)`` hyperprior for
        every parameter tensor, except the input layer's weights, which have
        one per input (the weights out of it), resampled from its exact conditional by
        a Gibbs step every 10 sampler steps (from half the burn-in on: first
        the chain meets the data at the fan-in scale), so that the data set each
        layer's scale and each input's relevance (Neal 1996's automatic
        relevance determination); until
        the warm-up's final window each Gibbs step is followed by Metropolis
        moves that rescale a tensor and its precisions together, so that the
        layers reach their posterior scale within the warm-up;
        given the precision ``tau`` a weight is ``N(0, 1 / (tau n_in))``
        with ``n_in`` its layer's fan-in
        (``HierarchicalPrior(input_relevance=False)`` gives the input layer
        one precision). "fan_in": that prior at
        ``tau = 1``. "auto" is "hierarchical" for a sampler that samples the
        prior at temperature 1 (pt-langevin with
        ``sampler__tempered="likelihood"`` too) and, for a sampler that
        tempers the prior (tacthmc, pt-langevin, or
        ``sampler__temperature`` other than 1), where a hierarchical prior
        is improper, the fan-in prior at the likelihood's gain:
        ``FanInPrior(gain=2.0)`` for a classifier (wider logits; at gain 1
        the draws were 2.5-5x sghmc's log loss), ``FanInPrior()`` for a
        regressor. A float is the sd of an isotropic Gaussian on every
        weight and bias (the papers' prior); an object with
        ``log_prob(parameters)`` is used as given. An explicit choice always
        overrides "auto". Raises ValueError for "hierarchical" with a
        sampler that tempers the prior.
    standardize_inputs : bool, default=True
        Centre and scale each input feature by its mean and standard
        deviation over the training rows of the first fit (``input_mean_``,
        ``input_scale_``, shape ``(n_features,)``: the columns of tabular
        input, the channels of a CNN's input, the per-step features of a
        sequence), then apply the same map at prediction, as a
        ``StandardScaler`` in front would (one already there makes it a
        no-op). The prior's scale assumes inputs of unit scale: raw
        features of very different scales (breast cancer's span 0.001 to
        4,000) otherwise cost 4 points of accuracy and twice the log loss.
        A feature constant up to rounding (scikit-learn's test) is only
        centred. False feeds the inputs as given (the fitted attributes are
        None) and warns (UserWarning) when a feature's root mean square is
        above 100. Fixed while chains continue: changing it in ``partial_fit`` raises
        ValueError.
    batch_size : int or "auto", default="auto"
        The largest mini-batch (an epoch's rows are spread evenly over
        ``ceil(n / batch_size)`` batches, differing by one row at most);
        -1 for full-batch gradients; "auto" is 128 rows for
        the stochastic-gradient samplers and the full batch for the samplers
        with a Metropolis test that need it (``hmc``, ``pt-langevin``).
    max_epochs : int or None, default=None
        Epochs to run; None runs ``burn_in + n_draws * thinning`` steps
        (for tacthmc ``burn_in + n_draws * thinning * steps_per_sample / 0.2``,
        0.2 being the expected fraction of steps at unit temperature). With
        an int, ``burn_in="auto"`` takes at most the first half of the run.
    compile : bool or "auto", default="auto"
        Compile the sampler's frozen transition (after the warm-up) with
        ``torch.compile`` (:mod:`bayesnet.samplers.compiled`): True
        for every sampler (sgld, sghmc, sgnht, baoab, eqn and tacthmc their
        whole step; hmc its leapfrog step; pt-langevin its gradient), "auto" only for runs
        of at least 50,000 steps after the warm-up, longer than any default
        fit's (the compilation takes 3-15 s on a CPU, and since the MLP's
        written-out gradient the eager step is about as fast as the
        compiled one there; hmc's steps are
        transitions of about ``n_leapfrog`` leapfrog steps, each saving
        2-3 ms on a small MLP, so "auto" is conservative there and
        True compiles shorter hmc runs that repay it); on a GPU "auto"
        compiles runs of at least 100,000 steps after the warm-up, with CUDA
        graphs (``mode="reduce-overhead"``, which removes the launch time
        that dominates a small network's step there, unless
        ``compile__mode``, ``compile__options`` or ``compile__backend``
        choose how to compile), False never. A
        compiled step is the eager step up to float rounding (along a long
        run the rounding can grow, as between any two machines); a failing compiler
        warns once and the run continues eagerly. ``compile__*`` parameters
        (``compile__mode="max-autotune"``, ``compile__backend``, ...) go to
        ``torch.compile``, over ``fullgraph=True, dynamic=False``; a key it
        does not take raises TypeError from ``fit`` before it changes
        anything. (Unlike skorch's
        ``compile``, the module itself is not compiled.)
    device : {"cpu", "cuda", "cuda:N", "mps", "auto"}, default="cpu"
        Where sampling and prediction run ("auto": a CUDA GPU when there is
        one; "mps", Apple's GPU, is accepted but has never run on one; an
        unavailable device is a ValueError from ``fit``).
        Draws are always stored on the CPU; prediction copies them to the
        device once and evaluates them together in blocks of draws x rows
        (all draws at once within an eighth of a GPU's free memory; a
        cache-sized block on a CPU). A model fitted on a GPU unpickles and
        predicts on a machine without one (on the CPU).
    random_state : int, RandomState or None, default=None
        Seeds the initial weights, the mini-batch order and the sampler noise.
    verbose : int, default=0
        1 shows a progress bar over sampler steps.
    **kwargs
        ``sampler__*`` hyperparameters and skorch ``NeuralNet`` options
        (``callbacks``, ``callbacks__<name>`` for a callback the estimator
        has, ``iterator_train__shuffle``, ...); ``fit`` raises ValueError
        for another ``callbacks__<name>`` or ``iterator_train__*`` key.

"""

ATTRIBUTES_DOC = """
    Attributes
    ----------
    classes_ / n_outputs_ / n_features_in_ : fitted data description.
    input_shape_ : tuple of int
        Shape of one sample as the network takes it (``(n_features,)`` for
        the MLP, ``(T, n_features)`` for the RNN, ``(C, L)`` or ``(C, H, W)``
        for the CNN).
    input_mean_, input_scale_ : ndarray of float64, shape (n_features,), or None
        The training mean and standard deviation (1 for a constant feature)
        of each input feature (column, channel or per-step feature) that
        ``standardize_inputs`` subtracts and divides by; None when it is
        False.
    module_ : torch.nn.Module
        The network; its parameters hold the chain's current position.
    n_train_ : int
        Rows the chains were fitted on (the last call's data).
    criterion_, prior_, posterior_ : the likelihood, the prior (for the
        hierarchical prior ``prior_.precision``, float64 ``(S, G)``: each
        member's precisions) and the ``ChainPosterior`` whose
        ``parameters`` are the live positions, ``(S, *shape)``.
    sampler_ : bayesnet.samplers.Sampler
    sampler_state_ : bayesnet.samplers.SamplerState
        The chains' state (``warmup_report`` among it); None in a model
        read from a file.
    plan_ : RunPlan
        The plan of the call that started the chains (burn-in, data size).
    n_draws_kept_ : int
        Draws kept, all chains (``n_draws_`` is its deprecated alias).
    loaded_ : bool
        Whether the model was read from a file (``bayesnet.io.load``): it
        predicts, but holds no chains to continue.
    trace_ : bayesnet.trace.Trace
        The retained draws, one slot per chain (per replica/walker for
        pt-langevin and eqn); ``trace_.as_array()`` is (n_slots, n_draws, D).
    convergence_ : dict
        Convergence in function space, over the draws of all chains
        (rank-normalised split R-hat and bulk/tail ESS, Vehtari et al.
        2021): ``"log_likelihood"`` of 256 fixed training rows
        (``check_rows_``) summed, ``{"rhat", "ess_bulk", "ess_tail",
        "quarters", "rows"}`` (``quarters``: its mean over each quarter of
        the draws, all chains; rising through all four with R-hat above 1.1,
        the chains were most likely still fitting, and the warning asks for
        a longer burn-in);
        ``"pointwise_log_likelihood"``, the same per row for 64 of them,
        ``{"rhat": median, "ess_bulk": median, "rhat_q90": 90th
        percentile, "ess_bulk_q10": 10th percentile, "rows"}`` (the
        warnings read the medians);
        and ``"potential"``. Weights themselves are not checked: hidden
        units are exchangeable, so equivalent modes would look unconverged.
        A ``ConvergenceWarning`` names the figure when R-hat exceeds 1.1,
        the log-likelihood's bulk ESS is below 10, a chain's kinetic
        temperature after burn-in is off its target, the warm-up did not
        settle, or fewer draws than asked for were kept.
    fit_status_ : dict
        How the last call ended: ``status`` ("complete", "short": fewer
        draws than asked for, "interrupted": Ctrl-C, or an error such as
        a ``MemoryError`` that stopped a group of chains with ``n_jobs``;
        ``partial_fit`` resumes either to the planned length, "diverged"),
        ``stopped_by``, ``steps_taken`` and ``steps_planned``,
        ``draws_kept``/``draws_wanted``/``draws_discarded`` (``draws_wanted``:
        ``n_draws`` per member that keeps them, all chains together;
        pt-langevin's hotter replicas' draws come on top, in ``draws_kept``),
        ``diverged_chains`` (per chain: step, draws kept and discarded),
        ``lost_chains`` (groups whose worker died, with ``n_jobs``),
        ``intra_op_threads``: the torch CPU threads the run used (one when a
        step is below ``bayesnet.estimators.run.THREAD_WORK`` floating-point
        operations, else the caller's setting, which is restored after), and
        ``compiled``: "compiled" ("compiled with CUDA graphs ..." where
        ``compile="auto"`` chose them on a GPU) or why the transition ran
        eagerly.
    compiled_step_ : bayesnet.samplers.compiled.CompiledTransition or None
        The compiled transition of this fit (``compile_seconds``, the time
        its compilations took; ``fallback``, why it runs eagerly after a
        failed compilation); not pickled.
    shards_ : list of estimators or None
        With ``n_jobs``: the per-process estimators whose draws were merged.
    diagnostics_ : dict
        Means over the steps after burn-in of the sampler's diagnostics:
        ``potential``, ``kinetic_temperature`` (samplers with momentum; about
        ``temperature`` when the step size is right),
        ``configurational_temperature`` (the virial ``theta . grad U / D``,
        measured at every draw by samplers whose gradients are taken at
        their positions: sgld, sghmc, sgnht, baoab, eqn; about
        ``temperature`` at equilibrium, below it while the positions have
        not reached their typical set; not measured on the compiled path,
        which ``compile="auto"`` takes for runs of 50,000 steps or more
        after the warm-up, 100,000 on a GPU), ``thermostat`` (sgnht),
        ``acceptance_rate`` and ``n_divergent`` (hmc), ``n_steps``, and
        ``max_rhat``/``min_ess_bulk`` over ``convergence_`` (function-space
        quantities only); pt-langevin adds
        its acceptance and swap rates.
    history_ : skorch History
        skorch's per-epoch records (the last 100); the per-step statistics
        are in ``step_stats_`` (``get_step_stats()``, ``get_sample_stats()``).
"""


def estimator_doc(summary: str, task: str, architecture: str) -> str:
    """An estimator's numpydoc docstring: ``summary``, the task's likelihood (``"classifier"`` or
    ``"regressor"``), the ``architecture``'s opening of the Parameters section, the sampling parameters (and
    the regressor's noise prior), then the Attributes section."""
    regressor = task == "regressor"
    return (summary + (REGRESSOR_DOC if regressor else CLASSIFIER_DOC) + architecture + SAMPLING_DOC
            + (NOISE_DOC if regressor else "") + ATTRIBUTES_DOC)
