"""The by-hand command lines (`python -m workflow_scripts <tool> --help`): one module per tool, each a thin CLI over
library code. No rule calls these; rules call workflow_scripts.stages."""
