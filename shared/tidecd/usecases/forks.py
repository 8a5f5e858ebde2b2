"""Untrusted pull requests: whether a pull request is previewed, and how (pure: no I/O).

A pull request whose head repository is its base repository was pushed by someone with write access: it
gets the full preview (rendered with the installation's credentials, compared with the live cluster by
server-side dry-run). A pull request from a fork (its head repository differs, or was deleted: `head.repo`
is null) was written by anyone: GitHub's rules for untrusted pull requests give it no secret and no access
to what the secrets guard until a maintainer asks. So a fork's pull request is previewed only when a
maintainer asks, as the usual CI bots do (Prow's `ok-to-test`):

- the label (`TIDECD_PREVIEW_LABEL`, default `tidecd:preview`) on the pull request: GitHub lets only people
  with triage or write access label it. While it stays on, every push is previewed; removing it stops that.
- the comment command (`TIDECD_PREVIEW_COMMAND`, default `/tidecd preview`) on its own line, by a commenter
  whose `author_association` is OWNER, MEMBER or COLLABORATOR: it previews the head of that moment once
  (`/tidecd preview <sha>` insists on that head: a push that raced the comment is not previewed).

Until then it gets one neutral comment saying who may ask (no commit status, no render). Approved, it is
previewed *without credentials*: rendered with no repository, registry or sealing key, compared with the
rendered manifests of the base's last rendered revision, never with the cluster (`preview.preview_fork`).
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tidecd.base.errors import ConfigError

DEFAULT_LABEL = "tidecd:preview"
DEFAULT_COMMAND = "/tidecd preview"
TRUSTED_ASSOCIATIONS = frozenset({"OWNER", "MEMBER", "COLLABORATOR"})
PREVIEW_ACTIONS = ("opened", "synchronize", "reopened")
LABEL_LIMIT = 50  # GitHub's longest label name
MAX_COMMENT_SCAN = 65_536  # GitHub's longest comment; a longer body is not read further
_SHA = re.compile(r"[0-9a-f]{7,40}")


class Mode(enum.StrEnum):
    FULL = "full"  # the base repository's own branch: credentials, live dry-run
    FORK = "fork"  # a fork a maintainer approved: no credential, no cluster, diffed against the base's render
    WAITING = "waiting"  # a fork nobody approved yet: a note, nothing rendered, no status
    IGNORED = "ignored"  # not a request for a preview


@dataclass(frozen=True)
class Policy:
    """How a maintainer asks: the label and the comment command."""

    label: str = DEFAULT_LABEL
    command: str = DEFAULT_COMMAND

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Policy:
        """`TIDECD_PREVIEW_LABEL` and `TIDECD_PREVIEW_COMMAND`, read at each call (as `TIDECD_INSTALLATION_ID`)."""
        source = os.environ if env is None else env
        return cls.of(source.get("TIDECD_PREVIEW_LABEL", ""), source.get("TIDECD_PREVIEW_COMMAND", ""))

    @classmethod
    def of(cls, label: str, command: str) -> Policy:
        """Checked values (TIDECD_PREVIEW_LABEL, TIDECD_PREVIEW_COMMAND); empty means the default."""
        label, command = label.strip() or DEFAULT_LABEL, " ".join(command.split()) or DEFAULT_COMMAND
        if len(label) > LABEL_LIMIT:
            raise ConfigError(f"TIDECD_PREVIEW_LABEL={label!r}: GitHub labels have at most {LABEL_LIMIT} characters")
        if not command.startswith("/") or len(command) > 100:
            raise ConfigError(f"TIDECD_PREVIEW_COMMAND={command!r}: expected a command starting with '/' "
                              "(at most 100 characters), such as /tidecd preview")
        return cls(label, command)


@dataclass(frozen=True)
class Ask:
    """What one delivery says, as far as trust goes."""

    event: str  # pull_request | issue_comment
    action: str
    fork: bool  # head repository is not the base repository (or is gone)
    labels: frozenset[str] = frozenset()  # on the pull request now
    label: str = ""  # the label a `labeled` action added
    body: str = ""  # the comment
    association: str = ""  # the commenter's author_association
    who: str = ""  # the commenter or sender (for the logs)
    open: bool = True  # the pull request is open


@dataclass(frozen=True)
class Decision:
    mode: Mode
    reason: str
    sha: str = ""  # a comment command that names the head it approves


def is_fork(pull_request: Mapping[str, Any]) -> bool:
    """A pull request from another repository than its base (`head.repo` null: the fork was deleted)."""
    def full_name(side: str) -> str:
        part = pull_request.get(side)
        repo = part.get("repo") if isinstance(part, Mapping) else None
        name = repo.get("full_name") if isinstance(repo, Mapping) else None
        return name.lower() if isinstance(name, str) else ""

    head, base = full_name("head"), full_name("base")
    return not head or not base or head != base


def labels_of(pull_request: Mapping[str, Any]) -> frozenset[str]:
    found = pull_request.get("labels")
    return frozenset(str(item["name"]) for item in found or () if isinstance(item, Mapping)
                     and isinstance(item.get("name"), str)) if isinstance(found, list) else frozenset()


def command_in(body: str, command: str) -> tuple[bool, str]:
    """Whether a line of `body` is the command (optionally followed by a sha), and that sha ("" when none).
    Case-insensitive like Prow's commands; the command must stand at the start of its line."""
    wanted = command.lower().split()
    for line in body[:MAX_COMMENT_SCAN].splitlines():
        words = line.strip().lower().split()
        if words[:len(wanted)] != wanted:
            continue
        rest = words[len(wanted):]
        if not rest:
            return True, ""
        if len(rest) == 1 and _SHA.fullmatch(rest[0]):
            return True, rest[0]
    return False, ""


