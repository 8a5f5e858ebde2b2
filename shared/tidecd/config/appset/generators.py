"""ApplicationSet generators: each turns its spec into parameter sets, as Argo CD's generators do.

    list          `elements` (or `elementsYaml`), one parameter set per element (without Go templates, strings
                  only, as Argo CD reads them)
    clusters      the clusters tidecd knows (cluster Secrets of the config source, and `in-cluster` when no
                  selector is given), filtered by `selector`; `values` added; `flatList`: one set,
                  `{clusters: [...]}`
    git           `directories` (one set per matching directory, `exclude` entries removed; Go's path.Match) or
                  `files` (the content of each matching JSON/YAML file, one set per list item, an empty file one
                  set of path parameters; git pathspec matching), at `revision`
    matrix        the product of two generators; the second may use the first's parameters; the first's
                  values win, even empty ones (Go templates: mergo with override), a key both give
                  differently is an error (fasttemplate)
    merge         the first generator's sets, updated by later ones whose `mergeKeys` values match (every
                  generator's merge keys must be unique, the first's too)
    pullRequest   open pull requests of a GitHub repository (PyGithub), filtered by `labels`
    scmProvider   the repositories of a GitHub organization or a GitLab group (`config.appset.discovery`)
    clusterDecisionResource
                  the clusters a duck-typed resource's status decides (`config.appset.discovery`); its
                  `values` are added as written (Argo CD does not template them)

Parameters follow the template form: nested values for Go templates (`.path.basename`), flat keys for
fasttemplate (`path.basename`, `path[0]`). Every generator may carry a `selector` (a post-selector over
its parameters) and a `template` that overrides parts of the ApplicationSet's template.

I/O goes through the `Sources` Protocol (git checkouts, clusters, pull requests), so every generator is
unit-tested with an in-memory fake.
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from tidecd.base import limits
from tidecd.base.globs import compile_glob
from tidecd.config.appset import discovery
from tidecd.config.appset.discovery import Decisions, ScmRepo, ScmSpec
from tidecd.config.appset.discovery import GeneratorError as GeneratorError
from tidecd.config.appset.gotemplate import TemplateError
from tidecd.config.appset.template import Renderer, flatten, merge
from tidecd.config.schema import Keys, Node

MAX_PARAMS = 5_000  # parameter sets one generator may produce
MAX_NESTING = 3  # matrix/merge inside matrix/merge
KINDS = ("list", "clusters", "git", "matrix", "merge", "pullRequest", "scmProvider", "clusterDecisionResource")
NOT_IMPLEMENTED = ("plugin",)
GENERATOR_KEYS = Keys((*KINDS, *NOT_IMPLEMENTED, "selector", "template"))
_LIST = Keys(("elements", "elementsYaml", "template"))
_CLUSTERS = Keys(("selector", "values", "template", "flatList"))
_GIT = Keys(("repoURL", "revision", "directories", "files", "pathParamPrefix", "values", "template",
              "requeueAfterSeconds"))
_GIT_PATH = Keys(("path", "exclude"))
_MATRIX = Keys(("generators", "template"))
_MERGE = Keys(("generators", "mergeKeys", "template"))
_PULL_REQUEST = Keys(("github", "requeueAfterSeconds", "template", "filters"))
_GITHUB = Keys(("owner", "repo", "api", "tokenRef", "appSecretName", "labels"))
_SELECTOR = Keys(("matchLabels", "matchExpressions"))
_EXPRESSION = Keys(("key", "operator", "values"))
IN_CLUSTER = ("in-cluster", "https://kubernetes.default.svc")


@dataclass(frozen=True)
class ClusterInfo:
    name: str
    server: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    project: str = ""
    local: bool = False  # the cluster tidecd runs beside, without a Secret (Argo CD's in-cluster)


@dataclass(frozen=True)
class PullRequest:
    number: int
    branch: str
    target_branch: str
    head_sha: str
    labels: tuple[str, ...] = ()
    author: str = ""
    title: str = ""


class Sources(Protocol):
    """What the generators read: git trees, clusters and pull requests."""

    def checkout(self, repo_url: str, revision: str) -> tuple[str, Path]:
        """(commit sha, directory holding the repository's files at that commit)."""
        ...

    def clusters(self) -> list[ClusterInfo]: ...

    def pull_requests(self, owner: str, repo: str, api: str, token_ref: tuple[str, str] | None,
                      labels: Sequence[str]) -> list[PullRequest]: ...

    def scm_repositories(self, spec: ScmSpec) -> list[ScmRepo]:
        """The organization's repositories, each at its default branch (sha not read yet)."""
        ...

    def scm_branches(self, spec: ScmSpec, repo: ScmRepo) -> list[ScmRepo]:
        """`repo` at its default branch, or at every branch with `all_branches`, each with its sha."""
        ...

    def scm_has_path(self, spec: ScmSpec, repo: ScmRepo, path: str) -> bool: ...

    def cluster_decisions(self, config_map: str, name: str, label_selector: Mapping[str, Any]) -> Decisions:
        """The decisions of the resources a clusterDecisionResource's ConfigMap describes."""
        ...


@dataclass(frozen=True)
class Params:
    """One parameter set, the generator-level template override, and where it came from."""

    values: dict[str, Any]
    template: dict[str, Any] | None = None
    origin: str = ""


# --------------------------------------------------------------------------------------------------
# Validation (at load time: errors name the dotted field)


def validate(node: Node, depth: int = 0) -> None:
    """One generator entry: exactly one known kind, its common fields, then the kind's own fields."""
    kinds = [k for k in node.data if k in KINDS]
    for name in NOT_IMPLEMENTED:
        if name in node.data:
            node.error(name, f"Argo CD generator {name} is not implemented by tidecd")
    if len(kinds) != 1 and not any(n in node.data for n in NOT_IMPLEMENTED):
        node.error("", f"expected exactly one generator ({', '.join(KINDS)}), found "
                       f"{', '.join(kinds) if kinds else 'none'}")
    _selector(node.child("selector", _SELECTOR))
    node.get("template", (dict,), "a mapping")
    for kind in kinds:
        if kind in ("matrix", "merge"):
            _validate_combined(node, kind, depth)
        else:
            _VALIDATORS[kind](node)


def _validate_list(node: Node) -> None:
    body = node.child("list", _LIST, required=True)
    if body is None:
        return
    if body.data.get("elements") is None and body.data.get("elementsYaml") is None:
        body.error("elements", "required field is missing (or set elementsYaml)")
    for i, item in enumerate(body.get("elements", (list,), "a list") or []):
        if not isinstance(item, dict):
            body.error(f"elements[{i}]", "expected a mapping")
    body.text("elementsYaml")


def _validate_clusters(node: Node) -> None:
    body = node.child("clusters", _CLUSTERS, required=True)
    if body is None:
        return
    _selector(body.child("selector", _SELECTOR))
    body.get("values", (dict,), "a mapping")


def _validate_git(node: Node) -> None:
    body = node.child("git", _GIT, required=True)
    if body is None:
        return
    body.text("repoURL", required=True)
    body.text("revision")
    body.text("pathParamPrefix")
    body.get("values", (dict,), "a mapping")
    dirs, files = body.children("directories", _GIT_PATH), body.children("files", _GIT_PATH)
    if bool(dirs) == bool(files):
        body.error("", "set exactly one of directories or files")
    for entry, matcher in [*((d, _path_match) for d in dirs), *((f, _pathspec) for f in files)]:
        pattern = entry.text("path", required=True)
        entry.flag("exclude")
        try:
            matcher(pattern)
        except ValueError as exc:
            entry.error("path", str(exc))


def _validate_combined(node: Node, kind: str, depth: int) -> None:
    """A matrix (exactly two generators) or a merge (two or more, with merge keys), nested at most so deep."""
    body = node.child(kind, _MATRIX if kind == "matrix" else _MERGE, required=True)
    if body is None:
        return
    children = body.children("generators", GENERATOR_KEYS)
    if kind == "matrix" and len(children) != 2:
        body.error("generators", "a matrix combines exactly two generators")
    if kind == "merge":
        if len(children) < 2:
            body.error("generators", "a merge needs at least two generators")
        if not body.texts("mergeKeys"):
            body.error("mergeKeys", "must list at least one key")
    if depth >= MAX_NESTING:
        body.error("generators", f"matrix/merge nested more than {MAX_NESTING} levels")
        return
    for child in children:
        validate(child, depth + 1)


def _validate_pull_request(node: Node) -> None:
    """Only the github provider, and none of the fields tidecd does not implement."""
    body = node.child("pullRequest", _PULL_REQUEST, required=True)
    if body is None:
        return
    if body.data.get("filters") is not None:
        body.error("filters", "Argo CD field filters is not implemented by tidecd (use github.labels)")
    body.number("requeueAfterSeconds", 1800)
    github = body.child("github", _GITHUB)
    if github is None:
        body.error("", "only the github provider is implemented by tidecd")
        return
    github.text("owner", required=True)
    github.text("repo", required=True)
    github.text("api")
    github.texts("labels")
    discovery.validate_github_auth(github, "use tokenRef or the github Secret")


_VALIDATORS: dict[str, Callable[[Node], None]] = {
    "list": _validate_list,
    "clusters": _validate_clusters,
    "git": _validate_git,
    "pullRequest": _validate_pull_request,
    "scmProvider": discovery.validate_scm,
    "clusterDecisionResource": discovery.validate_cdr,
}


def _selector(node: Node | None) -> None:
    if node is None:
        return
    node.pairs("matchLabels")
    for expr in node.children("matchExpressions", _EXPRESSION):
        expr.text("key", required=True)
        operator = expr.text("operator", required=True)
        if operator and operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            expr.error("operator", f"{operator!r} is not one of In, NotIn, Exists, DoesNotExist")
        expr.texts("values")


# --------------------------------------------------------------------------------------------------
# Evaluation


def selector_matches(selector: Mapping[str, Any] | None, lookup: Mapping[str, Any]) -> bool:
    """A Kubernetes label selector over `lookup` (labels, or flat parameters)."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if str(lookup.get(key, "\0")) != str(value):
            return False
    for expr in selector.get("matchExpressions") or []:
        key, operator = expr.get("key", ""), expr.get("operator", "")
        values = [str(v) for v in expr.get("values") or []]
        present = key in lookup
        inside = present and str(lookup.get(key, "")) in values
        verdict = {"In": inside, "NotIn": not inside, "Exists": present, "DoesNotExist": not present}
        if not verdict.get(operator, False):
            return False
    return True


class Evaluator:
    """Evaluates generator specs for one ApplicationSet (its template form decides the parameter shape)."""

    def __init__(self, sources: Sources, renderer: Renderer) -> None:
        self.sources, self.renderer, self.go = sources, renderer, renderer.go

    def run(self, gen: Mapping[str, Any], where: str) -> list[Params]:
        kind = next(k for k in KINDS if k in gen)
        body = gen[kind] or {}
        found = getattr(self, "_" + kind.lower())(body, f"{where}.{kind}")
        if len(found) > MAX_PARAMS:
            raise GeneratorError(f"{where}: produced {len(found)} parameter sets, more than {MAX_PARAMS}")
        template = merge(gen.get("template") or {}, body.get("template") or {}) if (
            gen.get("template") or (isinstance(body, Mapping) and body.get("template"))) else None
        out = []
        for params in found:
            if not selector_matches(gen.get("selector"), self._selectable(params.values)):
                continue
            combined = params.template if template is None else merge(template, params.template or {})
            out.append(Params(params.values, combined or None, params.origin))
        return out

    def _selectable(self, values: Mapping[str, Any]) -> Mapping[str, Any]:
        return flatten(values) if self.go else values

    # -- list ---------------------------------------------------------------------------------------

    def _list(self, body: Mapping[str, Any], where: str) -> list[Params]:
        elements = list(body.get("elements") or [])
        if body.get("elementsYaml"):
            try:
                loaded = limits.load_yaml(body["elementsYaml"], where)
            except (yaml.YAMLError, ValueError) as exc:
                raise GeneratorError(f"{where}.elementsYaml: not YAML ({type(exc).__name__})") from None
            if not isinstance(loaded, list) or not all(isinstance(e, dict) for e in loaded):
                raise GeneratorError(f"{where}.elementsYaml: expected a list of mappings")
            elements += loaded
        out = []
        for index, element in enumerate(elements):
            if not isinstance(element, Mapping):
                raise GeneratorError(f"{where}.elements[{index}]: expected a mapping")
            if self.go or index >= len(body.get("elements") or []):
                values = dict(element)  # Argo CD appends elementsYaml's items as they are, in both forms
            else:
                values = _fast_element(element, f"{where}.elements[{index}]")
            out.append(Params(values, origin=f"list element {index}"))
        return out

    # -- clusters -----------------------------------------------------------------------------------

    def _clusters(self, body: Mapping[str, Any], where: str) -> list[Params]:
        selector = body.get("selector") or None
        clusters = list(self.sources.clusters())
        if not selector and not any(c.server.rstrip("/") == IN_CLUSTER[1] for c in clusters):
            clusters.append(ClusterInfo(name=IN_CLUSTER[0], server=IN_CLUSTER[1], local=True))
        out = []
        for cluster in sorted(clusters, key=lambda c: c.name):
            if not selector_matches(selector, cluster.labels):
                continue
            values = self._cluster_params(cluster)
            self._values(body, values, where)
            out.append(Params(values, origin=f"cluster {cluster.name}"))
        if body.get("flatList"):
            return [Params({"clusters": [p.values for p in out]},
                           origin=f"clusters (flat list of {len(out)})")]
        return out

    def _cluster_params(self, cluster: ClusterInfo) -> dict[str, Any]:
        """Argo CD's parameters of one cluster. The local cluster (no Secret) has only `name`, `nameNormalized`
        (its name as is) and `server`; a Secret's cluster adds `metadata` with only the non-empty maps."""
        if cluster.local:
            return {"name": cluster.name, "nameNormalized": cluster.name, "server": cluster.server}
        meta: dict[str, Any] = {}
        if cluster.annotations:
            meta["annotations"] = dict(cluster.annotations)
        if cluster.labels:
            meta["labels"] = dict(cluster.labels)
        nested: dict[str, Any] = {"name": cluster.name, "nameNormalized": _sanitized(cluster.name),
                                  "server": cluster.server, "project": cluster.project, "metadata": meta}
        return nested if self.go else flatten(nested)

    def _values(self, body: Mapping[str, Any], values: dict[str, Any], where: str) -> None:
        """`values`: extra parameters, themselves templated with the generator's parameters."""
        extra = body.get("values") or {}
        if not extra:
            return
        try:
            rendered = {str(k): self.renderer.value(v, values, f"{where}.values.{k}") for k, v in extra.items()}
        except TemplateError as exc:
            raise GeneratorError(str(exc)) from None
        if self.go:
            values["values"] = rendered
        else:
            values.update({f"values.{k}": v for k, v in flatten(rendered).items()})

    # -- git ----------------------------------------------------------------------------------------

    def _git(self, body: Mapping[str, Any], where: str) -> list[Params]:
        url, revision = str(body.get("repoURL", "")), str(body.get("revision") or "HEAD")
        sha, root = self.sources.checkout(url, revision)
        prefix = str(body.get("pathParamPrefix") or "")
        out = []
        if body.get("directories"):
            for path in _match(_directories(root), body["directories"], _path_match):
                params = self._path_params(path, prefix, file=False)
                self._values(body, params, where)
                out.append(Params(params, origin=f"git directory {path} at {sha[:12]}"))
            return out
        for path in _match(_files(root), body.get("files") or [], _pathspec):
            for index, content in enumerate(_file_contents(root, path, where)):
                params = dict(content) if self.go else flatten(content)
                params.update(self._path_params(str(Path(path).parent.as_posix()), prefix, file=path))
                self._values(body, params, where)
                suffix = f" item {index}" if index else ""
                out.append(Params(params, origin=f"git file {path}{suffix} at {sha[:12]}"))
        return out

    def _path_params(self, path: str, prefix: str, file: str | bool) -> dict[str, Any]:
        path = path or "."  # a file at the root: Go's path.Dir gives ".", and path.Base(".") is "."
        segments = path.split("/")
        base = segments[-1]
        nested: dict[str, Any] = {"path": path, "basename": base,
                                  "basenameNormalized": _sanitized(base), "segments": segments}
        if isinstance(file, str):
            name = file.rsplit("/", 1)[-1]
            nested |= {"filename": name, "filenameNormalized": _sanitized(name)}
        if self.go:
            return {prefix: {"path": nested}} if prefix else {"path": nested}
        key = f"{prefix}.path" if prefix else "path"
        flat: dict[str, Any] = {key: nested["path"], f"{key}.basename": base,
                                f"{key}.basenameNormalized": nested["basenameNormalized"]}
        if isinstance(file, str):
            flat |= {f"{key}.filename": nested["filename"], f"{key}.filenameNormalized": nested["filenameNormalized"]}
        flat.update({f"{key}[{i}]": s for i, s in enumerate(segments)})
        return flat

    # -- matrix and merge ---------------------------------------------------------------------------

    def _matrix(self, body: Mapping[str, Any], where: str) -> list[Params]:
        first, second = body["generators"][0], body["generators"][1]
        out = []
        for left in self.run(first, f"{where}.generators[0]"):
            try:
                interpolated = self.renderer.value(second, left.values, f"{where}.generators[1]")
            except TemplateError as exc:
                raise GeneratorError(str(exc)) from None
            for right in self.run(interpolated, f"{where}.generators[1]"):
                # Argo CD (matrix.go): mergo with override of the second's set, then of the first's, into an
                # empty map: the first's values win, even empty ones; maps in both are merged key by key
                values = mergo_override(mergo_override({}, right.values), left.values) if self.go else _combined(
                    left.values, right.values, where)
                template = merge(left.template or {}, right.template or {}) or None
                out.append(Params(values, template, f"{left.origin} x {right.origin}"))
                if len(out) > MAX_PARAMS:
                    raise GeneratorError(f"{where}: more than {MAX_PARAMS} parameter sets")
        return out

    def _merge(self, body: Mapping[str, Any], where: str) -> list[Params]:
        """Argo CD's merge.go: every generator's sets by their merge keys' values (top-level parameters, compared
        as JSON: a missing key is null, so sets that both lack it match), which must be unique in each generator,
        the first included; each later generator updates the first's set with the same keys (Go templates:
        mergo with override; fasttemplate: its keys replace)."""
        keys = list(dict.fromkeys(str(k) for k in body.get("mergeKeys") or []))
        sets = [self.run(g, f"{where}.generators[{i}]") for i, g in enumerate(body["generators"])]

        def by_key(found: list[Params], number: int) -> dict[str, int]:
            out: dict[str, int] = {}
            for index, params in enumerate(found):
                key = json.dumps({k: params.values.get(k) for k in sorted(keys)}, sort_keys=True, default=str)
                if key in out:
                    raise GeneratorError(f"{where}.generators[{number}]: two parameter sets have the same merge keys "
                                         f"({key}); a merge needs them unique in every generator, the first "
                                         "included (as in Argo CD)")
                out[key] = index
            return out

        base = list(sets[0])
        base_keys = by_key(base, 0)
        for number, later in enumerate(sets[1:], start=1):
            later_keys = by_key(later, number)
            for key, index in base_keys.items():
                if key not in later_keys:
                    continue
                params, match = base[index], later[later_keys[key]]
                values = mergo_override(copy.deepcopy(params.values), match.values) if self.go else {
                    **params.values, **match.values}
                base[index] = Params(values, merge(params.template or {}, match.template or {}) or None,
                                     f"{params.origin} + {match.origin}")
        return base

    # -- pull requests ------------------------------------------------------------------------------

    def _pullrequest(self, body: Mapping[str, Any], where: str) -> list[Params]:
        github = body.get("github") or {}
        ref = github.get("tokenRef")
        token_ref = (str(ref["secretName"]), str(ref["key"])) if isinstance(ref, Mapping) else None
        pulls = self.sources.pull_requests(str(github["owner"]), str(github["repo"]), str(github.get("api") or ""),
                                           token_ref, tuple(github.get("labels") or ()))
        out = []
        for pr in sorted(pulls, key=lambda p: p.number):
            nested: dict[str, Any] = {
                "number": str(pr.number), "branch": pr.branch, "branch_slug": _slug(pr.branch),
                "target_branch": pr.target_branch, "target_branch_slug": _slug(pr.target_branch),
                "head_sha": pr.head_sha, "head_short_sha": pr.head_sha[:8], "head_short_sha_7": pr.head_sha[:7],
                "author": pr.author}
            if self.go:
                nested["labels"] = list(pr.labels)
            out.append(Params(nested, origin=f"pull request #{pr.number}"))
        return out


    # -- scmProvider and clusterDecisionResource (`config.appset.discovery`) -----------------------------

    def _scmprovider(self, body: Mapping[str, Any], where: str) -> list[Params]:
        spec = discovery.scm_spec(body)
        try:
            repos = discovery.select_repositories(
                body, self.sources.scm_repositories(spec), lambda repo: self.sources.scm_branches(spec, repo),
                lambda repo, path: self.sources.scm_has_path(spec, repo, path))
        except GeneratorError as exc:
            raise GeneratorError(f"{where}: {exc}") from None
        out = []
        for repo in repos:
            params = discovery.scm_params(repo, _sanitized)
            self._values(body, params, where)
            out.append(Params(params, origin=f"repository {repo.organization}/{repo.repository} at {repo.branch}"))
        return out

    def _clusterdecisionresource(self, body: Mapping[str, Any], where: str) -> list[Params]:
        selector = body.get("labelSelector") or {}
        try:
            decisions = self.sources.cluster_decisions(str(body.get("configMapRef", "")), str(body.get("name") or ""),
                                                       selector if isinstance(selector, Mapping) else {})
        except GeneratorError as exc:
            raise GeneratorError(f"{where}: {exc}") from None
        known = {c.name: c.server for c in self.sources.clusters()}
        if IN_CLUSTER[1] not in known.values():
            known.setdefault(IN_CLUSTER[0], IN_CLUSTER[1])
        out = []
        for params in discovery.decision_params(decisions, known):
            values = params if self.go else flatten(params)
            # Argo CD's duck_type.go copies `values` as written: unlike the clusters and git generators', they
            # are not templated with the decision's parameters (`{{ .name }}` stays `{{ .name }}`)
            extra = {str(k): str(v) for k, v in (body.get("values") or {}).items()}
            if self.go and extra:
                values["values"] = extra
            else:
                values.update({f"values.{k}": v for k, v in extra.items()})
            out.append(Params(values, origin=f"decision for cluster {params['name']}"))
        return out


def _fast_element(element: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A list element as Argo CD's list generator reads it for fasttemplate (list.go): every value a string,
    `values` a mapping of strings given as `values.KEY`; anything else (a number, a boolean, a nested
    mapping) fails the generator, as Argo CD's 'error parsing value as string' does."""
    out: dict[str, Any] = {}
    for key, value in element.items():
        if key == "values":
            if not isinstance(value, Mapping):
                raise GeneratorError(f"{where}.values: expected a mapping of strings (Argo CD: 'error parsing "
                                     "values map'); with goTemplate: true any value may be given")
            for inner, text in value.items():
                if not isinstance(text, str):
                    raise GeneratorError(f"{where}.values.{inner}: {type(text).__name__} value, expected a string "
                                         "(Argo CD's list generator without goTemplate takes strings only: quote "
                                         "it, or set goTemplate: true)")
                out[f"values.{inner}"] = text
        elif not isinstance(value, str):
            raise GeneratorError(f"{where}.{key}: {type(value).__name__} value, expected a string (Argo CD's list "
                                 "generator without goTemplate takes strings only: quote it, or set goTemplate: true)")
        else:
            out[str(key)] = value
    return out


def mergo_override(dst: dict[str, Any], src: Mapping[str, Any]) -> dict[str, Any]:
    """`dst` updated by `src` as Argo CD's `mergo.Merge(&dst, src, mergo.WithOverride)` (dario.cat/mergo v1.0.2)
    does it to parameter maps: every value of `src` replaces `dst`'s, an empty one ("", 0, false, null, an empty
    list) too, except that a mapping meeting a mapping is merged the same way, key by key. `dst` is changed
    and returned."""
    for key, value in src.items():
        mine = dst.get(key)
        if isinstance(value, Mapping) and isinstance(mine, Mapping):
            dst[key] = mergo_override(dict(mine), value)
        else:
            dst[key] = copy.deepcopy(value)
    return dst


def _combined(first: Mapping[str, Any], second: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Argo CD's matrix with fasttemplate: the flat parameters of both; a key both give differently is an error."""
    for key, value in second.items():
        if key in first and first[key] != value:
            raise GeneratorError(f"{where}: both generators give parameter {key!r}, with different values "
                                 f"({str(first[key])[:40]!r} and {str(value)[:40]!r})")
    return {**first, **second}


def _sanitized(text: str) -> str:
    """Argo CD's SanitizeName (`nameNormalized`, `basenameNormalized`): lowercase, anything but [-a-z0-9.] becomes
    '-', at most 253 characters, no leading or trailing '-' or '.'."""
    return re.sub(r"[^a-z0-9-.]", "-", text.lower())[:253].strip("-.")


def _slug(text: str) -> str:
    """Argo CD's branch slug: lowercase alphanumerics and '-', at most 50 characters."""
    value = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return value[:50].rstrip("-")


def _match(paths: list[str], entries: Sequence[Mapping[str, Any]],
           matcher: Callable[[str], Callable[[str], bool]]) -> list[str]:
    """Paths matching an including entry and no excluding one (Argo CD: excludes win)."""
    include = [matcher(str(e["path"])) for e in entries if not e.get("exclude")]
    exclude = [matcher(str(e["path"])) for e in entries if e.get("exclude")]
    return [p for p in paths if any(m(p) for m in include) and not any(m(p) for m in exclude)]


def _path_match(pattern: str) -> Callable[[str], bool]:
    """A git directories entry, as Go's `path.Match` (Argo CD's filterPaths): `*` stays within one folder, and
    `**` is no more than `*`, so `apps/**` matches `apps/web` and not `apps/web/base`."""
    regex = compile_glob(re.sub(r"\*{2,}", "*", pattern), separator="/")
    return lambda path: regex.fullmatch(path) is not None


def _pathspec(pattern: str) -> Callable[[str], bool]:
    """A git files entry, as Argo CD's default (`git ls-files -- PATTERN`, a git pathspec; doublestar globbing
    is an opt-in of its controller, not tidecd's): `*` crosses folders, so `envs/*` matches
    `envs/prod/config.json`; a pattern without wildcards matches that file or everything under that folder."""
    if not any(c in pattern for c in "*?["):
        folder = pattern.rstrip("/") + "/"
        return lambda path: path == pattern or path.startswith(folder)
    regex = compile_glob(pattern)
    return lambda path: regex.fullmatch(path) is not None


def _directories(root: Path) -> list[str]:
    out = []
    for folder, dirs, _ in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != ".git")
        for name in dirs:
            full = Path(folder) / name
            if not full.is_symlink():
                out.append(full.relative_to(root).as_posix())
        if len(out) > 50_000:
            raise GeneratorError("git: more than 50,000 directories in the repository")
    return sorted(out)


def _files(root: Path) -> list[str]:
    out: list[str] = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != ".git")
        out.extend((Path(folder) / n).relative_to(root).as_posix() for n in names
                   if not (Path(folder) / n).is_symlink())
        if len(out) > 100_000:
            raise GeneratorError("git: more than 100,000 files in the repository")
    return sorted(out)


def _file_contents(root: Path, path: str, where: str) -> list[dict[str, Any]]:
    """The parameter sets of one git file: a mapping, or each mapping of a list (JSON or YAML)."""
    full = root / path
    size = full.stat().st_size
    out: list[dict[str, Any]]
    if size > limits.current().file_bytes:
        raise GeneratorError(f"{where}.files: {path}: larger than {limits.current().file_bytes} bytes")
    try:
        text = full.read_text(encoding="utf-8")
        loaded = limits.load_yaml(text, path)
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise GeneratorError(f"{where}.files: {path}: not JSON or YAML ({type(exc).__name__})") from None
    except ValueError as exc:
        raise GeneratorError(f"{where}.files: {path}: {exc}") from None
    if loaded is None:  # an empty file: one set with only the path parameters (Argo CD's parseFileParams)
        return [{}]
    items = loaded if isinstance(loaded, list) else [loaded]
    if not all(isinstance(i, dict) for i in items):
        raise GeneratorError(f"{where}.files: {path}: expected a mapping or a list of mappings")
    out = [dict(i) for i in items]
    return out
