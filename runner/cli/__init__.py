"""The command line: `python -m runner COMMAND`, the client of a running server, and `bench`."""
