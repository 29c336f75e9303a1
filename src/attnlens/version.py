"""The installed package's version, read from its metadata (``pyproject.toml`` declares it once).

A leaf: it imports nothing of attnlens, so every module may import it, and nothing needs the package root's
``__init__`` (which sits above every module: tests/project/test_layout.py and the import contracts).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("attnlens")
except PackageNotFoundError:  # the sources on sys.path without an install: say so rather than guess
    __version__ = "0+unknown"
