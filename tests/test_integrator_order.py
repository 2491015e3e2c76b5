"""Orders of accuracy of the Langevin splittings on a harmonic potential (Heber et al. 2020 (TATi) Sec. 5.1).

For U = |theta|^2 / 2 (unit frequency, unit mass) at temperature T = 1 the exact
averages are <|p|^2>/D = <|theta|^2>/D = 1. The discretised chains are biased by
O(eps^q). We measure the relative errors of the average kinetic temperature
<|p|^2>/D and of the configurational temperature <theta . grad U>/D over a range
of step sizes and fit the slope q of log(error) against log(eps): BAOAB and
GLA2 are second order, GLA1 first order. (BAOAB's configurational temperature
is exact for harmonic potentials, Heber et al. 2020 (TATi) Sec. 2, so its order is read from
the kinetic temperature.) 4096 independent oscillators run as one vectorised
position, which the element-wise A/B/O steps treat as independent chains.
"""

import numpy as np
import pytest
import torch

from bayesnet.posterior import FunctionPotential
from bayesnet.samplers import make_sampler

SECOND_ORDER_STEPS = [0.2, 0.3, 0.45, 0.7]
FIRST_ORDER_STEPS = [0.05, 0.1, 0.2, 0.3]  # GLA1 leaves its linear regime beyond ~0.3


def averages(scheme, eps, n_steps=3000, burn_in=500, dim=4096, seed=0):
    pot = FunctionPotential(lambda params, batch: 0.5 * (params[0] ** 2).sum(),
                            [torch.zeros(dim, dtype=torch.float64)])
    sampler = make_sampler("baoab", step_size=eps, friction=1.0, scheme=scheme)
    gen = torch.Generator().manual_seed(seed)
    state = sampler.init(pot.parameters, gen)
    kin = conf = 0.0
    for k in range(n_steps):
        state, info = sampler.step(state, pot, None)
        if k >= burn_in:
            kin += float(info.kinetic_temperature)
            conf += float((state.position[0].detach() ** 2).mean())
    n = n_steps - burn_in
    return kin / n, conf / n


def slope(step_sizes, errors):
    return float(np.polyfit(np.log(step_sizes), np.log(errors), 1)[0])


@pytest.mark.parametrize("scheme,observable,order,step_sizes", [
    ("BAOAB", "kinetic", 2, SECOND_ORDER_STEPS),
    ("GLA2", "configurational", 2, SECOND_ORDER_STEPS),
    ("GLA1", "configurational", 1, FIRST_ORDER_STEPS),
])
def test_order_of_accuracy(scheme, observable, order, step_sizes):
    errors = []
    for eps in step_sizes:
        kin, conf = averages(scheme, eps)
        errors.append(abs((kin if observable == "kinetic" else conf) - 1.0))
    q = slope(step_sizes, errors)
    print(f"{scheme} {observable}: errors {np.round(errors, 4)} slope {q:.2f}")
    assert abs(q - order) < 0.35, (errors, q)


def test_baoab_configurational_average_is_exact_for_harmonic():
    _, conf = averages("BAOAB", 0.7)
    _, conf_gla1 = averages("GLA1", 0.7)
    assert abs(conf - 1.0) < 0.01 < abs(conf_gla1 - 1.0)


@pytest.mark.parametrize("name", ["baoab", "eqn"])
@pytest.mark.parametrize("friction_step", [1e-2, 1e-4, 1e-6])
def test_o_step_noise_matches_the_decay_it_applies(name, friction_step):
    """The O step ``p <- a p + s xi`` holds the temperature ``T`` only with ``s^2 = (1 - a^2) T`` for the decay ``a``
    it applies, a float32 number: the noise is taken from that ``a`` (to ~1e-4 relative whatever gamma h), not
    from the exact ``-expm1(-2 gamma h)``, which differs from ``1 - a^2`` by up to several per cent at gamma h
    ~ 1e-6 (a change to the exact form, made and reverted, held the temperature 1.5 % low there: this test fails
    on it)."""
    step_size, temperature = 1e-2, 0.7
    friction = friction_step / step_size
    pot = FunctionPotential(lambda params, batch: 0.5 * (params[0] ** 2).sum(), [torch.zeros(8)])
    sampler = make_sampler(name, step_size=step_size, friction=friction, temperature=temperature)
    state = sampler.init(pot.parameters, torch.Generator().manual_seed(0))
    state, _ = sampler.step(state, pot, None)
    scales = state.derived("scales", lambda: pytest.fail("the step did not cache its scales"))
    decay = torch.as_tensor(scales["decay"]).double()
    assert scales["decay"].dtype == torch.float32
    reference = torch.sqrt((1.0 - decay * decay) * temperature)  # float64, from the decay as applied
    relative = (torch.as_tensor(scales["noise"]).double() / reference - 1.0).abs().max().item()
    assert relative < 2e-4, relative
