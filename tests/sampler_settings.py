"""Fast per-sampler settings for the tests that run every registered sampler (as scikit-learn's INIT_PARAMS).

A new sampler adds one row to each table; every contract test (tests/test_sampler_contract.py) and every
estimator x architecture test then runs it.
"""

#: kernel hyperparameters for the contract suite's 2-D Gaussian (unit variances, correlation 0.9: largest
#: curvature 10), small enough that each kernel's discretisation bias stays within the suite's 3 % allowance
GAUSSIAN = {
    "sgld": dict(step_size=2e-3),
    "sghmc": dict(step_size=2e-3, friction=0.02),
    "sgnht": dict(step_size=2e-3, noise=0.02),
    "baoab": dict(step_size=0.1, friction=1.0),
    "hmc": dict(step_size=0.2, n_leapfrog=5, adaptation_steps=0),
    "tacthmc": dict(step_size=2e-3, noise=0.02, steps_per_sample=1, tempering=False),
    "pt-langevin": dict(n_replicas=2, max_temperature=2.0, step_size=0.5, swap_interval=10, adaptation_steps=0,
                        n_steps=None),
    "eqn": dict(n_walkers=4, step_size=0.1, friction=1.0, covariance_interval=100),
}

#: estimator keyword arguments for a quick fit of a small network
ESTIMATOR = {
    "sgld": {},
    "sghmc": {},
    "sgnht": {},
    "baoab": {},
    "hmc": dict(batch_size=-1, burn_in=4),  # full batch; each transition is n_leapfrog gradient steps
    "pt-langevin": dict(batch_size=-1, sampler__n_replicas=3),  # exact energies in its Metropolis tests
    # collects at unit temperature only: a narrow temperature range fills the trace
    "tacthmc": dict(sampler__wall=0.6, sampler__tempering_step_size=1e-5),
    "eqn": dict(sampler__n_walkers=3),
}
