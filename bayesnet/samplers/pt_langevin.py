"""Langevin-gradient parallel tempering (PT-LG), Chandra et al. 2019 Algorithm 1."""

from __future__ import annotations

import math
from contextlib import nullcontext
from numbers import Integral, Real
from typing import Any

import numpy as np
import torch
from sklearn.utils._param_validation import Interval, StrOptions
from torch import Tensor

from ..plan import ChainLayout
from .base import COMMON_STATS, Potential, Sampler, Stat, StepInfo, data_weighted
from .registry import register_sampler
from .compiled import CompiledPotential, potential_gradients
from .integrators import gaussian_like
from .random import ChainRandom
from .tempering import PTLangevinState, geometric_ladder, rate, swap_log_acceptance, swap_neighbours
from .warmup import Preconditioner

__all__ = ["PTLangevin", "PTLangevinState", "geometric_ladder", "swap_log_acceptance"]


@register_sampler
class PTLangevin(Sampler):
    r"""Langevin-gradient parallel tempering (Chandra et al. 2019, Algorithm 1; "PT-LG").

    Each chain is an ensemble of :math:`R` replicas on a geometric temperature
    ladder :math:`T_m = T_{max}^{m/(R-1)}`, :math:`m = 0, \ldots, R-1`
    (Sec. 3.5; :math:`T_0 = 1`), replica :math:`m` targeting
    :math:`\pi_m(\theta) \propto p(\theta|D)^{\beta_m} = e^{-\beta_m U(\theta)}`,
    :math:`\beta_m = 1/T_m` (Sec. 3.3), with :math:`U = -\log` posterior, the
    potential. One :meth:`step` is one iteration of Algorithm 1's inner loop for
    every replica at once:

    1. (Step 1.1) Draw :math:`l \sim U[0, 1]`. If :math:`l <` ``langevin_prob``,
       propose by a Langevin-gradient step (eqs. 9-12, written for the
       tempered target),

       .. math::

           \theta' \sim \mathcal N(\mu(\theta), \sigma^2 I), \qquad
           \mu(\theta) = \theta - r \beta_m \nabla U(\theta),

       otherwise by a random walk :math:`\theta' \sim \mathcal N(\theta, \sigma^2 I)`.
    2. (Steps 1.2-1.3) Accept with probability :math:`\min(1, \alpha)`,

       .. math::

           \log\alpha = -\beta_m\big(U(\theta') - U(\theta)\big)
               + \log q(\theta|\theta') - \log q(\theta'|\theta),
           \qquad \log q(a|b) = -\frac{|a - \mu(b)|^2}{2\sigma^2}

       for a Langevin proposal (the ratio is 1 for the random walk).
       Each of the two proposal kinds is a Metropolis-Hastings kernel that
       leaves :math:`\pi_m` invariant, and the choice between them does not
       depend on the position, so their mixture does too: the chain is exact
       (no discretisation bias) for a full-data potential.
    3. (Step 2) Every ``swap_interval`` steps, neighbouring replicas of each
       chain are offered an exchange of positions, accepted with probability
       :math:`\min(1, \exp((\beta_i - \beta_j)(U_i - U_j)))`
       (:func:`swap_log_acceptance`). The pairs alternate between the even
       pairs :math:`(0,1), (2,3), \ldots` and the odd pairs
       :math:`(1,2), (3,4), \ldots` on successive swap events (the
       deterministic even-odd scheme; with :math:`R = 2` the one pair is
       offered at every event). Pairs of one event are disjoint and each test
       is a Metropolis-Hastings move on the product target
       :math:`\prod_m \pi_m`, so every event preserves it. The temperatures
       stay with the ladder slots: the positions (and their cached potential
       and gradient) move.

    Sec. 3.5 and 4.1: the ladder is used for the first ``tempering_fraction``
    of the ``n_steps`` steps (global exploration); afterwards every replica
    runs at temperature 1 (local exploration, "canonical MCMC" with ``R``
    chains). In the tempering phase only replica 0 (:math:`T = 1`) of each
    chain is a draw (``StepInfo.is_draw``); in the second phase all replicas
    are. Swaps in the second phase would always be accepted and only relabel
    identically distributed replicas, so they are skipped. The paper discards
    the first 50 % of the samples as burn-in (Sec. 4.1), which also removes
    the replicas' relaxation from their hot states after the switch.

    Parameters
    ----------
    n_replicas : int, default=10
        :math:`R \ge 1` replicas per chain (paper: 10). ``R = 1`` is a single
        Metropolis chain at :math:`T = 1` with Langevin/random-walk proposals.
    max_temperature : float, default=5.0
        :math:`T_{max} \ge 1`, the temperature of the hottest replica (the
        paper evaluates 2-10, Table 2, and finds 4 best for Lazer).
    swap_interval : int, default=100
        Steps between two swap events, :math:`\ge 1` (paper: 100, Table 3).
    langevin_prob : float, default=0.5
        Probability in [0, 1] that a replica's proposal is a Langevin-gradient
        step ("LG-freq", Algorithm 1 line 5; paper Sec. 4.1: 0.5). 0 gives
        PT-RW, which never evaluates a gradient.
    step_size : float or "auto", default="auto"
        :math:`\sigma > 0`, the standard deviation of the proposal noise per
        parameter, in parameter units (paper Sec. 4.1: 0.025 for the
        random walk; eq. 9's :math:`\Sigma_\theta = \sigma^2 I`). "auto"
        starts every slot at :math:`2.38/\sqrt{D\lambda_{max}}` (random-walk
        Metropolis's optimal scale, Roberts et al. 1997, for the largest
        preconditioned curvature) and proposes with the warm-up's diagonal mass
        :math:`M` (``preconditioner``): :math:`\Sigma_\theta = \sigma^2 M^{-1}`,
        drift :math:`r\beta_m M^{-1}\nabla U`.
    langevin_step_size : float or "auto", default="auto"
        :math:`r > 0`, the learning rate of the gradient drift, in
        (parameter units)^2 per unit of potential. "auto" is
        :math:`\sigma^2/2`, the drift of the Metropolis-adjusted Langevin
        algorithm, for which the proposal is the Euler step of the Langevin
        diffusion of :math:`\pi_m` and the acceptance stays high for small
        :math:`\sigma`. The paper's :math:`r = 0.1` (Sec. 4.2) multiplies
        the gradient of the un-normalised squared error :math:`E` of
        eq. (11), not of this potential, so it does not carry over.
    tempering_fraction : float, default=0.6
        Fraction in [0, 1] of ``n_steps`` run on the ladder (paper Sec. 4.1:
        60 %): steps ``1..round(tempering_fraction * n_steps)``. 0 runs every
        replica at :math:`T = 1` from the start, 1 tempers throughout.
    n_steps : int, "auto" or None, default="auto"
        Planned length of the run, in steps; "auto" takes it from the run
        plan (:meth:`configure`). None, or "auto" without a plan: the
        tempering phase never ends (only replica 0 is ever a draw).
    adaptation_steps : int or "auto", default="auto"
        Steps ``1..adaptation_steps`` tune the proposal noise of every ladder
        slot of every chain separately (Robbins-Monro on
        :math:`\log\sigma_m`, gain :math:`k^{-0.6}`) towards
        ``target_accept``; afterwards the step sizes are frozen, so the kept
        draws come from a fixed kernel. 0 keeps the paper's single
        ``step_size`` for every replica. "auto" is the run plan's ``burn_in``
        (:meth:`configure`; 0 without a plan): the paper's 0.025 is
        far from the posterior's scale on some data sets (Henon, Iris in
        ``benchmarks/pt_langevin_paper.py``), and hot replicas want larger
        steps than cold ones. In the second phase every replica uses its
        chain's temperature-1 step size.
    target_accept : float, default=0.25
        Acceptance rate in (0, 1) the adaptation aims at (near the optimal
        0.234 of random-walk Metropolis; the paper reports 5-25 %).
    preconditioner : {"auto", "diagonal", "layer"} or None, default="auto"
        The diagonal mass matrix adapted during the warm-up from the
        gradients' and positions' spreads (:mod:`bayesnet.samplers.warmup`); None is
        the identity (the paper's proposals). "auto" is "diagonal" with
        ``step_size="auto"``, None when a step size is given.
    tempered : {"posterior", "likelihood"}, default="posterior"
        What the ladder tempers. "posterior" is the paper's :math:`\pi_m \propto p(\theta|D)^{\beta_m}`
        (Sec. 3.3): the prior is tempered too, so a prior with hyperparameters (the hierarchical prior, improper
        above :math:`T = 1`) cannot be used and ``prior_scale="auto"`` is the fan-in prior. "likelihood" tempers
        the data term only, :math:`\pi_m \propto p(y|\theta)^{\beta_m} p(\theta|\tau) p(\tau)` (with a
        regressor's noise-variance prior inside the tempered term), which is proper at every temperature: the
        hierarchical prior's Gibbs step is the same at every rung, a swap compares the data terms,
        :math:`\log a = (\beta_i - \beta_j)(U_{D,i} - U_{D,j})`, and exchanges :math:`\tau` with the positions,
        and ``prior_scale="auto"`` is the hierarchical prior (the power posteriors of Friel and Pettitt 2008,
        on a ladder). Both leave replica 0 on the posterior. The potential must then be a
        :class:`~bayesnet.posterior.ChainPosterior` (it weights the data term per member); a compiled gradient
        evaluates the same pure form with the prior's divided by the weight. The warm-up's mass is estimated from
        each member's gradients of its own target, and a hot replica's configurational temperature statistic is
        that of its tempered target.

    Raises
    ------
    ValueError
        From :meth:`validate`, on out-of-range values: non-integer or < 1 ``n_replicas``,
        ``swap_interval`` or ``n_steps``; ``max_temperature < 1``;
        ``langevin_prob`` or ``tempering_fraction`` outside [0, 1];
        ``step_size <= 0``; ``langevin_step_size`` neither "auto" nor > 0;
        ``adaptation_steps`` not an integer >= 0; ``target_accept`` outside (0, 1).

    Notes
    -----
    Positions: every tensor has a leading axis of :math:`S = C R` packed
    members, chain major (replica ``m`` of chain ``c`` at ``c * R + m``);
    :meth:`members_per_chain` is ``R``. The potential returns one value per
    member, shape ``(S,)``, and every member's own gradient. Only ``R = 1``
    without ``n_chains`` takes positions without the leading axis (then
    ``StepInfo.potential`` is 0-d and ``is_draw`` a bool).

    Cost: the potential and gradient at the current positions are cached in
    the state, so a step evaluates the potential once, at the proposals:
    ``value_and_grad`` whenever ``langevin_prob > 0`` (the backward proposal
    density of a Langevin proposal needs :math:`\nabla U(\theta')`, and every
    member keeps a gradient at its position), ``value`` at
    ``langevin_prob = 0``. The choice is the same for every member: the value
    alone and the value with the gradient round differently, so taking the
    gradient only on steps where some replica of some chain proposed a
    Langevin move made each chain depend on the chains beside it. At the
    defaults (10 replicas, ``langevin_prob=0.5``) a step without any Langevin
    proposal is one in a thousand; a small ``langevin_prob`` with few replicas
    pays a gradient on steps that need none. A cache made stale (a restart,
    new data) is recomputed first, on one host synchronisation per step.

    Mini-batches: the Metropolis tests compare the proposal's potential on
    this step's batch with the cached potential of the current position, from
    the batch on which it was accepted, and the Langevin drift uses
    mini-batch gradients; the chain is then no longer exact (as HMC's test on
    mini-batches). Use the full data (the paper does) for exact sampling.

    Departures from the reference code (github.com/sydney-machine-learning/
    parallel-tempering-neural-net), which departs from the paper:

    * The swap test uses :math:`(\beta_i - \beta_j)(U_i - U_j)`, the
      Metropolis-Hastings ratio of Algorithm 1 Step 2.2 for exchanging
      positions; the reference code accepts on the likelihood ratio alone,
      without the temperature difference, which does not preserve the
      tempered targets.
    * The proposal ratio is :math:`\log q(\theta|\theta') - \log q(\theta'|\theta)`,
      not tempered; the reference code divides it by the temperature. The
      temperature enters through the drift :math:`r\beta_m\nabla U`, the
      gradient of the replica's own target.
    * Each chain's replicas draw from that chain's own stream (independent streams); the
      reference code's processes share one random stream.
    * The drift descends :math:`U` (eq. 10 prints ":math:`+ r\nabla E`" of
      the squared error :math:`E`; descent is what is meant), and the whole
      posterior is tempered, :math:`p(\theta|D)^{\beta}` as Sec. 3.3 writes.

    ``StepInfo.extra`` holds, per member (shape ``(S,)``): ``accepted``
    (0/1), ``accept_prob``, ``langevin`` (1 for a Langevin proposal),
    ``temperature`` (of the step) and ``divergent`` (1 when the proposal's
    potential was not finite; it is then rejected); after a swap event also
    ``swap_accept``, the fraction of the offered exchanges accepted.
    :meth:`acceptance_rates` and :meth:`swap_rates` give the running rates
    per replica and per neighbouring pair (the paper's "Accept per." and
    "Swap per.", Tables 2-4).

    References
    ----------
    R. Chandra, K. Jain, R. V. Deo, S. Cripps, "Langevin-gradient parallel
    tempering for Bayesian neural learning", Neurocomputing 2019 (Chandra et al. 2019:
    Sec. 3.3-3.5, eqs. 9-12, Algorithm 1, Sec. 4.1); Roberts and Tweedie,
    Bernoulli 2 (1996) for the Metropolis-adjusted Langevin algorithm;
    Okabe et al., Chem. Phys. Lett. 335 (2001) for the even-odd exchange scheme; N. Friel and A. N. Pettitt,
    "Marginal likelihood estimation via power posteriors", JRSS B 70 (2008) for tempering the likelihood alone.
    """

    name = "pt-langevin"
    # the replicas' inverse temperatures are set in the state at the start: a continued chain keeps its ladder
    state_settings = Sampler.state_settings + ("max_temperature", "tempered")
    full_batch = True  # the Metropolis-Hastings tests are exact only on the full-data potential
    stats = {**COMMON_STATS, "accepted": Stat("mean"), "accept_prob": Stat("mean", "acceptance_rate", "acceptance_rate"),
             "langevin": Stat("mean"), "temperature": Stat("mean"), "divergent": Stat("sum", "n_divergent", "diverging")}
    state_class = PTLangevinState
    _parameter_constraints = {
        "n_replicas": [Interval(Integral, 1, None, closed="left")],
        "max_temperature": [Interval(Real, 1, np.inf, closed="left")],
        "swap_interval": [Interval(Integral, 1, None, closed="left")],
        "langevin_prob": [Interval(Real, 0, 1, closed="both")],
        "step_size": [Interval(Real, 0, np.inf, closed="neither"), StrOptions({"auto"})],
        "langevin_step_size": [Interval(Real, 0, np.inf, closed="neither"), StrOptions({"auto"})],
        "tempering_fraction": [Interval(Real, 0, 1, closed="both")],
        "n_steps": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"}), None],
        "adaptation_steps": [Interval(Integral, 0, None, closed="left"), StrOptions({"auto"})],
        "target_accept": [Interval(Real, 0, 1, closed="neither")],
        "preconditioner": [StrOptions({"auto", "diagonal", "layer"}), None],
        "tempered": [StrOptions({"posterior", "likelihood"})],
    }
    fallback_step_size = 0.025
    member_potentials = True  # (its Metropolis tests and swaps read each member's potential)
    tunes_step_on_acceptance = True
    # the mass is estimated from the gradient at the current positions, taken first in every warm-up step
    # (:meth:`_step`); the proposals' gradients do not count
    warmup_first_gradient_only = True

    def __init__(self, n_replicas: int = 10, max_temperature: float = 5.0, swap_interval: int = 100,
                 langevin_prob: float = 0.5, step_size: float | str = "auto", langevin_step_size: float | str = "auto",
                 tempering_fraction: float = 0.6, n_steps: int | str | None = "auto",
                 adaptation_steps: int | str = "auto", target_accept: float = 0.25, preconditioner: str | None = "auto",
                 tempered: str = "posterior"):
        self.n_replicas = n_replicas
        self.max_temperature = max_temperature
        self.swap_interval = swap_interval
        self.langevin_prob = langevin_prob
        self.step_size = step_size
        self.langevin_step_size = langevin_step_size
        self.tempering_fraction = tempering_fraction
        self.n_steps = n_steps
        self.adaptation_steps = adaptation_steps
        self.target_accept = target_accept
        self.preconditioner = preconditioner
        self.tempered = tempered

    def configure(self, plan) -> "PTLangevin":
        """Resolve ``n_steps="auto"`` to the plan's total steps (and, through it, ``adaptation_steps="auto"`` to
        its burn-in)."""
        super().configure(plan)
        self.n_steps_ = plan.total_steps if self.n_steps == "auto" else self.n_steps
        return self

    def warmup_step_size(self, curvature: Tensor, noise_fraction: Tensor | None) -> Tensor:
        """``2.38 / sqrt(D lambda)``: the starting proposal scale of every slot (then tuned on acceptance)."""
        D = self._dim
        return 2.38 / torch.sqrt(D * curvature)

    def prepare_step_size(self, state: PTLangevinState):
        """Note each replica's dimension ``D`` for :meth:`warmup_step_size` (here, where the state is at hand: a
        continued fit's sampler is built anew, and its warm-up goes on from the next window end). The proposals
        are preconditioned by the mass alone: returns None."""
        self._dim = sum(p.numel() for p in state.position) // state.n_members
        return None

    def preconditioner_changed(self, state: PTLangevinState) -> None:
        """The first warm-up estimate sets every slot's proposal scale; later windows change the mass only (the
        Robbins-Monro tuning carries on from where it was)."""
        if state.step == 0:
            state.log_step = torch.log(state.precond.step_size).to(state.log_step.dtype).reshape(state.log_step.shape)
        state.cache.clear()

    @torch.no_grad()
    def potential_changed(self, state: PTLangevinState, delta_value: Tensor, delta_grad: list[Tensor]) -> None:
        """The cached potentials and gradients follow the change."""
        if state.value is not None:
            state.value = state.value + delta_value.to(state.value.dtype).reshape(state.value.shape)
        if state.grad is not None:
            state.grad = [g + d.reshape(g.shape).to(g.dtype) for g, d in zip(state.grad, delta_grad)]

    @torch.no_grad()
    def restart_members(self, state: PTLangevinState, members: Tensor, potential: Potential, batch: Any) -> None:
        """A restarted replica halves its proposal scale, and its cached potential and gradient are taken anew
        at its restored position."""
        mask = members.reshape(-1)
        state.log_step = torch.where(mask, state.log_step - math.log(2.0), state.log_step)
        state.grad_valid = state.grad_valid & ~mask
        if state.value is not None:
            weighted = self.tempered == "likelihood" and state.cache_beta is not None
            # (at the weights the cache was taken under)
            with data_weighted(self.name, potential, state.cache_beta) if weighted else nullcontext():
                fresh = potential.value(batch).detach().reshape(mask.shape).to(state.value.dtype)
                if weighted:
                    data = potential.data_value.reshape(mask.shape).to(state.value.dtype)
                    state.data_value = torch.where(mask, data, state.data_value)
            state.value = torch.where(mask, fresh, state.value)

    def quota_members(self, layout: ChainLayout):
        """Only the replicas at temperature 1 (slot 0 of each chain's ladder) keep ``n_draws``: the others join
        them at temperature 1 after the tempering phase (``tempering_fraction`` of the run) and keep fewer."""
        import numpy as np

        return np.arange(layout.chains * layout.members_per_chain) % layout.members_per_chain == 0

    @property
    def planned_steps(self) -> int | None:
        """``n_steps`` as resolved (None: the tempering phase never ends)."""
        if self.n_steps != "auto":
            return self.n_steps
        return getattr(self, "n_steps_", None)

    @property
    def n_adaptation_steps(self) -> int:
        """``adaptation_steps`` as resolved (0 without a plan)."""
        return self.adaptation_length()

    # ------------------------------------------------------------------ #
    @property
    def temperatures(self) -> Tensor:
        """The ladder :math:`T_m`, shape ``(n_replicas,)``, float64 (:func:`geometric_ladder`)."""
        return torch.tensor(geometric_ladder(self.n_replicas, self.max_temperature), dtype=torch.float64)

    def members_per_chain(self) -> int:
        """The ``n_replicas`` replicas that make up one chain."""
        return int(self.n_replicas)

    def changed_state_settings(self, previous: Sampler, state=None) -> dict[str, tuple]:
        out = super().changed_state_settings(previous, state)
        if "max_temperature" in out and geometric_ladder(self.n_replicas, self.max_temperature) == geometric_ladder(
                previous.n_replicas, previous.max_temperature):  # (one replica: the ladder is [1] whatever it says)
            del out["max_temperature"]
        return out

    def __setstate__(self, state):
        # pickled before tempered existed (2026-11-29): that sampler tempered the whole posterior (before: a
        # continued fit was refused as a changed setting, get_params and bayesnet.save raised AttributeError)
        state.setdefault("tempered", "posterior")
        super().__setstate__(state)

    @property
    def exchanges_members(self) -> bool:
        """Whether swaps exchange positions between members (several replicas): a prior that keeps hyperparameters
        per member must then exchange them too (:func:`~bayesnet.priors.make_prior` checks)."""
        return int(self.n_replicas) > 1

    def untempered_prior_hint(self) -> str | None:
        """The setting that leaves the prior untempered, for the message that refuses a hierarchical prior."""
        return "sampler__tempered='likelihood', which tempers the likelihood only"

    def prior_temperature_range(self) -> tuple[float, float]:
        """``(1, 1)`` with ``tempered="likelihood"`` (the prior is not tempered), else :meth:`temperature_range`."""
        return (1.0, 1.0) if self.tempered == "likelihood" else self.temperature_range()

    def temperature_range(self, state: PTLangevinState | None = None) -> tuple[float, float]:
        # the ladder's ends (one replica: the ladder is [1], no tempering, whatever max_temperature says)
        ladder = geometric_ladder(self.n_replicas, self.max_temperature)
        return float(min(ladder)), float(max(ladder))

    def resolve_langevin_step_size(self, sigma: float | None = None) -> float:
        """:math:`r`: ``langevin_step_size``, or :math:`\\sigma^2/2` for "auto", with :math:`\\sigma` the given
        proposal scale, else ``step_size`` (``fallback_step_size`` when that is "auto": the warm-up sets it)."""
        if self.langevin_step_size == "auto":
            if sigma is None:
                sigma = self.fallback_step_size if self.step_size == "auto" else float(self.step_size)
            return 0.5 * float(sigma) ** 2
        return float(self.langevin_step_size)

    def tempering_steps(self) -> int | None:
        """Number of steps run on the ladder, ``round(tempering_fraction * n_steps)``; None if unbounded."""
        n_steps = self.planned_steps
        if n_steps is None:
            return None
        return int(round(self.tempering_fraction * n_steps))

    def in_tempering_phase(self, state: PTLangevinState) -> bool:
        """Whether the *next* step of ``state`` runs on the ladder (else every replica is at T = 1)."""
        limit = self.tempering_steps()
        return limit is None or state.step < limit

    def divergence_hint(self, state: PTLangevinState) -> str:
        sigma = float(state.log_step.exp().min()) if state is not None and self.step_size == "auto" else None
        now = f"={self.step_size:g}" if self.step_size != "auto" else (
            f"='auto', which the warm-up set to {sigma:.3g}" if sigma is not None else "='auto'")
        return (f"sampler__step_size{now}, the proposal noise sd; or sampler__langevin_step_size "
                f"(now r={self.resolve_langevin_step_size(sigma):g}), the gradient drift of the Langevin proposals")

    # ------------------------------------------------------------------ #
    def _init(self, position: list[Tensor], rng: ChainRandom, layout: ChainLayout,
              precond: Preconditioner) -> PTLangevinState:
        """Start the replicas at ``position`` (used in place, not copied): see :meth:`Sampler.init`."""
        R = int(self.n_replicas)
        S = layout.n_members or R
        C = S // R
        first = position[0]
        opts = dict(dtype=first.dtype, device=first.device)
        beta = 1.0 / torch.tensor(geometric_ladder(R, self.max_temperature), dtype=torch.float64)
        cold = torch.zeros(R, dtype=torch.bool, device=first.device)
        cold[0] = True
        counts = dict(dtype=torch.int64, device=first.device)
        return PTLangevinState(
            position=position, layout=layout, rng=rng, beta=beta.to(**opts), cold=cold.repeat(C),
            grad_valid=torch.zeros(S, dtype=torch.bool, device=first.device),
            mh_attempts=torch.zeros(C, R, **counts), mh_accepts=torch.zeros(C, R, **counts),
            swap_attempts=torch.zeros(C, max(R - 1, 0), **counts), swap_accepts=torch.zeros(C, max(R - 1, 0), **counts),
            log_step=torch.log(precond.step_size).to(first.dtype).reshape(-1).expand(S).clone(),
            batched=layout.has_axis, precond=precond)

    def _members(self, state: PTLangevinState) -> list[Tensor]:
        """Views ``(S, n_k)`` of the position tensors (in-place updates show in the positions)."""
        S = state.n_members
        return [p.view(S, -1) for p in state.position]

    def _per_chain_uniform(self, state: PTLangevinState, per_chain: int, dtype) -> Tensor:
        """``per_chain`` uniforms from every chain's stream, shape ``(C * per_chain,)`` chain major."""
        return state.rng.uniform(per_chain, dtype).reshape(-1)

    def _check_state(self, state: PTLangevinState) -> None:
        if state.layout.members_per_chain != self.n_replicas:
            raise ValueError(f"{self.name}: the state was started with {state.layout.members_per_chain} replicas "
                             f"per chain, the sampler now has n_replicas={self.n_replicas}.")

    # ------------------------------------------------------------------ #
    @torch.no_grad()
    def _step(self, state: PTLangevinState, potential: Potential, batch: Any) -> tuple[PTLangevinState, StepInfo]:
        """One Metropolis-Hastings step of every replica, then a swap event every ``swap_interval`` steps.

        Returns
        -------
        state : PTLangevinState
            Advanced in place.
        info : StepInfo
            ``potential`` (S,): U at each member's position after the step (and swap), untempered;
            ``is_draw`` (S,) bool: the members at temperature 1 on this step.
        """
        self._check_state(state)
        S = state.n_members
        C = S // int(self.n_replicas)
        first = state.position[0]
        tempering = self.in_tempering_phase(state)
        beta = state.beta.repeat(C) if tempering else torch.ones(S, dtype=first.dtype, device=first.device)
        if self.tempered != "likelihood":
            return self._advance(state, potential, batch, tempering, beta, beta)
        # the weights hold for the kernel's own evaluations only: the warm-up's curvature and noise measurements
        # see U; the gradients it records for the mass are the kernel's, of each member's own tempered target
        with data_weighted(self.name, potential, beta):
            self._rebase_cache(state, beta)
            return self._advance(state, potential, batch, tempering, beta, torch.ones_like(beta))

    @staticmethod
    def _rebase_cache(state: PTLangevinState, beta: Tensor) -> None:
        """``tempered="likelihood"``: bring the cached potentials to the data weights ``beta`` now in force (a
        swap moved them with their positions; the tempering phase ended), ``beta U_D + U_P`` from the cached data
        term; the cached gradients of the members whose weight changed are taken anew."""
        if state.value is None or state.data_value is None or state.cache_beta is None:
            state.value, state.grad_valid = None, torch.zeros_like(state.grad_valid)
        else:
            change = beta - state.cache_beta
            state.value = state.value + change * state.data_value
            state.grad_valid = state.grad_valid & (change == 0)
        state.cache_beta = beta.clone()

    def _advance(self, state: PTLangevinState, potential: Potential, batch: Any, tempering: bool, beta: Tensor,
                 kernel_beta: Tensor) -> tuple[PTLangevinState, StepInfo]:
        """:meth:`_step` at the ladder's ``beta`` (S,) (``tempering``: whether this step runs on the ladder), the
        kernel's own tests and drift at ``kernel_beta``: ``beta`` itself when the whole posterior is tempered, ones
        when the potential weights the data term."""
        R = int(self.n_replicas)
        S = state.n_members
        C = S // R
        theta = self._members(state)
        device, dtype = theta[0].device, theta[0].dtype
        weighted = self.tempered == "likelihood"
        if self.n_adaptation_steps == 0 and self.step_size != "auto":  # the paper's one step size
            state.log_step = torch.full((S,), math.log(float(self.step_size)), dtype=dtype, device=device)
        log_step = state.log_step if tempering else state.log_step.view(C, R)[:, :1].expand(C, R).reshape(S)
        sigma = log_step.exp().unsqueeze(1)  # (S, 1): each slot's proposal noise sd
        r = sigma * sigma / 2 if self.langevin_step_size == "auto" else \
            torch.full_like(sigma, float(self.langevin_step_size))

        # Step 1.1: the kind of proposal of each replica; the gradient at the current position where one needs it
        p_lg = float(self.langevin_prob)
        langevin = self._per_chain_uniform(state, R, dtype) < p_lg
        # with Langevin proposals possible, the gradient on every step whatever the other members propose (the
        # class docstring's "Cost": the value alone rounds differently, which made chains depend on each other)
        any_langevin = p_lg > 0
        stale = ~state.grad_valid if any_langevin else langevin & ~state.grad_valid
        any_stale = bool(stale.any()) if any_langevin else False  # the one host sync
        if state.warmup is not None:  # every warm-up step: the gradient at the positions, for the mass estimate
            any_stale = True
        if any_stale:  # (re)compute where stale only: a member's cache never depends on the others'
            u, g = potential.value_and_grad(batch)
            u = u.detach().reshape(S).to(dtype)
            g = [gk.detach().reshape(S, -1).to(dtype) for gk in g]
            if weighted:
                data = potential.data_value.reshape(S).to(dtype)
                state.data_value = data if state.value is None else torch.where(stale, data, state.data_value)
            state.value = u if state.value is None else torch.where(stale, u, state.value)
            if state.grad is None:
                state.grad = g
            else:
                state.grad = [torch.where(stale.unsqueeze(1), gn, go) for gn, go in zip(g, state.grad)]
            state.grad_valid = state.grad_valid | stale
        elif state.value is None:
            state.value = potential.value(batch).detach().reshape(S).to(dtype)
            if weighted:
                state.data_value = potential.data_value.reshape(S).to(dtype)
        u_old, g_old = state.value, state.grad

        start = [t.clone() for t in theta]
        noise = gaussian_like(theta, state.rng, state.layout if state.batched else ChainLayout(1, R))
        # (S, 1): r beta_m or 0 (r with the data term weighted in the potential)
        drift = torch.where(langevin.unsqueeze(1), r * kernel_beta.unsqueeze(1), torch.zeros_like(r))
        m, sqrt_m = self._mass(state, theta)
        for t, n, k in zip(theta, noise, range(len(theta))):
            if any_langevin:
                t.sub_(drift * m[k] * torch.where(langevin.unsqueeze(1), g_old[k], torch.zeros_like(t)))
            t.add_(n * sigma * sqrt_m[k])

        # Step 1.2: the potential at the proposals, and the acceptance probabilities
        if any_langevin:
            u_new, g_new = potential.value_and_grad(batch)
            g_new = [gk.detach().reshape(S, -1).to(dtype) for gk in g_new]
        else:
            u_new, g_new = potential.value(batch), None
        u_new = u_new.detach().reshape(S).to(dtype)
        data_new = potential.data_value.reshape(S).to(dtype) if weighted else None
        log_alpha = -kernel_beta * (u_new - u_old)
        if any_langevin:
            ratio = self._log_proposal_ratio(start, theta, noise, g_new, drift, sigma, m)
            log_alpha = log_alpha + torch.where(langevin, ratio, torch.zeros_like(ratio))
        finite = torch.isfinite(log_alpha)
        log_alpha = torch.where(finite, log_alpha, torch.full_like(log_alpha, -math.inf))

        # Step 1.3: accept or restore
        log_u = torch.log(self._per_chain_uniform(state, R, dtype))
        accept = log_u < log_alpha
        keep = accept.unsqueeze(1)
        for t, s in zip(theta, start):
            t.copy_(torch.where(keep, t, s))
        state.value = torch.where(accept, u_new, u_old)
        if weighted:
            state.data_value = torch.where(accept, data_new, state.data_value)
        if g_new is not None:
            if g_old is None:
                g_old = [torch.zeros_like(t) for t in theta]
            state.grad = [torch.where(keep, gn, go) for gn, go in zip(g_new, g_old)]
            state.grad_valid = state.grad_valid | accept
        else:
            state.grad_valid = state.grad_valid & ~accept
        state.mh_attempts += 1
        state.mh_accepts += accept.view(C, R)
        state.step += 1
        if state.step <= self.n_adaptation_steps:  # Robbins-Monro on each slot's log step size
            gain = state.step ** -0.6
            state.log_step = state.log_step + gain * (log_alpha.clamp(max=0.0).exp() - self.target_accept)

        # Step 2: replica exchange on the ladder
        extra = {}
        if tempering and R > 1 and state.step % self.swap_interval == 0:
            self._swap(state, potential)
        extra.update({
            "accepted": accept.to(dtype),
            "accept_prob": log_alpha.clamp(max=0.0).exp(),
            "langevin": langevin.to(dtype),
            "temperature": 1.0 / beta,
            "divergent": (~torch.isfinite(u_new)).to(dtype),
        })
        is_draw = state.cold.clone() if tempering else torch.ones(S, dtype=torch.bool, device=device)
        # the untempered U of every member (with the data term weighted in the cache: beta U_D + U_P + (1 - beta) U_D)
        value = state.value + (1.0 - state.cache_beta) * state.data_value if weighted else state.value.clone()
        if not state.batched:  # one replica, no chain axis
            return state, StepInfo(potential=value.reshape(()), is_draw=True,
                                   extra={k: v.reshape(()) for k, v in extra.items()})
        return state, StepInfo(potential=value, is_draw=is_draw, extra=extra)

    # compiled (bayesnet.samplers.compiled): the potential's gradient, not the step. Each step draws which
    # replicas make a Langevin proposal and recomputes the cached gradient at the positions only where it went
    # stale (a host-side choice), so the step stays eager around the compiled gradient
    compiles = True

    def pure_transition(self, potentials, layout: ChainLayout):
        """The compiled unit: the potential's gradient and value at given positions,
        :func:`~bayesnet.samplers.compiled.potential_gradients` of its pure form."""
        return potential_gradients(potentials)

    def run_compiled(self, state: PTLangevinState, potential: Potential, batch: Any, fn) -> StepInfo:
        """One eager step whose gradients are ``fn`` (compiled)."""
        return self._step(state, CompiledPotential(potential, fn), batch)[1]

    @staticmethod
    def _mass(state: PTLangevinState, theta: list[Tensor]) -> tuple[list, list]:
        """The inverse mass ``m`` and its root as ``(S, n_k)`` views of the member views (1.0 without a mass)."""
        pre = state.precond
        if pre is None or pre.inverse_mass is None:
            return [1.0] * len(theta), [1.0] * len(theta)

        def make():
            m = pre.inverse_mass.reshape(len(theta[0]), -1)
            parts = list(m.split([t.shape[1] for t in theta], dim=1))
            return parts, [x.sqrt() for x in parts]

        return state.derived("mass", make)

    def _log_proposal_ratio(self, start: list[Tensor], proposal: list[Tensor], noise: list[Tensor],
                            grad_new: list[Tensor], drift: Tensor, sigma: Tensor, m: list) -> Tensor:
        r""":math:`\log q(\theta|\theta') - \log q(\theta'|\theta)` per member, shape ``(S,)``, for Langevin proposals.

        :math:`\theta' - \mu(\theta) = \sigma M^{-1/2}\epsilon` (the drawn ``noise``
        :math:`\epsilon`), so the forward term is :math:`|\epsilon|^2/2`; the
        backward one is :math:`(\theta - \theta' + r\beta M^{-1}\nabla U(\theta'))^\top M
        (\ldots)/(2\sigma^2)`, ``m`` the inverse mass per coordinate (1.0 without one).
        ``drift`` is :math:`r\beta_m` and ``sigma`` each member's :math:`\sigma`, both shape ``(S, 1)``.
        """
        forward = sum(n.square().sum(1) for n in noise) * 0.5
        backward = sum(((s - p + drift * mk * g).square() / mk).sum(1)
                       for s, p, g, mk in zip(start, proposal, grad_new, m))
        return forward - backward / (2.0 * sigma * sigma).squeeze(1)

    def _swap(self, state: PTLangevinState, potential: Potential | None = None) -> Tensor:
        """One swap event (:func:`~bayesnet.samplers.tempering.swap_neighbours`): on the potentials, or with
        ``tempered="likelihood"`` on the data terms, the prior's per-member hyperparameters exchanged with the
        positions (``potential.permute_members``)."""
        if self.tempered != "likelihood":
            return swap_neighbours(state, int(self.n_replicas), self._members(state))
        return swap_neighbours(state, int(self.n_replicas), self._members(state), energy=state.data_value,
                               permuted=getattr(potential, "permute_members", None))

    def reset_cache(self, state: PTLangevinState) -> None:
        """Drop the cached potentials and gradients: the next step re-evaluates them on its own batch (so a
        fit continued on new data compares potentials of the same data)."""
        state.value = None
        state.grad_valid = torch.zeros_like(state.grad_valid)

    def state_summary(self, state: PTLangevinState) -> dict:
        """Run-level rates for the estimators' ``diagnostics_``: ``replica_acceptance_rates`` (per ladder slot)
        and ``pair_swap_rates`` (per neighbouring pair), ``replica_step_sizes`` (the proposal sd of each slot),
        lists averaged over the chains; ``swap_rate``, their overall mean (NaN before any swap);
        ``in_tempering_phase``."""
        acc = self.acceptance_rates(state).nanmean(0)
        swap = self.swap_rates(state)
        R = int(self.n_replicas)
        steps = state.log_step.exp().view(-1, R).mean(0).tolist()
        return {"replica_acceptance_rates": acc.tolist(), "pair_swap_rates": swap.nanmean(0).tolist(),
                "replica_step_sizes": steps,
                "swap_rate": float(swap.nanmean()) if swap.numel() else math.nan,
                "in_tempering_phase": self.in_tempering_phase(state)}

    # ------------------------------------------------------------------ #
    @staticmethod
    def acceptance_rates(state: PTLangevinState) -> Tensor:
        """Metropolis-Hastings acceptance rate of each ladder slot so far, shape ``(C, R)``, float64 (NaN before
        the first step); ``C = 1`` without ``n_chains``."""
        return rate(state.mh_accepts, state.mh_attempts)

    @staticmethod
    def swap_rates(state: PTLangevinState) -> Tensor:
        """Acceptance rate of the exchanges between slots ``m`` and ``m + 1``, shape ``(C, R - 1)``, float64 (NaN
        for a pair never offered)."""
        return rate(state.swap_accepts, state.swap_attempts)
