import os
import sys

# numpy's and scipy's BLAS at one thread (comment below): set before either loads its OpenBLAS; threadpoolctl then
# limits the one already loaded, whichever it is
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import torch  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
# Small tensors: one intra-op thread avoids OpenMP spin-waiting, which costs
# orders of magnitude when another process shares the two cores (and the suite
# runs one test process per core: pytest-xdist's -n logical). numpy's BLAS
# likewise (scikit-learn's checks and the baselines), through threadpoolctl
# (a scikit-learn dependency).
torch.set_num_threads(1)
threadpool_limits(1, user_api="blas")
