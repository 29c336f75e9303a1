"""Findings across the runs of a grid: which conclusions of one run survive a change of seed, model or dataset."""
