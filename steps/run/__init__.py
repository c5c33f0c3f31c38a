"""Running commands: the runner (argv only, bounded output, another account's processes) and uv's
environment (the index options and the operator's uv/pip configuration)."""
