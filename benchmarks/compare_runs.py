"""Are two runs' results the same? ``python benchmarks/compare_runs.py RESULTS_A RESULTS_B``: the artifacts that
differ, one per line (exit 1), or ``same results`` (exit 0). The comparison is :mod:`attnlens.pipeline.compare`'s.
"""

from attnlens.pipeline.compare import main

if __name__ == "__main__":
    main()
