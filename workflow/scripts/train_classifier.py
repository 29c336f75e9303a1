"""Adapter for rule train_classifier: a command (not a `script:`), so `accelerate launch` can start one per GPU."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

import sys

from attnlens.stages.model import train_classifier_command

if __name__ == "__main__":
    train_classifier_command(sys.argv[1:])
