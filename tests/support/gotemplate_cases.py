"""The template differential corpus: ApplicationSet Go templates run through Go (the `gotemplate` helper)
and through the Python engine, which must agree on every one (issue 24).

Generated systematically rather than hand-picked: every Sprig and Argo CD function used with typical
arguments, piped and called, the actions (if/else if/with/range/variables/trim markers/comments), missing
keys with and without `missingkey=error`, comparisons on missing fields, string literals holding `}}` and
backquotes, JSON numbers, nested maps, and the examples of Argo CD's ApplicationSet documentation. Each
template runs under both option sets, so a case covers the default and `missingkey=error`.
"""

from __future__ import annotations

from typing import Any

PARAMS: dict[str, Any] = {
    "name": "Guestbook App", "env": "prod", "replicas": 3, "ratio": 0.5, "big": 1e21, "neg": -7,
    "float": 2.0, "flag": True, "off": False, "none": None, "empty": "", "zero": 0,
    "list": ["a", "b", "c"], "nums": [3, 1, 2], "mixed": [1, "x", True],
    "path": {"path": "apps/web", "basename": "web", "segments": ["apps", "web"],
             "basenameNormalized": "web", "filename": "config.json"},
    "cluster": {"name": "in-cluster", "server": "https://kubernetes.default.svc", "address": "10.0.0.1"},
    "metadata": {"labels": {"env": "staging", "team": "a"}, "annotations": {}},
    "values": {"a": {"b": {"c": "deep"}}, "n": 1},
    "yaml": "a: 1\nb:\n- x\n- y\n", "yamlList": "- a\n- b\n", "json": '{"k": [1, 2], "s": "v"}',
    "version": "1.2.3", "url": "https://example.com/a/b?q=1", "weird": "Héllo_Wörld.v2 -- X!",
    "spaces": "  padded  ", "csv": "a,b,,c", "branch": "feature/JIRA-123_Add-Thing", "number": 42,
    "sha": "abcdef0123456789", "head_short_sha": "abcdef0", "labels": ["preview", "team-a"],
}

