"""Analysis: pure functions from traces or series to verdicts and findings. Never imports torch."""
