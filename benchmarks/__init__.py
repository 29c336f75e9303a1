"""The measurements behind ``docs/benchmarks.md``: ``make bench`` (``python -m benchmarks.bench``, one module per
suite under :mod:`benchmarks.suites`), the paper-shape rehearsal, the card's proofs and two commits side by side.
Run from the checkout's root, as modules (``python -m benchmarks.<name>``)."""
