"""Sprig's defaults, JSON, list, dict, reflection and URL functions (slim-sprig's set)."""

from __future__ import annotations

import urllib.parse
from typing import Any

from sluice_runtime.gotemplate import budgets
from sluice_runtime.gotemplate import converting as cv
from sluice_runtime.gotemplate.errors import FuncError
from sluice_runtime.gotemplate.functions import ANY, GoFunc
from sluice_runtime.gotemplate.values import NO_VALUE, Int64, StrList, kind, type_name, unbox

S, INT, B = "string", "int", "bool"
MAP = "map[string]interface {}"
NIL_DEREF = "runtime error: invalid memory address or nil pointer dereference"


def empty(v: Any) -> bool:
    v = unbox(v)
    if v is None or v is NO_VALUE:
        return True
    if isinstance(v, bool):
        return not v
    if isinstance(v, int | float):
        return v == 0
    if isinstance(v, str | list | tuple | dict):
        return len(v) == 0
    return False


def _default(d: Any, *given: Any) -> Any:
    if not given or empty(given[0]):
        return d
    return given[0]


def _coalesce(*values: Any) -> Any:
    return next((v for v in values if not empty(v)), None)


# -- lists -------------------------------------------------------------------------------


def _as_list(v: Any, what: str) -> list[Any]:
    v = unbox(v)
    if v is None or v is NO_VALUE:
        raise FuncError(NIL_DEREF)
    if isinstance(v, list | tuple):
        return [unbox(x) for x in v]
    raise FuncError(_MESSAGES.get(what, "Cannot find {} on type {}").format(what, kind(v)))


_MESSAGES = {
    "compact": "Cannot compact on type {1}",
    "chunk": "Cannot chunk type {1}",
    "push": "Cannot push on type {1}",
    "prepend": "Cannot prepend on type {1}",
}


def _list_fn(what: str, body: Any) -> Any:
    def call(v: Any, *rest: Any) -> Any:
        return body(_as_list(v, what), *rest)

    return call


