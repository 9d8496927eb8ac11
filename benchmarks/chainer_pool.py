"""Chainer 7.8.1 with CuPy's device pool against the managed pool, beside the same GCN in
PyTorch. The CPU classes are the newcomer's run on a box without a GPU: one small size each,
seconds apiece. The GPU GCN sweep stops at 2**21 nodes (about 5.5 GB by ``harness.workloads.chainer.graphs.gcn_bytes``
at 128 features), far under the managed-memory guard's cap on an 80 GB card. These classes run on the whole card
(budget ``card``); ``MlpBeyond`` runs the MLP at a batch past an emulated 16 GB card, where
Chainer's device pool, capped at the budget, does not fit and the managed pool does."""
from harness.cases.chainer_cnn import BATCHES as CNN_BATCHES
from harness.cases.chainer_gcn import NODES
from harness.cases.chainer_mlp import BATCHES as MLP_BATCHES, PAST_16GB

from benchmarks.common import _OnDevice, _OnHost

GPU_POOLS = ["device_pool", "managed_pool"]
FEATURES = 128


class GcnCpu(_OnHost):
    case = "chainer_gcn"
    fixed = {"device": "cpu", "pool": "numpy", "features": FEATURES, "budget": "card"}
    param_names = ["nodes"]
    params = [[NODES[0]]]


class Gcn(_OnDevice):
    case = "chainer_gcn"
    fixed = {"device": "cuda", "features": FEATURES, "budget": "card"}
    param_names = ["pool", "nodes"]
    params = [GPU_POOLS, list(NODES)]


class TorchGcnCpu(_OnHost):
    case = "torch_gcn"
    fixed = {"device": "cpu", "features": FEATURES}
    param_names = ["nodes"]
    params = [[NODES[0]]]


class TorchGcn(_OnDevice):
    case = "torch_gcn"
    fixed = {"device": "cuda", "features": FEATURES}
    param_names = ["nodes"]
    params = [list(NODES)]


class MlpCpu(_OnHost):
    case = "chainer_mlp"
    fixed = {"device": "cpu", "pool": "numpy", "budget": "card"}
    param_names = ["batch"]
    params = [[MLP_BATCHES[0]]]


class Mlp(_OnDevice):
    case = "chainer_mlp"
    fixed = {"device": "cuda", "budget": "card"}
    param_names = ["pool", "batch"]
    params = [GPU_POOLS, list(MLP_BATCHES)]


class MlpBeyond(_OnDevice):
    case = "chainer_mlp"
    fixed = {"device": "cuda", "batch": PAST_16GB, "budget": "16GB"}
    param_names = ["pool"]
    params = [GPU_POOLS]


class CnnCpu(_OnHost):
    case = "chainer_cnn"
    fixed = {"device": "cpu", "pool": "numpy"}
    param_names = ["batch"]
    params = [[CNN_BATCHES[0]]]


class Cnn(_OnDevice):
    case = "chainer_cnn"
    fixed = {"device": "cuda"}
    param_names = ["pool", "batch"]
    params = [GPU_POOLS, list(CNN_BATCHES)]
