"""The box's physical limits: every other figure is read against these."""
from harness.cases.ceilings import CONTEXT_PROBES, GPU_PROBES, HOST_PROBES, MULTI_GPU_PROBES
from harness.cases.pageable import DIRECTIONS, SIZES_MIB

from benchmarks.common import _OnDevice, _OnHost


class Host(_OnHost):
    case = "ceilings"
    param_names = ["probe"]
    params = [list(HOST_PROBES)]
    timeout = 300


class Device(_OnDevice):
    case = "ceilings"
    param_names = ["probe"]
    params = [list(GPU_PROBES)]
    timeout = 300


class Peer(Device):
    params = [list(MULTI_GPU_PROBES)]


class Context(_OnDevice):
    """What a fresh process holds on the device outside its allocator: the CUDA context, then
    cuBLAS's and cuDNN's (in the record's memory, ``context.*``): what an emulated card charges."""
    case = "ceilings"
    param_names = ["probe"]
    params = [list(CONTEXT_PROBES)]
    timeout = 300


class Pageable(_OnDevice):
    """Pageable host memory to and from the device, by buffer size: the best size is the ceiling."""
    case = "pageable"
    param_names = ["direction", "size_mib"]
    params = [list(DIRECTIONS), list(SIZES_MIB)]
    timeout = 300
