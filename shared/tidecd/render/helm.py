"""Helm charts committed to the repository, rendered with `helm template` as Argo CD renders them.

Argo CD's command line: release name (default: the app's name), namespace (`helm.namespace`, else the
destination's), `--include-crds` (`--skip-crds` with `skipCrds`), each value file (relative to the chart;
a leading `/` means the repository root; missing ones skipped with `ignoreMissingValueFiles`), the inline
values (`valuesObject` or `values`) as one more file, then `--set`/`--set-string` parameters, then
`--set-file` for `fileParameters` (files inside the repository). Argo CD's build environment
(`render.buildenv`) is substituted where Argo CD substitutes it: parameter values, value file paths and
file parameter paths; never in `values`/`valuesObject`, the release name or the namespace. A parameter's
value (after that substitution) is data: it reaches
helm as exactly that value (see `escape_set_value`), never as more `--set` syntax. Value
files must stay inside the repository. Helm runs with throwaway config/cache/data homes, no repositories
file, no registry login, no plugins and no network (`render.tool`): chart dependencies are vendored under
`charts/`, fetched into the snapshot by a chart source, or, for a chart committed without them, fetched by
the step as chart snapshots and added to a copy of the chart (`Dependencies`: Argo CD's `helm dependency
build`). `--kube-version` and `--api-versions` are the destination cluster's (`BuildEnv`), unless
`helm.kubeVersion` / `helm.apiVersions` say otherwise, as Argo CD passes them. Value files, the chart's values.yaml
and the inline values pass the YAML bounds of `tidecd.base.limits` before helm reads them. Hooks are kept
(with their `helm.sh/hook` annotations) for the sync engine to map.
"""

from __future__ import annotations

import posixpath
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from tidecd.base import limits
from tidecd.base.errors import RenderError, UnsafePathError
from tidecd.base.paths import copy_writable, inside
from tidecd.clients import tools
from tidecd.config.load import HelmParameter, HelmSpec
from tidecd.render.buildenv import BuildEnv
from tidecd.render.documents import Document, load_yaml
from tidecd.render.tool import run as run_tool

KUBE_VERSION = "1.34"  # Capabilities.KubeVersion where no destination was asked (a fork's preview), pinned
_GENERIC_VERSION = re.compile(r"^\s*v?([0-9]+(?:\.[0-9]+)+)")  # k8s.io version.ParseGeneric: 2+ numbers

_DOC_SEPARATOR = re.compile(r"^---[ \t]*$", re.MULTILINE)
_SOURCE_COMMENT = re.compile(r"^# Source: (.+?)\s*$", re.MULTILINE)
_VARIABLE_HEAD = re.compile(r"^\$\{?([A-Za-z0-9_]+)")  # `$NAME` or `${NAME` opening a value file path


def is_chart(app_dir: Path) -> bool:
    return (app_dir / "Chart.yaml").is_file()


@dataclass(frozen=True)
class Dependencies:
    """What `helm dependency build` adds to the `charts/` of a chart committed without its dependencies:
    the archives the source stage fetched as snapshots (`source.dependencies.fetch_missing`: file name,
    bytes) and the `file://` charts of the same repository (dependency name, its `repository` field)."""

    archives: tuple[tuple[str, bytes], ...] = ()
    local: tuple[tuple[str, str], ...] = ()


