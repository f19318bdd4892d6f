"""Rendering: HTML report, terminal text, JSON. Renderers only read analysis results."""
