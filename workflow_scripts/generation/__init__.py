"""Generation: one module per model kind (replay: cached and reference; cli_tool: cli; vllm: vllm) and the
completion cache they share."""
