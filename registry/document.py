"""The registry file format: a registry as plain data (TOML or JSON).

One document describes a whole registry; a space's declaration holds the same document::

    format = "statefuse-registry/1"
    authority_order = ["system", "user", "operator", "tool", "agent"]   # optional

    [default]                          # optional: predicates without a contract
    normalizer = "natural"

    [[contracts]]
    predicate = "price"
    normalizer = "money"
    params = { currency = "USD" }      # keyword arguments of the normalizer

    [[contracts]]
    namespace = "vendor"               # optional: only in this namespace
    predicate = "deadline"
    normalizer = "date"
    policy = "latest"                  # surface (default) | latest | authority

    [[contracts]]
    predicate = "tags"
    cardinality = "many"               # one (default) | many

    [predicates]                       # shorthand: one line per predicate, its normalizer
    approved = "boolean"
    starts = "date"

    [[detectors]]                      # optional: domain conflicts across keys (SEMANTICS §5)
    detector = "budget@1"              # "name@version" in the detector catalog
    reads = ["budget/cost", "budget/limit"]   # "predicate" or "namespace/predicate"

A contract (and ``[default]``) takes: ``predicate`` (contracts only), ``namespace``,
``cardinality``, ``normalizer`` (``"name"`` or ``"name@version"``; left out: the default's),
``params``, ``ref`` (``"normal-form"``, the default: equal values share a correction handle, or
``"value"``) and ``policy``. ``[predicates]`` is shorthand: ``name = "normalizer"`` is a
contract for that predicate (every namespace) with that normalizer and the defaults otherwise;
a document is rendered back with ``contracts`` only. ``normalizers`` (optional) lists custom
normalizer names that belong to the registry although no contract uses them. ``detectors``
(optional) declares detectors by ``name@version`` with the predicates each reads; every replica
runs them on the active claims of those predicates (`registry.detector`).

Parsing is strict: an unknown key, a wrong type or a bad name raises RegistryError naming the
path of the field (``contracts[2].policy``) and the rule, so a typo never silently means
"default". Pure: reading and writing files is `registry.file`'s job.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from statefuse.registry.catalog import check_name, check_version
from statefuse.registry.contract import Cardinality, Param, Policy, PredicateContract
from statefuse.registry.detector import DetectorSpec, Read
from statefuse.registry.error import ContractError, RegistryError
from statefuse.registry.value import Value

try:
    import tomllib  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef,import-not-found,unused-ignore]

#: The format tag of a registry document.
FORMAT = "statefuse-registry/1"
#: Most contracts one registry document may hold.
MAX_CONTRACTS = 10_000

_TOP_KEYS = (
    "format",
    "authority_order",
    "default",
    "contracts",
    "predicates",
    "normalizers",
    "detectors",
)
_DETECTOR_KEYS = ("detector", "reads")
#: Most detectors one registry document may declare.
MAX_DETECTORS = 100
#: Most predicates one detector may read.
MAX_READS = 100
_CONTRACT_KEYS = (
    "predicate",
    "namespace",
    "cardinality",
    "normalizer",
    "params",
    "ref",
    "policy",
)
_REF_RULES = {"normal-form": True, "value": False}
#: A normalizer version in a declaration: ASCII digits, no leading zero.
_VERSION = re.compile(r"[1-9][0-9]{0,6}")


def _fail(field: str, rule: str, message: str) -> RegistryError:
    return RegistryError(field, rule, message)


def _mapping(value: object, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(field, "table", f"expected a table (map), got {type(value).__name__}")
    return value


def _known_keys(table: Mapping[str, Any], allowed: tuple[str, ...], field: str) -> None:
    for key in table:
        if key not in allowed:
            raise _fail(
                f"{field}.{key}",
                "unknown-field",
                f"unknown field {key!r} (expected one of: {', '.join(allowed)})",
            )


def _str(table: Mapping[str, Any], key: str, field: str) -> str | None:
    value = table.get(key)
    if value is None:
        return None
    if type(value) is not str or not value:
        raise _fail(
            f"{field}.{key}", "non-empty-str", f"expected a non-empty string, got {value!r}"
        )
    return value


def _choice(table: Mapping[str, Any], key: str, field: str, choices: tuple[str, ...]) -> str | None:
    value = _str(table, key, field)
    if value is not None and value not in choices:
        raise _fail(f"{field}.{key}", key, f"expected one of {', '.join(choices)}, got {value!r}")
    return value


def parse_normalizer(spec: object, field: str = "normalizer") -> tuple[str, int]:
    """``"name"`` or ``"name@version"`` as (name, version); raises RegistryError."""
    if type(spec) is not str or not spec:
        raise _fail(field, "non-empty-str", f"expected 'name' or 'name@version', got {spec!r}")
    name, at, version_text = spec.partition("@")
    try:
        check_name(name, field)
        version = 1
        if at:
            if not _VERSION.fullmatch(version_text):
                raise _fail(field, "normalizer-version", f"bad version in {spec!r}")
            version = check_version(int(version_text), field)
    except ContractError as exc:
        raise _fail(exc.field, exc.rule, exc.message) from None
    return name, version


def _contract(table: Mapping[str, Any], field: str, *, default: bool) -> PredicateContract:
    table = _mapping(table, field)
    allowed = _CONTRACT_KEYS[1:] if default else _CONTRACT_KEYS
    _known_keys(table, allowed, field)
    if default:
        predicate = "*"
        if "namespace" in table:
            raise _fail(f"{field}.namespace", "default-namespace", "the default has no namespace")
    else:
        found = _str(table, "predicate", field)
        if found is None:
            raise _fail(f"{field}.predicate", "required", "every contract names its predicate")
        predicate = found
    cardinality = _choice(table, "cardinality", field, tuple(c.value for c in Cardinality))
    policy = _choice(table, "policy", field, tuple(p.value for p in Policy))
    ref = _choice(table, "ref", field, tuple(_REF_RULES))
    normalizer: str | None = None
    version = 1
    if table.get("normalizer") is not None:
        normalizer, version = parse_normalizer(table["normalizer"], f"{field}.normalizer")
    params: dict[str, Param] = {}
    if table.get("params") is not None:
        params = dict(_mapping(table["params"], f"{field}.params"))
    namespace = _str(table, "namespace", field)
    try:
        return PredicateContract(
            predicate=predicate,
            namespace=namespace,
            cardinality=Cardinality(cardinality or "one"),
            normalizer=normalizer,
            normalizer_version=version,
            ref_uses_normal_form=_REF_RULES[ref or "normal-form"],
            policy=Policy(policy or "surface"),
            params=params,
        )
    except ContractError as exc:
        raise _fail(f"{field}.{exc.field}", exc.rule, exc.message) from None


def parse(
    document: object, *, field: str = "registry"
) -> tuple[list[PredicateContract], PredicateContract | None, tuple[str, ...] | None, list[str]]:
    """(contracts, default or None, authority order or None, extra custom normalizer names) of
    a registry document; raises RegistryError naming the bad field."""
    doc = _mapping(document, field)
    _known_keys(doc, _TOP_KEYS, field)
    fmt = doc.get("format", FORMAT)
    if fmt != FORMAT:
        raise _fail(f"{field}.format", "format", f"expected {FORMAT!r}, got {fmt!r}")
    order: tuple[str, ...] | None = None
    if doc.get("authority_order") is not None:
        raw = doc["authority_order"]
        if not isinstance(raw, (list, tuple)) or not all(type(x) is str for x in raw):
            raise _fail(f"{field}.authority_order", "list-of-str", "expected a list of labels")
        order = tuple(raw)
    default = None
    if doc.get("default") is not None:
        default = _contract(doc["default"], f"{field}.default", default=True)
    raw_contracts = doc.get("contracts")
    raw_contracts = [] if raw_contracts is None else raw_contracts
    if not isinstance(raw_contracts, (list, tuple)):
        raise _fail(f"{field}.contracts", "list", "expected a list of contract tables")
    if len(raw_contracts) > MAX_CONTRACTS:
        raise _fail(f"{field}.contracts", "max-contracts", f"at most {MAX_CONTRACTS} contracts")
    contracts = [
        _contract(t, f"{field}.contracts[{i}]", default=False) for i, t in enumerate(raw_contracts)
    ]
    if doc.get("predicates") is not None:
        short = _mapping(doc["predicates"], f"{field}.predicates")
        for predicate, spec in short.items():
            where = f"{field}.predicates.{predicate}"
            name, version = parse_normalizer(spec, where)
            try:
                contracts.append(
                    PredicateContract(predicate, normalizer=name, normalizer_version=version)
                )
            except ContractError as exc:
                raise _fail(where, exc.rule, exc.message) from None
    extra = doc.get("normalizers")
    extra = [] if extra is None else extra
    if not isinstance(extra, (list, tuple)):
        raise _fail(f"{field}.normalizers", "list-of-str", "expected a list of normalizer names")
    names = []
    for i, spec in enumerate(extra):
        name, version = parse_normalizer(spec, f"{field}.normalizers[{i}]")
        if version != 1:
            raise _fail(
                f"{field}.normalizers[{i}]", "normalizer-version", "list version-1 names only"
            )
        names.append(name)
    return contracts, default, order, names


def parse_detectors(document: object, *, field: str = "registry") -> list[DetectorSpec]:
    """The detectors a registry document declares (``[[detectors]]``: ``detector =
    "name@version"``, ``reads = ["namespace/predicate" or "predicate", ...]``), in document
    order; raises RegistryError naming the bad field. A document without the section declares
    none."""
    doc = _mapping(document, field)
    raw = doc.get("detectors")
    if raw is None:
        return []
    if not isinstance(raw, (list, tuple)):
        raise _fail(f"{field}.detectors", "list", "expected a list of detector tables")
    if len(raw) > MAX_DETECTORS:
        raise _fail(f"{field}.detectors", "max-detectors", f"at most {MAX_DETECTORS} detectors")
    out: list[DetectorSpec] = []
    seen: set[str] = set()
    for i, entry in enumerate(raw):
        where = f"{field}.detectors[{i}]"
        table = _mapping(entry, where)
        _known_keys(table, _DETECTOR_KEYS, where)
        if table.get("detector") is None:
            raise _fail(f"{where}.detector", "required", "name the detector: 'name@version'")
        name, version = parse_normalizer(table["detector"], f"{where}.detector")
        reads_raw = table.get("reads")
        if not isinstance(reads_raw, (list, tuple)) or not reads_raw:
            raise _fail(
                f"{where}.reads",
                "list-of-str",
                "list the predicates it reads: 'predicate' or 'namespace/predicate'",
            )
        if len(reads_raw) > MAX_READS:
            raise _fail(f"{where}.reads", "max-reads", f"at most {MAX_READS} predicates")
        reads: list[Read] = []
        for j, text in enumerate(reads_raw):
            if type(text) is not str or not text or text.count("/") > 1:
                raise _fail(
                    f"{where}.reads[{j}]",
                    "read",
                    f"expected 'predicate' or 'namespace/predicate', got {text!r}",
                )
            namespace, _, predicate = text.rpartition("/")
            if not predicate or ("/" in text and not namespace):
                raise _fail(
                    f"{where}.reads[{j}]",
                    "read",
                    f"expected 'predicate' or 'namespace/predicate', got {text!r}",
                )
            reads.append((namespace or None, predicate))
        label = f"{name}@{version}"
        if label in seen:
            raise _fail(f"{where}.detector", "unique", f"{label} is declared twice")
        seen.add(label)
        out.append(DetectorSpec(name, version, tuple(sorted(set(reads), key=_read_order))))
    return out


def _read_order(read: Read) -> tuple[str, str]:
    return (read[0] or "", read[1])


def _contract_entry(contract: PredicateContract, *, default: bool) -> dict[str, Value]:
    out: dict[str, Value] = {}
    if not default:
        out["predicate"] = contract.predicate
        if contract.namespace is not None:
            out["namespace"] = contract.namespace
    if default or contract.cardinality is not Cardinality.ONE:
        out["cardinality"] = contract.cardinality.value
    assert contract.normalizer is not None
    out["normalizer"] = (
        contract.normalizer
        if contract.normalizer_version == 1
        else f"{contract.normalizer}@{contract.normalizer_version}"
    )
    if contract.params:
        out["params"] = dict(contract.param_items)
    if default or not contract.ref_uses_normal_form:
        out["ref"] = "normal-form" if contract.ref_uses_normal_form else "value"
    if default or contract.policy is not Policy.SURFACE:
        out["policy"] = contract.policy.value
    return out


def render(registry: Any) -> dict[str, Value]:
    """The document of ``registry`` (a `Registry`): every contract with its normalizer
    resolved, so the document means the same whatever the reader's defaults are."""
    used = {c.normalizer for c in (*registry.contracts, registry.default)}
    extra = sorted(n for n in registry.custom_normalizers if n not in used)
    doc: dict[str, Value] = {
        "format": FORMAT,
        "authority_order": list(registry.authority_order),
        "default": _contract_entry(registry.default, default=True),
        "contracts": [_contract_entry(c, default=False) for c in registry.contracts],
    }
    if extra:
        doc["normalizers"] = list[Value](extra)
    if registry.detectors:
        doc["detectors"] = [d.declaration() for d in registry.detectors]
    return doc


