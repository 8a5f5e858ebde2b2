"""Write-back: what the new images look like in the app's files, and the commit that pushes them.

Targets (argocd-image-updater's): `.argocd-source-<app>.yaml` in the app path (kustomize images or helm
parameters, merged with what the file has), the kustomization's `images:` (`kustomize edit set image`),
or a helm values file (the keys the `helm.image-*` annotations name). The edits are pure functions of
the old file text. `push` makes one commit over the branch head in memory with dulwich and pushes it
with the repository's credentials; the server refuses a push whose old head moved, and then the edit is
made again on the new head (up to a few times). Nothing is ever forced.
"""

from __future__ import annotations

import copy
import functools
import posixpath
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml

from tidecd import source as git
from tidecd.base import limits
from tidecd.base.errors import ConfigError, PermanentError, SourceUnavailable, TemporaryError, UnsafePathError
from tidecd.config.load import redact_repo_url
from tidecd.images.state import ImageValue
from tidecd.render.overrides import kustomize_image_name

if TYPE_CHECKING:
    from collections.abc import Iterator

    from dulwich.objects import Tree
    from dulwich.pack import UnpackedObject
    from dulwich.repo import MemoryRepo

PUSH_ATTEMPTS = 4
KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")


class PushRejected(TemporaryError):
    """The branch moved while we committed (or the server refused the update): fetch again and retry."""


class PushDeclined(PermanentError):
    """The server's hook declined the update (a protected branch): trying again would not help; a caller may
    push to another branch and open a pull request instead."""


_DECLINED = ("declined", "protected branch")  # git's "pre-receive hook declined", GitHub's "protected branch hook"


@dataclass(frozen=True)
class Author:
    name: str = "tidecd-image-updater"
    email: str = "noreply@tidecd.invalid"

    def identity(self) -> bytes:
        return f"{self.name} <{self.email}>".encode()


# --- file edits ------------------------------------------------------------------------------------------


def _load(text: str | None, where: str) -> dict[str, Any]:
    if not text:
        return {}
    try:
        data = limits.load_yaml(text, where)  # a file in the repository: read within the limits
    except yaml.YAMLError:
        raise ConfigError(f"{where}: not valid YAML; cannot write the new images into it") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping")
    return data


def _dump(data: dict[str, Any]) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def edit_source_file(text: str | None, values: list[ImageValue], tool: str, where: str) -> str:
    """`.argocd-source-<app>.yaml`: kustomize.images or helm.parameters, entries replaced by name."""
    data = _load(text, where)
    if tool == "Kustomize":
        kustomize = data.setdefault("kustomize", {})
        names = {kustomize_image_name(v.kustomize_image()) for v in values}
        kept = [i for i in kustomize.get("images") or [] if kustomize_image_name(str(i)) not in names]
        kustomize["images"] = kept + [v.kustomize_image() for v in values]
    elif tool == "Helm":
        helm = data.setdefault("helm", {})
        params = [p for v in values for p in v.helm_parameters()]
        names = {p.name for p in params}
        kept = [p for p in helm.get("parameters") or [] if not isinstance(p, dict) or p.get("name") not in names]
        helm["parameters"] = kept + [{"name": p.name, "value": p.value, "forcestring": True} for p in params]
    else:
        raise ConfigError(f"{where}: only kustomize and helm apps can take image updates; this app is a plain "
                          "directory of manifests")
    return _dump(data)


def edit_kustomization(text: str | None, values: list[ImageValue], where: str) -> str:
    """The kustomization's `images:` as `kustomize edit set image` leaves it."""
    if text is None:
        raise ConfigError(f"{where}: no kustomization file to write the images into")
    data = _load(text, where)
    images = [dict(i) for i in data.get("images") or [] if isinstance(i, dict)]
    for value in values:
        name = value.kustomize_name or value.image
        entry = next((i for i in images if i.get("name") == name), None)
        if entry is None:
            entry = {"name": name}
            images.append(entry)
        if value.image != name:
            entry["newName"] = value.image
        else:
            entry.pop("newName", None)
        if value.digest:
            entry["digest"] = value.digest
            entry.pop("newTag", None)
        else:
            entry["newTag"] = value.tag
            entry.pop("digest", None)
    data["images"] = images
    return _dump(data)


def edit_helm_values(text: str | None, values: list[ImageValue], where: str) -> str:
    """The helm values file with the image name/tag (or spec) at the annotated dotted keys."""
    data = _load(text, where)
    for value in values:
        for param in value.helm_parameters():
            _set_dotted(data, param.name, param.value, where)
    return _dump(data)


