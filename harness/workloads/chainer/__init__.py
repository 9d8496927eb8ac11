"""The Chainer family: Chainer made to import on today's stack, where it runs and which CuPy
allocator it draws from, its networks, the synthetic graph its GCN learns, and that GCN
ported to PyTorch (the framework Chainer's users moved to)."""
