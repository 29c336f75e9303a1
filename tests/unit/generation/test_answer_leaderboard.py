"""The answer leaderboard per planted structure (:mod:`attnlens.generation.answer_leaderboard`): each structure's
answers summarised as a family of their own, and what the model answered in each."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attnlens.attribution.leaderboard import EXAMPLE_COLUMNS, summarise
from attnlens.generation.answer_leaderboard import answer_metrics, structure_answers, structure_leaderboards


def _answers() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Nine answers of three structures (one context plants none), two methods' LDS each."""
    rng = np.random.default_rng(0)
    structures = ["single"] * 4 + ["redundant"] * 4 + [""]
    responses = pd.DataFrame(
        {
            "example_id": [f"e{i}" for i in range(9)],
            "structure": structures,
            "exact_match": [1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0],
            "follows_context": [1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0],
            "same_as_closed_book": [0.0] * 8 + [1.0],
        }
    )
    rows = [
        (f"e{i}", method, "lds", rng.normal(0.5 if method == "surrogate" else 0.2, 0.1), np.nan)
        for i in range(9)
        for method in ("surrogate", "attention_all")
    ]
    return pd.DataFrame(rows, columns=list(EXAMPLE_COLUMNS)), responses


def test_each_structures_answers_are_summarised_as_a_family_of_their_own():
    judged, responses = _answers()
    columns = answer_metrics((1,))
    board = structure_leaderboards(judged, responses, columns, "attention_all", seed=0, n_bootstrap=50)
    assert list(board.columns[:1]) == ["structure"] and set(board["structure"]) == {"single", "redundant"}
    for name, ids in (("single", ["e0", "e1", "e2", "e3"]), ("redundant", ["e4", "e5", "e6", "e7"])):
        mine = board[board["structure"] == name].drop(columns=["structure", "n_answers"]).reset_index(drop=True)
        alone = summarise(judged[judged["example_id"].isin(ids)], columns, "attention_all", 0, 50, ())
        pd.testing.assert_frame_equal(mine, alone)  # its own Holm family: the other structure's tests do not count
        assert (board[board["structure"] == name]["n_answers"] == 4).all()
    none = structure_leaderboards(judged, responses.assign(structure=""), columns, "attention_all", 0, 50)
    assert none.empty and list(none.columns) == ["structure", "n_answers"]


def test_what_the_model_answered_per_structure():
    _, responses = _answers()
    said = structure_answers(responses).set_index("structure")
    assert list(said.index) == ["all", "redundant", "single"]  # the unplanted context counts in "all" only
    assert said.loc["all", "answers"] == 9 and said.loc["single", "right"] == pytest.approx(0.75)
    assert said.loc["redundant", "follows_context"] == pytest.approx(0.5)
    assert said.loc["all", "same_as_closed_book"] == pytest.approx(1 / 9)
