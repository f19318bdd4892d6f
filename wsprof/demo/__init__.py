"""The embedded workload behind ``wsprof demo``."""
