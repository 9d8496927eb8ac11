"""Arrays on CuPy: its allocators and managed memory, zero-copy mapped host memory, access
patterns over a working set, and explicit out-of-core streaming in chunks."""
