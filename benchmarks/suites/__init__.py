"""One module per ``make bench`` suite (``results/bench/<suite>.json``); ``benchmarks/bench.py`` runs them."""
