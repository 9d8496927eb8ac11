"""What fits: the search for the largest batch under a budget, the probe each guess runs
alone in its process, and the log of earlier probes that bounds and aims later searches."""
