"""One exception type for bad input, rendered as a single clear line.

Every check on user-supplied data or configuration raises :class:`InputError` naming the
file (or config file), the field and what was expected. A rule's job catches it and prints
exactly one line (see :func:`attnlens.pipeline.runtime.log_to`), so bad input never ends in a traceback.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad input: ``<where>: <field>: <what was expected>``.

    Args:
        where: the file, folder or config file the problem is in.
        field: the column, key or item that is wrong.
        expected: what was expected, and what was found.
    """

    def __init__(self, where: str, field: str, expected: str) -> None:
        self.where = str(where)
        self.field = field
        self.expected = expected
        super().__init__(f"{self.where}: {field}: {expected}")
