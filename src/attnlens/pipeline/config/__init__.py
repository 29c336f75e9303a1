"""The configuration: one declaration per key, in ``workflow/schemas/config.schema.yaml``.

One module a job: :mod:`~.sections` (the schema and the section classes), :mod:`~.validation` (a config checked
against the schema and across keys), :mod:`~.markdown` (``config/README.md``); shard counts are
:mod:`attnlens.sharding`'s.

The schema declares every key once — type, range, enum, default and meaning. Snakemake validates the
config against it, ``config/README.md`` is generated from it (:func:`schema_markdown`), and the frozen
dataclass of each section (``AttributionConfig`` …) is generated from it here (:func:`_section_class`):
only the class names are written in Python. A rule passes only its own keys (``keys(...)`` in the
workflow) and its script builds the matching dataclass with :func:`rule_section`. What a JSON schema
cannot say — checks across keys — is :func:`_check_cross_fields`.

:func:`load_config` validates a YAML file against the schema (filling defaults) and turns the
first violation into one :class:`~attnlens.errors.InputError` line naming the file and the key.
"""

from __future__ import annotations

from attnlens.pipeline.config.markdown import schema_markdown
from attnlens.pipeline.config.sections import (
    KEYS_GIVEN,
    KEYS_READ,
    SCHEMA_PATH,
    SECTION_CLASSES,
    SECTIONS,
    STUDIES,
    TOP_LEVEL_VALUES,
    AttentionConfig,
    AttributionConfig,
    ConfigKeyNotGiven,
    DataConfig,
    ExplanationsConfig,
    ExplorerConfig,
    FaithfulnessConfig,
    FiguresConfig,
    FindingsConfig,
    GenerationConfig,
    GenerationLearnedConfig,
    GenerationScratchConfig,
    GenerationTrainConfig,
    GridConfig,
    HubConfig,
    ImportanceConfig,
    ModelConfig,
    PairAttributionConfig,
    PairDataConfig,
    PairEncoderConfig,
    PairExactConfig,
    PairHubConfig,
    PairsConfig,
    PairSyntheticConfig,
    PairTopologyConfig,
    PersistenceConfig,
    PredictConfig,
    ReportConfig,
    SimilarityConfig,
    SyntheticConfig,
    TopologyConfig,
    TrainConfig,
    load_schema,
    rule_section,
)
from attnlens.pipeline.config.validation import (
    load_config,
    read_config_file,
    validate_config,
)

__all__ = [
    "KEYS_GIVEN",
    "KEYS_READ",
    "SCHEMA_PATH",
    "SECTIONS",
    "SECTION_CLASSES",
    "STUDIES",
    "TOP_LEVEL_VALUES",
    "AttentionConfig",
    "AttributionConfig",
    "ConfigKeyNotGiven",
    "DataConfig",
    "ExplanationsConfig",
    "ExplorerConfig",
    "FaithfulnessConfig",
    "FiguresConfig",
    "FindingsConfig",
    "GenerationConfig",
    "GenerationLearnedConfig",
    "GenerationScratchConfig",
    "GenerationTrainConfig",
    "GridConfig",
    "HubConfig",
    "ImportanceConfig",
    "ModelConfig",
    "PairAttributionConfig",
    "PairDataConfig",
    "PairEncoderConfig",
    "PairExactConfig",
    "PairHubConfig",
    "PairSyntheticConfig",
    "PairTopologyConfig",
    "PairsConfig",
    "PersistenceConfig",
    "PredictConfig",
    "ReportConfig",
    "SimilarityConfig",
    "SyntheticConfig",
    "TopologyConfig",
    "TrainConfig",
    "load_config",
    "load_schema",
    "read_config_file",
    "rule_section",
    "schema_markdown",
    "validate_config",
]
