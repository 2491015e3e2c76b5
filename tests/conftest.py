import os
import sys

# BLAS at one thread (see below): set before numpy's and scipy's OpenBLAS load (threadpoolctl, below, limits one
# already loaded)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import torch  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
# Small tensors: one intra-op thread avoids OpenMP spin-waiting, which costs
# orders of magnitude when another process shares the two cores (and the suite
# runs one test process per core: pytest-xdist's -n logical). BLAS likewise
# (scikit-learn's checks and the baselines): the variables above, and
# threadpoolctl (a scikit-learn dependency) for a BLAS loaded before them.
torch.set_num_threads(1)
threadpool_limits(1, user_api="blas")

import random  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Every test starts from the same global random state, seeded before its fixtures are set up (a module's
    fixtures too, made at its first test). An estimator with ``random_state=None`` takes its seed from numpy's
    global generator (scikit-learn's convention), and a few tests draw from torch's: without a seed here a test's
    outcome depended on the tests its pytest-xdist worker happened to run before it. One CI run failed that way
    (an iris fit with ``burn_in=10``, which diverges for 1 seed in 60: a clear ``DivergenceError``, but not what
    the test was about). A test about randomness seeds its own estimators. ``BAYESNET_TEST_SEED`` (default 0)
    runs the suite from another global state: a test that fails there leans on its global seed."""
    seed = int(os.environ.get("BAYESNET_TEST_SEED", "0"))
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