ACTIONS = [
    "{{ .name }}", "{{.name}}", "{{ .path.basename }}", "{{ .path.segments }}", "{{ .metadata.labels.env }}",
    "{{ .values.a.b.c }}", "{{ .values }}", "{{ .list }}", "{{ .nums }}", "{{ .mixed }}", "{{ .cluster }}",
    "{{ .replicas }}", "{{ .ratio }}", "{{ .big }}", "{{ .neg }}", "{{ .float }}", "{{ .flag }}", "{{ .off }}",
    "{{ .none }}", "{{ .empty }}", "{{ .zero }}", "{{ .missing }}", "{{ .missing.deeper }}",
    "{{ .metadata.labels.missing }}", "{{ .metadata.annotations }}", "{{ .none.x }}", "{{ . }}x",
    '{{ if eq .env "prod" }}P{{ else }}O{{ end }}', '{{ if eq .missing "prod" }}P{{ else }}O{{ end }}',
    '{{ if eq .metadata.labels.missing "x" }}P{{ else }}O{{ end }}', '{{ if ne .env "dev" }}N{{ end }}',
    '{{ if .missing }}Y{{ else if .flag }}F{{ else }}N{{ end }}', "{{ if .empty }}Y{{ else }}N{{ end }}",
    "{{ if .zero }}Y{{ else }}N{{ end }}", "{{ if .list }}Y{{ end }}",
    "{{ if .metadata.annotations }}Y{{ else }}N{{ end }}",
    "{{ if and .flag .off }}Y{{ else }}N{{ end }}", "{{ if or .off .env }}Y{{ end }}", "{{ if not .off }}Y{{ end }}",
    "{{ with .metadata.labels }}{{ .team }}{{ end }}", "{{ with .missing }}x{{ else }}none{{ end }}",
    "{{ range .list }}[{{ . }}]{{ end }}", "{{ range $i, $v := .nums }}{{ $i }}={{ $v }};{{ end }}",
    "{{ range $k, $v := .metadata.labels }}{{ $k }}:{{ $v }},{{ end }}", "{{ range .missing }}x{{ else }}E{{ end }}",
    "{{ range $i, $e := .list }}{{ if $i }},{{ end }}{{ $e }}{{ end }}", "{{ $x := .env }}{{ $x }}-{{ $.name }}",
    "{{ $n := 1 }}{{ $n = 2 }}{{ $n }}", "a {{- .env -}} b", "a  {{- \" x \" -}}  b", "{{/* c */}}ok",
    "{{- /* c */ -}} ok", '{{ "}}" }}', '{{ printf "%s}}" .env }}', "{{ `a}}b` }}", '{{ "a`b" }}',
    "{{ `x\"y` }}", '{{ "\\t" }}|', "{{ 'a' }}", "{{ 1 }}{{ 1.5 }}{{ 1e3 }}{{ 0x10 }}{{ -2 }}", "{{ true }}{{ nil }}",
    "{{ len .list }} {{ len .metadata.labels }} {{ len .name }}", "{{ index .list 1 }}",
    "{{ index .path.segments 5 }}",
    '{{ index .metadata.labels "team" }}', '{{ index .metadata.labels "nope" }}',
    "{{ index .values \"a\" \"b\" \"c\" }}",
    "{{ slice .list 1 }}", "{{ slice .name 0 5 }}", '{{ print "a" 1 2 "b" }}', '{{ println "a" }}x',
    '{{ printf "%s-%d-%v-%q" .env .replicas .flag .name }}', '{{ printf "%d" .replicas }}', '{{ printf "%v" .big }}',
    '{{ printf "%.2f" .ratio }}', '{{ printf "%05d" .number }}', "{{ html \"<a>\" }}", "{{ js \"a'b\" }}",
    "{{ urlquery \"a b&c\" }}", "{{ eq .replicas 3 }}", "{{ eq .env \"prod\" \"dev\" }}", "{{ lt 1 2 }} {{ ge 2 2 }}",
    "{{ lt .replicas 5 }}", '{{ eq .name "x" | not }}', "{{ (index .list 0) | upper }}",
    "{{ .name | lower | replace \" \" \"-\" }}", "{{ .env }}{{ .missing }}{{ .env }}", "{{ .list | len }}",
    "{{ end }}", "{{ .env", "{{ if .env }}x", "{{ nosuch .env }}", "{{ .env.deeper }}", "{{ index .list 9 }}",
    "{{ }}", "no tags at all", "{{ define \"x\" }}X{{ end }}{{ template \"x\" }}", "{{ block \"b\" . }}B{{ end }}",
    "{{ break }}", "{{ range .list }}{{ if eq . \"b\" }}{{ break }}{{ end }}{{ . }}{{ end }}",
    "{{ range .list }}{{ if eq . \"b\" }}{{ continue }}{{ end }}{{ . }}{{ end }}", "{{ range 3 }}{{ . }}{{ end }}",
    "{{ call .env }}", "{{ .env | printf \"%s-%s\" \"x\" }}", "{{ and }}", "{{ index . \"env\" }}",
]

