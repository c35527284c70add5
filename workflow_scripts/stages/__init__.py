"""The modules Snakemake rules call: `python -m workflow_scripts.stages.<rule>`, one per rule, each a thin CLI
over library code (input and output files as flags, settings as one validated --params JSON)."""