def render_helm(
    checkout: Path,
    app_path: str,
    chart_dir: Path,
    spec: HelmSpec | None,
    *,
    app_name: str,
    namespace: str,
    value_refs: Mapping[str, Path] | None = None,
    build_env: BuildEnv | None = None,
    dependencies: Dependencies | None = None,
) -> list[Document]:
    """Objects of `helm template` for the chart at `chart_dir` (the app's `path` inside `checkout`);
    `value_refs` name the checkouts that `$<ref>/...` value files (multi-source apps) are read from;
    `build_env` is substituted as Argo CD substitutes it (default: only the app's name and namespace);
    `dependencies`, when given, are added to a copy of the chart first (`built_chart`)."""
    env = build_env or BuildEnv(app_name=app_name, namespace=namespace)
    spec = substituted(spec or HelmSpec(), env)
    numbered = _value_files(checkout, app_path, spec, value_refs or {}, env)
    for index, path in numbered:
        check_values_file(path, f"spec.source.helm.valueFiles[{index}] {spec.value_files[index]!r}")
    value_files = [path for _, path in numbered]
    if (chart_dir / "values.yaml").is_file():
        check_values_file(chart_dir / "values.yaml", f"{app_path}/values.yaml")
    file_parameters = [
        (name, value_file_path(checkout, app_path, path, i, what=f"spec.source.helm.fileParameters[{i}].path"))
        for i, (name, path) in enumerate(spec.file_parameters)]
    _check_inline_values(spec.values)
    with tempfile.TemporaryDirectory(prefix="tidecd-helm-") as tmp:
        work = Path(tmp)
        if dependencies is not None and (dependencies.archives or dependencies.local):
            chart_dir = built_chart(checkout, app_path, chart_dir, dependencies, work / "chart")
        inline = work / "inline-values.yaml"
        if spec.values:
            inline.write_text(spec.values, encoding="utf-8")
        argv = template_argv(
            tools.binary("helm"), spec, chart_dir, value_files, inline if spec.values else None,
            release=spec.release_name or app_name, namespace=spec.namespace or namespace,
            kube_version=env.kube_version, api_versions=env.api_versions,
        )
        for name, path in file_parameters:
            argv += ["--set-file", f"{name}={escape_set_text(str(path))}"]
        try:
            out = run_tool(
                argv, what=f"helm template {app_path}", cwd=chart_dir, home=work, env=helm_env(work),
                strip=[checkout.resolve(), checkout, work],
            )
        except RenderError as exc:
            raise _with_dependency_hint(exc) from exc
    return parse_output(out)


def built_chart(checkout: Path, app_path: str, chart_dir: Path, dependencies: Dependencies, dest: Path) -> Path:
    """A copy of the chart at `dest` with its dependencies in `charts/`, as `helm dependency build` leaves
    it: each fetched archive as its file, each `file://` chart (which must be a chart inside the checkout,
    relative to the chart as helm reads it) as a directory. The checkout itself is shared and read-only."""
    copy_writable(chart_dir, dest)  # links are followed: `check_tree` kept each inside the checkout
    charts = dest / "charts"
    charts.mkdir(exist_ok=True)
    for name, data in dependencies.archives:
        if "/" in name or name.startswith("."):
            raise RenderError(f"{app_path}/Chart.yaml: dependency archive name {name!r} is not a file name")
        (charts / name).write_bytes(data)
    for name, repository in dependencies.local:
        what = f"{app_path}/Chart.yaml: dependency {name} {repository!r}"
        local = inside(checkout, posixpath.join(app_path, repository.removeprefix("file://")), what=what)
        if not (local / "Chart.yaml").is_file():
            raise RenderError(f"{what}: no chart there in the repository")
        copy_writable(local, charts / name)
    return dest


def substituted(spec: HelmSpec, env: BuildEnv) -> HelmSpec:
    """`spec` with Argo CD's build environment in the parameter values and file parameter paths, as
    repository.go `helmTemplate` substitutes them (value file paths: `_value_files`)."""
    return replace(
        spec,
        parameters=tuple(replace(p, value=env.subst(p.value)) for p in spec.parameters),
        file_parameters=tuple((name, env.subst(path)) for name, path in spec.file_parameters),
    )


def template_argv(
    helm: str,
    spec: HelmSpec,
    chart_dir: Path,
    value_files: list[Path],
    inline_values: Path | None,
    *,
    release: str,
    namespace: str,
    kube_version: str = "",
    api_versions: tuple[str, ...] = (),
) -> list[str]:
    """helm's command line. `kube_version` and `api_versions` are the destination's (`BuildEnv`); as Argo
    CD's `helmTemplate`, `helm.kubeVersion` replaces the one and a non-empty `helm.apiVersions` the other."""
    crds = "--skip-crds" if spec.skip_crds else "--include-crds"
    if spec.kube_version:
        version = parse_kube_version(spec.kube_version, "spec.source.helm.kubeVersion")
    else:
        version = parse_kube_version(kube_version, "the destination's version") if kube_version else KUBE_VERSION
    argv = [helm, "template", release, str(chart_dir), crds, "--kube-version", version]
    argv += ["--skip-schema-validation"] * spec.skip_schema_validation + ["--skip-tests"] * spec.skip_tests
    for api_version in spec.api_versions or api_versions:
        argv += ["--api-versions", api_version]
    if namespace:
        argv += ["--namespace", namespace]
    for path in value_files:
        argv += ["--values", str(path)]
    if inline_values is not None:
        argv += ["--values", str(inline_values)]
    for parameter in spec.parameters:
        argv += set_flag(parameter)
    return argv


