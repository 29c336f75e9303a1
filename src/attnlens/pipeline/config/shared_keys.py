"""The keys of the two jobs a grid's runs share (rule prepare_dataset's and rule build_base_model's ``keys(...)`` in
the workflow): runs that give a rule the same values share its job (attnlens.pipeline.grid)."""

from __future__ import annotations

#: The keys rule prepare_dataset is given.
PREPARE_DATASET_KEYS = {
    "data": [
        "task",
        "source",
        "seed",
        "test_fraction",
        "text_column",
        "label_column",
        "label_columns",
        "id_column",
        "question_column",
        "sources_column",
        "layout",
        "path",
        "classes",
        "hub",
        "synthetic",
    ],
    "model": ["source", "name_or_path", "max_length"],
}
#: The keys rule build_base_model is given.
BUILD_BASE_MODEL_KEYS = {
    "model": [
        "source",
        "name_or_path",
        "max_length",
        "attention_window",
        "architecture",
        "block_size",
        "num_random_blocks",
        "seed",
    ],
}
