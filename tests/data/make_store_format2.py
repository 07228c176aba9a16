"""Make tests/data/store_format2: a store written by orbitscope before the Task v2 reshaping.

Run once at commit e7f1787 (the last commit before the reshaping), from a checkout of it:
``PYTHONPATH=src python tests/data/make_store_format2.py tests/data/store_format2``.
tests/test_engine_v2.py checks that today's code finds these runs by id and returns their arrays.
One torch thread, as the tests run: the thread count changes float summation order in matrix
products, so arrays are bit-identical only at equal thread counts.
"""
import sys
import numpy as np
import torch
from torch import nn
import orbitscope as osc
torch.set_num_threads(1)  # as the tests run
from orbitscope.data import mnist_subset


def fixed_model():
    rng = np.random.default_rng(0)
    fc = nn.Linear(784, 10)
    with torch.no_grad():
        fc.weight.copy_(torch.as_tensor(rng.normal(0, 0.05, (10, 784)), dtype=torch.float32))
        fc.bias.copy_(torch.as_tensor(rng.normal(0, 0.1, 10), dtype=torch.float32))
    return nn.Sequential(nn.Flatten(), fc)


data = mnist_subset("test").stratified(2)
home = sys.argv[1]
r1 = osc.evaluate(fixed_model(), data, osc.Rotation([0, 45, 90, 180]), osc.Classification(store_probabilities=True), store=home, name="fixture-rotation", batch_size=8)
r2 = osc.evaluate(fixed_model(), data, osc.Translation([-2, 0, 2]), store=home, name="fixture-shift", batch_size=8)
print(r1.run_id, r2.run_id)
