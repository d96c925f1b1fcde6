"""postBuild substitution: the expression language, objects, names, and variable sources."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from sluice_api.kustomize import PostBuild
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.resources import CONFIG_MAP, SECRET
from sluice_runtime.substituting import (
    SubstitutionError,
    collect,
    expand,
    post_build_enabled,
    substitute,
    validate_names,
)

VARS = {
    "env": "prod",
    "empty": "",
    "region": "eu-west-1",
    "name": "Alpha",
    "file": "archive.tar.gz",
    "path": "/srv/app/data",
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("plain text", "plain text", id="no-expression"),
        pytest.param("${env}", "prod", id="variable"),
        pytest.param("a-${env}-${region}-b", "a-prod-eu-west-1-b", id="several"),
        pytest.param("${undefined}", "", id="undefined-is-empty"),
        pytest.param("${undefined:=dev}", "dev", id="assign-default-undefined"),
        pytest.param("${empty:=dev}", "dev", id="assign-default-empty"),
        pytest.param("${env:=dev}", "prod", id="assign-default-unused"),
        pytest.param("${undefined:-dev}", "dev", id="use-default"),
        pytest.param("${empty:-dev}", "dev", id="use-default-empty"),
        pytest.param("${undefined=dev}", "dev", id="equals-default"),
        pytest.param("${undefined:=}", "", id="empty-default"),
        pytest.param("${undefined:=a b: c}", "a b: c", id="default-with-spaces"),
        pytest.param("${undefined:=${env}}", "prod", id="nested-default"),
        pytest.param("${undefined:=x-${region}-y}", "x-eu-west-1-y", id="nested-in-text"),
        pytest.param("$${env}", "${env}", id="escape"),
        pytest.param("keep $${env} but ${env}", "keep ${env} but prod", id="escape-and-expand"),
        pytest.param("pa$$word", "pa$word", id="double-dollar-is-one"),
        pytest.param("$env and $HOME", "$env and $HOME", id="no-braces-untouched"),
        pytest.param("cost: 5$", "cost: 5$", id="trailing-dollar"),
        pytest.param("${#region}", "9", id="length"),
        pytest.param("${name^^}", "ALPHA", id="upper"),
        pytest.param("${name,,}", "alpha", id="lower"),
        pytest.param("${env^}", "Prod", id="upper-first"),
        pytest.param("${name,}", "alpha", id="lower-first"),
        pytest.param("${region:3}", "west-1", id="substring"),
        pytest.param("${region:3:4}", "west", id="substring-length"),
        pytest.param("${region:-1}", "eu-west-1", id="colon-dash-is-a-default-not-an-offset"),
        pytest.param("${region:0:-2}", "eu-west", id="negative-length"),
        pytest.param("${file#*.}", "tar.gz", id="trim-shortest-prefix"),
        pytest.param("${file##*.}", "gz", id="trim-longest-prefix"),
        pytest.param("${file%.*}", "archive.tar", id="trim-shortest-suffix"),
        pytest.param("${file%%.*}", "archive", id="trim-longest-suffix"),
        # Go's path.Match: `*` never crosses a `/` (bash would give "data").
        pytest.param("${path##*/}", "srv/app/data", id="glob-star-stops-at-slash"),
        pytest.param("${region/-/_}", "eu_west-1", id="replace-first"),
        pytest.param("${region//-/_}", "eu_west_1", id="replace-all"),
        pytest.param("${region/#eu/us}", "us-west-1", id="replace-prefix"),
        pytest.param("${region/%1/2}", "eu-west-2", id="replace-suffix"),
        pytest.param("${path//\\//.}", ".srv.app.data", id="replace-escaped-slash"),
        pytest.param("${region//-/}", "euwest1", id="replace-with-nothing"),
    ],
)
def test_expand(text: str, expected: str) -> None:
    assert expand(text, VARS) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Globs are translated to RE2: every character Python's re.escape
        # escapes must still mean itself there.
        pytest.param("${odd# a}", "#b~c-d.e\t(f)", id="glob-space"),
        pytest.param("${odd#* a#}", "b~c-d.e\t(f)", id="glob-hash"),
        pytest.param("${odd%\t(f)}", " a#b~c-d.e", id="glob-tab-and-parens"),
        pytest.param("${odd%[.]e*}", " a#b~c-d", id="glob-class"),
        pytest.param("${odd%[^x]}", " a#b~c-d.e\t(f", id="glob-negated-class"),
        pytest.param("${odd#[}", " a#b~c-d.e\t(f)", id="glob-malformed-leaves-value"),
    ],
)
def test_expand_globs_with_special_characters(text: str, expected: str) -> None:
    assert expand(text, {"odd": " a#b~c-d.e\t(f)"}) == expected


@pytest.mark.timeout(10)
def test_a_catastrophic_glob_completes() -> None:
    # `*a*a...*ab` against forty a's: a backtracking engine tries every way of
    # splitting the value between the stars, for each prefix _trim tries.
    value = "a" * 40
    assert expand("${v##" + "*a" * 12 + "b}", {"v": value}) == value
    assert expand("${v%%" + "*a" * 12 + "}", {"v": value}) == ""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("${unclosed", "missing closing brace in '${unclosed'", id="unclosed"),
        pytest.param("x: ${env\ny: 1", "missing closing brace in '${env'", id="unclosed-line"),
        pytest.param("${}", "unable to parse variable name in '${}'", id="no-name"),
        pytest.param("${-x}", "unable to parse variable name in '${-x}'", id="bad-name"),
        pytest.param("${env-dev}", "missing closing brace in '${env-dev}'", id="dash-default"),
        pytest.param(
            "${env:=dev", "unable to parse substitution within function in '${env:=dev'",
            id="unclosed-default",
        ),
        pytest.param("${env/x}", "bad substitution in '${env/x}'", id="replace-without-slash"),
        pytest.param("${env^x}", "bad substitution in '${env^x}'", id="casing-junk"),
        pytest.param("${env//-}", "bad substitution in '${env//-}'", id="replace-needs-two-slashes"),
    ],
)  # fmt: skip
def test_expand_refuses_malformed_expressions(text: str, message: str) -> None:
    with pytest.raises(SubstitutionError) as error:
        expand(text, VARS)

    assert str(error.value) == message


def obj(
    name: str = "app",
    *,
    kind: str = "ConfigMap",
    namespace: str | None = "default",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    **body: Any,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": kind, "metadata": meta, **body}


DISABLED = {"kustomize.toolkit.fluxcd.io/substitute": "disabled"}


@pytest.mark.parametrize(
    ("objects", "variables", "expected"),
    [
        pytest.param(
            [obj(data={"env": "${env}", "region": "${region:=us-east-1}"})],
            {"env": "prod"},
            [obj(data={"env": "prod", "region": "us-east-1"})],
            id="values",
        ),
        pytest.param(
            [obj("${env}-app", namespace="${env}", data={"${env}": "key"})],
            {"env": "prod"},
            [obj("prod-app", namespace="prod", data={"prod": "key"})],
            id="names-namespaces-and-keys",
        ),
        pytest.param(
            [obj(kind="Deployment", spec={"replicas": "${replicas}", "paused": "${paused}"})],
            {"replicas": "3", "paused": "false"},
            [obj(kind="Deployment", spec={"replicas": 3, "paused": False})],
            id="numbers-and-booleans-are-typed-by-the-value",
        ),
        pytest.param(
            [obj(data={"port": "${port}"})],
            {"port": "'8080'"},
            [obj(data={"port": "8080"})],
            id="a-quoted-value-stays-a-string",
        ),
        pytest.param(
            [obj(data={"literal": "$${env}", "shell": "echo $HOME", "price": "5$$"})],
            {"env": "prod"},
            [obj(data={"literal": "${env}", "shell": "echo $HOME", "price": "5$"})],
            id="escapes",
        ),
        pytest.param(
            [obj(data={"script": "#!/bin/sh\necho \"${greeting}\" > /tmp/out\nexit 0\n"})],
            {"greeting": 'say "hi": now # not a comment'},
            [obj(data={"script": '#!/bin/sh\necho "say "hi": now # not a comment" > /tmp/out\nexit 0\n'})],
            id="multi-line-strings-take-any-value",
        ),
        pytest.param(
            [
                obj("a", data={"v": "${env}"}),
                obj("b", annotations=DISABLED, data={"v": "${env}"}),
                obj("c", labels=DISABLED, data={"v": "${env}"}),
                obj("d", annotations={"kustomize.toolkit.fluxcd.io/substitute": "enabled"},
                    data={"v": "${env}"}),
            ],
            {"env": "prod"},
            [
                obj("a", data={"v": "prod"}),
                obj("b", annotations=DISABLED, data={"v": "${env}"}),
                obj("c", labels=DISABLED, data={"v": "${env}"}),
                obj("d", annotations={"kustomize.toolkit.fluxcd.io/substitute": "enabled"},
                    data={"v": "prod"}),
            ],
            id="multi-document-with-disabled-annotation-and-label",
        ),
        pytest.param(
            [obj(data={"v": "${env:=dev}", "broken": "${unclosed"})],
            {},
            [obj(data={"v": "${env:=dev}", "broken": "${unclosed"})],
            id="no-variables-no-substitution",
        ),
        pytest.param(
            [obj(data={"v": "${other}"})],
            {"env": "prod"},
            [obj(data={"v": None})],
            id="undefined-leaves-an-empty-value",
        ),
    ],
)  # fmt: skip
def test_substitute(
    objects: list[dict[str, Any]], variables: dict[str, str], expected: list[dict[str, Any]]
) -> None:
    assert substitute(objects, variables) == expected


@pytest.mark.parametrize(
    ("always", "expected"),
    [
        pytest.param(False, {"v": "${env:=dev}", "e": "$${x}"}, id="with-variables"),
        pytest.param(True, {"v": "dev", "e": "${x}"}, id="always"),
    ],
)
def test_substitute_without_variables(always: bool, expected: dict[str, str]) -> None:
    """substituteStrategy `Always` applies defaults and escapes with no variables at all."""
    objects = [obj(data={"v": "${env:=dev}", "e": "$${x}"})]
    assert substitute(objects, {}, always=always) == [obj(data=expected)]


def test_substitute_leaves_objects_without_expressions_alone() -> None:
    unchanged = obj(data={"when": "2024-01-01"})

    [result] = substitute([unchanged], {"env": "prod"})

    assert result is unchanged


@pytest.mark.parametrize(
    ("objects", "variables", "message"),
    [
        pytest.param(
            [obj("fine"), obj("web", kind="Deployment", spec={"image": "${unclosed"})],
            {"env": "prod"},
            "variable substitution failed for Deployment 'default/web': "
            "missing closing brace in '${unclosed'",
            id="malformed",
        ),
        pytest.param(
            [obj("cluster-wide", kind="Namespace", namespace=None, data={"v": "${v}"})],
            {"v": "a: b"},
            "variable substitution failed for Namespace 'cluster-wide': the result is not "
            "valid YAML: yaml: line 6: mapping values are not allowed",
            id="value-breaks-yaml",
        ),
        pytest.param(
            [obj(data={"v": "${v}"})],
            {"my-var": "x", "v": "1"},
            "variable name 'my-var' is not valid: names start with a letter or '_' and contain "
            "only letters, digits and '_'",
            id="invalid-name",
        ),
    ],
)
def test_substitute_errors_name_the_culprit(
    objects: list[dict[str, Any]], variables: dict[str, str], message: str
) -> None:
    with pytest.raises(SubstitutionError) as error:
        substitute(objects, variables)

    assert str(error.value).startswith(message)


@pytest.mark.parametrize(
    "names",
    [
        pytest.param(["a"], id="one-letter"),
        pytest.param(["_private", "CLUSTER_NAME", "var01", "x_1_y"], id="usual"),
    ],
)
def test_validate_names_accepts(names: list[str]) -> None:
    validate_names(dict.fromkeys(names, "v"))


@pytest.mark.parametrize(
    ("names", "message"),
    [
        pytest.param(["my-var"], "variable name 'my-var' is not valid", id="dash"),
        pytest.param(["1st"], "variable name '1st' is not valid", id="leading-digit"),
        pytest.param([""], "variable name '' is not valid", id="empty"),
        pytest.param(["a b"], "variable name 'a b' is not valid", id="space"),
        pytest.param(["café"], "variable name 'café' is not valid", id="non-ascii"),
        pytest.param(["ok\n"], "variable name 'ok\n' is not valid", id="trailing-newline"),
        pytest.param(
            ["good", "bad.one", "9lives"],
            "variable names '9lives', 'bad.one' are not valid",
            id="every-invalid-name",
        ),
    ],
)
def test_validate_names_refuses(names: list[str], message: str) -> None:
    with pytest.raises(SubstitutionError) as error:
        validate_names(dict.fromkeys(names, "v"))

    assert str(error.value).startswith(message + ": ")


@pytest.mark.parametrize(
    ("post_build", "enabled"),
    [
        pytest.param(None, False, id="none"),
        pytest.param(PostBuild(), False, id="empty"),
        pytest.param(PostBuild(substitute={}), False, id="empty-substitute"),
        pytest.param(PostBuild(substitute={"a": "b"}), True, id="substitute"),
        pytest.param(
            PostBuild.model_validate({"substituteFrom": [{"kind": "ConfigMap", "name": "vars"}]}),
            True,
            id="substitute-from",
        ),
        pytest.param(PostBuild(substitute_strategy="Always"), True, id="always"),
        pytest.param(
            PostBuild(substitute_strategy="WithVariables"), False, id="with-variables-none"
        ),
        pytest.param(
            PostBuild(substitute={"a": "b"}, substitute_strategy="WithVariables"),
            True,
            id="with-variables",
        ),
    ],
)
def test_post_build_enabled(post_build: PostBuild | None, enabled: bool) -> None:
    assert post_build_enabled(post_build) is enabled


# -- variable sources on the real API server ----------------------------------


async def create_config_map(kube: KubeClient, namespace: str, name: str, **data: str) -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}
    await kube.create(CONFIG_MAP, body, namespace)


async def create_secret(kube: KubeClient, namespace: str, name: str, **data: str) -> None:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": encoded}
    await kube.create(SECRET, body, namespace)


async def test_collect_merges_sources_in_order(kube: KubeClient, namespace: str) -> None:
    await create_config_map(kube, namespace, "first", a="cm", b="cm", only_cm="here")
    await create_secret(kube, namespace, "second", b="secret", c="multi\nline")
    await create_config_map(kube, namespace, "third", c="cm3", d="cm3")
    post_build = PostBuild.model_validate(
        {
            "substitute": {"d": "inline", "e": "in\nline"},
            "substituteFrom": [
                {"kind": "ConfigMap", "name": "first"},
                {"kind": "Secret", "name": "second"},
                {"kind": "ConfigMap", "name": "absent", "optional": True},
                {"kind": "Secret", "name": "absent-too", "optional": True},
                {"kind": "ConfigMap", "name": "third"},
            ],
        }
    )

    variables = await collect(kube, namespace, post_build)

    assert variables == {
        "a": "cm",
        "b": "secret",
        "only_cm": "here",
        "c": "cm3",
        "d": "inline",
        "e": "inline",
    }


@pytest.mark.parametrize("kind", ["ConfigMap", "Secret"])
async def test_collect_fails_on_a_missing_required_source(
    kube: KubeClient, namespace: str, kind: str
) -> None:
    post_build = PostBuild.model_validate({"substituteFrom": [{"kind": kind, "name": "nowhere"}]})

    with pytest.raises(SubstitutionError) as error:
        await collect(kube, namespace, post_build)

    assert str(error.value) == f"postBuild.substituteFrom {kind} '{namespace}/nowhere' not found"


async def test_collect_then_substitute(kube: KubeClient, namespace: str) -> None:
    await create_secret(kube, namespace, "vars", password="s3cr$t", replicas="2")
    post_build = PostBuild.model_validate({"substituteFrom": [{"kind": "Secret", "name": "vars"}]})

    variables = await collect(kube, namespace, post_build)
    [result] = substitute(
        [obj(kind="Deployment", spec={"replicas": "${replicas}", "pw": "${password}"})], variables
    )

    assert result["spec"] == {"replicas": 2, "pw": "s3cr$t"}
