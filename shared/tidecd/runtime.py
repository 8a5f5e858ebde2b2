"""The running installation: its settings (environment variables) and the clients built from them.

One `Runtime` per function call (or CLI run). Sealed credentials are opened here, in memory, and never
written anywhere.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from tidecd.base import constants
from tidecd.base.errors import ConfigError, NotFound, TemporaryError, TidecdError
from tidecd.base.paths import inside
from tidecd.clients.clustersecrets import find_cluster_secret
from tidecd.clients.secrets import load_private_keys, text_fields, unseal
from tidecd.clients.store import ObjectStore, open_store
from tidecd.config import cache as config_cache
from tidecd.config import teams
from tidecd.config.load import (
    Application,
    Config,
    ConfigSourceRef,
    Destination,
    TeamSource,
    load_config,
    parse_config_source,
    redact_repo_url,
)
from tidecd.generated import records as generated

if TYPE_CHECKING:
    from tidecd.clients.cluster import KubeCluster
    from tidecd.source.gitremote import RepoCredentials

log = structlog.get_logger("tidecd.runtime")
IN_CLUSTER_SERVER = "https://kubernetes.default.svc"


@dataclass
class Settings:
    """DESIGN.md section 8; docs/configuration.md and docs/security.md list each variable with its default."""

    config: str = "./examples/config"
    store: str = "./.tidecd"
    webhook_secret: str = ""
    api_token: str = ""
    api_readonly_token: str = ""  # the dashboard's read-only role: sees everything, acts on nothing
    sealing_keys: str = ""
    refresh_topic: str = ""
    kubeconfig: str = ""
    # the image updater: committer of git write-backs, registries spoken to over plain http (host[:port])
    git_commit_user: str = "tidecd-image-updater"
    git_commit_email: str = "noreply@tidecd.invalid"
    plain_http_registries: str = ""
    public_url: str = ""  # the dashboard's public base URL (links in GitHub statuses and notifications)
    github_api_url: str = ""  # GitHub's API base URL; empty: https://api.github.com (or the github Secret's url)
    step_budget: float = 10.0  # seconds one reconcile step may work before it schedules its continuation
    poll_jitter: float = 10.0  # the poll tick starts after a random 0..this many seconds (0: at once)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ if env is None else env)
        return cls(
            config=env.get("TIDECD_CONFIG", cls.config),
            store=env.get("TIDECD_STORE", cls.store),
            webhook_secret=env.get("TIDECD_WEBHOOK_SECRET", ""),
            api_token=env.get("TIDECD_API_TOKEN", ""),
            api_readonly_token=env.get("TIDECD_API_READONLY_TOKEN", ""),
            sealing_keys=env.get("TIDECD_SEALING_KEYS", ""),
            refresh_topic=env.get("TIDECD_REFRESH_TOPIC", ""),
            kubeconfig=env.get("KUBECONFIG", ""),
            git_commit_user=env.get("TIDECD_GIT_COMMIT_USER", cls.git_commit_user),
            git_commit_email=env.get("TIDECD_GIT_COMMIT_EMAIL", cls.git_commit_email),
            plain_http_registries=env.get("TIDECD_PLAIN_HTTP_REGISTRIES", ""),
            public_url=env.get("TIDECD_PUBLIC_URL", ""),
            github_api_url=env.get("TIDECD_GITHUB_API_URL", ""),
            step_budget=_seconds(env, "TIDECD_STEP_BUDGET", cls.step_budget),
            poll_jitter=_seconds(env, "TIDECD_POLL_JITTER", cls.poll_jitter, allow_zero=True),
        )

    def __repr__(self) -> str:  # never print the secrets
        return f"Settings(config={self.config!r}, store={self.store!r}, refresh_topic={self.refresh_topic!r})"


# A warm function instance serves many calls: a config directory whose files did not change (same names,
# same bytes) is not parsed again. Hashing is ~100x cheaper than parsing: 1,000 Applications take
# 0.3-1 s to load on two cores, their sha256 a few ms.
_DIRECTORY_CONFIGS: dict[str, tuple[str, Config]] = {}
# The same for a git config source, by its cache key (`tidecd.config.cache.key`: the commit): a warm call
# at an unchanged commit pays its ls-remote only, not even the store read. A few sources, a few commits.
_GIT_CONFIGS: dict[str, Config] = {}
GIT_CONFIGS_KEPT = 8


def cached_config_directories() -> list[str]:
    """The config directories whose parsed config this process keeps (tests, the bench)."""
    return sorted(_DIRECTORY_CONFIGS)


def forget_config_directories() -> None:
    """Parse every config directory again on its next load, and read every git config source's from the
    store again (the bench measures a cold parse)."""
    _DIRECTORY_CONFIGS.clear()
    _GIT_CONFIGS.clear()


RACY_SECONDS = 2.0  # a file modified this recently is fingerprinted by content, not by its stat alone


def fingerprint(directory: Path, *, now: float | None = None) -> str:
    """What changes when any file of the directory changes: each path's size, mtime and inode, as git's
    index does, and the content hash of files modified in the last RACY_SECONDS (a rewrite within the
    file system's timestamp granularity keeps the mtime). Reading and hashing 1,000 Application files
    was a tenth of every reconcile step's time in the 1,000-app scenario; their stat is ~20x cheaper, and
    one `scandir` entry's stat (its type comes with the listing) a third of `islink` + `stat` + `isfile`."""
    parts: list[str] = []  # hashed once at the end: one update per entry cost more than the stat
    racy: list[bytes] = []
    racy_after = (time.time() if now is None else now) - RACY_SECONDS
    folders = [str(directory)]
    while folders:
        folder = folders.pop()
        try:
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError:  # gone, or unreadable: as os.walk, skipped
            continue
        below = []
        for entry in entries:
            if entry.is_symlink():
                parts.append(f"{entry.path}\0link:{os.readlink(entry.path)}")
            elif entry.is_dir(follow_symlinks=False):
                parts.append(f"{entry.path}\0dir")
                below.append(entry.path)
            elif entry.is_file(follow_symlinks=False):
                try:
                    stat = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                parts.append(f"{entry.path}\0{stat.st_size}:{stat.st_mtime_ns}:{stat.st_ino}")
                if stat.st_mtime >= racy_after:
                    with open(entry.path, "rb") as f:
                        racy.append(entry.path.encode() + b"\0" + hashlib.sha256(f.read()).digest())
            else:
                parts.append(f"{entry.path}\0other")
        folders.extend(reversed(below))  # depth first, in name order, as os.walk goes
    digest = hashlib.sha256("\n".join(parts).encode("utf-8", "surrogateescape"))
    for line in racy:
        digest.update(line)
    return digest.hexdigest()


def config_head_key(ref: ConfigSourceRef) -> str:
    """A git config source's repository and ref, as `Runtime.config_heads` names it (no credentials)."""
    return f"{redact_repo_url(ref.repo_url)}#{ref.ref}"


def _directory_config(directory: Path, team: str = "") -> Config:
    stamp = fingerprint(directory)
    key = f"{directory} (team {team})" if team else str(directory)
    cached = _DIRECTORY_CONFIGS.get(key)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    config = load_config(directory, strict=False, team=team)
    _DIRECTORY_CONFIGS[key] = (stamp, config)
    return config


def _keep_warm(cache_key: str, config: Config) -> None:
    _GIT_CONFIGS.pop(cache_key, None)
    _GIT_CONFIGS[cache_key] = config
    while len(_GIT_CONFIGS) > GIT_CONFIGS_KEPT:
        del _GIT_CONFIGS[next(iter(_GIT_CONFIGS))]


def _seconds(env: dict[str, str], name: str, default: float, *, allow_zero: bool = False) -> float:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    low_ok = value >= 0 if allow_zero else value > 0
    if not low_ok or value > 600:
        raise ConfigError(f"{name}={text!r}: expected a number of seconds between 0 and 600")
    return value


@dataclass
class Runtime:
    settings: Settings
    store: ObjectStore
    _config: Config | None = None
    _clusters: dict[str, KubeCluster] = field(default_factory=dict)
    _secrets: list[dict[str, Any]] | None = None
    _argocd_secret: Mapping[str, str] | None = None
    # the step's source seam (`tidecd.step.desired.Render`): a test passes its fake source here; None
    # renders from the app's real sources
    render: Callable[..., tuple[str, list[dict[str, Any]]]] | None = None
    # the commit of each git config source (`config_head_key`): resolved by this runtime's config load, or
    # handed in by the poll's refresh moments after its own ls-remote (`triggers.dispatch.Refresh.config`)
    config_heads: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, settings: Settings, store: ObjectStore, *, config: Config | None = None,
           clusters: Mapping[str, KubeCluster] | None = None, secrets: list[dict[str, Any]] | None = None,
           render: Callable[..., tuple[str, list[dict[str, Any]]]] | None = None) -> Runtime:
        """A runtime over given parts: a fixed config, clusters by destination name or server, the plain
        (already unsealed) cluster and repository Secrets, a source (`render`). Tests pass their fakes here
        instead of patching the runtime."""
        return cls(settings=settings, store=store, _config=config, _clusters=dict(clusters or {}),
                   _secrets=secrets, render=render)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Runtime:
        settings = Settings.from_env(env)
        return cls(settings=settings, store=open_store(settings.store))

    # -- configuration --------------------------------------------------------------------------------

    def config(self) -> Config:
        """The config source's apps and projects, joined by the apps generated from them (ApplicationSets,
        apps of apps: `tidecd.generated.records`), which are read from the object store."""
        if self._config is None:
            base = self._load_config()
            problems: list[str] = []
            records = generated.safe_load_records(self.store, problems)
            config = generated.merge(base, records) if records else base
            if problems:
                config = dataclasses.replace(config, problems=[*config.problems, *problems])
            self._config = config
        return self._config

    def with_config(self, config: Config) -> Runtime:
        """This installation under another config (the config source at a pull request's head, planned by
        `tidecd.usecases.plan`): the same settings, store, cluster connections, opened Secrets and source."""
        return Runtime(settings=self.settings, store=self.store, _config=config, _clusters=self._clusters,
                       _secrets=self.secrets(), render=self.render)

    def forget_config(self) -> None:
        """Read the config again at the next `config()` (after generated apps changed)."""
        self._config = None

    def _load_config(self) -> Config:
        source = parse_config_source(self.settings.config)
        config = _directory_config(source) if isinstance(source, Path) else self._load_config_from_git(source)
        for team in config.team_sources:
            config = self._join_team(config, team)
        return config

    def _join_team(self, config: Config, team: TeamSource) -> Config:
        """The main config joined by one team's config source (`tidecd.config.teams`); a team source that
        cannot be read is a problem of its own, and every other source keeps working."""
        try:
            source = parse_config_source(team.spec, what=f"team config source {team.name!r}")
            loaded = (_directory_config(source, team.name) if isinstance(source, Path)
                      else self._load_config_from_git(source, team.name))
        except (TidecdError, OSError) as exc:
            return teams.unavailable(config, team, str(exc))
        return teams.join(config, team, loaded)

    def _load_config_from_git(self, ref: ConfigSourceRef, team: str = "") -> Config:
        from tidecd import source as git  # lazy: cold start (git sources only for a config source in git)
        from tidecd.source import checkouts  # lazy: cold start (as above)

        creds = git.credentials_for(ref.repo_url, self.plain_secrets_unsealed_later())
        sha = self.config_heads.get(config_head_key(ref), "")
        if not sha:  # handed in: a step of the poll's fan-out needs no ls-remote of its own
            sha = git.resolve_revision(git.ls_remote(ref.repo_url, creds), ref.ref, ref.repo_url)
            self.config_heads[config_head_key(ref)] = sha
        cache_key = config_cache.key(ref.repo_url, sha, ref.path, str(ref), team)
        cached = self._cached_config(cache_key)
        if cached is not None:
            return cached
        with checkouts.tree(self.store, ref.repo_url, sha, creds) as root:  # read-only, kept while warm
            what = f"team config source {team!r} path" if team else "TIDECD_CONFIG path"
            config = load_config(inside(root, ref.path or ".", what=what), display=str(ref), strict=False, team=team)
        _keep_warm(cache_key, config)
        blob = config_cache.encode(config)
        if blob is None:
            log.info("config not cached: a value does not round-trip through JSON", source=str(ref), commit=sha)
        else:
            try:
                self.store.write(cache_key, blob)
            except TemporaryError as exc:  # the next cold start loads in full again; this one has its config
                log.warning("config cache not written", key=cache_key, error=str(exc)[:300])
        return config

    def _cached_config(self, cache_key: str) -> Config | None:
        """The config loaded at this commit before (`tidecd.config.cache`): one store read instead of a
        checkout and every file validated. An object that does not decode is only logged: the full load
        follows and writes it again."""
        if (warm := _GIT_CONFIGS.get(cache_key)) is not None:
            return warm
        blob = self.store.read(cache_key)
        if blob is None:
            return None
        try:
            config = config_cache.decode(blob.data)
        except config_cache.CacheFormatError as exc:
            log.warning("config cache unreadable: loading the config source in full", key=cache_key,
                        error=str(exc)[:300])
            return None
        _keep_warm(cache_key, config)
        return config

    def plain_secrets_unsealed_later(self) -> list[dict[str, Any]]:
        """Repository credentials for the config repo itself can only come from the environment."""
        return []

    def app(self, name: str) -> Application:
        config = self.config()
        apps = config.applications
        if name in config.invalid:
            raise ConfigError(config.invalid[name])
        if name not in apps:
            raise NotFound(f"application {name!r} not found in the config source {self.settings.config}")
        return apps[name]

    # -- credentials ----------------------------------------------------------------------------------

    def private_keys(self) -> list[bytes]:
        if not self.settings.sealing_keys:
            return []
        return load_private_keys(self.settings.sealing_keys)

    def secrets(self) -> list[dict[str, Any]]:
        """The config source's cluster and repository Secrets, unsealed in memory."""
        if self._secrets is None:
            keys: list[bytes] | None = None
            opened = []
            for obj in self.config().secrets:
                if obj.get("kind") == "SealedSecret":
                    keys = keys if keys is not None else self.private_keys()
                    if not keys:
                        raise ConfigError("the config source holds SealedSecrets but no sealing key is "
                                          "configured (TIDECD_SEALING_KEYS)")
                    opened.append(unseal(obj, keys))
                else:
                    opened.append(obj)
            self._secrets = opened
        return self._secrets

    def argocd_secret(self) -> Mapping[str, str]:
        """The values of the config source's SealedSecret `argocd-secret` (password hashes, the OIDC client
        secret, `server.secretkey`), opened in memory; empty when there is none."""
        if self._argocd_secret is None:
            sso = self.config().argo_settings.sso
            opened: Mapping[str, str] = {}
            if sso.sealed_secret is not None:
                keys = self.private_keys()
                if not keys:
                    raise ConfigError(f"{sso.secret_origin}: SealedSecret/argocd-secret cannot be opened: no "
                                      "sealing key is configured (TIDECD_SEALING_KEYS)")
                opened = text_fields(unseal(dict(sso.sealed_secret), keys), f"{sso.secret_origin}: argocd-secret")
            self._argocd_secret = opened
        return self._argocd_secret

    def notifications_secret(self) -> Mapping[str, str]:
        """The values of the config source's SealedSecret `argocd-notifications-secret` (the services'
        tokens, webhook URLs and keys), opened in memory; empty when there is none."""
        notifications = self.config().argo_settings.notifications
        if notifications.sealed_secret is None:
            return {}
        keys = self.private_keys()
        if not keys:
            raise ConfigError(f"{notifications.secret_origin}: SealedSecret/argocd-notifications-secret cannot be "
                              "opened: no sealing key is configured (TIDECD_SEALING_KEYS)")
        return text_fields(unseal(dict(notifications.sealed_secret), keys),
                           f"{notifications.secret_origin}: argocd-notifications-secret")

    def repo_credentials(self, repo_url: str) -> RepoCredentials | None:
        from tidecd import source as git  # lazy: cold start (git sources only when a repository is reached)

        return git.credentials_for(repo_url, self.secrets())

    # -- clusters -------------------------------------------------------------------------------------

    def cluster(self, destination: Destination) -> KubeCluster:
        ident = destination.name or destination.server
        if ident not in self._clusters:
            self._clusters[ident] = self._connect(destination)
        return self._clusters[ident]

    def destination_server(self, destination: Destination) -> str:
        """The destination's API server URL as Argo CD names it (what sync impersonation matches): the
        app's `server`, else its cluster secret's, else the in-cluster URL."""
        if destination.server:
            return destination.server
        found = find_cluster_secret(self.secrets(), name=destination.name, server="")
        if found is None:
            return IN_CLUSTER_SERVER
        return text_fields(found, f"cluster secret {(found.get('metadata') or {}).get('name', '?')}").get("server", "")

    def _connect(self, destination: Destination) -> KubeCluster:
        # lazy: cold start (the cluster client and its metrics only for a call that reaches a cluster)
        from tidecd.clients.cluster import KubeCluster, client_for_secret

        found = find_cluster_secret(self.secrets(), name=destination.name, server=destination.server)
        if found is not None:
            return KubeCluster(client_for_secret(found), name=destination.name or destination.server)
        if destination.name in ("in-cluster", "") and destination.server in ("", IN_CLUSTER_SERVER):
            return KubeCluster.from_kubeconfig(self.settings.kubeconfig or None)
        what = f"name {destination.name!r}" if destination.name else f"server {destination.server!r}"
        raise ConfigError(f"destination cluster with {what} is not known: add a cluster secret labelled "
                          f"{constants.LABEL_SECRET_TYPE}={constants.SECRET_TYPE_CLUSTER} to the config source")
