"""asv's plumbing: the suite's run and publishing, the benchmark adapter asv's classes call,
the suite's benchmarks as declared (``catalog``), the begun log, profiles, asv's configuration,
output, labels and offline site, and the run a plain ``asv run`` makes."""
