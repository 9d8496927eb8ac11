"""Data parallel versus model parallel on torchvision's ResNet50: 1000 classes, SGD, MSE against
one-hot labels, random images; by default batch 10 of 3 x 1024 x 1024, the well-known two-GPU
model-parallel tutorial, and 2048 x 2048, four times its activations, where one GPU runs short
sooner. ``strategy`` and ``gpus`` choose how it is spread (``harness.workloads.parallelism.parallel``);
``batch`` is the global batch, the same for every strategy; ``nodes`` and ``transport`` as in
``parallel_lm``; ``cut``: where model parallel cuts it, ``balanced`` or ``seed003`` (after
``layer2``, as seed 003 and the tutorial did). Its BatchNorm sees each shard or
micro-batch alone, so strategies agree on the loss only roughly here; the transformer case is
the exact one."""
from harness.workloads.parallelism.parallel import STRATEGIES, build
from harness.workloads.parallelism.launch import TRANSPORTS
from harness.workloads.parallelism.model_parallel import CUTS
from harness.workloads.parallelism.parallel_job import Job
from harness.cases.base import Case

DEVICES = ("cuda", "cpu")
GPUS = (1, 2, 3, 4, 8)
MICRO_BATCHES = (1, 2, 5, 10)
BATCHES = (2, 10, 16, 20, 40, 80)
IMAGE_SIZES = (64, 224, 512, 1024, 2048)
NODES = (1, 2)
# Parameters added after records were filed, at the values those records ran at.
EARLIER = {"nodes": 1, "transport": "fast", "cut": "balanced"}


def _build(strategy, device, gpus, micro_batches, batch, image_size, nodes, transport, cut):
    return build(Job(model="resnet50", strategy=strategy, device=device, gpus=gpus, batch=batch,
                     micro_batches=micro_batches, image_size=image_size, warmup=2, repeat=10, nodes=nodes,
                     transport=transport, cut=cut))


CASE = Case(name="parallel_resnet50",
            params={"strategy": STRATEGIES, "device": DEVICES, "gpus": GPUS, "micro_batches": MICRO_BATCHES,
                    "batch": BATCHES, "image_size": IMAGE_SIZES, "nodes": NODES, "transport": tuple(TRANSPORTS),
                    "cut": CUTS},
            build=_build, earlier=EARLIER, doc=__doc__)