def _set_dotted(data: dict[str, Any], dotted: str, value: str, where: str) -> None:
    parts = dotted.split(".")
    node = data
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{where}: {dotted}: {part} is not a mapping")
        node = child
    node[parts[-1]] = value


def repo_path(app_path: str, target: str) -> str:
    """A path in the repository: absolute (`/x`) from its root, else relative to the app path."""
    joined = target[1:] if target.startswith("/") else posixpath.join(app_path or ".", target)
    normal = posixpath.normpath(joined)
    if normal == "..":
        raise UnsafePathError(f"write-back target {target!r} leaves the repository")
    if normal.startswith("../") or normal.startswith("/"):
        raise UnsafePathError(f"write-back target {target!r} leaves the repository")
    return "" if normal == "." else normal


# --- the commit ------------------------------------------------------------------------------------------


Edit = Callable[[Callable[[str], "str | None"]], Mapping[str, "str | None"]]
"""Given a reader (repo path → text or None), the files to write (path → new text, None to remove the
file); {} for no change."""


def push(repo_url: str, creds: git.RepoCredentials | None, *, base: str, target: str, edit: Edit,
         message: str, author: Author, attempts: int = PUSH_ATTEMPTS,
         sleep: Callable[[float], None] = time.sleep) -> str:
    """Commit the edit on `target` (created from `base` when missing) and push; '' when nothing changed.

    Returns the new commit's sha. A lost race (the branch moved) is retried on the new head.
    """
    def entries(repo: MemoryRepo, commit: Any) -> dict[str, Entry]:
        files = edit(functools.partial(_read_file, repo, commit.tree))
        return {path: None if text is None else _blob(repo, text) for path, text in files.items()}

    return push_entries(repo_url, creds, base=base, target=target, entries=entries, message=message,
                        author=author, attempts=attempts, sleep=sleep)


Entry = tuple[int, bytes] | None
"""A path's new tree entry: (mode, object id) of a blob or a tree, or None to remove it."""


def push_entries(repo_url: str, creds: git.RepoCredentials | None, *, base: str, target: str,
                 entries: Callable[[MemoryRepo, Any], dict[str, Entry]], message: str, author: Author,
                 attempts: int = PUSH_ATTEMPTS, sleep: Callable[[float], None] = time.sleep) -> str:
    """`push` for any change of the tree: `entries(repo, head commit)` names each path's new entry (objects
    it adds to `repo`); '' when the tree stays as it is. The same race rule: redone on the new head."""
    last: Exception | None = None
    for attempt in range(attempts):
        refs = git.ls_remote(repo_url, creds)
        target_ref, base_ref = f"refs/heads/{target}", f"refs/heads/{base}"
        head = refs.get(target_ref) or refs.get(base_ref)
        if head is None:
            raise ConfigError(f"branch {base!r} not found in {redact_repo_url(repo_url)}")
        old = refs.get(target_ref)
        repo, commit = git.fetch_commit(repo_url, head, creds)
        changes = entries(repo, commit)
        new_sha = _commit(repo, commit, changes, message, author) if changes else b""
        if not new_sha:
            return ""
        try:
            _send(repo_url, creds, repo, target_ref, old, new_sha, head)
            return new_sha.decode()
        except PushRejected as exc:
            last = exc
            sleep(0.2 * (attempt + 1))
    raise SourceUnavailable(f"push to {redact_repo_url(repo_url)} lost the race {attempts} times: {last}",
                            delay=30.0)


def tree_entry(repo: Any, tree_id: bytes, path: str) -> tuple[int, bytes] | None:
    """(mode, object id) at `path` under the tree `tree_id` ("" is the tree itself); None when absent."""
    # lazy: cold start (dulwich only when a repository is fetched or written)
    from dulwich.objects import ObjectID, Tree

    mode, node_id = 0o040000, tree_id
    for part in [p for p in path.split("/") if p]:
        node = repo.object_store[ObjectID(node_id)]
        if not isinstance(node, Tree):
            return None
        try:
            mode, node_id = node[part.encode()]
        except KeyError:
            return None
    return int(mode), bytes(node_id)


def _blob(repo: MemoryRepo, text: str) -> tuple[int, bytes]:
    # lazy: cold start (dulwich only when a repository is fetched or written)
    from dulwich.objects import Blob

    blob = Blob.from_string(text.encode())
    repo.object_store.add_object(blob)
    return 0o100644, bytes(blob.id)


