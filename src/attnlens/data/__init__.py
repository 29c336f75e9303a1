"""The data side: where examples come from and how their text is read.

* :mod:`~attnlens.data.sources` — load a ``data.source`` (the synthetic corpus, a file, class folders, a hub
  dataset), check it, split it, and write ``{train,test}.parquet`` with its manifest;
* :mod:`~attnlens.data.layouts` — how a dataset's rows become examples (``data.layout``: columns, HotpotQA);
* :mod:`~attnlens.data.corpus` — the generated corpus of every task (one module a task), with its planted rationales;
* :mod:`~attnlens.data.reading` — what the model reads of each split: truncation and unknown tokens, and their notes;
* :mod:`~attnlens.data.tokens` — token surface strings and the token masks, for WordPiece and byte-level BPE.

A context cut into sources, its prompt and the ways to remove a source are the generation task's
(:mod:`attnlens.tasks.contexts`): the data side reads the tasks, never the other way round.
"""
