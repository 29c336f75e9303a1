# Validation, helpers and wildcard constraints: the only Python of the workflow.
import sys

from attnlens.config import validate_config
from attnlens.errors import InputError

try:
    validate_config(config, where=" + ".join(map(str, workflow.configfiles)) or "config")
except InputError as err:
    sys.exit(f"attnlens: error: {err}")


def get_final_outputs():
    """Everything `rule all` builds."""
    return [
        "results/models/finetuned",
        "results/models/train_metrics.json",
        "results/predictions/test.parquet",
        "results/predictions/metrics.json",
        "results/predictions/selection.json",
    ]


wildcard_constraints:
    split="train|test",
