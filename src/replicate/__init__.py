"""Shared code of the grokking replication book (see DESIGN.md for the map)."""
__version__ = "0.1.0"
