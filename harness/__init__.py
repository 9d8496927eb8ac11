"""oombench's harness, in layers (highest first; none imports from a layer above it):

- ``drive``: the command line, set-up, asv, the runner that measures one case;
- ``report``: summary, tables, results docs, the gate, the pages: readers of the record store;
- ``cases``: declarations: each case's parameters and how to build its workload;
- ``workloads``: what builds a step: models, trainers, parallel strategies, kernels;
- ``measure``: timing, memory, devices, environment, outcomes, the guard, records and their store;
- ``units``: how every figure is written.

Importing the package imports nothing heavy; each module pulls in a framework only when used.
"""
__version__ = "0.1.0"
