"""What drives a run: ``commands`` (the command line and set-up of the environment, compare, todo,
mutate, a second stack, the wheelhouse) over ``asv`` (running the suite, the benchmark adapter,
publishing), over the runner that measures one case in this process, and the scratch folders and
bytecode cache that the processes a command starts share."""
