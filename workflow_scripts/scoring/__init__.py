"""From evaluations to published numbers: the per-problem rows, the one definition of speedup, fast_p and the
flag limit, the summary in the published schema, tables and figures."""
