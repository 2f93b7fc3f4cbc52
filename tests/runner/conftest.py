"""Runner tests run torch on one CPU thread: the models are tiny, and on a shared 2-core
machine a second OpenMP thread waiting on a busy core makes small matmuls 10-100x slower."""

from __future__ import annotations

import torch

torch.set_num_threads(1)
