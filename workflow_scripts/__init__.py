"""The Triton KernelBench pipeline as a package.

stages/      the only modules Snakemake rules call (module name == rule name), each a thin CLI over the libraries
core/        hashing, atomic I/O, records passed between stages, statuses and flags, results layout, the store
suite/       the KernelBench checkout, its problems and the prompt
generation/  one module per model kind and the completion cache
analysis/    code extraction and static analysis (labels mistakes; stops nothing)
evaluation/  running answers and baselines: run configuration, timing, isolation, the child process
scoring/     rows, speedup and fast_p (one definition), the published summary and figures
devtools/    helpers for tests and benchmarks; never called by rules, not part of any store key
"""
