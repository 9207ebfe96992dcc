"""Shared code of the grokking replication book: core modules, measures/, experiments/, harness/."""
__version__ = "0.1.0"
