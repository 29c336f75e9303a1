"""Adapter for rule train_classifier: a command (not a `script:`), so `accelerate launch` can start one per GPU."""

import sys

from attnlens.stages.model import train_classifier_command

if __name__ == "__main__":
    train_classifier_command(sys.argv[1:])
