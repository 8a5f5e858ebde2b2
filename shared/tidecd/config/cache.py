"""A loaded `Config` as one explicit, versioned JSON object, so a cold instance reads a config source in
one store read instead of re-reading and re-validating every file (issue 30: 1,000 Application files
cost 5.2 s of CPU per cold start).

Why not pickle: the object lives in the store, and a pickle runs code when read. This encoding is
driven by the dataclasses' own type hints, so every field of every value (apps, projects, argocd-cm
settings, ApplicationSets, the problems and invalid apps set aside at load) round-trips, and a field
added later is encoded without touching this module. `encode` refuses (returns None) any config whose
decoded form would not equal the original, so a cache hit always behaves as the full load did.

The key names the format version and a digest of this package's source (`code_digest`): a tidecd
upgrade that changes how files are validated, or how values are shaped, never reads an older result.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import types
import typing
import zlib
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from tidecd.base.errors import PermanentError
from tidecd.config.appset.model import ApplicationSet
from tidecd.config.model import Application, Config

FORMAT = 1
MAX_BYTES = 256 << 20  # inflated; 1,000 apps are about 1 MB of JSON: a bigger object is not a config of ours
PREFIX = "config-cache/"


class CacheFormatError(PermanentError):
    """The object does not decode into a Config (truncated, corrupted, or written by another format)."""


@cache
def code_digest() -> str:
    """The source of the config package (schema, load, model, ...): what a loaded Config follows from."""
    root = Path(__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def key(repo_url: str, commit: str, path: str, display: str, team: str) -> str:
    """The store key of one git config source's load at `commit` (a directory source has no commit and
    is not cached in the store: its files are read where they are, and `runtime` keeps it warm in memory)."""
    text = json.dumps([FORMAT, code_digest(), repo_url, commit, path, display, team])
    return f"{PREFIX}v{FORMAT}/{commit}-{hashlib.sha256(text.encode()).hexdigest()[:24]}.json.gz"


def encode(config: Config) -> bytes | None:
    """The gzipped JSON of `config`, or None when some value would not come back equal (e.g. a Secret
    holding a YAML timestamp): such a config is simply loaded in full each cold start."""
    try:
        data = {"format": FORMAT, "config": _encode(config, Config)}
        text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        return None
    blob = gzip.compress(text.encode(), compresslevel=5)
    try:
        if decode(blob) != config:
            return None
    except CacheFormatError:
        return None
    return blob


def decode(blob: bytes) -> Config:
    try:
        data = json.loads(_inflate(blob))
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise CacheFormatError(f"format {data.get('format') if isinstance(data, dict) else '?'!r}, "
                                   f"expected {FORMAT}")
        config = _decode(data["config"], Config)
    except CacheFormatError:
        raise
    except (OSError, EOFError, zlib.error, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise CacheFormatError(f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(config, Config):
        raise CacheFormatError("not a Config")
    return config


def encode_app(app: Application) -> Any:
    """One Application as JSON (the deletion of a written app keeps its last spec: `generated.records`)."""
    return _encode(app, Application)


def decode_app(data: Any) -> Application | None:
    """An Application `encode_app` wrote, or None when it does not decode (written by another version)."""
    try:
        app = _decode(data, Application)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return app if isinstance(app, Application) else None


def _inflate(blob: bytes) -> bytes:
    """The gzip member inflated, refused past MAX_BYTES (memory stays bounded whatever the object holds)."""
    inflater = zlib.decompressobj(wbits=31)
    data = inflater.decompress(blob, MAX_BYTES)
    if inflater.unconsumed_tail:
        raise CacheFormatError(f"inflates to more than {MAX_BYTES:,} bytes")
    if not inflater.eof:
        raise CacheFormatError("truncated")
    return data


def _hints(cls: type) -> dict[str, Any]:
    return _HINTS.get(cls) or _HINTS.setdefault(cls, typing.get_type_hints(cls))


_HINTS: dict[type, dict[str, Any]] = {}


def _optional(args: tuple[Any, ...]) -> Any:
    """The type of `X | None`; a union of several types is carried as raw JSON (checked by the round trip)."""
    inner = [a for a in args if a is not type(None)]
    return inner[0] if len(inner) == 1 else Any


def _encode(value: Any, hint: Any) -> Any:
    """`value` as JSON, shaped by `hint` (the field's type)."""
    if hint is Any:
        if isinstance(value, ApplicationSet):  # Config.appsets holds them under Any (config layering)
            return _encode(value, ApplicationSet)
        return value  # raw YAML data (Secrets, templates): JSON as is, checked by encode's round trip
    if dataclasses.is_dataclass(hint):
        return {f.name: _encode(getattr(value, f.name), _hints(hint)[f.name])  # type: ignore[arg-type]
                for f in dataclasses.fields(hint)}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return None if value is None else _encode(value, _optional(args))
    if origin in (dict, Mapping) or hint is dict:
        item = args[1] if args else Any
        return {str(k): _encode(v, item) for k, v in value.items()}
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return [_encode(v, args[0]) for v in value]
    if origin is tuple:
        return [_encode(v, a) for v, a in zip(value, args, strict=True)]
    if origin in (list, set, frozenset):
        items = [_encode(v, args[0] if args else Any) for v in value]
        return items if origin is list else sorted(items)
    return value


def _decode(data: Any, hint: Any) -> Any:
    return _decoder(hint)(data)


Decoder = Callable[[Any], Any]


def _same(data: Any) -> Any:
    return data


@cache
def _decoder(hint: Any) -> Decoder:
    """The decoding of one type, built once per type: a cold start decodes thousands of values of a few
    dozen types, so the type is looked at once, not once per value."""
    if hint is Any:
        appset_fields = frozenset(f.name for f in dataclasses.fields(ApplicationSet))
        return lambda data: (_decoder(ApplicationSet)(data)
                             if isinstance(data, dict) and data.keys() == appset_fields else data)
    if dataclasses.is_dataclass(hint):
        return _dataclass_decoder(hint)  # type: ignore[arg-type]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = _decoder(_optional(args))
        return lambda data: None if data is None else inner(data)
    if origin is Mapping:
        value = _decoder(args[1])
        return lambda data: types.MappingProxyType({k: value(v) for k, v in data.items()})
    if origin is dict or hint is dict:
        value = _decoder(args[1] if args else Any)
        return _same if value is _same else lambda data: {k: value(v) for k, v in data.items()}
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        item = _decoder(args[0])
        return lambda data: tuple(item(v) for v in data)
    if origin is tuple:
        items = [_decoder(a) for a in args]
        return lambda data: tuple(each(v) for each, v in zip(items, data, strict=True))
    if origin in (list, set, frozenset):
        item = _decoder(args[0] if args else Any)
        return lambda data: origin([item(v) for v in data])
    return _same  # str, int, float (an int written in a float field stays an int, as the loader left it), bool


def _dataclass_decoder(cls: type) -> Decoder:
    hints = _hints(cls)
    fields = [(f.name, _decoder(hints[f.name])) for f in dataclasses.fields(cls)]

    def decode(data: Any) -> Any:
        return cls(**{name: each(data[name]) for name, each in fields})

    return decode
