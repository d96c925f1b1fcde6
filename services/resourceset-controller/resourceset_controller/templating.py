"""Rendering a ResourceSet's templates, as Flux Operator's builder does.

Each entry of `resources` is written out as YAML and rendered as a Go
template with `<<`/`>>` delimiters, `missingkey=error`, slim-sprig's
hermetic functions plus `slugify` and `toYaml` (all the engine's), and
`inputs` as a function returning the input set; `resourcesTemplate` is rendered the same way as
multi-document YAML. Without input sets each template is rendered once with
empty inputs. Objects annotated `fluxcd.controlplane.io/reconcile: disabled`
are left out, and an object generated twice is kept once (the first).

The templates and their inputs are the tenant's: one `gotemplate.Budget`
bounds the steps and bytes of every render of a build, and the rendered
YAML is read within `yamlloading.VALUES_LIMITS` (aliases included). `build`
blocks: the controller runs it off the event loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from sluice_api.resourceset import RECONCILE_ANNOTATION
from sluice_runtime import gotemplate, yamlloading

DELIMS = ("<<", ">>")


class RenderError(ValueError):
    """A template that does not render to objects; the message names template and input."""


def _render(text: str, inputs: Mapping[str, Any], *, name: str, budget: gotemplate.Budget) -> str:
    if DELIMS[0] not in text:
        # No action: Go's text/template would print the text unchanged.
        return text
    try:
        return gotemplate.render(
            text,
            None,
            name=name,
            delims=DELIMS,
            missing_key_error=True,
            # slugify, toYaml and mustToYaml are the engine's (Flux Operator's extras).
            funcs={"inputs": lambda: dict(inputs)},
            budget=budget,
        )
    except gotemplate.TemplateError as error:
        raise RenderError(str(error)) from None


def identity(obj: Mapping[str, Any]) -> tuple[str, str, str, str]:
    meta = obj.get("metadata") or {}
    return (
        str(obj.get("apiVersion")),
        str(obj.get("kind")),
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
    )


def _objects(text: str, *, where: str) -> list[dict[str, Any]]:
    try:
        docs = [
            d for d in yamlloading.load_all(text, limits=yamlloading.VALUES_LIMITS) if d is not None
        ]
    except yamlloading.YAMLError as error:
        raise RenderError(f"{where}: the output is not valid YAML: {error}") from None
    for doc in docs:
        if not isinstance(doc, dict):
            raise RenderError(f"{where}: the output is not an object")
    return docs


def build(
    resources: Sequence[Mapping[str, Any]],
    template: str | None,
    input_sets: Sequence[Mapping[str, Any]],
    *,
    budget: gotemplate.Budget | None = None,
) -> list[dict[str, Any]]:
    """Every object the templates render over `input_sets`; raises RenderError.

    `budget` (a fresh default one when not given) bounds all the renders together.
    """
    budget = budget or gotemplate.Budget()
    sets: Sequence[Mapping[str, Any]] = input_sets or [{}]
    out: list[dict[str, Any]] = []
    seen: set[tuple[str, str, str, str]] = set()

    def keep(obj: dict[str, Any]) -> None:
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        if str(annotations.get(RECONCILE_ANNOTATION, "")).lower() == "disabled":
            return
        key = identity(obj)
        if key not in seen:
            seen.add(key)
            out.append(obj)

    for index, resource in enumerate(resources):
        text = yaml.safe_dump(dict(resource), sort_keys=True, width=1 << 30)
        for item in sets:
            where = f"resources[{index}] with input id '{item.get('id', '')}'"
            try:
                rendered = _render(text, item, name=f"resources[{index}]", budget=budget)
            except RenderError as error:
                raise RenderError(f"{where}: {error}") from None
            docs = _objects(rendered, where=where)
            if len(docs) != 1:
                raise RenderError(f"{where}: renders {len(docs)} objects, not one")
            keep(docs[0])
    if template:
        for item in sets:
            where = f"resourcesTemplate with input id '{item.get('id', '')}'"
            try:
                rendered = _render(template, item, name="resourcesTemplate", budget=budget)
            except RenderError as error:
                raise RenderError(f"{where}: {error}") from None
            for doc in _objects(rendered, where=where):
                keep(doc)
    return out