# Sprig (v3.3.0) and Argo CD's additions, each with typical arguments.
FUNCTIONS = [
    "{{ upper .env }}", "{{ lower .name }}", "{{ title \"hello world\" }}", "{{ untitle \"Hello\" }}",
    "{{ repeat 3 \"ab\" }}", "{{ substr 1 4 .name }}", "{{ nospace .name }}", "{{ trunc 5 .name }}",
    "{{ trunc -3 .name }}", "{{ abbrev 8 .name }}", "{{ abbrevboth 5 10 \"1234 5678 9123\" }}",
    "{{ initials .name }}", "{{ wrap 5 .name }}", "{{ wrapWith 5 \"\\n\" .name }}", "{{ contains \"book\" .name }}",
    "{{ hasPrefix \"Guest\" .name }}", "{{ hasSuffix \"App\" .name }}", "{{ quote .env }}", "{{ squote .env }}",
    "{{ cat .env .name }}", "{{ indent 2 .env }}", "{{ nindent 2 .env }}", "{{ replace \"p\" \"P\" .env }}",
    "{{ plural \"one\" \"many\" 2 }}", "{{ snakecase \"FirstName\" }}", "{{ camelcase \"http_server\" }}",
    "{{ kebabcase \"FirstName\" }}", "{{ swapcase \"Hello\" }}", "{{ trim .spaces }}",
    "{{ trimAll \"$\" \"$5.00$\" }}",
    "{{ trimPrefix \"apps/\" .path.path }}", "{{ trimSuffix \"/web\" .path.path }}", "{{ toString .replicas }}",
    "{{ toString .big }}", "{{ toString .ratio }}", "{{ atoi \"42\" }}", "{{ int .ratio }}", "{{ int64 .replicas }}",
    "{{ float64 \"1.5\" }}", "{{ toStrings .nums }}", "{{ toDecimal \"0777\" }}", "{{ join \"-\" .list }}",
    "{{ join \",\" .nums }}", "{{ splitList \",\" .csv }}", "{{ split \",\" .csv }}", "{{ (split \",\" .csv)._0 }}",
    "{{ splitn \",\" 2 .csv }}", "{{ sortAlpha .list }}", "{{ sortAlpha .nums }}",
    "{{ regexMatch \"^a.*\" .path.path }}",
    "{{ regexFind \"[a-z]+\" .branch }}", "{{ regexFindAll \"[0-9]\" .sha 3 }}",
    "{{ regexReplaceAll \"[^a-z0-9]+\" (lower .branch) \"-\" }}",
    "{{ regexReplaceAll \"(a)(b)\" \"ab\" \"${2}${1}\" }}",
    "{{ regexReplaceAllLiteral \"a\" \"aa\" \"$1\" }}", "{{ regexSplit \"-|_\" .branch -1 }}",
    "{{ regexQuoteMeta \"a.b\" }}", "{{ mustRegexMatch \"[\" \"x\" }}", "{{ sha1sum .env }}", "{{ sha256sum .env }}",
    "{{ adler32sum .env }}", "{{ b64enc .env }}", "{{ b64dec \"cHJvZA==\" }}", "{{ b32enc .env }}",
    "{{ b32dec \"OBZG6ZA=\" }}", "{{ add 1 2 3 }}", "{{ add1 .replicas }}", "{{ sub 5 .replicas }}",
    "{{ mul 2 3 .replicas }}", "{{ div 7 2 }}", "{{ mod 7 3 }}", "{{ max 1 5 3 }}", "{{ min 4 2 8 }}",
    "{{ addf 1.5 2 }}", "{{ subf 5 .ratio }}", "{{ mulf .ratio 3 }}", "{{ divf 1 4 }}", "{{ floor 1.7 }}",
    "{{ ceil 1.2 }}", "{{ round 3.14159 2 }}", "{{ until 3 }}", "{{ untilStep 0 10 3 }}", "{{ seq 1 3 }}",
    "{{ list 1 \"a\" .env }}", "{{ first .list }}", "{{ last .list }}", "{{ rest .list }}", "{{ initial .list }}",
    "{{ append .list \"d\" }}", "{{ prepend .list \"z\" }}", "{{ concat .list .nums }}", "{{ reverse .list }}",
    "{{ uniq (list 1 1 2) }}", "{{ without .list \"b\" }}", "{{ has \"b\" .list }}",
    "{{ compact (list 1 \"\" 0 2) }}",
    "{{ chunk 2 .list }}", "{{ mustFirst .list }}", "{{ dict \"a\" 1 \"b\" .env }}",
    "{{ get .metadata.labels \"team\" }}",
    "{{ get .metadata.labels \"nope\" }}", "{{ hasKey .metadata.labels \"env\" }}",
    "{{ keys .metadata.labels | sortAlpha }}",
    "{{ values .metadata.labels | sortAlpha }}", "{{ pick .cluster \"name\" }}",
    "{{ omit .cluster \"server\" \"address\" }}",
    "{{ pluck \"name\" .cluster .path }}", "{{ dig \"a\" \"b\" \"c\" \"none\" .values }}",
    "{{ dig \"a\" \"x\" \"none\" .values }}", "{{ merge (dict \"a\" 1) (dict \"a\" 2 \"b\" 3) }}",
    "{{ mergeOverwrite (dict \"a\" 1) (dict \"a\" 2 \"b\" 3) }}", "{{ deepCopy .metadata }}",
    "{{ set (dict \"a\" 1) \"b\" 2 }}", "{{ unset (dict \"a\" 1 \"b\" 2) \"a\" }}",
    "{{ empty .empty }} {{ empty .env }}",
    "{{ default \"d\" .missing }}", "{{ default \"d\" .empty }}", "{{ default \"d\" .env }}", "{{ default 5 .zero }}",
    "{{ coalesce .missing .empty .env }}", "{{ all 1 \"a\" }}", "{{ any 0 \"\" 1 }}",
    "{{ ternary \"y\" \"n\" .flag }}",
    "{{ toJson .metadata }}", "{{ toPrettyJson .cluster }}", "{{ toRawJson \"<a>\" }}",
    "{{ mustToPrettyJson .list }}",
    "{{ fromJson .json }}", "{{ (fromJson .json).s }}", "{{ mustFromJson \"{\" }}", "{{ toYaml .metadata }}",
    "{{ toYaml .list }}", "{{ fromYaml .yaml }}", "{{ (fromYaml .yaml).b }}", "{{ fromYamlArray .yamlList }}",
    "{{ fromYaml \"- x\" }}", "{{ kindOf .list }} {{ kindOf .replicas }} {{ kindOf .metadata }}",
    "{{ typeOf .replicas }} {{ typeOf .env }}", "{{ kindIs \"string\" .env }}", "{{ typeIs \"float64\" .replicas }}",
    "{{ deepEqual .list (list \"a\" \"b\" \"c\") }}", "{{ semver \"1.2.3\" }}", "{{ (semver .version).Minor }}",
    "{{ semverCompare \">=1.2.0\" .version }}", "{{ semverCompare \"~1.3\" .version }}", "{{ base .path.path }}",
    "{{ dir .path.path }}", "{{ ext .path.filename }}", "{{ clean \"a//b/../c\" }}", "{{ isAbs .path.path }}",
    "{{ osBase \"a/b\" }}", "{{ urlParse .url }}", "{{ (urlParse .url).host }}",
    "{{ urlJoin (dict \"scheme\" \"https\" \"host\" \"x.io\" \"path\" \"/p\") }}", "{{ normalize .weird }}",
    "{{ normalize .branch }}", "{{ slugify .weird }}", "{{ slugify 10 .branch }}", "{{ slugify 10 false .branch }}",
    "{{ slugify .branch }}", "{{ tpl \"{{ .env }}-x\" . }}", "{{ tpl \"{{ .missing }}\" . }}",
    "{{ sha256sum .name | trunc 8 }}",
    "{{ derivePassword 1 \"long\" \"pw\" \"user\" \"example.com\" }}", "{{ uuidv4 }}", "{{ now }}",
    "{{ randAlphaNum 5 }}",
    "{{ randInt 1 5 }}", "{{ env \"HOME\" }}", "{{ expandenv \"$HOME\" }}", "{{ getHostByName \"localhost\" }}",
    "{{ date \"2006\" .zero }}", "{{ genPrivateKey \"rsa\" }}", "{{ bcrypt \"x\" }}", "{{ shuffle \"abc\" }}",
    "{{ toDate \"2006-01-02\" \"2024-03-05\" | unixEpoch }}", "{{ duration 95 }}", "{{ fail \"stop here\" }}",
    "{{ required \"need env\" .missing }}", "{{ required \"need env\" .env }}", "{{ fromYaml \"a: [\" }}",
]

