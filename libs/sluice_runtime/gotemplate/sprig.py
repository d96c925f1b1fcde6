"""The function table of Flux Operator's ResourceSet templates.

slim-sprig's ``HermeticTxtFuncMap`` (sprig without the functions that need
non-standard packages, crypto, the clock, randomness or the environment),
plus ``slugify`` (gosimple/slug with Flux Operator's settings) and ``toYaml``
(sigs.k8s.io/yaml). The date functions that parse Go time layouts
(toDate, mustToDate, unixEpoch, dateModify, mustDateModify, ago) are not
provided: a template naming one fails to parse with Go's
``function "toDate" not defined``, never renders differently.
"""

from __future__ import annotations

from sluice_runtime.gotemplate.functions import GoFunc
from sluice_runtime.gotemplate.sprig_collections import COLLECTIONS
from sluice_runtime.gotemplate.sprig_strings import STRINGS
from sluice_runtime.gotemplate.yamling import EXTRAS

SPRIG: dict[str, GoFunc] = {**STRINGS, **COLLECTIONS, **EXTRAS}
