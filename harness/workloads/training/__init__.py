"""Training in PyTorch and the ways out of "CUDA out of memory": the models, the optimizer step over
micro-batches, the ``tricks`` step a way builds, a way's knobs (``ways``) and its allocator
settings, offloading to the host, sequence batches, and the workloads that fragment."""
