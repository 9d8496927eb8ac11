"""A strict stand-in for pynvml, shared by the tests that read NVML (devices, busy shares, the
managed-memory guard): handles are objects of their own, and each GPU differs from the others in
memory, name, UUID and compute capability, so a value read from the wrong handle, or none, shows."""
import types

GiB = 2**30


class Handle:
    def __init__(self, kind, key):
        self.kind, self.key = kind, key


class StrictNvml(types.ModuleType):
    """pynvml of a box whose GPU i has (i + 1) x 10 GiB total, i GiB used, compute capability
    (8 + i).0 and UUID GPU-i; MIG instance MIG-i-a lives on GPU i with 5 GiB; GPU i runs i
    processes; GPUs 0 and 1 are peers, any pair with GPU 2 is not, and NVML errs on pairs with 3."""
    NVML_P2P_CAPS_INDEX_READ = 0
    NVML_P2P_STATUS_OK = 0

    class NVMLError(Exception):
        pass

    def __init__(self, names, cuda=12040):
        super().__init__("pynvml")
        self.names, self.cuda, self.open = names, cuda, 0

    def _gpu(self, h):
        assert isinstance(h, Handle) and h.kind == "gpu", h
        return h.key

    def nvmlInit(self): self.open += 1
    def nvmlShutdown(self): self.open -= 1
    def nvmlDeviceGetCount(self): return len(self.names)

    def nvmlDeviceGetHandleByIndex(self, i):
        assert isinstance(i, int) and 0 <= i < len(self.names), i
        return Handle("gpu", i)

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid.startswith("GPU-"):
            return self.nvmlDeviceGetHandleByIndex(int(uuid[4:]))
        assert uuid.startswith("MIG-"), uuid
        return Handle("mig", uuid)

    def nvmlDeviceGetName(self, h): return self.names[self._gpu(h)].encode()
    def nvmlDeviceGetCudaComputeCapability(self, h): return 8 + self._gpu(h), 0
    def nvmlDeviceGetUUID(self, h): return f"GPU-{self._gpu(h)}".encode()
    def nvmlSystemGetDriverVersion(self): return "580.159.04"
    def nvmlSystemGetCudaDriverVersion(self): return self.cuda

    def nvmlDeviceGetMemoryInfo(self, h):
        if isinstance(h, Handle) and h.kind == "mig":
            return types.SimpleNamespace(total=5 * GiB, free=4 * GiB, used=GiB)
        i = self._gpu(h)
        return types.SimpleNamespace(total=(i + 1) * 10 * GiB, free=(i + 1) * 10 * GiB - i * GiB, used=i * GiB)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, h):
        assert isinstance(h, Handle) and h.kind == "mig", h
        return Handle("gpu", int(h.key.split("-")[1]))

    def nvmlDeviceGetP2PStatus(self, a, b, cap):
        i, j = self._gpu(a), self._gpu(b)
        assert cap == self.NVML_P2P_CAPS_INDEX_READ
        if 3 in (i, j):
            raise self.NVMLError("not supported")
        return 0 if {i, j} == {0, 1} else 3

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [object()] * self._gpu(h)