def _read_file(repo: MemoryRepo, tree_id: bytes, path: str) -> str | None:
    # lazy: cold start (dulwich only when a repository is fetched or written)
    from dulwich.objects import Blob, ObjectID, Tree

    node: Any = repo.object_store[ObjectID(tree_id)]
    for part in path.split("/"):
        if not isinstance(node, Tree):
            return None
        try:
            _mode, sha = node[part.encode()]
        except KeyError:
            return None
        node = repo.object_store[sha]
    if not isinstance(node, Blob):
        return None
    try:
        return bytes(node.data).decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None


def _commit(repo: MemoryRepo, parent: Any, changes: dict[str, Entry], message: str, author: Author) -> bytes:
    """A commit over `parent` with each path set to its entry (or removed); b"" when the tree is unchanged."""
    # lazy: cold start (dulwich only when a repository is fetched or written)
    from dulwich.objects import Commit, Tree

    tree = copy.deepcopy(repo.object_store[parent.tree])
    assert isinstance(tree, Tree)
    for path, entry in sorted(changes.items()):
        tree = _put(repo, tree, path.split("/"), entry)
    if tree.id == parent.tree:
        return b""
    commit = Commit()
    commit.tree = tree.id
    commit.parents = [parent.id]
    commit.author = commit.committer = author.identity()
    commit.author_time = commit.commit_time = int(time.time())
    commit.author_timezone = commit.commit_timezone = 0
    commit.encoding = b"UTF-8"
    commit.message = message.encode()
    repo.object_store.add_object(commit)
    return bytes(commit.id)


def _put(repo: MemoryRepo, tree: Tree, parts: list[str], entry: Entry) -> Tree:
    """A copy of `tree` with `entry` at `parts` (None: removed), creating folders; stores every new tree.
    A folder left empty by a removal is removed too (git has no empty trees)."""
    # lazy: cold start (dulwich only when a repository is fetched or written)
    from dulwich.objects import ObjectID, Tree

    name = parts[0].encode()
    if len(parts) == 1:
        if entry is None:
            if name in tree:
                del tree[name]
        else:
            tree.add(name, entry[0], ObjectID(entry[1]))
    else:
        try:
            _mode, sub_id = tree[name]
            sub = repo.object_store[sub_id]
            child = copy.deepcopy(sub) if isinstance(sub, Tree) else Tree()
        except KeyError:
            if entry is None:
                return tree
            child = Tree()
        child = _put(repo, child, parts[1:], entry)
        if len(child):
            tree.add(name, 0o040000, child.id)
        elif name in tree:
            del tree[name]
    repo.object_store.add_object(tree)
    return tree


def _send(repo_url: str, creds: git.RepoCredentials | None, repo: MemoryRepo, ref: str, old: str | None,
          new_sha: bytes, parent: str) -> None:
    # lazy: cold start (dulwich only when a repository is fetched or written)
    from dulwich.objects import ObjectID
    from dulwich.refs import Ref

    ref_b = Ref(ref.encode())
    expected = old.encode() if old else None

    def update_refs(remote: dict[Ref, ObjectID]) -> dict[Ref, ObjectID]:
        if remote.get(ref_b) != expected:
            raise PushRejected(f"{ref} moved")
        return {**remote, ref_b: ObjectID(new_sha)}

    def pack(have: Any, want: Any, *, ofs_delta: bool = True,
             progress: Any = None) -> tuple[int, Iterator[UnpackedObject]]:
        base = ObjectID(parent.encode())  # fetched with depth 1: nothing behind it is here, nor needed
        return repo.object_store.generate_pack_data([base], want, shallow={base}, ofs_delta=ofs_delta,
                                                    progress=progress)

    with git.git_client(repo_url, creds) as (client, path):
        try:
            result = client.send_pack(path.encode(), update_refs, pack)
        except PushRejected:
            raise
        except git.transport_errors() as exc:
            if "non-fast-forward" in str(exc) or "fetch first" in str(exc) or "stale info" in str(exc):
                raise PushRejected(str(exc)[:200]) from None
            raise git.unavailable_error(repo_url, exc, creds) from exc
    status = (result.ref_status or {}).get(ref_b)
    if status and any(word in str(status).lower() for word in _DECLINED):
        raise PushDeclined(f"{redact_repo_url(repo_url)} declined the push to {ref}: {str(status)[:200]}")
    if status:
        raise PushRejected(f"{ref}: {status}")
