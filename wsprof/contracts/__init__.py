"""Contracts between wsprof's layers: the types capture, trace, importers, analysis and
report share instead of strings (series keys and kinds, units, counter names, event kinds,
the self-overhead record, the phase vocabulary). Pure data; imports nothing else of wsprof."""
