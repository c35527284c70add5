"""Hashing, atomic I/O, the records passed between stages, statuses and flags, the results layout and the
content-addressed store. Standard library only at import time (the vLLM environment imports it too)."""
