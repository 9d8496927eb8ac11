"""The instruments and what they write, in rooms: ``instruments`` (timing, memory levels, devices,
the environment and the machine's name), ``guards`` (an emulated card's budget, the managed-memory
guard, working sets, what a case needs, checks of inputs, locks, owned folders, lifelines) and
``records`` (the record and the record store); beside them ``outcomes`` (how a case ends other
than with a figure) and ``workload`` (the Workload type).

The lowest layer: it imports nothing of the harness above it. Inside it, records and workload sit
over guards, guards over instruments, and everything over outcomes."""
