"""Capture: collective hooks, counters and the py-spy driver. Capture never analyses."""
