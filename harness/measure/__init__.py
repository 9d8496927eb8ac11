"""The instruments and what they write: timing, memory levels, devices, the environment and the
machine's name, outcomes, the managed-memory guard, the record and the record store.

The lowest layer: it imports nothing of the harness above it."""
