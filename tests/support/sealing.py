"""A sealing key pair for tests that seal credentials into a config source.

`sealing` is one key pair per test module, written as `tls.key` and `tls.crt` into a `keys/` directory
(what TIDECD_SEALING_KEYS names): `(pair, directory)`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tidecd.clients.secrets import KeyPair, generate_key, write_key_pair


@pytest.fixture(scope="module")
def sealing(tmp_path_factory: pytest.TempPathFactory) -> tuple[KeyPair, Path]:
    """A sealing key pair in a `keys/` directory (what TIDECD_SEALING_KEYS names)."""
    folder = tmp_path_factory.mktemp("sealing") / "keys"
    folder.mkdir()
    pair = generate_key()
    write_key_pair(pair, folder / "tls.key", folder / "tls.crt")
    return pair, folder
