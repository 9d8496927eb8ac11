"""What builds a step to measure, a family a room: ``training`` (PyTorch models and trainers, and
the ways out), ``parallelism`` (the strategies and their process launcher), ``chainer`` (Chainer
networks, and their GCN in PyTorch), ``cupy`` (kernels, allocators, managed memory), ``search``
(what fits: the search and its probe); ``synthetic`` makes a results folder to time the tools on.

A workload never reads a clock or a memory counter: it returns a ``harness.measure.workload.Workload``."""
