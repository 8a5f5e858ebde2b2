"""Argo CD's build environment: the `$ARGOCD_APP_*` variables a source's fields may name.

Argo CD's repo server builds one environment per render (`newEnv` in reposerver/repository/repository.go)
and substitutes it, with `Env.Envsubst` (pkg/apis/application/v1alpha1/types.go), into a few fields only:
helm parameter values, value file and file parameter paths; kustomize images and commonLabels values
(commonAnnotations values only with `commonAnnotationsEnvsubst`); jsonnet tlas and extVars values. The
tools apply `substitute` to exactly those fields, so the text deployed is the text Argo CD deploys.

`substitute` is Go's `os.Expand` with Argo CD's mapping, byte for byte: `$NAME` and `${NAME}` are
replaced, `$$` is one `$`, and a name the environment does not hold (`$HOME`, `$KUBE_VERSION`, `$1`)
becomes the empty string, not kept. `KUBE_VERSION` and `KUBE_API_VERSIONS` are in the environment of
config management plugins only (`getPluginEnvs`), so in these fields Argo CD empties them too.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace

__all__ = ["BuildEnv", "substitute"]

_SPECIAL = frozenset("*#$@!?-0123456789")  # Go's isShellSpecialVar: a one-character name


@dataclass(frozen=True)
class BuildEnv:
    """What Argo CD's repo server knows of the app when it renders one source.

    Callers give what the source does not say (the project, the source's resolved revision: a commit
    SHA, or a chart's version, and the destination's version and API versions); `render.render` fills the
    rest from its arguments (`complete`).
    """

    project: str = ""
    revision: str = ""
    app_name: str = ""
    namespace: str = ""
    repo_url: str = ""
    path: str = ""
    target_revision: str = ""
    # the destination cluster as Argo CD's controller hands it to the repo server (`KubeVersion`,
    # `ApiVersions` of the manifest request): helm's `.Capabilities`; never substituted into fields
    kube_version: str = ""  # the server's gitVersion ("" where no cluster may be asked: a fork's preview)
    api_versions: tuple[str, ...] = ()  # `group/version` and `group/version/Kind` it serves, sorted
    kustomize_helm: bool = False  # argocd-cm's kustomize.buildOptions has --enable-helm (`helmCharts`)

    def complete(self, *, app_name: str, namespace: str, repo_url: str, path: str,
                 target_revision: str) -> BuildEnv:
        """This environment with the app's name and destination namespace and the source's fields set."""
        return replace(self, app_name=app_name, namespace=namespace, repo_url=repo_url, path=path,
                       target_revision=target_revision)

    def variables(self) -> dict[str, str]:
        """The names and values of Argo CD's `newEnv`, in its order."""
        return {
            "ARGOCD_APP_NAME": self.app_name,
            "ARGOCD_APP_NAMESPACE": self.namespace,
            "ARGOCD_APP_PROJECT_NAME": self.project,
            "ARGOCD_APP_REVISION": self.revision,
            "ARGOCD_APP_REVISION_SHORT": self.revision[:7],
            "ARGOCD_APP_REVISION_SHORT_8": self.revision[:8],
            "ARGOCD_APP_SOURCE_REPO_URL": self.repo_url,
            "ARGOCD_APP_SOURCE_PATH": self.path,
            "ARGOCD_APP_SOURCE_TARGET_REVISION": self.target_revision,
        }

    def subst(self, text: str) -> str:
        """`text` with this environment substituted (see `substitute`)."""
        return substitute(text, self.variables())

    def digest(self) -> str:
        """A short stable hash of every value, for cache keys: a render depends on all of them."""
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


def substitute(text: str, env: Mapping[str, str]) -> str:
    """`text` with `$NAME` and `${NAME}` replaced from `env`, exactly as Argo CD's `Env.Envsubst`.

    That is Go's `os.Expand` with a mapping that returns `$` for the name `$` (so `$$` is an escaped
    dollar) and `env[name]`, or "" for a name not in `env`. From `os.Expand`: a name is a run of ASCII
    letters, digits and `_`, or one special character (`*#$@!?-` or a digit); `${...}` takes everything
    up to the next `}`; a `$` followed by nothing nameable (`$ `, `$/`, a final `$`) is kept; `${}` and an
    unclosed `${` are dropped (bad syntax), the text after them kept.
    """
    if "$" not in text:
        return text
    out: list[str] = []
    start = 0
    index = 0
    while index < len(text):
        if text[index] == "$" and index + 1 < len(text):
            out.append(text[start:index])
            name, width = _shell_name(text, index + 1)
            if name:
                out.append("$" if name == "$" else env.get(name, ""))
            elif width == 0:
                out.append("$")  # valid syntax, no name: the dollar stays
            index += width
            start = index + 1
        index += 1
    out.append(text[start:])
    return "".join(out)


def _shell_name(text: str, at: int) -> tuple[str, int]:
    """Go's `getShellName` on `text[at:]`: the name and how many characters it took (after the `$`)."""
    first = text[at]
    if first == "{":
        if len(text) - at > 2 and text[at + 1] in _SPECIAL and text[at + 2] == "}":
            return text[at + 1], 3
        close = text.find("}", at + 1)
        if close == at + 1:
            return "", 2  # `${}`: bad syntax, eaten
        if close < 0:
            return "", 1  # `${` never closed: bad syntax, the `{` eaten
        return text[at + 1:close], close - at + 1
    if first in _SPECIAL:
        return first, 1
    end = at
    while end < len(text) and (text[end] == "_" or (text[end].isascii() and text[end].isalnum())):
        end += 1
    return text[at:end], end - at
