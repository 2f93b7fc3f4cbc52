"""The `batchscope` command line (entry point: app.cli.main:main; `python -m app.cli`)."""
