"""Running answers and baselines: the run configuration, the timing protocol, the isolated child process and
its channel, the environment fingerprint and the GPU locks."""
