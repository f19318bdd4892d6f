"""Importers: per-step series from CSV files, framework logs and metric exports."""
