"""Stand-in for Hugging Face ``accelerate`` (only its launcher), for wsprof's launcher tests."""