def from_text(text: str, *, json_format: bool, field: str = "registry") -> dict[str, Any]:
    """The document in the text of a registry file (JSON or TOML); raises RegistryError
    (field: ``field``, rule ``registry-json`` / ``registry-toml``) if it does not parse."""
    if json_format:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _fail(
                field, "registry-json", f"not JSON: {exc.msg} at line {exc.lineno}"
            ) from None
    else:
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise _fail(field, "registry-toml", f"not TOML: {exc}") from None
    if not isinstance(doc, dict):
        raise _fail(field, "table", "a registry file holds one table (map)")
    return doc


def to_json(document: Mapping[str, Value]) -> str:
    """``document`` as a JSON registry file."""
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def _toml_str(text: str) -> str:
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _toml_value(value: Value) -> str:
    if type(value) is bool:
        return "true" if value else "false"
    if type(value) in (int, float):
        return repr(value)
    if type(value) is str:
        return _toml_str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        inner = ", ".join(f"{_toml_str(k)} = {_toml_value(v)}" for k, v in value.items())
        return "{ " + inner + " }" if inner else "{}"
    raise TypeError(f"no TOML form for {value!r}")


def to_toml(document: Mapping[str, Value]) -> str:
    """``document`` as a TOML registry file."""
    lines = [f"format = {_toml_str(FORMAT)}"]
    for key in ("authority_order", "normalizers"):
        if key in document:
            lines.append(f"{key} = {_toml_value(document[key])}")
    default = document.get("default")
    if isinstance(default, dict):
        lines += ["", "[default]"]
        lines += [f"{k} = {_toml_value(v)}" for k, v in default.items()]
    contracts = document.get("contracts")
    for entry in contracts if isinstance(contracts, list) else []:
        assert isinstance(entry, dict)
        lines += ["", "[[contracts]]"]
        lines += [f"{k} = {_toml_value(v)}" for k, v in entry.items()]
    detectors = document.get("detectors")
    for entry in detectors if isinstance(detectors, list) else []:
        assert isinstance(entry, dict)
        lines += ["", "[[detectors]]"]
        lines += [f"{k} = {_toml_value(v)}" for k, v in entry.items()]
    return "\n".join(lines) + "\n"
