"""The arguments the command line and the MCP server take as text: keys, values, id prefixes
and author ids, read the same way by both entry points (which is why this sits below them: the
MCP server must not import the command line).

Every reader raises `CliError` (an `InputError`) naming the argument and the rule it breaks; an
entry point shows it as one line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any, NoReturn

from statefuse.core.error import InputError
from statefuse.core.keytext import Key, KeyTextError, key_parts
from statefuse.core.op import ClaimAdded
from statefuse.core.state import State
from statefuse.registry.value import Value

__all__ = [
    "MIN_PREFIX_CHARS",
    "CliError",
    "parse_author",
    "parse_key",
    "parse_key_prefix",
    "parse_value",
    "resolve_claim",
    "resolve_id",
    "value_from_json",
]


#: Shortest claim id prefix accepted (shorter ones would soon be ambiguous in a large memory).
MIN_PREFIX_CHARS = 8


class CliError(InputError, ValueError):
    """A command-line argument the library cannot take as given (bad KEY syntax, an unknown or
    ambiguous id prefix, a missing store). Shown as ``Error: <message>``."""


# --- argument syntax ------------------------------------------------------------------------------


def _key_parts(text: str, counts: range, spelled: str) -> tuple[str, ...]:
    try:
        return key_parts(text, counts, spelled, field="KEY")
    except KeyTextError as e:
        raise CliError(e.field, e.rule, e.message) from None


def parse_key(text: str) -> Key:
    """``namespace/subject/predicate`` -> its three parts; raises CliError otherwise."""
    ns, subject, predicate = _key_parts(text, range(3, 4), "namespace/subject/predicate")
    return ns, subject, predicate


def parse_key_prefix(text: str) -> tuple[str, ...]:
    """``namespace``, ``namespace/subject`` or a whole key -> its parts."""
    return _key_parts(text, range(1, 4), "namespace[/subject[/predicate]]")


def _no_constants(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def value_from_json(v: Any) -> Value:
    """A value from parsed JSON: ``{"$bytes": "<hex>"}`` becomes bytes (the spelling ``--json``
    output uses), everything else is taken as it is. Raises CliError (rule ``bytes-hex``)."""
    if isinstance(v, list):
        return [value_from_json(x) for x in v]
    if isinstance(v, dict):
        if set(v) == {"$bytes"} and isinstance(v["$bytes"], str):
            try:
                return bytes.fromhex(v["$bytes"])
            except ValueError:
                raise CliError(
                    "VALUE", "bytes-hex", 'a {"$bytes": …} value needs hex digits'
                ) from None
        return {k: value_from_json(x) for k, x in v.items()}
    value: Value = v
    return value


_TOO_DEEP = object()


def _clip(text: str, most: int = 60) -> str:
    """``text`` quoted for a message, cut to ``most`` characters."""
    return repr(text if len(text) <= most else text[:most] + "…")


#: The first characters of a VALUE that means JSON: one that starts so and does not parse is
#: a typo rather than a string (``'{"a": 1'``), refused unless ``--string`` says otherwise.
_JSON_OPENERS = ("{", "[", '"')


def _meant_as_json(text: str, exc: json.JSONDecodeError) -> bool:
    """Whether ``text``, which does not parse, was meant as JSON: it starts as JSON does and
    is cut short (``'{"a": 1'``, ``[1,``, an unterminated string) or ends as it began (``{a:
    1}``, ``[1, 2,]``). ``[WIP] fix login`` is a string."""
    body = text.strip()
    if not body.startswith(_JSON_OPENERS):
        return False
    closer = {"{": "}", "[": "]", '"': '"'}[body[0]]
    cut_short = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string")
    return cut_short or (len(body) > 1 and body.endswith(closer))


def parse_value(text: str, *, as_string: bool = False) -> Value:
    """A VALUE argument: JSON when it parses as JSON, else the string itself; ``as_string``
    (``--string``): the string itself always. Raises CliError (rule ``json-syntax``) for a
    value meant as JSON that does not parse (`_meant_as_json`), and (rule
    ``value-depth``) for JSON nested deeper than Python can read."""
    if as_string:
        return text
    try:
        parsed = json.loads(text, parse_constant=_no_constants)
    except json.JSONDecodeError as exc:
        if _meant_as_json(text, exc):
            raise CliError(
                "VALUE",
                "json-syntax",
                f"VALUE {_clip(text)} looks like JSON but does not parse ({exc.msg} at"
                f" character {exc.pos}): fix it, or pass --string to store it as a string",
            ) from None
        return text
    except ValueError:
        return text
    except RecursionError:
        parsed = _TOO_DEEP
    try:
        if parsed is not _TOO_DEEP:
            return value_from_json(parsed)
    except RecursionError:
        pass
    raise CliError("VALUE", "value-depth", "the JSON value is nested too deeply to read")


def resolve_id(text: str, ids: Iterable[bytes], *, what: str) -> bytes:
    """The one id in ``ids`` that starts with the hex prefix ``text`` (at least
    `MIN_PREFIX_CHARS` digits). Raises CliError when none or several do."""
    prefix = text.strip().lower()
    if not re.fullmatch(rf"[0-9a-f]{{{MIN_PREFIX_CHARS},64}}", prefix):
        raise CliError(
            what, "id-prefix", f"{what} id {text!r} is not {MIN_PREFIX_CHARS} to 64 hex digits"
        )
    head = bytes.fromhex(prefix[: len(prefix) // 2 * 2])
    found = sorted(i for i in ids if i.startswith(head) and i.hex().startswith(prefix))
    if not found:
        raise CliError(what, "known-id", f"no {what} has an id starting with {prefix}")
    if len(found) > 1:
        shown = ", ".join(i.hex()[: max(len(prefix) + 4, 12)] for i in found[:5])
        more = ", …" if len(found) > 5 else ""
        raise CliError(
            what,
            "unique-prefix",
            f"{what} id {prefix} is ambiguous: it starts {len(found)} {what} ids"
            f" ({shown}{more}); give more digits",
        )
    return found[0]


def resolve_claim(state: State, text: str) -> ClaimAdded:
    """The claim (active or retracted) whose id ``text`` names or starts."""
    return state.claims[resolve_id(text, state.claims, what="claim")]


def parse_author(text: str) -> bytes:
    """A whole author id (64 hex digits)."""
    if not re.fullmatch(r"[0-9a-fA-F]{64}", text.strip()):
        raise CliError(
            "AUTHOR", "author-id", f"author {text!r} is not an author id (64 hex digits)"
        )
    return bytes.fromhex(text.strip())
