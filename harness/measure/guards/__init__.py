"""What keeps a run within its bounds and harmless to the box: an emulated card's budget, the
managed-memory guard, working sets and their limits, what a case needs to run here, checks
of what a user hands in, locks, folders a command owns, processes that die with their parent,
and signal handlers put back as they were."""
