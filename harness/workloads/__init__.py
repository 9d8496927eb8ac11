"""What builds a step to measure: PyTorch models and trainers, the parallel strategies and their
process launcher, CuPy kernels and allocators, Chainer networks, the what-fits search and probe.

A workload never reads a clock or a memory counter: it returns a ``harness.measure.workload.Workload``."""
