"""The function table of Flux Operator's ResourceSet templates.

slim-sprig's ``HermeticTxtFuncMap`` (sprig without the functions that need
non-standard packages, crypto, the clock, randomness or the environment;
``ago`` and ``randInt`` stay, as there), plus ``slugify`` (gosimple/slug with
Flux Operator's settings) and ``toYaml``/``mustToYaml`` (sigs.k8s.io/yaml).
Each function carries its Go parameter types, so bad arguments fail as in Go.
"""

from __future__ import annotations

from sluice_runtime.gotemplate.dates import DATES
from sluice_runtime.gotemplate.functions import GoFunc
from sluice_runtime.gotemplate.sprig_collections import COLLECTIONS
from sluice_runtime.gotemplate.sprig_json import JSON
from sluice_runtime.gotemplate.sprig_regex import REGEX
from sluice_runtime.gotemplate.sprig_strings import STRINGS
from sluice_runtime.gotemplate.yamling import EXTRAS

SPRIG: dict[str, GoFunc] = {**STRINGS, **REGEX, **COLLECTIONS, **JSON, **DATES, **EXTRAS}
