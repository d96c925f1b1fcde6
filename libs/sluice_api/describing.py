"""Field descriptions from attribute docstrings, read when a schema is made, not at import.

An attribute's docstring is its field's description in the CRDs (what `kubectl
explain` shows). Pydantic's `use_attribute_docstrings` reads them as each model
class is created: the class's source found by walking the stack, tokenized and
parsed twice, for every model; 0.37 CPU-seconds of every controller's start,
for a text only the CRD generator reads. So the models leave it off and the
generator calls `describe_fields()` first, which gives each field the description
Pydantic would have: the docstring under the annotation in the class that declared
the field last (an explicit `Field(description=...)` wins), read by Pydantic's own
extractor (from its `_internal` package: test_crds fails if a release moves it).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from pydantic import BaseModel
from pydantic._internal._docs_extraction import extract_docstrings_from_cls


@functools.cache
def _docstrings(cls: type[Any]) -> dict[str, str]:
    return extract_docstrings_from_cls(cls, use_inspect=True)


def _subclasses(root: type[BaseModel]) -> list[type[BaseModel]]:
    """`root` and every class below it, each once, in a fixed order."""
    found: dict[type[BaseModel], None] = {}
    pending = [root]
    while pending:
        cls = pending.pop()
        if cls not in found:
            found[cls] = None
            pending.extend(cls.__subclasses__())
    return list(found)


_described: set[type[BaseModel]] = set()


def describe_fields(root: type[BaseModel]) -> None:
    """Give every field of `root`'s subclasses its attribute docstring, once per class."""
    pending = [cls for cls in _subclasses(root) if cls not in _described]
    for cls in pending:
        for name, field in cls.model_fields.items():
            if field.description is not None:
                continue
            for owner in cls.__mro__:
                if name in inspect.get_annotations(owner):
                    field.description = _docstrings(owner).get(name)
                    break
    # A model already built (objects parsed before the CRDs were made) has its schema
    # without them: made again (test_crds checks the result is the same either way).
    for cls in pending:
        if cls.__pydantic_complete__:
            cls.model_rebuild(force=True)
    _described.update(pending)
