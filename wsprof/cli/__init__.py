"""Command line (click); one module per command."""
