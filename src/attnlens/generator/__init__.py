"""A causal language model that answers from a context: its prompts (:mod:`~.prompts`), its training from scratch on
the embedded corpus (:mod:`~.training`) and its greedy answers and their scores (:mod:`~.decoding`), which the
generation study explains (:mod:`attnlens.attribution.context`)."""
