"""Helpers for tests and benchmarks (workspace copies, tiny models). Never called by rules and never part of a
store key."""
