"""Differential cases for every function of slim-sprig's hermetic set that Sluice provides."""

from __future__ import annotations

from typing import Any

from .cases_core import DATA, case

SPRIG: dict[str, dict[str, Any]] = {
    # strings
    "hello": case("{{hello}}"),
    "trunc": case(
        '{{trunc 3 "abcdef"}} {{trunc -2 "abcdef"}} {{trunc 10 "abc"}} {{trunc -10 "abc"}}'
    ),
    "trim": case('[{{trim "  a b \\n\\t"}}]'),
    "upper-lower": case('{{upper "aBc"}} {{lower "AbC"}} {{.s | upper}}'),
    "title": case('{{title "hello wide-world foo_bar it\'s"}}'),
    "substr": case(
        '{{substr 1 3 "abcdef"}} {{substr -1 2 "abcdef"}} {{substr 2 -1 "abcdef"}} {{substr 2 99 "abc"}}'
    ),
    "substr-panic": case('{{substr 0 99 "abc"}}{{substr -1 99 "abc"}}', loose=True),
    "repeat": case('{{repeat 3 "ab"}} {{"x" | repeat 2}}'),
    "repeat-wrong-type": case('{{repeat "3" "ab"}}'),
    "trimAll": case('{{trimAll "$" "$$5.00$"}} {{trimall "ab" "abcba"}}'),
    "trimSuffix-Prefix": case(
        '{{trimSuffix "-" "ab-"}} {{trimPrefix "-" "-ab"}} {{trimSuffix "" "ab"}}'
    ),
    "contains": case(
        '{{contains "ell" .s}} {{.s | contains "x"}} {{hasPrefix "he" .s}} {{hasSuffix "lo" .s}}'
    ),
    "quote": case('{{quote "a" 1 .n "b\\"c"}} {{.app.version | quote}} {{quote .l}} {{quote}}'),
    "squote": case('{{squote "a" 1 .n}} {{squote .m}}'),
    "cat": case('{{cat "a" 1 .n .t "b"}}'),
    "indent": case('{{indent 2 "a\\nb"}}|{{nindent 4 "x\\ny"}}'),
    "indent-yaml": case("spec:\n  values: {{ .m | toYaml | nindent 4 }}"),
    "replace": case(
        '{{replace "a" "b" "banana"}} {{"x-y" | replace "-" "_"}} {{replace "" "-" "ab"}}'
    ),
    "plural": case(
        '{{plural "one" "many" 1}} {{plural "one" "many" 2}} {{len .l | plural "item" "items"}}'
    ),
    "sha": case(
        '{{sha1sum "abc"}} {{sha256sum "abc"}} {{adler32sum "abc"}} {{adler32sum "app-microservice1"}}'
    ),
    "toString": case(
        "{{toString 1}} {{toString .f}} {{toString .l}} {{toString .n}} {{toString .t}} {{toString .m}}"
    ),
    "atoi": case('{{atoi "42"}} {{atoi "-7"}} {{atoi "x"}} {{atoi "1.5"}} {{atoi "+3"}}'),
    "int": case(
        '{{int "42"}} {{int 3.9}} {{int "0x1F"}} {{int "3.0"}} {{int "3.5"}} {{int .t}} {{int .n}} {{int "017"}} {{int .l}}'
    ),
    "int64": case('{{int64 "42"}} {{int64 -3.9}} {{int64 .i}}'),
    "float64": case(
        '{{float64 "3.25"}} {{float64 2}} {{float64 "x"}} {{float64 .f}} {{float64 "1e3"}} {{float64 .no}}'
    ),
    "seq": case(
        "{{seq 3}} | {{seq 2 5}} | {{seq 5 2}} | {{seq 0 2 10}} | {{seq 10 -3 1}} | {{seq 1 2 0}} | {{seq}} | {{seq 0}}"
    ),
    "toDecimal": case('{{toDecimal "0777"}} {{toDecimal 10}} {{toDecimal "9"}}'),
    "split-types": case(
        '{{typeOf (split "," "a,b")}} [{{index (split "," "a") "_9"}}] {{kindOf (split "," "a")}}'
    ),
    "split-field-missing": case('{{(split "," "a")._9}}', mk=False),
    "split-field-missing-error": case('{{(split "," "a")._9}}'),
    "split": case(
        '{{split "," "a,b,c"}} {{(split "," "a,b,c")._1}} {{splitn "," 2 "a,b,c"}} {{splitn "," 0 "a,b"}}'
    ),
    "splitList": case(
        '{{splitList "," "a,b,,c"}} {{splitList "" "abc"}} {{splitList "," ""}} {{len (splitList "," "")}}'
    ),
    "toStrings": case(
        '{{toStrings .l}} {{toStrings 5}} {{toStrings .n}} {{toStrings (list 1 .n "a")}}'
    ),
    "until": case(
        "{{until 3}} {{until -2}} {{until 0}} {{untilStep 0 10 3}} {{untilStep 10 0 -4}} {{untilStep 0 3 0}}"
    ),
    "until-range": case("{{range $i := until 3}}{{$i}},{{end}}"),
    # math
    "add": case('{{add 1 2 3}} {{add .i "8" 1.9}} {{add}} {{add1 5}} {{add1 "x"}}'),
    "sub-div-mod": case(
        "{{sub 10 3}} {{div 10 3}} {{div -7 2}} {{mod 10 3}} {{mod -7 2}} {{mul 2 3 4}} {{mul 5}}"
    ),
    "div-zero": case("{{div 1 0}}", loose=True),
    "max-min": case(
        '{{max 1 5 3}} {{min 4 2 8}} {{biggest 1 9}} {{maxf 1.5 2.5}} {{minf 1.5 0.5 "x"}} {{max "7" 2}}'
    ),
    "ceil-floor-round": case(
        '{{ceil 1.2}} {{floor 1.8}} {{ceil "2.1"}} {{round 3.14159 2}} {{round 2.5 0}} {{round 2.4 0}} {{round 1.15 1 0.4}}'
    ),
    "math-types": case(
        "{{typeOf (add 1 2)}} {{typeOf (int 2)}} {{typeOf (float64 1)}} {{kindOf (add 1 1)}}"
    ),
    "until-with-int64": case("{{until (add 1 2)}}"),
    "eq-int64-int": case("{{eq (add 1 1) 2}}"),
    # paths and encodings
    "paths": case(
        '{{base "/a/b.txt"}} {{dir "/a/b.txt"}} {{clean "/a/../b//c/."}} {{ext "x/y.tar.gz"}} {{isAbs "/x"}} {{isAbs "x"}}'
    ),
    "paths-edge": case(
        '{{base ""}} {{base "/"}} {{dir ""}} {{dir "a"}} {{clean ""}} {{clean "../../a"}} {{ext "a.b/c"}} {{base "a/b/"}}'
    ),
    "os-paths": case(
        '{{osBase "/a/b"}} {{osDir "/a/b"}} {{osClean "a//b"}} {{osExt "f.go"}} {{osIsAbs "/"}}'
    ),
    "b64": case(
        '{{b64enc "hello wörld"}} {{b64dec "aGVsbG8="}} {{b32enc "hi"}} {{b32dec "NBUQ===="}}'
    ),
    # regex
    "regexMatch": case(
        '{{regexMatch "^[a-z]+$" "abc"}} {{regexMatch "^\\\\d+$" "12a"}} {{regexMatch "(" "x"}}'
    ),
    "regexFind": case(
        '{{regexFind "[0-9]+" "ab12cd345"}} [{{regexFind "z" "abc"}}] {{regexFindAll "[0-9]+" "a1b22c333" -1}} {{regexFindAll "[0-9]" "a1b2c3" 2}}'
    ),
    "regexReplaceAll": case(
        '{{regexReplaceAll "a(x*)b" "-ab-axxb-" "${1}W"}} {{regexReplaceAll "(?P<n>[a-z]+)" "abc 12" "<$n>"}} {{regexReplaceAllLiteral "a(x*)b" "-ab-axxb-" "${1}"}}'
    ),
    "regexReplace-empty": case('{{regexReplaceAll "x*" "abc" "-"}}'),
    "regexSplit": case(
        '{{regexSplit "z+" "pizza" -1}} {{regexSplit "," "a,b,c" 2}} {{regexSplit "," "" -1}} {{regexSplit "a" "banana" 0}}'
    ),
    "mustRegex": case(
        '{{mustRegexFindAll "[0-9]" "a1b2" -1}} {{mustRegexFind "b." "abc"}} '
        '{{mustRegexReplaceAll "(b)" "abc" "<$1>"}} {{mustRegexReplaceAllLiteral "(b)" "abc" "$1"}} '
        '{{mustRegexSplit "," "a,b" -1}}'
    ),
    "mustRegex-bad": case('{{mustRegexFind "[" "x"}}'),
    "regex-bad-panics": case('{{regexFind "a**" "x"}}'),
    "regex-bad-codes": case('{{mustRegexFind "(" "x"}}|{{mustRegexFind "x{2,1}" "x"}}'),
    "regex-bad-codes2": case('{{mustRegexFind ")" "x"}}{{mustRegexFind "*" "x"}}'),
    "regex-bad-class": case('{{mustRegexSplit "[z-a]" "x" -1}}'),
    "mustCompact-mustPush": case("{{mustCompact (list 0 1)}} {{mustPush .l 9}}"),
    "regexQuoteMeta": case('{{regexQuoteMeta "1.5*[x]"}}'),
    "mustRegexMatch-bad": case('{{mustRegexMatch "(" "x"}}'),
    "regex-anchor-newline": case('{{regexMatch "^b$" "a\\nb"}} {{regexMatch "(?m)^b$" "a\\nb"}}'),
    # defaults
    "default": case(
        '{{default "x" .e}} {{default "x" .s}} {{.z | default 5}} {{.n | default "nil"}} {{.el | default "empty"}} {{default "d"}}'
    ),
    "default-missing": case('{{.nope | default "fallback"}}', mk=False),
    "default-false": case("{{.no | default true}}"),
    "empty": case(
        "{{empty .e}} {{empty .s}} {{empty .z}} {{empty .n}} {{empty .el}} {{empty .em}} {{empty .no}} {{empty .fz}} {{empty .m}}"
    ),
    "coalesce": case('{{coalesce .e .z .s}} {{coalesce .n .e}} {{coalesce 0 "" 5}}'),
    "all-any": case("{{all 1 .s .t}} {{all 1 .e}} {{any .e .z .t}} {{any .e .n}} {{all}} {{any}}"),
    "compact": case('{{compact (list 1 0 "" "a" .n false)}} {{compact .el}}'),
    "compact-bad": case("{{compact 5}}"),
    "compact-nil": case("{{compact .n}}", loose=True),
    "ternary": case('{{ternary "y" "n" .t}} {{ternary "y" "n" .no}} {{.t | ternary 1 2}}'),
    "ternary-wrong": case('{{ternary "y" "n" 1}}'),
    # JSON
    "toJson": case(
        "{{toJson .m}} {{toJson .l}} {{toJson .s}} {{toJson .n}} {{toJson .f}} {{toJson .nested}}"
    ),
    "toJson-html": case('{{toJson "<a&b>"}} {{toRawJson "<a&b>"}} {{toRawJson .m}}'),
    "toJson-floats": case(
        "{{toJson 1e21}} {{toJson 1e20}} {{toJson 0.000001}} {{toJson 0.0000001}} {{toJson 1.5}} {{toJson 100.0}}"
    ),
    "toJson-escapes": case('{{toJson "a\\"b\\\\c\\n\\t\\u0001é"}}'),
    "toPrettyJson": case(
        "{{toPrettyJson .m}}\n{{toPrettyJson .el}} {{toPrettyJson .em}} {{toPrettyJson .nested}}"
    ),
    "fromJson": case(
        '{{(fromJson "{\\"a\\":1,\\"b\\":[true,null]}").b}} {{fromJson "[1,2]"}} {{fromJson "bad"}} {{typeOf (fromJson "1")}}'
    ),
    "fromJson-field": case('{{$o := fromJson "{\\"x\\":{\\"y\\":\\"z\\"}}"}}{{$o.x.y}}'),
    "mustFromJson-bad": case('{{mustFromJson "{bad"}}', loose=True),
    "mustToJson": case("{{mustToJson .l}} {{mustToPrettyJson .l}} {{mustToRawJson .s}}"),
    # reflection
    "typeOf": case(
        '{{typeOf .s}} {{typeOf .i}} {{typeOf .f}} {{typeOf .t}} {{typeOf .l}} {{typeOf .m}} {{typeOf .n}} {{typeOf (splitList "," "a")}}'
    ),
    "typeIs": case(
        '{{typeIs "string" .s}} {{typeIs "int" .s}} {{typeIsLike "int" .i}} {{typeIsLike "string" .s}}'
    ),
    "kindOf": case(
        "{{kindOf .s}} {{kindOf .i}} {{kindOf .f}} {{kindOf .t}} {{kindOf .l}} {{kindOf .m}} {{kindOf .n}}"
    ),
    "kindIs": case('{{kindIs "slice" .l}} {{kindIs "map" .l}} {{kindIs "invalid" .n}}'),
    "deepEqual": case(
        '{{deepEqual .l .l}} {{deepEqual (list 1 2) (list 1 2)}} {{deepEqual (list 1) (list "1")}} {{deepEqual 1 1}} {{deepEqual (add 1 0) 1}} {{deepEqual .m .m}}'
    ),
    # lists
    "list": case('{{list 1 "a" .n .t}} {{tuple 1 2}} {{list}} {{len (list 1 2)}}'),
    "append-prepend": case(
        '{{append .l 4}} {{push .sl "z"}} {{prepend .l 0}} {{mustAppend .el 1}} {{mustPrepend .sl 1}}'
    ),
    "append-bad": case("{{append 5 1}}"),
    "first-last": case(
        '{{first .l}} {{last .l}} {{first .el}} {{last .el}} {{mustFirst .sl}} {{mustLast .sl}} {{first (splitList "," "x,y")}}'
    ),
    "first-bad": case("{{first 5}}"),
    "rest-initial": case(
        "{{rest .l}} {{initial .l}} {{rest .el}} {{initial .el}} {{mustRest .sl}} {{mustInitial .sl}}"
    ),
    "reverse": case("{{reverse .l}} {{reverse .el}} {{mustReverse .sl}}"),
    "uniq": case('{{uniq (list 1 2 1 "a" "a" 2)}} {{mustUniq .l}}'),
    "without": case('{{without .l 2}} {{without .sl "a" "c"}} {{mustWithout .l 1 3}}'),
    "has": case(
        '{{has 2 .l}} {{has 9 .l}} {{.l | has 1}} {{has "a" .sl}} {{has 1 .n}} {{mustHas 3 .l}}'
    ),
    "has-bad": case("{{has 1 5}}"),
    "slice": case(
        "{{slice .l 1}} {{slice .l 1 2}} {{slice .l}} {{slice .el}} {{mustSlice .sl 0 1}}"
    ),
    "slice-bad": case("{{slice .l 2 9}}", loose=True),
    "slice-not-list": case("{{slice .s 1}}"),
    "concat": case("{{concat .l .sl}} {{concat .el}} {{concat}}"),
    "concat-bad": case("{{concat .l 5}}"),
    "chunk": case("{{chunk 2 .l}} {{chunk 3 .l}} {{chunk 1 .sl}} {{mustChunk 5 .l}}"),
    "sortAlpha": case('{{sortAlpha .sl}} {{sortAlpha (list "b" 10 "a" 2)}} {{sortAlpha "x"}}'),
    "join": case(
        '{{join "," .sl}} {{join "-" .l}} {{.sl | join "+"}} {{join "," "abc"}} {{join "," (list 1 .n 2)}}'
    ),
    # dicts
    "dict": case('{{dict "a" 1 "b" "two"}} {{dict "odd"}} {{dict 1 2}} {{dict}}'),
    "get": case('{{get .m "a"}} [{{get .m "zz"}}] {{get .m "c"}}'),
    "get-wrong-type": case('{{get .l "a"}}'),
    "set-unset": case(
        '{{$d := dict "a" 1}}{{$_ := set $d "b" 2}}{{$d}} {{unset $d "a"}} {{set (dict) "k" "v"}}'
    ),
    "hasKey": case('{{hasKey .m "a"}} {{hasKey .m "zz"}}'),
    "pluck": case('{{pluck "a" (dict "a" 1) (dict "b" 2) (dict "a" 3)}}'),
    "keys-sorted": case(
        '{{keys .m | sortAlpha}} {{keys (dict "x" 1) (dict "y" 2) | sortAlpha}} {{keys}}'
    ),
    "pick-omit": case('{{pick .m "a" "c" "zz"}} {{omit .m "a"}}'),
    "values-sorted": case('{{values (dict "a" "x" "b" "y") | sortAlpha}}'),
    "dig": case('{{dig "c" "d" "none" .m}} {{dig "c" "zz" "none" .m}} {{dig "zz" "default" .m}}'),
    "dig-bad": case('{{dig "a" "b" "none" .m}}', loose=True),
    "dig-few": case('{{dig "a" .m}}'),
    # flow control
    "fail": case('{{if .t}}{{fail "boom: bad input"}}{{end}}'),
    "fail-pipe": case('{{"custom" | fail}}'),
    # URLs
    "urlParse": case(
        '{{$u := urlParse "https://user:pw@example.com:8443/p/a%20b?q=1&r=2#frag"}}{{$u.scheme}}|{{$u.host}}|{{$u.hostname}}|{{$u.path}}|{{$u.query}}|{{$u.fragment}}|{{$u.userinfo}}|{{$u.opaque}}'
    ),
    "urlParse-oci": case(
        '{{$u := urlParse "oci://ghcr.io/org/app"}}{{$u.scheme}} {{$u.host}} {{$u.path}}'
    ),
    "urlJoin": case(
        '{{urlJoin (dict "scheme" "https" "host" "example.com" "path" "/a b" "query" "x=1" "fragment" "f")}} {{urlJoin (dict "host" "h" "path" "p")}}'
    ),
    "urlParse-roundtrip": case('{{urlParse "http://example.com/x?y=z" | urlJoin}}'),
    # durations
    "duration": case(
        '{{duration "90"}} {{duration "3661"}} {{duration 90}} {{duration "x"}} {{duration (int64 5)}} {{duration "0"}}'
    ),
    "durationRound": case(
        '{{durationRound "2h10m"}} {{durationRound "90s"}} {{durationRound "400h"}} {{durationRound "9000h"}} {{durationRound "1ms"}} {{durationRound 5}} {{durationRound "-3h"}}'
    ),
    # dates (Go layouts; the local zone is UTC)
    "toDate": case(
        '{{toDate "2006-01-02" "2024-01-15"}}|{{toDate "2006-01-02 15:04:05" "2024-02-29 23:59:58"}}|'
        '{{toDate "02/01/06" "31/12/99"}}|{{toDate "Jan 2, 2006" "Feb 3, 2013"}}|'
        '{{toDate "January _2 2006 3:04PM" "March  5 2021 11:07AM"}}'
    ),
    "toDate-zones": case(
        '{{toDate "2006-01-02T15:04:05Z07:00" "2024-03-05T10:20:30+02:00"}}|'
        '{{toDate "2006-01-02T15:04:05Z07:00" "2024-03-05T10:20:30Z"}}|'
        '{{toDate "2006-01-02 15:04:05 -0700" "2024-03-05 10:20:30 -0530"}}|'
        '{{toDate "2006-01-02 MST" "2024-03-05 UTC"}}|{{toDate "2006-01-02 MST" "2024-03-05 PST"}}'
    ),
    "toDate-fractions": case(
        '{{toDate "2006-01-02 15:04:05.000" "2024-01-15 10:00:00.123"}}|'
        '{{toDate "2006-01-02 15:04:05.999" "2024-01-15 10:00:00.5"}}|'
        '{{toDate "2006-01-02 15:04:05" "2024-01-15 10:00:00.25"}}|'
        '{{toDate "2006-01-02T15:04:05.999999999Z07:00" "2024-01-15T10:00:00.000001Z"}}'
    ),
    "toDate-year-zero": case(
        '{{toDate "15:04" "10:30"}}|{{toDate "15:04" "10:30" | unixEpoch}}|{{toDate "Jan 2" "Feb 29"}}'
    ),
    "toDate-bad-is-zero": case('{{toDate "2006-01-02" "nope"}}|{{toDate "2006" "2024x"}}'),
    "unixEpoch": case(
        '{{toDate "2006-01-02" "2024-01-15" | unixEpoch}} '
        '{{toDate "2006-01-02T15:04:05Z07:00" "2024-03-05T10:20:30+02:00" | unixEpoch}} '
        '{{toDate "2006" "1969" | unixEpoch}}'
    ),
    "mustToDate-errors": case('{{mustToDate "2006-01-02" "2024-13-01"}}'),
    "mustToDate-cannot-parse": case('{{mustToDate "2006-01-02" "2024/01/01"}}'),
    "mustToDate-extra": case('{{mustToDate "2006-01-02" "2024-01-01 x"}}'),
    "mustToDate-day-range": case('{{mustToDate "2006-01-02" "2023-02-29"}}'),
    "mustToDate-hour-range": case('{{mustToDate "15:04" "25:00"}}'),
    "mustDateModify": case(
        '{{mustDateModify "1.5h" (toDate "2006-01-02" "2024-01-15")}}|'
        '{{toDate "2006-01-02" "2024-01-15" | mustDateModify "-25h"}}|'
        '{{toDate "2006-01-02" "2024-01-15" | must_date_modify "90m" | unixEpoch}}'
    ),
    "mustDateModify-bad": case('{{toDate "2006-01-02" "2024-01-15" | mustDateModify "soon"}}'),
    "date-types": case('{{typeOf (toDate "2006" "2024")}} {{kindOf (toDate "2006" "2024")}}'),
    "unixEpoch-wrong-type": case('{{unixEpoch "2024"}}'),
    # ResourceSet docs' examples
    "docs-quote-int-bool": case(
        'semver: {{ .app.version | quote }}\nreplicas: {{ .app.replicas | int }}\nenabled: {{ "true" | quote }}'
    ),
    "docs-exclude": case(
        'reconcile: {{ if eq .tenant "team1" }}enabled{{ else }}disabled{{ end }}'
    ),
    "docs-delims": dict(
        case("name: podinfo-<< inputs.tenant >>\nv: << inputs.app.version | quote >>"),
        left="<<",
        right=">>",
    ),
    "docs-range-components": dict(
        case(
            "---\nkind: OCIRepository\n<<- range $c := inputs.l >>\n---\nname: << $c >>\n<<- if inputs.t >>\n  decryption: sops\n<<- end >>\n<<- end >>"
        ),
        left="<<",
        right=">>",
    ),
    "docs-toYaml-nindent": case("spec:\n  layerSelector: {{ .app | toYaml | nindent 4 }}"),
}

# The ResourceSet templates call inputs as a function; for Go it is a field of the data.
for _k in ("docs-delims", "docs-range-components"):
    SPRIG[_k]["template"] = SPRIG[_k]["template"].replace("inputs.", ".")
del DATA
