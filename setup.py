"""Build the optional compiled recording path (``wsprof.capture._fasthooks``).

Everything else is in pyproject.toml. Where no C compiler (or no Python headers) exists, or on
Python < 3.11, the extension is skipped and wsprof records through its pure-Python path.
"""

import sys

from setuptools import Extension, setup

ext = [
    Extension(
        "wsprof.capture._fasthooks",
        ["wsprof/capture/_fasthooks.c"],
        extra_compile_args=["-O2", "-std=c11"],
        optional=True,
    )
]
setup(ext_modules=ext if sys.version_info >= (3, 11) else [])
