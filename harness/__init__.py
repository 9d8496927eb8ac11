"""oombench's harness: device discovery, measurement, outcomes, safety, cases and the CLI.

Importing the package imports nothing heavy; each module pulls in a framework only when used.
"""
__version__ = "0.1.0"
