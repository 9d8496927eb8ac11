"""Data parallel versus model parallel (``harness.workloads.parallelism.parallel``): ResNet50 at the tutorial's batch
10 of 1024 x 1024 images and of 2048 x 2048, and the shared transformer LM (12 blocks of width 1024, 1024 tokens,
batch 16). ``batch`` is the global batch everywhere, so seconds per step compare directly across
strategies and GPU counts; scaling efficiency is single's seconds over (gpus x a strategy's).
GPU counts a box lacks skip with the reason. ``cut`` (added last, so that earlier results keep
their keys) is where model parallel cuts ResNet50: balanced, or after ``layer2`` as seed 003 did.
The ``*TwoNodes`` classes run DDP as two rendezvoused node agents of one GPU each on this box,
with NCCL's fast transports and over sockets (as between hosts without a fast link): the network's
cost is the difference. ``ResnetScaling`` runs ResNet50 at 1024 x 1024 by data parallel at batch 16,
which splits evenly over 1, 2, 4 and 8 GPUs (the tutorial's 10 does not over 4 or 8), so its
scaling efficiency reads at every GPU count; its one-GPU step holds under a third of an 80 GB
card. The CPU classes are the newcomer's run: a tiny LM on gloo, two CPU
workers, seconds apiece."""
from benchmarks.common import _OnDevice, _OnHost

RESNET_CASE, LM_CASE = "parallel_resnet50", "parallel_lm"
TUTORIAL = {"batch": 10}
SCALING = {"batch": 16, "image_size": 1024}  # a global batch every GPU count of ALL_GPUS divides
ONE_NODE = {"nodes": 1, "transport": "fast"}
CUTS = ["balanced", "seed003"]
TRANSPORTS = ["fast", "sockets"]
IMAGE_SIZES = [1024, 2048]  # the tutorial's, and one larger
LM_SHAPE = {"batch": 16, "depth": 12, "width": 1024, "seq_len": 1024}
LM = {**LM_SHAPE, **ONE_NODE}
TINY_LM = {"device": "cpu", "batch": 4, "depth": 2, "width": 32, "seq_len": 16, **ONE_NODE}
DATA_PARALLEL = ["dp", "ddp", "fsdp"]
ALL_GPUS = [1, 2, 4, 8]
SEVERAL_GPUS = [2, 4, 8]


class ResnetSingle(_OnDevice):
    case = RESNET_CASE
    fixed = dict(TUTORIAL, **ONE_NODE, cut="balanced", strategy="single", device="cuda", gpus=1, micro_batches=1)
    param_names = ["image_size"]
    params = [[224, *IMAGE_SIZES]]


class ResnetDataParallel(_OnDevice):
    case = RESNET_CASE
    fixed = dict(TUTORIAL, **ONE_NODE, cut="balanced", device="cuda", micro_batches=1)
    param_names = ["strategy", "gpus", "image_size"]
    params = [DATA_PARALLEL, ALL_GPUS, IMAGE_SIZES]


class ResnetScalingSingle(_OnDevice):
    case = RESNET_CASE
    fixed = dict(SCALING, **ONE_NODE, cut="balanced", strategy="single", device="cuda", gpus=1, micro_batches=1)
    param_names = []
    params = []


class ResnetScaling(_OnDevice):
    case = RESNET_CASE
    fixed = dict(SCALING, **ONE_NODE, cut="balanced", device="cuda", micro_batches=1)
    param_names = ["strategy", "gpus"]
    params = [DATA_PARALLEL, ALL_GPUS]


class ResnetModelParallel(_OnDevice):
    case = RESNET_CASE
    fixed = dict(TUTORIAL, **ONE_NODE, strategy="naive_mp", device="cuda", micro_batches=1)
    param_names = ["gpus", "image_size", "cut"]
    params = [SEVERAL_GPUS, IMAGE_SIZES, CUTS]


class ResnetPipeline(_OnDevice):
    case = RESNET_CASE
    fixed = dict(TUTORIAL, **ONE_NODE, strategy="pipeline", device="cuda")
    param_names = ["gpus", "micro_batches", "image_size", "cut"]
    params = [SEVERAL_GPUS, [2, 5, 10], IMAGE_SIZES, CUTS]


class ResnetTwoNodes(_OnDevice):
    case = RESNET_CASE
    fixed = dict(TUTORIAL, strategy="ddp", device="cuda", gpus=2, micro_batches=1, nodes=2, cut="balanced")
    param_names = ["image_size", "transport"]
    params = [IMAGE_SIZES, TRANSPORTS]


class LmSingle(_OnDevice):
    case = LM_CASE
    fixed = dict(LM, strategy="single", device="cuda", gpus=1, micro_batches=1)
    param_names = []
    params = []


class LmDataParallel(_OnDevice):
    case = LM_CASE
    fixed = dict(LM, device="cuda", micro_batches=1)
    param_names = ["strategy", "gpus"]
    params = [DATA_PARALLEL, ALL_GPUS]


class LmModelParallel(_OnDevice):
    case = LM_CASE
    fixed = dict(LM, strategy="naive_mp", device="cuda", micro_batches=1)
    param_names = ["gpus"]
    params = [SEVERAL_GPUS]


class LmPipeline(_OnDevice):
    case = LM_CASE
    fixed = dict(LM, strategy="pipeline", device="cuda")
    param_names = ["gpus", "micro_batches"]
    params = [SEVERAL_GPUS, [2, 4, 8]]


class LmTwoNodes(_OnDevice):
    case = LM_CASE
    fixed = dict(LM_SHAPE, strategy="ddp", device="cuda", gpus=2, micro_batches=1, nodes=2)
    param_names = ["transport"]
    params = [TRANSPORTS]


class LmCpuSingle(_OnHost):
    case = LM_CASE
    fixed = dict(TINY_LM, strategy="single", gpus=1, micro_batches=1)
    param_names = []
    params = []


class LmCpu(_OnHost):
    case = LM_CASE
    fixed = dict(TINY_LM, gpus=2, micro_batches=1)
    param_names = ["strategy"]
    params = [["ddp", "naive_mp", "fsdp"]]


class LmCpuPipeline(_OnHost):
    case = LM_CASE
    fixed = dict(TINY_LM, strategy="pipeline", gpus=2)
    param_names = ["micro_batches"]
    params = [[2, 4]]