def decide(ask: Ask, policy: Policy) -> Decision:
    """Whether and how the pull request of `ask` is previewed; the reason is for the logs and the answer."""
    if ask.event == "issue_comment":
        return _comment(ask, policy)
    if ask.event != "pull_request":
        return Decision(Mode.IGNORED, f"event {ask.event!r} asks for no preview")
    if not ask.open:
        return Decision(Mode.IGNORED, "the pull request is closed")
    if ask.action == "labeled":
        if ask.label != policy.label:
            return Decision(Mode.IGNORED, f"label {ask.label!r} is not {policy.label!r}")
        if not ask.fork:
            return Decision(Mode.IGNORED, "the pull request is not from a fork: it is previewed on every push")
        return Decision(Mode.FORK, f"a maintainer ({ask.who or 'someone with triage access'}) added the label "
                                   f"{policy.label!r}")
    if ask.action not in PREVIEW_ACTIONS:
        return Decision(Mode.IGNORED, f"pull_request action {ask.action!r} needs no preview")
    if not ask.fork:
        return Decision(Mode.FULL, "the head branch is in the base repository")
    if policy.label in ask.labels:
        return Decision(Mode.FORK, f"the label {policy.label!r} is on the pull request")
    return Decision(Mode.WAITING, f"the pull request comes from a fork: a maintainer must add the label "
                                  f"{policy.label!r} or comment {policy.command!r}")


def _comment(ask: Ask, policy: Policy) -> Decision:
    if ask.action != "created":
        return Decision(Mode.IGNORED, f"issue_comment action {ask.action!r} asks for no preview")
    found, sha = command_in(ask.body, policy.command)
    if not found:
        return Decision(Mode.IGNORED, f"the comment holds no {policy.command!r} line")
    if not ask.open:
        return Decision(Mode.IGNORED, f"{policy.command!r} on a closed pull request: nothing to preview")
    if ask.association not in TRUSTED_ASSOCIATIONS:
        return Decision(Mode.IGNORED, f"{policy.command!r} by {ask.who or 'someone'} "
                                      f"({ask.association or 'no association'}) refused: only "
                                      f"{', '.join(sorted(TRUSTED_ASSOCIATIONS))} may ask")
    mode = Mode.FORK if ask.fork else Mode.FULL
    return Decision(mode, f"{ask.who or 'a maintainer'} ({ask.association}) commented {policy.command!r}", sha)


# --- where a fork's objects go, without asking the cluster -----------------------------------------------

# Kubernetes' built-in cluster-scoped kinds (group, kind): a fork's preview may not ask the cluster's
# discovery, so these, the CRDs its own manifests declare and the kinds the app already has decide the scope.
CLUSTER_SCOPED = frozenset({
    ("", "Namespace"), ("", "Node"), ("", "PersistentVolume"), ("", "ComponentStatus"),
    ("rbac.authorization.k8s.io", "ClusterRole"), ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"), ("apiregistration.k8s.io", "APIService"),
    ("storage.k8s.io", "StorageClass"), ("storage.k8s.io", "CSIDriver"), ("storage.k8s.io", "CSINode"),
    ("storage.k8s.io", "VolumeAttachment"), ("storage.k8s.io", "VolumeAttributesClass"),
    ("scheduling.k8s.io", "PriorityClass"), ("node.k8s.io", "RuntimeClass"),
    ("networking.k8s.io", "IngressClass"), ("networking.k8s.io", "IPAddress"),
    ("networking.k8s.io", "ServiceCIDR"), ("certificates.k8s.io", "CertificateSigningRequest"),
    ("certificates.k8s.io", "ClusterTrustBundle"), ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"), ("resource.k8s.io", "DeviceClass"),
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"),
    ("admissionregistration.k8s.io", "MutatingAdmissionPolicy"),
    ("admissionregistration.k8s.io", "MutatingAdmissionPolicyBinding"),
})


@dataclass(frozen=True)
class StaticScopes:
    """`step.desired.Scopes` without a cluster: the kinds the app's recorded objects show (a key without a
    namespace is cluster-scoped), then Kubernetes' built-ins; any other kind is taken as namespaced."""

    known: Mapping[tuple[str, str], bool]

    @classmethod
    def of(cls, keys: Iterable[tuple[str, str, str]]) -> StaticScopes:
        """From the (group, kind, namespace) of objects the app already has."""
        return cls({(group, kind): bool(namespace) for group, kind, namespace in keys})

    def is_namespaced(self, group: str, kind: str) -> bool:
        if (group, kind) in self.known:
            return self.known[(group, kind)]
        return (group, kind) not in CLUSTER_SCOPED


def credential_free_url(repo_url: str) -> bool:
    """Whether a fork's preview may fetch `repo_url` without any credential: not over ssh (that would reach
    for whatever key the host holds), not from a local path, and with no credential in the URL itself."""
    url = repo_url.strip().lower()
    scheme, sep, rest = url.partition("://")
    if not sep:  # scp-like `git@host:path` is ssh; a bare OCI registry reference is fine
        return "@" not in url.split("/", 1)[0]
    if scheme not in ("https", "http", "oci", "git"):
        return False
    return "@" not in rest.split("/", 1)[0]