def parse_kube_version(text: str, what: str) -> str:
    """A Kubernetes version as Argo CD's `parseKubeVersion` hands it to helm (k8s.io's `ParseGeneric`): the
    leading `v` and anything after the numbers (`-gke.100`, `+k3s1`) dropped; `v1.34.4` → `1.34.4`."""
    match = _GENERIC_VERSION.match(text)
    if match is None:
        raise RenderError(f"{what} {text!r}: could not parse the Kubernetes version (expected e.g. 1.34 or v1.34.4)")
    return match[1]


def set_flag(parameter: HelmParameter) -> list[str]:
    flag = "--set-string" if parameter.force_string else "--set"
    return [flag, f"{parameter.name}={escape_set_value(parameter.value)}"]


def escape_set_value(value: str) -> str:
    r"""`value` as helm's `--set` parser reads it back exactly, `{a,b}` (Argo CD's list form) as that list.

    Argo CD escapes only the commas not already after a backslash and passes backslashes and `{...}` as
    they are: `zz\\,evil=x` reaches helm as `zz\` and a second parameter `evil=x`, and `{a},evil=x` as a
    list and `evil=x`. Data became syntax. Here every backslash, comma and brace of a value is escaped
    (helm's value parser reads `\x` as `x` and no other character of a value specially), so nothing in a
    value can end it: `zz\,evil=x` is that tag. A value written `{...}` is still a list, as in Argo CD: its
    items are read as helm reads a list (split at unescaped commas, `\x` is `x`; a `}` inside is text) and
    each is escaped again, so the list is exactly those items under this parameter's name. Unlike Argo CD,
    a backslash in a plain value is kept (helm would drop it).
    """
    if value.startswith("{") and value.endswith("}"):
        return "{" + ",".join(escape_set_text(item) for item in _list_items(value[1:-1])) + "}"
    return escape_set_text(value)


def escape_set_text(text: str) -> str:
    """`text` escaped for helm's `--set`/`--set-string`/`--set-file` parser: read back as exactly `text`."""
    return re.sub(r"([\\,{}])", r"\\\1", text)


def _list_items(inner: str) -> list[str]:
    """The items of a `{...}` parameter value as helm splits them: at commas not escaped by a backslash."""
    items: list[str] = []
    current: list[str] = []
    chars = iter(inner)
    for char in chars:
        if char == "\\":
            current.append(next(chars, "\\"))
        elif char == ",":
            items.append("".join(current))
            current = []
        else:
            current.append(char)
    return [*items, "".join(current)]


def _value_files(checkout: Path, app_path: str, spec: HelmSpec, value_refs: Mapping[str, Path],
                 env: BuildEnv) -> list[tuple[int, Path]]:
    """The value files to pass (with their index in valueFiles); with `ignoreMissingValueFiles`, those that
    do not exist are left out.

    The build environment is substituted as Argo CD's `getResolvedValueFiles` does: in a `$<ref>/<path>`
    file after the ref name, in any other file in the whole path (`$ARGOCD_APP_NAME/values.yaml`). A
    `$<name>/` that is neither a ref nor a variable of the environment stays an error naming the refs
    (Argo CD would look for `/<path>` in the repository instead).
    """
    out = []
    for index, name in enumerate(spec.value_files):
        head, _, rest = name.partition("/")
        variable = _VARIABLE_HEAD.match(head)
        try:
            if head.startswith("$") and head[1:] in value_refs:
                out.append((index, ref_value_file(value_refs, f"{head}/{env.subst(rest)}", index)))
            elif head.startswith("$") and not (variable and variable[1] in env.variables()):
                out.append((index, ref_value_file(value_refs, name, index)))
            else:
                out.append((index, value_file_path(checkout, app_path, env.subst(name), index)))
        except UnsafePathError:
            raise
        except RenderError:
            if not (spec.ignore_missing_value_files and "://" not in name):
                raise
    return out


