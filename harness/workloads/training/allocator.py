"""Allocator settings as a way out: torch's CUDA caching allocator configured by name, and CuPy's
pools, each applied to the case's own fresh process before its first allocation.

torch (``TORCH``): ``default`` (no configuration), ``expandable`` (``expandable_segments:True``:
segments grow in place by mapping more pages, so blocks of new sizes need no new segment),
``async`` (``backend:cudaMallocAsync``: the driver's stream-ordered pool), ``gc0.6``
(``garbage_collection_threshold:0.6``, the value of PyTorch's own example: past 60% of the memory
the process may use, cached blocks nobody reused are given back before a request must wait for
all of them; on a whole card of 80 GB or more a workload of 20-odd GB never reaches that share, so
it acts under an emulated budget), and ``split512`` (``max_split_size_mb:512``: no cached block
over 512 MB is cut for a smaller request; 512 MB lies above every activation of both fragmenting
workloads, whose largest, ResNet50's first stage at 1024 x 1024, holds 335 MB in bf16 for ten
images, and below the LM's logits (bf16, and their fp32 copy for the loss), 0.8 to 2.1 GB as a
step's token count moves with its length: the blocks whose sizes change from step to step).

Why before torch is imported, not merely before CUDA starts: c10 chooses the allocator's backend
(native or cudaMallocAsync) in a static initializer when libc10_cuda loads, at ``import torch``,
from the configuration in the environment. torch 2.9 and later read ``PYTORCH_ALLOC_CONF`` first
and the older ``PYTORCH_CUDA_ALLOC_CONF`` (deprecated) only where it is unset; earlier releases
read only the latter. A setting therefore sets both, ``default`` removes both, and applying one in
a process that has imported torch already is refused (``TooLate``): its backend is fixed.

CuPy (``CUPY``): ``device_pool`` (the default ``MemoryPool``), ``async_pool`` (``MemoryAsyncPool``,
over cudaMallocAsync) and ``limited_pool`` (a ``MemoryPool`` with ``set_limit``: at the limit the
pool frees its cached blocks and retries before it fails). A budget caps every pool at the
emulated card; the limit of ``limited_pool`` is tighter: ``LIMIT_OVER_LIVE`` times the bytes the
workload's largest step holds live, so that the pool may keep no cache of other sizes beyond room
for rounding.
"""
from __future__ import annotations

import os
import sys

TORCH = {"default": "", "expandable": "expandable_segments:True", "async": "backend:cudaMallocAsync",
         "gc0.6": "garbage_collection_threshold:0.6", "split512": "max_split_size_mb:512"}
ENV_VARS = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")  # the one torch >= 2.9 reads first, then the older
CUPY = ("device_pool", "async_pool", "limited_pool")
LIMIT_OVER_LIVE = 1.25


class TooLate(RuntimeError):
    """torch was imported before the setting could be applied: its backend is fixed already."""


def choices_message(kind: str, name, names) -> str:
    return f"unknown {kind} allocator setting {name!r}: choose one of {', '.join(names)}"


def torch_conf(name: str) -> str:
    """The configuration string of torch setting ``name``; ValueError naming the choices."""
    if name not in TORCH:
        raise ValueError(choices_message("torch", name, TORCH))
    return TORCH[name]


def cupy_setting(name: str) -> str:
    if name not in CUPY:
        raise ValueError(choices_message("CuPy", name, CUPY))
    return name


def environ_with(name: str, environ) -> dict:
    """A copy of ``environ`` with torch setting ``name`` in force: for a process about to start."""
    conf = torch_conf(name)
    env = {k: v for k, v in environ.items() if k not in ENV_VARS}
    if conf:
        env.update({var: conf for var in ENV_VARS})
    return env


def apply_torch(name: str, environ=None, modules=None) -> dict:
    """Puts torch setting ``name`` in force in this process's environment, before torch is
    imported; returns what it set ({variable: value}, empty for ``default``). ``TooLate`` where
    torch is imported already, ValueError for an unknown name (both before anything changes)."""
    environ = os.environ if environ is None else environ
    modules = sys.modules if modules is None else modules
    wanted = environ_with(name, {})
    if environ_with(name, environ) == dict(environ):
        return wanted  # in force already: nothing to change, whenever torch was imported
    if "torch" in modules:
        raise TooLate(f"allocator setting {name!r} must be in the environment before torch is imported (the "
                      "backend is chosen when torch loads), and this process imported torch already: run the "
                      "case in a fresh process (asv, `python3 -m harness case`), not after other torch work")
    for var in ENV_VARS:
        environ.pop(var, None)
    environ.update(wanted)
    return wanted


def use_torch(name: str, environ=None) -> None:
    """Puts torch setting ``name`` in force for this process unless it is already: ``default``
    leaves whatever the user set, and a setting the process's starter put in its environment
    stands. Otherwise ``apply_torch``: refused once torch is imported (a case runs in a fresh
    process)."""
    environ = os.environ if environ is None else environ
    if all(environ.get(key) == value for key, value in environ_with(name, {}).items()):
        return
    apply_torch(name, environ)


def in_force(torch) -> dict:
    """What torch's CUDA allocator runs with: its backend, and the configuration it parsed where
    this torch can say (``torch._C._accelerator_getAllocatorSettings``, torch 2.9 and later)."""
    read = getattr(torch._C, "_accelerator_getAllocatorSettings", None)
    return {"backend": torch.cuda.get_allocator_backend(), "settings": read() if read else None}


def verified(name: str, running: dict) -> dict:
    """What the record keeps of ``running`` (``in_force``'s answer); RuntimeError where torch runs
    another backend than setting ``name`` asks for (the one part of it a process cannot change later)."""
    conf = torch_conf(name)
    backend = "cudaMallocAsync" if "cudaMallocAsync" in conf else "native"
    if running.get("backend") != backend:
        raise RuntimeError(f"allocator setting {name!r} ({conf or 'no configuration'}) asks for the {backend} "
                           f"backend, and torch runs {running.get('backend')}: something set "
                           f"{' or '.join(ENV_VARS)} otherwise before torch was imported")
    return {"allocator_backend": backend, "allocator_settings": running.get("settings"), "allocator_conf": conf}


def use_cupy_pool(cupy, name: str, limit_bytes: int | None = None, live_bytes: int | None = None):
    """Sets CuPy's allocator to pool ``name``, capped at ``limit_bytes`` (the budget; None: the
    whole card); ``limited_pool`` at ``LIMIT_OVER_LIVE`` x ``live_bytes`` too. Returns the pool,
    watched for its peak under its name (``harness.measure.instruments.memory.watch_pool``)."""
    from harness.measure.instruments import memory
    from harness.workloads.cupy.managed import install_cupy_allocator
    cupy_setting(name)
    if name == "limited_pool":
        pool = cupy.cuda.MemoryPool()
        cupy.cuda.set_allocator(pool.malloc)
        memory.watch_pool(name, pool)
        limit_bytes = min(x for x in (limit_bytes, int(LIMIT_OVER_LIVE * live_bytes)) if x is not None)
    else:
        pool = install_cupy_allocator(cupy, name)
    if limit_bytes is not None:
        pool.set_limit(size=limit_bytes)
    return pool