# Argo CD's ApplicationSet documentation and e2e examples, with the parameters they run with.
DOCS = [
    "{{.path.basename}}", "{{ .path.basenameNormalized }}", "{{index .path.segments 1}}",
    "{{.cluster.name}}-guestbook", "https://{{ .cluster.address }}:6443",
    "{{ .name | normalize }}-{{ .path.basename }}", "{{ trunc 63 (printf \"%s-%s\" .name .env) | trimSuffix \"-\" }}",
    # The Matrix page: a string literal holding `}}`.
    "{{ if eq .path.basename \"web\" }}{{ \"{{ keep }}\" }}{{ end }}",
    "{{- if .metadata.labels.env }}{{ .metadata.labels.env }}{{- else }}default{{- end }}",
    "{{ .branch | lower | replace \"/\" \"-\" }}-{{ .number }}", "pr-{{ .number }}-{{ .head_short_sha }}",
    "{{ default \"HEAD\" .targetRevision }}", "{{ .path.path }}/overlays/{{ .env }}",
    "{{ if has \"preview\" .labels }}preview{{ else }}stable{{ end }}",
]


def templates() -> list[str]:
    """Every template of the corpus, once each, in a stable order."""
    seen: dict[str, None] = {}
    for text in ACTIONS + FUNCTIONS + DOCS:
        seen.setdefault(text, None)
    return list(seen)


OPTIONS: tuple[tuple[str, ...], ...] = ((), ("missingkey=error",))
