"""The commands a user types: ``python3 -m harness`` and its set-up, compare (with its state
file), todo, mutate, a second library stack and the wheelhouse."""
