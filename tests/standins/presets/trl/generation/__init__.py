"""Stand-in package (same dotted path as the framework's)."""
