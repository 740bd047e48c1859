"""Write the corpus of malformed op encodings (``*.bin``) and its README.

Run from the repository root: ``python tests/corpus/make_corpus.py``. The output is deterministic
and tests/test_corpus.py checks that the files on disk are exactly what this script writes.

Every case starts from one of the valid op maps in BASES (test_corpus checks that they decode) and
breaks exactly one rule. A file is named ``<rule>__<case>.bin``: ``decode_op`` must raise a
StateFuseError whose ``.rule`` is ``<rule>``. The bytes are built with msgpack and blake3 alone,
never with StateFuse, so a bug in the library's encoder cannot quietly change the corpus.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import blake3
import msgpack

HERE = Path(__file__).resolve().parent


def _id(tag: str) -> bytes:
    return blake3.blake3(tag.encode()).digest()


#: Well-formed op maps, one per op kind (SEMANTICS §2).
BASES: dict[str, dict[str, object]] = {
    "claim": {
        "op": "ClaimAdded",
        "v": 1,
        "author": "w",
        "lamport": 1,
        "wall_ms": 0,
        "namespace": "ns",
        "subject": "s",
        "predicate": "p",
        "value": 1,
        "claim_ref": _id("ref"),
        "scope": "global",
        "confidence": 1.0,
        "evidence": sorted([_id("e1"), _id("e2")]),
        "provenance": "",
        "authority": "",
        "layer": "fact",
        "visibility": ["a", "b"],
        "constraint": "",
        "depends_on": [],
        "expires": None,
        "kind": "fact",
        "reasserts": [],
    },
    "retraction": {
        "op": "ClaimRetracted",
        "v": 1,
        "author": "w",
        "lamport": 2,
        "wall_ms": 0,
        "target_claim_id": _id("claim"),
        "target_claim_ref": None,
        "reason": "",
        "superseded_by": None,
    },
    "evidence": {
        "op": "EvidenceAdded",
        "v": 1,
        "author": "w",
        "lamport": 1,
        "wall_ms": 0,
        "source": "doc",
        "content": None,
    },
    "decision": {
        "op": "DecisionAdded",
        "v": 1,
        "author": "w",
        "lamport": 3,
        "wall_ms": 0,
        "locus": _id("locus"),
        "conflict_id": _id("conflict"),
        "selected_claim_id": _id("claim"),
        "scope": "global",
        "reason": "",
        "payload": None,
    },
}


def enc(value: object) -> bytes:
    """Plain msgpack (as canonical as msgpack makes it; maps keep the order given)."""
    return msgpack.packb(value, use_bin_type=True, use_single_float=False)


def _map_header(n: int) -> bytes:
    return bytes([0x80 | n]) if n < 16 else b"\xde" + struct.pack(">H", n)


def op_bytes(
    base: str,
    *,
    set_: dict[str, object] | None = None,
    drop: Iterable[str] = (),
    raw: dict[str, bytes] | None = None,
    order: str = "sorted",
    header: bytes | None = None,
) -> bytes:
    """The map BASES[base] with fields set / dropped, some values given as raw msgpack bytes,
    keys in ``sorted`` (canonical) or ``reversed`` order, and optionally another map header."""
    fields = {k: enc(v) for k, v in BASES[base].items() if k not in set(drop)}
    fields.update({k: enc(v) for k, v in (set_ or {}).items()})
    fields.update(raw or {})
    keys = sorted(fields, key=lambda k: k.encode("utf-8"), reverse=order == "reversed")
    body = b"".join(enc(k) + fields[k] for k in keys)
    return (header if header is not None else _map_header(len(fields))) + body


def _nested_lists(depth: int) -> bytes:
    return b"\x91" * depth + b"\xc0"


@dataclass(frozen=True)
class Case:
    rule: str
    name: str
    data: bytes
    doc: str

    @property
    def filename(self) -> str:
        return f"{self.rule}__{self.name}.bin"


def cases() -> list[Case]:
    """Every corpus case; the order is the README's order."""
    claim = op_bytes("claim")
    claim_fields = op_bytes("claim", header=b"")
    n_claim = len(BASES["claim"])
    return [
        # --- bytes that are not canonical msgpack (SEMANTICS §1) ---
        Case(
            "canonical",
            "unsorted-op-keys",
            op_bytes("claim", order="reversed"),
            "op map keys in reverse order",
        ),
        Case(
            "canonical",
            "duplicate-op-key",
            _map_header(n_claim + 1) + claim_fields + enc("lamport") + enc(1),
            "the key 'lamport' appears twice",
        ),
        Case(
            "canonical",
            "map32-op-header",
            op_bytes("claim", header=b"\xdf" + struct.pack(">I", n_claim)),
            "op map announced with a map32 header where map16 fits",
        ),
        Case(
            "canonical",
            "lamport-as-uint8",
            op_bytes("claim", raw={"lamport": b"\xcc\x01"}),
            "lamport 1 written as uint8 instead of a positive fixint",
        ),
        Case(
            "canonical",
            "wall-ms-as-int64",
            op_bytes("claim", raw={"wall_ms": b"\xd3" + bytes(8)}),
            "wall_ms 0 written as int64",
        ),
        Case(
            "canonical",
            "confidence-as-float32",
            op_bytes("claim", raw={"confidence": b"\xca" + struct.pack(">f", 1.0)}),
            "confidence 1.0 written as float32",
        ),
        Case(
            "canonical",
            "scope-as-str8",
            op_bytes("claim", raw={"scope": b"\xd9\x06global"}),
            "scope written as str8 where a fixstr fits",
        ),
        Case(
            "canonical",
            "claim-ref-as-bin16",
            op_bytes("claim", raw={"claim_ref": b"\xc5\x00\x20" + _id("ref")}),
            "a 32-byte id written as bin16 where bin8 fits",
        ),
        Case(
            "canonical",
            "visibility-as-array16",
            op_bytes("claim", raw={"visibility": b"\xdc\x00\x02" + enc("a") + enc("b")}),
            "a two-item list written with an array16 header",
        ),
        Case(
            "canonical",
            "unsorted-visibility",
            op_bytes("claim", set_={"visibility": ["b", "a"]}),
            "visibility roles not sorted (set-like fields are stored sorted)",
        ),
        Case(
            "canonical",
            "duplicate-evidence",
            op_bytes("claim", set_={"evidence": [_id("e1"), _id("e1")]}),
            "the same evidence id twice (set-like fields are stored unique)",
        ),
        Case(
            "canonical",
            "confidence-as-int",
            op_bytes("claim", set_={"confidence": 1}),
            "confidence 1 as an int (it is stored as the float 1.0)",
        ),
        Case("trailing-bytes", "extra-nil", claim + b"\xc0", "one nil after a complete op"),
        Case("truncated", "empty", b"", "no bytes at all"),
        Case("msgpack", "truncated-half", claim[: len(claim) // 2], "the first half of an op"),
        Case("msgpack", "truncated-last-byte", claim[:-1], "an op missing its last byte"),
        Case("msgpack", "reserved-byte", b"\xc1", "0xc1, which msgpack never uses"),
        Case(
            "msgpack",
            "int-map-key",
            _map_header(n_claim + 1) + claim_fields + b"\x01\xc0",
            "an op map with an int key",
        ),
        Case(
            "msgpack",
            "invalid-utf8",
            op_bytes("claim", raw={"subject": b"\xa2\xff\xfe"}),
            "a str whose bytes are not UTF-8",
        ),
        Case(
            "msgpack",
            "value-nested-2000-deep",
            op_bytes("claim", raw={"value": _nested_lists(2000)}),
            "a value 2000 lists deep (must be an error, never a RecursionError)",
        ),
        Case(
            "msgpack",
            "string-over-size-limit",
            op_bytes("claim", raw={"provenance": b"\xdb" + struct.pack(">I", 2 << 20) + b"x"}),
            "a str32 header announcing 2 MiB (over MAX_STRING_BYTES)",
        ),
        Case(
            "msgpack",
            "array-over-item-limit",
            op_bytes("claim", raw={"value": b"\xdd" + struct.pack(">I", 10_001) + b"\xc0"}),
            "an array32 header announcing MAX_CONTAINER_ITEMS + 1 items",
        ),
        Case(
            "max-depth",
            "value-nested-40-deep",
            op_bytes("claim", raw={"value": _nested_lists(40)}),
            "a value nested deeper than MAX_DEPTH",
        ),
        Case(
            "max-depth",
            "value-at-depth-limit-inside-op",
            op_bytes("claim", raw={"value": _nested_lists(32)}),
            "a value MAX_DEPTH deep, one level too deep once inside the op map",
        ),
        Case(
            "no-ext-types",
            "ext8-empty-payload",
            op_bytes("claim", raw={"value": b"\xc7\x00\x05"}),
            "a msgpack extension type with no payload",
        ),
        Case(
            "no-ext-types",
            "fixext1-value",
            op_bytes("claim", raw={"value": b"\xd4\x01\x00"}),
            "a msgpack extension type (fixext1)",
        ),
        Case(
            "no-ext-types",
            "timestamp-value",
            op_bytes("claim", raw={"value": b"\xd6\xff" + struct.pack(">I", 1)}),
            "a msgpack timestamp (extension type -1)",
        ),
        Case(
            "finite-float",
            "nan-value",
            op_bytes("claim", raw={"value": b"\xcb" + struct.pack(">Q", 0x7FF8_0000_0000_0001)}),
            "a NaN value",
        ),
        Case(
            "finite-float",
            "infinite-value",
            op_bytes("claim", raw={"value": b"\xcb" + struct.pack(">d", float("inf"))}),
            "an infinite value",
        ),
        Case(
            "int64",
            "uint64-value",
            op_bytes("claim", raw={"value": b"\xcf" + struct.pack(">Q", 1 << 63)}),
            "an integer value above the int64 range",
        ),
        Case(
            "str-map-keys",
            "bytes-key-in-value",
            op_bytes("claim", raw={"value": b"\x81\xc4\x01k\xc0"}),
            "a map value with a bytes key",
        ),
        # --- valid values that are not valid ops (SEMANTICS §2) ---
        Case(
            "op-is-map",
            "list-not-map",
            enc(list(BASES["claim"].items())),
            "the op's items as a list instead of a map",
        ),
        Case("op-is-map", "nil", b"\xc0", "nil"),
        Case(
            "op-version",
            "version-2",
            op_bytes("claim", set_={"v": 2}),
            "a claim with a stated confidence labelled version 2 (whose claims state none)",
        ),
        Case(
            "op-version",
            "version-3",
            op_bytes("claim", set_={"v": 3}),
            "a version no op type has",
        ),
        Case(
            "op-version",
            "unset-confidence-as-nil",
            op_bytes("claim", set_={"confidence": None}),
            "an unset confidence written as nil (a version 2 claim leaves the field out)",
        ),
        Case("op-version", "version-missing", op_bytes("claim", drop=["v"]), "no version field"),
        Case("op-version", "version-str", op_bytes("claim", set_={"v": "1"}), "version as a str"),
        Case(
            "op-version",
            "version-true",
            op_bytes("claim", set_={"v": True}),
            "version True (equal to 1 in Python, but a different value)",
        ),
        Case("op-version", "plain-map", enc({"a": 1}), "a valid value map that is not an op"),
        Case(
            "op-type",
            "unknown-op",
            op_bytes("claim", set_={"op": "ClaimDeleted"}),
            "an unknown op type",
        ),
        Case("op-type", "op-not-str", op_bytes("claim", set_={"op": 1}), "op type as an int"),
        Case("op-fields", "missing-field", op_bytes("claim", drop=["scope"]), "no scope field"),
        Case(
            "op-fields",
            "extra-field",
            op_bytes("claim", set_={"note": "x"}),
            "a field the schema does not have",
        ),
        Case(
            "op-fields",
            "op-id-field",
            op_bytes("claim", set_={"op_id": _id("x")}),
            "an op_id field (ids are derived, never stored)",
        ),
        Case(
            "op-fields",
            "fields-of-another-kind",
            op_bytes("retraction", set_={"op": "EvidenceAdded"}),
            "a retraction's fields under the EvidenceAdded type",
        ),
        Case("int", "lamport-as-str", op_bytes("claim", set_={"lamport": "1"}), "lamport as a str"),
        Case("lamport-range", "lamport-zero", op_bytes("claim", set_={"lamport": 0}), "lamport 0"),
        Case(
            "ms-range",
            "negative-wall-ms",
            op_bytes("claim", set_={"wall_ms": -1}),
            "a negative wall clock",
        ),
        Case(
            "author-type", "author-int", op_bytes("claim", set_={"author": 7}), "author as an int"
        ),
        Case(
            "name-length",
            "empty-namespace",
            op_bytes("claim", set_={"namespace": ""}),
            "an empty namespace",
        ),
        Case(
            "id-length",
            "short-claim-ref",
            op_bytes("claim", set_={"claim_ref": bytes(31)}),
            "a 31-byte claim_ref",
        ),
        Case(
            "id-type",
            "claim-ref-as-str",
            op_bytes("claim", set_={"claim_ref": "x" * 32}),
            "claim_ref as a str",
        ),
        Case(
            "scope-format",
            "scope-capitalised",
            op_bytes("claim", set_={"scope": "Global"}),
            "scope 'Global'",
        ),
        Case(
            "scope-format",
            "scope-task-without-id",
            op_bytes("claim", set_={"scope": "task:"}),
            "scope 'task:' with no id",
        ),
        Case(
            "layer",
            "unknown-layer",
            op_bytes("claim", set_={"layer": "FACT"}),
            "layer 'FACT' (layers are lower case)",
        ),
        Case(
            "unit-interval",
            "confidence-above-one",
            op_bytes("claim", set_={"confidence": 1.5}),
            "confidence 1.5",
        ),
        Case(
            "list",
            "visibility-as-str",
            op_bytes("claim", set_={"visibility": "a"}),
            "visibility as a str instead of a list",
        ),
        Case(
            "text-length",
            "long-reason",
            op_bytes("retraction", set_={"reason": "x" * 16_385}),
            "a reason longer than MAX_TEXT_CHARS",
        ),
        Case(
            "retraction-target",
            "no-target",
            op_bytes("retraction", set_={"target_claim_id": None}),
            "a retraction with neither target_claim_id nor target_claim_ref",
        ),
    ]


def render_readme(all_cases: list[Case]) -> str:
    lines = [
        "# Malformed op corpus",
        "",
        "Each `<rule>__<case>.bin` holds bytes that `statefuse.decode_op` must reject with a",
        "`StateFuseError` whose `.rule` is `<rule>` (never another exception);",
        "tests/test_corpus.py checks every file.",
        "",
        "Generated by `python tests/corpus/make_corpus.py`; do not edit by hand. This README is",
        "generated too, and the test fails if the files and the script disagree.",
        "",
        "| file | expected rule | what is wrong |",
        "| --- | --- | --- |",
    ]
    lines += [f"| `{c.filename}` | `{c.rule}` | {c.doc} |" for c in all_cases]
    return "\n".join(lines) + "\n"


def main(out: Path = HERE) -> int:
    all_cases = cases()
    for stale in out.glob("*.bin"):
        stale.unlink()
    for case in all_cases:
        (out / case.filename).write_bytes(case.data)
    (out / "README.md").write_text(render_readme(all_cases), encoding="utf-8")
    print(f"wrote {len(all_cases)} cases to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
