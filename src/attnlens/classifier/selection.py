"""The showcased examples: which test documents every per-example figure, overlay and explorer shows, and why.

Read from the predictions table (:data:`PREDICTIONS_SCHEMA`, written by rule ``predict``) and kept in
``selection.json`` (:data:`SELECTION_SCHEMA`). Plain pandas: the light rules that read the selection load no model.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from attnlens.errors import InputError
from attnlens.io import load_json
from attnlens.tasks import CLASSIFICATION, REGISTRY, Task, get_task

PREDICTIONS_SCHEMA = "predictions/v1"
SELECTION_SCHEMA = "selection/v1"


def select_examples(
    predictions: pd.DataFrame,
    seed: int,
    extra_ids: Sequence[str] = (),
    task: Task = CLASSIFICATION,
    names: Sequence[str] = (),
) -> list[dict]:
    """The showcased examples of the test split: the task's roles (:meth:`~attnlens.tasks.Task.roles`), then
    ``fixed``: every id of ``extra_ids`` (e.g. the paper's legacy ids), in the given order.

    For a classification the roles are ``false_positive`` / ``false_negative`` (binary tasks, positive = class 1):
    the most confident error of that kind; ``most_confident_<c>``: of the examples predicted ``c``, the one with
    the highest probability of ``c``; ``random_correct_<c>``: a correct example of true class ``c``, drawn with
    ``seed``. For a regression: the largest over- and underestimate, the closest prediction, the highest predicted
    value and a seeded draw. A role no example meets is left out (never filled with an example of another class);
    :func:`roles_left_out` says which and why.

    Args:
        predictions: the ``predict`` rule's table (``example_id, label, pred`` and the task's outputs column).
        seed: seed of the random draws.
        extra_ids: ids to include as they are.
        task: the run's task.
        names: the outputs' names (the classifier's labels), as a rule names them.
    """
    chosen = [(role, i, rule) for role, i, rule in task.roles(predictions, seed, names) if i is not None]
    position = {eid: i for i, eid in enumerate(predictions["example_id"])}
    for eid in extra_ids:
        if eid not in position:
            raise InputError("config", "predict.extra_ids", f"expected ids of the test split, {eid!r} is not one")
        chosen.append(("fixed", position[eid], "listed in predict.extra_ids"))
    return [{"role": role, **task.showcase_entry(predictions, i), "rule": rule} for role, i, rule in chosen]


def roles_left_out(
    predictions: pd.DataFrame, seed: int, task: Task = CLASSIFICATION, names: Sequence[str] = ()
) -> list[dict]:
    """The showcase roles :func:`select_examples` leaves out: ``{"role", "why"}`` each."""
    return [{"role": role, "why": why} for role, i, why in task.roles(predictions, seed, names) if i is None]


def role_left_out(selection: dict, role: str) -> str | None:
    """Why ``role`` names no example of this run (``selection.json`` as loaded), or ``None`` if it is no role name.

    A role is left out when no example meets it (its reason is in the selection's ``left_out``), when it is a role
    of another task (``most_confident_1`` in a regression), or when the task says so: for a classification, a
    class the classifier does not have, or a binary-task role and more classes.
    """
    for r in selection.get("left_out", []):
        if r["role"] == role:
            return r["why"]
    task = get_task(selection.get("task"))
    for other in REGISTRY.values():
        if other.role_pattern.fullmatch(role):
            if other is not task:
                return f"{role} is a role of {other.label} runs, this run is a {task.label}"
            return task.role_missing(selection, role)
    return None


def _number(value) -> str:
    """A label or prediction as a title shows it: a class index as it is, a value to four significant digits, a
    multi-label document's 0/1 vector as the set of its labels' indices."""
    if isinstance(value, list):
        return "{" + ", ".join(str(k) for k, present in enumerate(value) if present) + "}"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def outcome_text(entry: dict) -> str:
    """``label 1, predicted 0`` (a class), ``label 3.012, predicted 2.874`` (a value) or ``label {0, 2}, predicted
    {2}`` (labels) for a showcased example."""
    return f"label {_number(entry['label'])}, predicted {_number(entry['pred'])}"


def showcased_once(selection: Sequence[dict]) -> list[tuple[dict, str]]:
    """Each showcased example once, in selection order: its first entry and all its roles, joined."""
    roles: dict[str, list[str]] = {}
    first: dict[str, dict] = {}
    for e in selection:
        first.setdefault(e["example_id"], e)
        roles.setdefault(e["example_id"], []).append(e["role"])
    return [(first[eid], ", ".join(r)) for eid, r in roles.items()]


def load_selection(path) -> list[dict]:
    """The showcased examples of ``selection.json`` (``role``, ``example_id``, …), in file order."""
    return load_json(path, SELECTION_SCHEMA)["examples"]
