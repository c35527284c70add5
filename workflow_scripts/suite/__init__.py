"""The KernelBench checkout: fetching and validating it, its problems, and the prompt KernelBench renders."""
