"""The command line interface (thin: parsing, messages, exit codes)."""
