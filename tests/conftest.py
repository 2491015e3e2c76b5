import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
# Small tensors: one intra-op thread avoids OpenMP spin-waiting, which costs
# orders of magnitude when another process shares the two cores.
torch.set_num_threads(1)
