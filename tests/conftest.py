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
