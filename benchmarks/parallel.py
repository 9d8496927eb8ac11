"""Data parallel versus model parallel (``harness.workloads.parallel``): ResNet50 at the tutorial's batch
10 of 1024 x 1024 images and of 2048 x 2048, and the shared transformer LM (12 blocks of width 1024, 1024 tokens,
batch 16). ``batch`` is the global batch everywhere, so seconds per step compare directly across
strategies and GPU counts; scaling efficiency is single's seconds over (gpus x a strategy's).
GPU counts a box lacks skip with the reason. The CPU classes are the newcomer's run: a tiny LM
on gloo, two CPU workers, seconds apiece."""
from benchmarks.common import _OnDevice, _OnHost

RESNET_CASE, LM_CASE = "parallel_resnet50", "parallel_lm"
TUTORIAL = {"batch": 10}
IMAGE_SIZES = [1024, 2048]  # the tutorial's, and one larger
LM = {"batch": 16, "depth": 12, "width": 1024, "seq_len": 1024}
TINY_LM = {"device": "cpu", "batch": 4, "depth": 2, "width": 32, "seq_len": 16}
DATA_PARALLEL = ["dp", "ddp", "fsdp"]
ALL_GPUS = [1, 2, 4, 8]
SEVERAL_GPUS = [2, 4, 8]


class ResnetSingle(_OnDevice):
    case = RESNET_CASE
    fixed = dict(TUTORIAL, strategy="single", device="cuda", gpus=1, micro_batches=1)
    param_names = ["image_size"]
    params = [[224, *IMAGE_SIZES]]


class ResnetDataParallel(_OnDevice):
    case = RESNET_CASE
    fixed = dict(TUTORIAL, device="cuda", micro_batches=1)
    param_names = ["strategy", "gpus", "image_size"]
    params = [DATA_PARALLEL, ALL_GPUS, IMAGE_SIZES]


class ResnetModelParallel(_OnDevice):
    case = RESNET_CASE
    fixed = dict(TUTORIAL, strategy="naive_mp", device="cuda", micro_batches=1)
    param_names = ["gpus", "image_size"]
    params = [SEVERAL_GPUS, IMAGE_SIZES]


class ResnetPipeline(_OnDevice):
    case = RESNET_CASE
    fixed = dict(TUTORIAL, strategy="pipeline", device="cuda")
    param_names = ["gpus", "micro_batches", "image_size"]
    params = [SEVERAL_GPUS, [2, 5, 10], IMAGE_SIZES]


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
