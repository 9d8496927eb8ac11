"""What drives a run: the command line, set-up of the environment, asv (running, benchmark
adapter, publishing), the runner that measures one case in this process, the wheelhouse."""
