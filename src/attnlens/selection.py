"""The showcased examples: which test documents every per-example figure, overlay and explorer shows, and why.

Read from the predictions table (:data:`PREDICTIONS_SCHEMA`, written by rule ``predict``) and kept in
``selection.json`` (:data:`SELECTION_SCHEMA`). Plain pandas: the light rules that read the selection load no model.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from attnlens.errors import InputError
from attnlens.io import load_json

PREDICTIONS_SCHEMA = "predictions/v1"
SELECTION_SCHEMA = "selection/v1"


def _roles(predictions: pd.DataFrame, seed: int) -> list[tuple[str, int | None, str]]:
    """``(role, row or None, rule or why no example meets it)`` for every showcase role, in order."""
    probs = np.stack(predictions["probs"].to_numpy())
    labels = predictions["label"].to_numpy()
    preds = predictions["pred"].to_numpy()
    n_labels = probs.shape[1]
    out: list[tuple[str, int | None, str]] = []
    if n_labels == 2:
        for role, true, pred in (("false_positive", 0, 1), ("false_negative", 1, 0)):
            idx = np.flatnonzero((labels == true) & (preds == pred))
            if len(idx):
                best = idx[np.argmax(probs[idx, pred])]
                out.append((role, int(best), f"label {true} predicted {pred}, highest p{pred} among them"))
            else:
                out.append((role, None, f"no test example has label {true} and is predicted {pred}"))
    for c in range(n_labels):
        idx = np.flatnonzero(preds == c)
        if len(idx):
            best = idx[np.argmax(probs[idx, c])]
            out.append((f"most_confident_{c}", int(best), f"predicted {c}, highest softmax probability p{c}"))
        else:
            out.append((f"most_confident_{c}", None, f"no test example is predicted {c}"))
    rng = np.random.default_rng(seed)
    for c in range(n_labels):
        idx = np.flatnonzero((labels == c) & (preds == c))
        if len(idx):
            out.append((f"random_correct_{c}", int(rng.choice(idx)), f"seeded draw (seed {seed}) of correct class {c}"))
        else:
            out.append((f"random_correct_{c}", None, f"no test example of class {c} is predicted {c}"))
    return out


def select_examples(predictions: pd.DataFrame, seed: int, extra_ids: Sequence[str] = ()) -> list[dict]:
    """The showcased examples of the test split.

    * ``false_positive`` / ``false_negative`` (binary tasks, positive = class 1): the most confident
      error of that kind;
    * ``most_confident_<c>``: of the examples predicted ``c``, the one with the highest probability of ``c``;
    * ``random_correct_<c>``: a correct example of true class ``c``, drawn with ``seed``;
    * ``fixed``: every id of ``extra_ids`` (e.g. the paper's legacy ids), in the given order.

    A role no example meets is left out (never filled with an example of another class);
    :func:`roles_left_out` says which and why.

    Args:
        predictions: ``example_id, label, pred, probs`` (``probs`` a list per row).
        seed: seed of the random draws.
        extra_ids: ids to include as they are.
    """
    chosen = [(role, i, rule) for role, i, rule in _roles(predictions, seed) if i is not None]
    position = {eid: i for i, eid in enumerate(predictions["example_id"])}
    for eid in extra_ids:
        if eid not in position:
            raise InputError("config", "predict.extra_ids", f"expected ids of the test split, {eid!r} is not one")
        chosen.append(("fixed", position[eid], "listed in predict.extra_ids"))
    labels = predictions["label"].to_numpy()
    preds = predictions["pred"].to_numpy()
    probs = predictions["probs"].to_numpy()
    return [
        {
            "role": role,
            "example_id": str(predictions["example_id"].iloc[i]),
            "label": int(labels[i]),
            "pred": int(preds[i]),
            "probs": [round(float(p), 6) for p in probs[i]],
            "rule": rule,
        }
        for role, i, rule in chosen
    ]


def roles_left_out(predictions: pd.DataFrame, seed: int) -> list[dict]:
    """The showcase roles :func:`select_examples` leaves out: ``{"role", "why"}`` each."""
    return [{"role": role, "why": why} for role, i, why in _roles(predictions, seed) if i is None]


#: Names of showcase roles (:func:`select_examples`), whatever the number of classes.
ROLE_NAME = re.compile(r"(?:most_confident|random_correct)_(\d+)|false_positive|false_negative")


def role_left_out(selection: dict, role: str) -> str | None:
    """Why ``role`` names no example of this run (``selection.json`` as loaded), or ``None`` if it is no role name.

    A role is left out when no example meets it (its reason is in the selection's ``left_out``), when it names a
    class the classifier does not have, or when it is a binary-task role and the task has more classes.
    """
    for r in selection.get("left_out", []):
        if r["role"] == role:
            return r["why"]
    match = ROLE_NAME.fullmatch(role)
    if match is None:
        return None
    k = len(selection["examples"][0]["probs"]) if selection["examples"] else None
    if match.group(1) is not None:
        return f"the classifier has {k} classes, none numbered {match.group(1)}" if int(match.group(1)) >= k else None
    return f"{role} is a role of two-class tasks, this classifier has {k} classes" if k != 2 else None


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