def ref_value_file(value_refs: Mapping[str, Path], value_file: str, index: int) -> Path:
    """`$<ref>/<path>`: a file of the multi-source app's source with that `ref`, inside its checkout."""
    what = f"spec.sources: helm.valueFiles[{index}] {value_file!r}"
    ref, _, rest = value_file[1:].partition("/")
    root = value_refs.get(ref)
    if root is None:
        known = ", ".join(f"${r}" for r in sorted(value_refs)) or "none"
        raise RenderError(f"{what}: no source has ref {ref!r} (refs: {known})")
    return _file_inside(root, rest, what, f"the checkout of source ${ref}", f"the source with ref {ref!r}")


def value_file_path(checkout: Path, app_path: str, value_file: str, index: int, *, what: str = "") -> Path:
    """The value file inside the checkout: relative to the chart, or to the repository with a leading `/`."""
    what = what or f"spec.source.helm.valueFiles[{index}]"
    if "://" in value_file:
        raise RenderError(f"{what} {value_file!r}: remote value files are not fetched; commit it to the repo")
    relative = value_file.lstrip("/") if value_file.startswith("/") else posixpath.join(app_path, value_file)
    return _file_inside(checkout, relative, f"{what} {value_file!r}", "the repository checkout", "the repository")


def _file_inside(root: Path, relative: str, what: str, checkout: str, source: str) -> Path:
    """A value file that must be a regular file inside `root`: UnsafePathError when it would leave it."""
    try:
        path = inside(root, relative or ".", what=what)
    except UnsafePathError as exc:
        raise UnsafePathError(f"{what} leaves {checkout}") from exc
    if not path.is_file():
        raise RenderError(f"{what} does not exist in {source}")
    return path


def helm_env(work: Path) -> dict[str, str]:
    """Helm homes in the temp dir: no user repositories, registry logins or plugins take part."""
    return {
        "HELM_CACHE_HOME": str(work / "cache"),
        "HELM_CONFIG_HOME": str(work / "config"),
        "HELM_DATA_HOME": str(work / "data"),
        "HELM_REPOSITORY_CONFIG": str(work / "config" / "no-repositories.yaml"),
        "HELM_REPOSITORY_CACHE": str(work / "cache" / "no-repository-cache"),
        "HELM_REGISTRY_CONFIG": str(work / "config" / "no-registry.json"),
        "HELM_PLUGINS": str(work / "no-plugins"),
        "HELM_NO_PLUGINS": "1",
        "KUBECONFIG": str(work / "no-kubeconfig"),
    }


def check_values_file(path: Path, what: str) -> None:
    """A values file within the file size limit whose YAML passes the alias and depth bounds."""
    limits.check_yaml(limits.read_text(path, what), what)


def parse_output(text: str) -> list[Document]:
    """Split `helm template` output at `---`, naming each object by its `# Source:` template."""
    docs: list[Document] = []
    counts: dict[str, int] = {}
    source = "helm template output"
    for chunk in _DOC_SEPARATOR.split(text):
        if match := _SOURCE_COMMENT.search(chunk):
            source = f"{match.group(1)} (rendered by helm)"
        parsed = load_yaml(chunk, source, start=counts.get(source, 0) + 1)
        counts[source] = counts.get(source, 0) + (1 if chunk.strip() else 0)
        docs.extend(parsed)
    return docs


def _check_inline_values(values: str) -> None:
    """Name the field for bad inline values, rather than helm naming our temp file. Never echo them."""
    if not values.strip():
        return
    limits.check_yaml(values, "spec.source.helm.values")
    try:
        parsed = yaml.safe_load(values)
    except yaml.MarkedYAMLError as exc:
        line = f" line {exc.problem_mark.line + 1}" if exc.problem_mark else ""
        raise RenderError(f"spec.source.helm.values{line}: invalid YAML: {exc.problem}") from None
    except yaml.YAMLError:
        raise RenderError("spec.source.helm.values: invalid YAML") from None
    if parsed is not None and not isinstance(parsed, dict):
        raise RenderError("spec.source.helm.values: expected a mapping of values")


def _with_dependency_hint(exc: RenderError) -> RenderError:
    message = str(exc)
    if "missing in charts/" in message:
        message += (" (a dependency is fetched only by its repository URL, from a repository the project's "
                    "sourceRepos permit; otherwise run `helm dependency build` and commit charts/)")
    return RenderError(message)
