"""The normalizers this process can run, by name and version.

A space's registry declaration names normalizers as data (``"money"``, ``"acme.sku@2"``); the code
behind a name lives in each process. Built-in normalizers are version 1 of their names; custom
ones are registered once per process, usually when the module defining them is imported::

    from statefuse import registry

    def sku(value):
        ...

    registry.register_normalizer("acme.sku", 1, sku)

Why versions: a normalizer's behaviour is part of the space's contract (it decides which values
agree and which `claim_ref` a value gets). Changing what a registered name does would silently
change every replica's memory; registering the new behaviour as a new version and declaring it
(`Replica.declare_registry`) changes it for everyone at once, visibly.

The catalog is process state (a dict filled by imports), the one mutable thing in this package;
registering is idempotent for the same function and refused for another one.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from statefuse.registry.detector import Detector
from statefuse.registry.error import ContractError, RegistryError
from statefuse.registry.normalizer import BUILTIN_NORMALIZERS, NAME_PATTERN, Normalizer

#: The highest normalizer version a declaration may name.
MAX_VERSION = 1_000_000

_REGISTERED: dict[tuple[str, int], Normalizer] = {}


def check_name(name: object, field: str = "name") -> str:
    """``name`` if it is a valid normalizer name; raises ContractError naming ``field``."""
    if type(name) is not str or not NAME_PATTERN.fullmatch(name):
        raise ContractError(
            field,
            "normalizer-name",
            f"a normalizer name is a letter then up to 127 letters, digits, '.', '_' or '-',"
            f" not {name!r}",
        )
    return name


def check_version(version: object, field: str = "version") -> int:
    """``version`` if it is a valid normalizer version (an int from 1); raises ContractError."""
    if type(version) is not int or not 1 <= version <= MAX_VERSION:
        raise ContractError(
            field,
            "normalizer-version",
            f"a version is an int from 1 to {MAX_VERSION}, not {version!r}",
        )
    return version


def _enter(
    kind: str,
    table: dict[tuple[str, int], Any],
    builtins: Mapping[str, object],
    name: str,
    version: int,
    fn: object,
) -> None:
    """Put ``fn`` in ``table`` as ``name@version`` (a normalizer or a detector, ``kind``):
    the rules both catalogs share (ContractError: ``no-builtin-override``, ``callable``,
    ``<kind>-registered``)."""
    check_version(version)
    if name in builtins:
        raise ContractError("name", "no-builtin-override", f"{name!r} is a built-in {kind} name")
    if not callable(fn):
        raise ContractError("fn", "callable", f"{kind} {name!r} is not callable")
    current = table.get((name, version))
    if current is not None and current is not fn:
        raise ContractError(
            "name",
            f"{kind}-registered",
            f"{name}@{version} is registered already (as {_label(current)}); register the"
            f" new behaviour as version {version + 1} and declare that",
        )
    table[(name, version)] = fn


def register_normalizer(name: str, version: int, fn: Normalizer) -> None:
    """Make ``fn`` the normalizer ``name`` version ``version`` in this process.

    ``fn`` takes a value (and the declaration's params as keyword arguments) and returns its
    normal form; it must be pure, deterministic and idempotent: check it in your tests with
    `registry.checker.check_registry` (samples keyed ``"name@version"``), which also runs it
    in fresh interpreters. Registering the same function again is a no-op.

    Raises ContractError: a bad name or version, a built-in name (``no-builtin-override``), a
    ``fn`` that is not callable, or another function already registered under that name and
    version (``normalizer-registered``: register the new behaviour as a new version).
    """
    check_name(name)
    _enter("normalizer", _REGISTERED, BUILTIN_NORMALIZERS, name, version, fn)


def registered_normalizers() -> Mapping[tuple[str, int], Normalizer]:
    """Every normalizer of this process by (name, version), built-ins (version 1) included."""
    return MappingProxyType(
        {**{(n, 1): fn for n, fn in BUILTIN_NORMALIZERS.items()}, **_REGISTERED}
    )


def find_normalizer(
    name: str, version: int, extra: Mapping[str, Normalizer] | None = None
) -> Normalizer:
    """The code of normalizer ``name`` version ``version``: a built-in, one of ``extra`` (the
    version-1 normalizers a `Registry` was built with) or a registered one.

    Raises RegistryError (rule ``unknown-normalizer``) naming it and how to register it.
    """
    if version == 1:
        fn = BUILTIN_NORMALIZERS.get(name) or (extra or {}).get(name)
        if fn is not None:
            return fn
    fn = _REGISTERED.get((name, version))
    if fn is not None:
        return fn
    builtin = (
        " (a built-in name; built-ins have version 1 only)" if name in BUILTIN_NORMALIZERS else ""
    )
    raise RegistryError(
        "normalizer",
        "unknown-normalizer",
        f"the registry names normalizer {name}@{version}{builtin}, which this process does not"
        f" have: import the module that calls"
        f" statefuse.register_normalizer({name!r}, {version}, fn) before opening"
        " (CLI: --normalizers MODULE)",
    )


def _label(fn: object) -> str:
    module = getattr(fn, "__module__", "?")
    return f"{module}.{getattr(fn, '__qualname__', repr(fn))}"


# --- detectors ------------------------------------------------------------------------------

_DETECTORS: dict[tuple[str, int], Detector] = {}


def register_detector(name: str, version: int, fn: Detector) -> None:
    """Make ``fn`` the detector ``name`` version ``version`` in this process (SEMANTICS §5).

    ``fn`` takes a `DetectorInput` (the active claims of the predicates its declaration reads,
    sorted by claim id) and returns a list of `Finding`; it must be pure and deterministic
    (no clock, no randomness, no set or dict order that depends on the hash seed): check it
    with `registry.checker.check_registry` (samples keyed ``"name@version"``, each a list of
    claims), which also runs it in fresh interpreters. Registering the same function again is
    a no-op. The same rules as `register_normalizer`: a bad name or version, a built-in name
    (``no-builtin-override``), a ``fn`` that is not callable, or another function under that
    name and version (``detector-registered``) raise ContractError.
    """
    from statefuse.registry.detector import check_detector_name
    from statefuse.registry.detectors import BUILTIN_DETECTORS

    check_detector_name(name)
    _enter("detector", _DETECTORS, BUILTIN_DETECTORS, name, version, fn)


def registered_detectors() -> Mapping[tuple[str, int], Detector]:
    """Every detector of this process by (name, version), built-ins (version 1) included."""
    from statefuse.registry.detectors import BUILTIN_DETECTORS

    return MappingProxyType({**{(n, 1): f for n, f in BUILTIN_DETECTORS.items()}, **_DETECTORS})


def find_detector(name: str, version: int) -> Detector:
    """The code of detector ``name`` version ``version``: a built-in or a registered one.

    Raises RegistryError (rule ``unknown-detector``, the detector's twin of
    ``unknown-normalizer``) naming it and how to register it."""
    from statefuse.registry.detectors import BUILTIN_DETECTORS

    if version == 1 and name in BUILTIN_DETECTORS:
        return BUILTIN_DETECTORS[name]
    fn = _DETECTORS.get((name, version))
    if fn is not None:
        return fn
    raise RegistryError(
        "detector",
        "unknown-detector",
        f"the registry names detector {name}@{version}, which this process does not have:"
        f" import the module that calls statefuse.register_detector({name!r}, {version}, fn)"
        " before opening (CLI: --normalizers MODULE)",
    )
