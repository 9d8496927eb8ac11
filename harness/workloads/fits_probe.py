"""One "what fits" probe, alone in its process:
``python -m harness.workloads.fits_probe PARAMS_JSON N FRACTION [batch|seq_len]``.

Caps the CUDA allocator at FRACTION of the card before anything is allocated, builds the
``tricks`` training step at batch N (no accumulation), or one sequence of N tokens, runs ``STEPS`` optimizer steps and prints
one JSON line: ``{"fits": true|false, "pid": ..., "peak_allocated": bytes, "reason": ...}``.
Out of memory is an answer (exit 0); any other error is a broken probe (a traceback, exit 1).
On the CPU there is no allocator cap: the probe only says whether the step runs.
"""
from __future__ import annotations

import json
import os
import sys

STEPS = 2  # the second step holds the optimizer state the first one created
# Under a cap, cuBLAS and cuDNN can fail to get their workspace from the capped allocator and
# say so in their own words rather than as torch's OutOfMemoryError.
LIBRARY_OOM = ("CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED", "CUDNN_STATUS_NOT_ENOUGH_WORKSPACE")


def out_of_memory(e: BaseException) -> bool:
    from harness.measure.outcomes import is_out_of_memory
    return is_out_of_memory(e) or any(text in str(e) for text in LIBRARY_OOM)


def sizes(over: str, n: int) -> dict:
    """The ``tricks`` parameters a probe of size n sets."""
    return {"batch": n, "micro_batch": n} if over == "batch" else {"seq_len": n, "batch": 1, "micro_batch": 1}


def probe(params: dict, n: int, fraction: float, over: str = "batch") -> dict:
    from harness.workloads.tricks import make_trainer
    from harness.measure.requirements import need_torch
    torch = need_torch(params["device"])
    cuda = params["device"] == "cuda"
    if cuda:
        torch.cuda.set_per_process_memory_fraction(fraction, 0)
    result = {"pid": os.getpid(), "n": n}
    from harness.workloads.training import float32_matmul
    try:
        with float32_matmul(params["technique"] == "tf32"):  # as the tricks case runs it
            trainer, _ = make_trainer(**dict(params, **sizes(over, n)))
            for _ in range(STEPS):
                trainer.step()
            if cuda:
                torch.cuda.synchronize()
    except Exception as e:
        if not out_of_memory(e):
            raise
        return dict(result, fits=False, reason=str(e).strip().splitlines()[0])
    if cuda:
        result["peak_allocated"] = int(torch.cuda.max_memory_allocated(0))
        result["peak_reserved"] = int(torch.cuda.max_memory_reserved(0))
    return dict(result, fits=True)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (3, 4):
        raise SystemExit("usage: python -m harness.workloads.fits_probe PARAMS_JSON N FRACTION [batch|seq_len]")
    over = argv[3] if len(argv) == 4 else "batch"
    print(json.dumps(probe(json.loads(argv[0]), int(argv[1]), float(argv[2]), over)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