def deep_equal(a: Any, b: Any) -> bool:
    budgets.step()  # a step per pair compared: the comparison is the template's loop
    a, b = unbox(a), unbox(b)
    if type_name(a) != type_name(b):
        return False
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(deep_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(deep_equal(a[k], b[k]) for k in a)
    return bool(a == b)


def _join(sep: str, v: Any) -> str:
    budgets.spend_deep(v)
    parts = to_strings(v)
    budgets.spend(len(sep) * len(parts))
    return sep.join(parts)


def _uniq(items: list[Any]) -> list[Any]:
    out: list[Any] = []
    for x in items:
        if not any(deep_equal(x, y) for y in out):
            out.append(x)
    return out


def _has(needle: Any, haystack: Any) -> bool:
    haystack = unbox(haystack)
    if haystack is None:
        return False
    if not isinstance(haystack, list | tuple):
        raise FuncError(f"Cannot find has on type {kind(haystack)}")
    return any(deep_equal(needle, x) for x in haystack)


def _slice(v: Any, *indices: Any) -> Any:
    v = unbox(v)
    if v is None or v is NO_VALUE:
        raise FuncError(NIL_DEREF)
    if not isinstance(v, list | tuple):
        raise FuncError(f"list should be type of slice or array but {kind(v)}")
    if not v:
        return None
    start = cv.to_int64(indices[0]) if indices else 0
    end = cv.to_int64(indices[1]) if len(indices) >= 2 else len(v)
    if not 0 <= start <= end <= len(v):
        raise FuncError("reflect.Value.Slice: slice index out of bounds")
    return [unbox(x) for x in v[start:end]]


def _concat(*lists: Any) -> Any:
    out: list[Any] = []
    for v in lists:
        v = unbox(v)
        if v is None or v is NO_VALUE:
            raise FuncError(NIL_DEREF)
        if not isinstance(v, list | tuple):
            raise FuncError(f"Cannot concat type {kind(v)} as list")
        out += [unbox(x) for x in v]
    return out


def _chunk(size: int, v: Any) -> list[list[Any]]:
    items = _as_list(v, "chunk")
    return [items[i : i + size] for i in range(0, len(items), size)] or [[]]


def _dig(*ps: Any) -> Any:
    if len(ps) < 3:
        raise FuncError("dig needs at least three arguments")
    d = unbox(ps[-1])
    default = ps[-2]
    keys = [unbox(k) for k in ps[:-2]]
    for k in keys:
        if not isinstance(k, str):
            raise FuncError(f"interface conversion: interface {{}} is {type_name(k)}, not string")
    if not isinstance(d, dict):
        raise FuncError(f"interface conversion: interface {{}} is {type_name(d)}, not {MAP}")
    for i, k in enumerate(keys):
        if k not in d:
            return default
        if i == len(keys) - 1:
            return d[k]
        d = d[k]
        if not isinstance(d, dict):
            raise FuncError(f"interface conversion: interface {{}} is {type_name(d)}, not {MAP}")
    return default


def _dict(*v: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i in range(0, len(v), 2):
        out[cv.strval(v[i])] = v[i + 1] if i + 1 < len(v) else ""
    return out


def _set(d: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    d[key] = value
    return d


def _unset(d: dict[str, Any], key: str) -> dict[str, Any]:
    d.pop(key, None)
    return d


# -- URLs (Go's net/url for the common absolute and relative forms) ----------------------


def _url_parse(v: str) -> dict[str, Any]:
    parts = urllib.parse.urlsplit(v)
    netloc = parts.netloc
    userinfo, _, host = netloc.rpartition("@") if "@" in netloc else ("", "", netloc)
    hostname = host
    if hostname.startswith("["):
        hostname = hostname[1 : hostname.find("]")]
    elif ":" in hostname:
        hostname = hostname.split(":", 1)[0]
    opaque = ""
    path = urllib.parse.unquote(parts.path)
    if parts.scheme and not v[len(parts.scheme) + 1 :].startswith("/"):
        opaque, path = parts.path, ""
    return {
        "scheme": parts.scheme,
        "host": host,
        "hostname": hostname,
        "path": path,
        "query": parts.query,
        "opaque": opaque,
        "fragment": parts.fragment,
        "userinfo": userinfo,
    }


def _url_join(d: dict[str, Any]) -> str:
    def get(key: str) -> str:
        value = d.get(key, "")
        if not isinstance(value, str):
            raise FuncError(
                f"unable to parse {key} key, must be of type string, but {kind(value)} found"
            )
        return value

    scheme, host, path, query = get("scheme"), get("host"), get("path"), get("query")
    opaque, fragment, userinfo = get("opaque"), get("fragment"), get("userinfo")
    out = scheme + ":" if scheme else ""
    if opaque:
        out += opaque
    else:
        if scheme or host or userinfo:
            if host or path or userinfo:
                out += "//"
            if userinfo:
                out += userinfo + "@"
            out += host
        if path and not path.startswith("/") and host:
            out += "/"
        out += urllib.parse.quote(path, safe="/:@!$&'()*+,;=-._~")
    if query:
        out += "?" + query
    if fragment:
        out += "#" + urllib.parse.quote(fragment, safe="/:@!$&'()*+,;=-._~?")
    return out


COLLECTIONS: dict[str, GoFunc] = {
    "default": GoFunc(_default, (ANY, ANY), variadic=True, boxed_result=True),
    "empty": GoFunc(empty, (ANY,)),
    "coalesce": GoFunc(_coalesce, (ANY,), variadic=True, boxed_result=True),
    "all": GoFunc(lambda *v: all(not empty(x) for x in v), (ANY,), variadic=True),
    "any": GoFunc(lambda *v: any(not empty(x) for x in v), (ANY,), variadic=True),
    "compact": GoFunc(_list_fn("compact", lambda xs: [x for x in xs if not empty(x)]), (ANY,)),
    "mustCompact": GoFunc(_list_fn("compact", lambda xs: [x for x in xs if not empty(x)]), (ANY,)),
    "ternary": GoFunc(lambda vt, vf, v: vt if v else vf, (ANY, ANY, B), boxed_result=True),
    "typeOf": GoFunc(lambda v: "<nil>" if v is None else type_name(v), (ANY,)),
    "typeIs": GoFunc(lambda t, v: t == ("<nil>" if v is None else type_name(v)), (S, ANY)),
    "typeIsLike": GoFunc(
        lambda t, v: ("<nil>" if v is None else type_name(v)) in (t, "*" + t), (S, ANY)
    ),
    "kindOf": GoFunc(kind, (ANY,)),
    "kindIs": GoFunc(lambda t, v: t == kind(v), (S, ANY)),
    "deepEqual": GoFunc(deep_equal, (ANY, ANY)),
    "tuple": GoFunc(lambda *v: list(v), (ANY,), variadic=True),
    "list": GoFunc(lambda *v: list(v), (ANY,), variadic=True),
    "dict": GoFunc(_dict, (ANY,), variadic=True),
    "get": GoFunc(lambda d, k: d.get(k, ""), (MAP, S), boxed_result=True),
    "set": GoFunc(_set, (MAP, S, ANY)),
    "unset": GoFunc(_unset, (MAP, S)),
    "hasKey": GoFunc(lambda d, k: k in d, (MAP, S)),
    "pluck": GoFunc(lambda k, *ds: [d[k] for d in ds if k in d], (S, MAP), variadic=True),
    "keys": GoFunc(lambda *ds: StrList(k for d in ds for k in d), (MAP,), variadic=True),
    "pick": GoFunc(lambda d, *ks: {k: d[k] for k in ks if k in d}, (MAP, S), variadic=True),
    "omit": GoFunc(
        lambda d, *ks: {k: v for k, v in d.items() if k not in ks}, (MAP, S), variadic=True
    ),
    "values": GoFunc(lambda d: list(d.values()), (MAP,)),
    "append": GoFunc(_list_fn("push", lambda xs, v: [*xs, v]), (ANY, ANY)),
    "push": GoFunc(_list_fn("push", lambda xs, v: [*xs, v]), (ANY, ANY)),
    "mustAppend": GoFunc(_list_fn("push", lambda xs, v: [*xs, v]), (ANY, ANY)),
    "mustPush": GoFunc(_list_fn("push", lambda xs, v: [*xs, v]), (ANY, ANY)),
    "prepend": GoFunc(_list_fn("prepend", lambda xs, v: [v, *xs]), (ANY, ANY)),
    "mustPrepend": GoFunc(_list_fn("prepend", lambda xs, v: [v, *xs]), (ANY, ANY)),
    "first": GoFunc(_list_fn("first", lambda xs: xs[0] if xs else None), (ANY,), boxed_result=True),
    "mustFirst": GoFunc(
        _list_fn("first", lambda xs: xs[0] if xs else None), (ANY,), boxed_result=True
    ),
    "rest": GoFunc(_list_fn("rest", lambda xs: xs[1:]), (ANY,)),
    "mustRest": GoFunc(_list_fn("rest", lambda xs: xs[1:]), (ANY,)),
    "last": GoFunc(_list_fn("last", lambda xs: xs[-1] if xs else None), (ANY,), boxed_result=True),
    "mustLast": GoFunc(
        _list_fn("last", lambda xs: xs[-1] if xs else None), (ANY,), boxed_result=True
    ),
    "initial": GoFunc(_list_fn("initial", lambda xs: xs[:-1]), (ANY,)),
    "mustInitial": GoFunc(_list_fn("initial", lambda xs: xs[:-1]), (ANY,)),
    "reverse": GoFunc(_list_fn("reverse", lambda xs: xs[::-1]), (ANY,)),
    "mustReverse": GoFunc(_list_fn("reverse", lambda xs: xs[::-1]), (ANY,)),
    "uniq": GoFunc(_list_fn("uniq", _uniq), (ANY,)),
    "mustUniq": GoFunc(_list_fn("uniq", _uniq), (ANY,)),
    "without": GoFunc(
        _list_fn("without", lambda xs, *o: [x for x in xs if not any(deep_equal(x, y) for y in o)]),
        (ANY, ANY),
        variadic=True,
    ),
    "mustWithout": GoFunc(
        _list_fn("without", lambda xs, *o: [x for x in xs if not any(deep_equal(x, y) for y in o)]),
        (ANY, ANY),
        variadic=True,
    ),
    "has": GoFunc(_has, (ANY, ANY)),
    "mustHas": GoFunc(_has, (ANY, ANY)),
    "slice": GoFunc(_slice, (ANY, ANY), variadic=True, boxed_result=True),
    "mustSlice": GoFunc(_slice, (ANY, ANY), variadic=True, boxed_result=True),
    "concat": GoFunc(_concat, (ANY,), variadic=True, boxed_result=True),
    "dig": GoFunc(_dig, (ANY,), variadic=True, boxed_result=True),
    "chunk": GoFunc(_chunk, (INT, ANY)),
    "mustChunk": GoFunc(_chunk, (INT, ANY)),
    "join": GoFunc(_join, (S, ANY)),
    "sortAlpha": GoFunc(lambda v: _sort_alpha(v), (ANY,)),
    "toStrings": GoFunc(lambda v: to_strings(v), (ANY,)),
    "urlParse": GoFunc(_url_parse, (S,)),
    "urlJoin": GoFunc(_url_join, (MAP,)),
}


def to_strings(v: Any) -> StrList:
    """sprig's strslice: a list's non-nil elements as strings; a scalar as one string."""
    v = unbox(v)
    if isinstance(v, list | tuple):
        return StrList(cv.strval(x) for x in v if unbox(x) is not None)
    if v is None or v is NO_VALUE:
        return StrList()
    return StrList([cv.strval(v)])


def _sort_alpha(v: Any) -> StrList:
    v = unbox(v)
    if isinstance(v, list | tuple):
        return StrList(sorted(to_strings(v), key=lambda s: s.encode()))
    return StrList([cv.strval(v)])


del Int64
