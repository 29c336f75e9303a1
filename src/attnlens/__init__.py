"""attnlens: does what a transformer attends to agree with what its prediction depends on?

The importable half of the pipeline: every numeric step and every artifact reader/writer lives
here, covered by unit tests; the Snakemake rules only decide what runs where.
"""

from attnlens.errors import InputError

__version__ = "0.1.0"

__all__ = ["InputError", "__version__"]
