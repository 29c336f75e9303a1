"""The tasks a model is trained and explained for, as a registry: what a document's explained scalar is.

A :class:`Task` says, for one kind of model output, everything a stage needs to know about it and nothing a
stage may decide for itself:

* **its labels**: how a label column is checked (:meth:`Task.check_labels`) and stratified for the train/test
  split (:meth:`Task.strata`);
* **its head**: Hugging Face's ``problem_type`` and how many outputs the head has, so that the model's own loss is
  the task's (cross-entropy, mean squared error);
* **its readout** ``F``: what the methods explain and the removal curves measure, from the logits —
  :meth:`Task.readout` on a torch tensor, :meth:`Task.outputs` on a NumPy array (the class probabilities; the
  predicted value);
* **its targets**: which of ``F``'s columns a document's explanation is for (:meth:`Task.targets`: the predicted
  or the true class, every class; the one output; each label predicted present);
* **its metrics and predictions table** (:meth:`Task.metrics`, :meth:`Task.predictions`) and **the showcased
  documents** (:meth:`Task.roles`: the most confident errors, the largest errors).

Stages never branch on the task: they ask the task of their run (:func:`get_task`, :func:`task_of` for a
model that carries its own). Plain NumPy and pandas, so the light rules read it without torch; a readout is
computed with the tensor's own methods.

One module a task (:mod:`~attnlens.tasks.classification`, :mod:`~attnlens.tasks.regression`,
:mod:`~attnlens.tasks.multilabel`, :mod:`~attnlens.tasks.qa`) beside the seam (:mod:`~attnlens.tasks.task`).
Adding a task: a module with a :class:`Task` subclass that registers itself (``REGISTRY.register(MyTask())``),
its import below, and its tests (``tests/unit/tasks/test_tasks.py`` checks every registered task's readout, metrics and
roles against independent references).
"""

from attnlens.tasks.task import (
    DEFAULT,
    REGISTRY,
    Outcome,
    Task,
    get_task,
    output_index,
    output_labels,
    register,
    task_names,
    task_of,
)

# isort: split
# registration order (the schema's order): each module registers its task as it is imported
from attnlens.tasks.classification import CLASSIFICATION, Classification, classification_metrics, softmax

# isort: split
from attnlens.tasks.regression import REGRESSION, Regression, regression_metrics

# isort: split
from attnlens.tasks.multilabel import MULTILABEL, MultiLabel, auroc, multilabel_metrics, sigmoid

# isort: split
from attnlens.tasks.qa import QA, QuestionAnswering

# isort: split
from attnlens.tasks.generation import GENERATION, Generation

__all__ = [
    "CLASSIFICATION",
    "DEFAULT",
    "GENERATION",
    "MULTILABEL",
    "QA",
    "REGISTRY",
    "REGRESSION",
    "Classification",
    "Generation",
    "MultiLabel",
    "Outcome",
    "QuestionAnswering",
    "Regression",
    "Task",
    "auroc",
    "classification_metrics",
    "get_task",
    "multilabel_metrics",
    "output_index",
    "output_labels",
    "register",
    "regression_metrics",
    "sigmoid",
    "softmax",
    "task_names",
    "task_of",
]
