"""The instruments: what this process reads of the machine and its step. Time per step,
memory levels, how busy the GPU was, the devices, the host, the environment and the
machine's name, and the compatibility shims in place."""
