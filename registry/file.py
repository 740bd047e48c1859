"""Registry files on disk: `load_registry` and `save_registry` (TOML, or JSON by suffix).

Kept apart from `registry.registry` and `registry.document` so that those stay pure (the pure
core imports them); this is the only module of the package besides the checker that touches
files.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from statefuse.registry.document import from_text
from statefuse.registry.error import RegistryError
from statefuse.registry.normalizer import Normalizer
from statefuse.registry.registry import Registry

#: Largest registry file `read_registry_file` accepts.
MAX_FILE_BYTES = 4 * 1024 * 1024


def read_registry_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The document in a registry file: JSON if the name ends in ``.json``, else TOML.

    Raises RegistryError (field: the path) if the file cannot be read or parsed."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise RegistryError(
            str(p), "registry-file", f"cannot read the registry file: {exc.strerror}"
        ) from None
    if len(data) > MAX_FILE_BYTES:
        raise RegistryError(
            str(p), "registry-file", f"a registry file is at most {MAX_FILE_BYTES} bytes"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise RegistryError(str(p), "registry-file", "a registry file is UTF-8 text") from None
    return from_text(text, json_format=p.suffix.lower() == ".json", field=str(p))


def load_registry(
    path: str | os.PathLike[str], *, normalizers: Mapping[str, Normalizer] | None = None
) -> Registry:
    """The registry a registry file describes (see `Registry.from_document`)."""
    return Registry.from_document(
        read_registry_file(path), normalizers=normalizers, field=str(path)
    )


def save_registry(registry: Registry, path: str | os.PathLike[str]) -> None:
    """Write ``registry`` as a registry file: JSON if ``path`` ends in ``.json``, else TOML."""
    text = registry.to_json() if Path(path).suffix.lower() == ".json" else registry.to_toml()
    Path(path).write_text(text, encoding="utf-8")
