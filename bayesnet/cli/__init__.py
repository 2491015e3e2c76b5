"""The ``bayesnet`` command: fit a Bayesian network on a CSV file or a bundled dataset, and predict.

Examples
--------
``bayesnet fit``                         breast cancer, MLP, SGHMC, prints test metrics
``bayesnet fit --dataset sunspots``      yearly sunspots, Takens embedding, forecasting
``bayesnet fit --data d.csv --target y --task regression --sampler sgld --set sampler__temperature=0.5``
``bayesnet fit --data digits.csv --target label --model cnn --input-shape 1,8,8``
``bayesnet predict model.bayesnet --data new.csv --output predictions.csv``

Everything the user gives is checked before sampling starts: options by argparse (usage and
``bayesnet fit: error: ...``, exit code 2), files and their contents by this module (one line ``error: ...``,
exit code 2). A diverging fit exits with code 3 and an interrupted one (Ctrl-C) with 130; both save the draws
collected so far, marked as a partial fit.
"""

from .commands import load_model, main, save_model
from .options import build_parser

__all__ = ["main", "build_parser", "load_model", "save_model"]
