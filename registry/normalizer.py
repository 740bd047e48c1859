"""Built-in normalizers: functions from a value to its normal form.

Invariant: every normalizer is a pure function ``Value -> Value`` that is deterministic across
processes and hash seeds, idempotent (``n(n(x)) == n(x)`` by canonical bytes) and returns a
canonical value. Values it cannot bring to normal form raise NormalizationError with
``field="value"`` and ``rule="normalizer:<name>"``; the message shows the offending value.

Why: equality under a predicate contract is equality of normal forms, and normal forms feed
``claim_ref`` and conflict grouping (SEMANTICS §2, §5). Replicas compute them independently, so
anything but a pure, stable function would let two replicas disagree about which claims agree,
conflict or share a correction handle. Idempotence makes a normal form a fixed point: it is
itself accepted and maps to itself, so a value that a normalizer declines can never be
byte-equal to some other value's normal form. Nothing here does I/O, reads a clock or the local
time zone, uses randomness, or iterates a set or dict whose order depends on the hash seed.

Normal forms (``field`` is always ``"value"``):

- ``exact``: the value itself.
- ``text``: a str in Unicode NFC, case-folded, with every whitespace run collapsed to one space
  and no leading or trailing space.
- ``number``: a decimal str with no exponent, no ``+``, no leading zeros (but ``"0.5"``), no
  trailing fractional zeros and no ``"-0"``: ``"1000"``, ``"-0.5"``, ``"0"``. Every digit lies
  between 10**-MAX_NUMBER_EXPONENT and 10**MAX_NUMBER_EXPONENT, which bounds its length.
- ``date``: ``"YYYY-MM-DD"``.
- ``datetime``: UTC ``"YYYY-MM-DDTHH:MM:SSZ"``, with ``".ffffff"`` before the ``Z`` when the
  microsecond is not zero. Sub-microsecond digits are truncated; a datetime without an offset is
  taken to be UTC.
- ``money``: ``{"amount": <number normal form>, "currency": <three upper-case ASCII letters>}``.
- ``boolean``: ``True`` or ``False``.
- ``natural`` (the default contract's): every str in its ``text`` normal form and every int or
  float as an int when it is a whole number in the int range (``1.0`` -> ``1``), else as the
  float; lists and map values likewise, element by element; other values as they are. Types stay
  apart (``"1"`` and ``1`` differ, and ``True`` is not ``1``), so it never declines a value.

Normalizers with parameters take them as keyword arguments after the value: ``money`` takes
``currency`` (the currency of amounts written without one, e.g. ``1150`` or ``"1,150.00"``).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping
from datetime import date as _date
from datetime import datetime as _datetime
from datetime import timedelta
from types import MappingProxyType

from statefuse.registry.error import NormalizationError
from statefuse.registry.value import INT_MAX, INT_MIN, FrozenMap, Value

#: What a normalizer name may look like: letters, digits, ``.``, ``_`` and ``-``, starting with a
#: letter. ``@`` separates a name from its version in a declaration (``"acme.sku@2"``).
NAME_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9._-]{0,127}")

Normalizer = Callable[[Value], Value]

#: Every digit of a ``number`` (and of a ``money`` amount) must lie between 10**-400 and
#: 10**400. That admits every finite float (5e-324 .. 1.8e308) and keeps normal forms short: a
#: string like ``"1e999999"`` would otherwise become a million characters.
MAX_NUMBER_EXPONENT = 400
#: How many rounds of NFC + casefold + whitespace collapse ``text`` runs before giving up. One
#: round reaches the fixed point for every string we know of (tested exhaustively on single code
#: points and with Hypothesis); the loop makes idempotence hold by construction, not by luck.
MAX_TEXT_ROUNDS = 4
#: The longest excerpt of an offending value an error message quotes.
MAX_SHOWN_CHARS = 120

#: Currency symbols ``money`` accepts, and the ISO 4217 code each stands for. ``¥`` is read as JPY
#: (it is also used for CNY; write ``"CNY 100"`` for that).
CURRENCY_SYMBOLS: Mapping[str, str] = MappingProxyType(
    {"$": "USD", "€": "EUR", "£": "GBP", "¥": "JPY"}
)

_TRUE_WORDS = frozenset({"true", "yes", "y", "on", "t", "1"})
_FALSE_WORDS = frozenset({"false", "no", "n", "off", "f", "0"})


def _show(value: object) -> str:
    shown = repr(value)
    if len(shown) > MAX_SHOWN_CHARS:
        return shown[: MAX_SHOWN_CHARS - 3] + "..."
    return shown


def _reject(name: str, why: str, value: object) -> NormalizationError:
    return NormalizationError("value", f"normalizer:{name}", f"{why}: {_show(value)}")


def exact(value: Value) -> Value:
    """The value itself: equality is equality of canonical bytes."""
    return value


def text(value: Value) -> str:
    """Text compared without regard to case, Unicode composition or whitespace layout.

    Raises NormalizationError (rule ``normalizer:text``) if ``value`` is not a str.
    """
    if type(value) is not str:
        raise _reject("text", "text needs a str", value)
    current = value
    for _ in range(MAX_TEXT_ROUNDS):
        folded = unicodedata.normalize("NFC", unicodedata.normalize("NFC", current).casefold())
        collapsed = " ".join(folded.split())
        if collapsed == current:
            return current
        current = collapsed
    raise _reject("text", f"no fixed point after {MAX_TEXT_ROUNDS} rounds", value)


# --- number ---------------------------------------------------------------------------------

_DECIMAL = re.compile(
    r"""
    (?P<sign>[+-])?
    (?:
        (?P<grouped>[0-9]{1,3}(?:,[0-9]{3})+)   # 1,000,000 (groups of three only)
      | (?P<plain>[0-9]+(?:_[0-9]+)*)           # 1000000 or 1_000_000
    )?
    (?:\.(?P<frac>[0-9]+(?:_[0-9]+)*)?)?
    (?:[eE](?P<exp>[+-]?[0-9]+))?
    """,
    re.VERBOSE,
)
#: Ints this large are out of range; checked before ``str()`` so huge ints are never rendered.
_INT_LIMIT = 10 ** (MAX_NUMBER_EXPONENT + 1)
#: Exponent digits beyond this many are out of range whatever the significand.
_MAX_EXPONENT_DIGITS = 9


class _NotANumber(Exception):
    """Why a string is not a decimal number (mapped to the caller's rule)."""


def _render_decimal(negative: bool, digits: str, exponent: int) -> str:
    """The number normal form of ``(-1)**negative * int(digits) * 10**exponent``."""
    significant = digits.lstrip("0")
    if not significant:
        return "0"
    stripped = significant.rstrip("0")
    exponent += len(significant) - len(stripped)
    if exponent < -MAX_NUMBER_EXPONENT or exponent + len(stripped) - 1 > MAX_NUMBER_EXPONENT:
        raise _NotANumber(f"magnitude outside 10**±{MAX_NUMBER_EXPONENT}")
    if exponent >= 0:
        body = stripped + "0" * exponent
    elif len(stripped) > -exponent:
        body = f"{stripped[:exponent]}.{stripped[exponent:]}"
    else:
        body = "0." + "0" * (-exponent - len(stripped)) + stripped
    return "-" + body if negative else body


def _parse_decimal(source: str) -> str:
    """The number normal form of a decimal string; raises _NotANumber."""
    match = _DECIMAL.fullmatch(source.strip())
    if match is None or not (match["grouped"] or match["plain"] or match["frac"]):
        raise _NotANumber("not a decimal number")
    whole = (match["grouped"] or match["plain"] or "").replace(",", "").replace("_", "")
    frac = (match["frac"] or "").replace("_", "")
    if not (whole + frac).strip("0"):
        return "0"
    exp_text = (match["exp"] or "0").lstrip("+-").lstrip("0") or "0"
    if len(exp_text) > _MAX_EXPONENT_DIGITS:
        raise _NotANumber(f"magnitude outside 10**±{MAX_NUMBER_EXPONENT}")
    exponent = -int(exp_text) if (match["exp"] or "").startswith("-") else int(exp_text)
    return _render_decimal(match["sign"] == "-", whole + frac, exponent - len(frac))


def _number_form(value: Value) -> str:
    """The number normal form of an int, finite float or decimal string; raises _NotANumber."""
    if type(value) is int:
        if abs(value) >= _INT_LIMIT:
            raise _NotANumber(f"magnitude outside 10**±{MAX_NUMBER_EXPONENT}")
        return _render_decimal(value < 0, str(abs(value)), 0)
    if type(value) is float:
        # repr is the shortest string that round-trips, so 0.1 reads as "0.1", not as the
        # binary fraction 0.1000000000000000055511151231257827...; "nan"/"inf" fail to parse.
        return _parse_decimal(repr(value))
    if type(value) is str:
        return _parse_decimal(value)
    raise _NotANumber("a number must be an int, a finite float or a decimal str (not a bool)")


def number(value: Value) -> str:
    """Numbers equal as decimals agree: ``1000 == 1000.0 == "1,000" == " 1_000 " == "1e3"``.

    Accepts ints, finite floats (read through ``repr``) and decimal strings with optional sign,
    thousands separators (``,`` in groups of three, or ``_`` between digits), fraction and
    exponent, surrounded by optional whitespace. Raises NormalizationError (rule
    ``normalizer:number``) for bools, other types, NaN/infinity, empty or malformed strings and
    magnitudes beyond MAX_NUMBER_EXPONENT.
    """
    try:
        return _number_form(value)
    except _NotANumber as exc:
        raise _reject("number", str(exc), value) from None


# --- date and datetime ----------------------------------------------------------------------

_CALENDAR_DATE = re.compile(r"(?P<y>[0-9]{4})(?P<sep>-?)(?P<m>[0-9]{2})(?P=sep)(?P<d>[0-9]{2})")
_ORDINAL_DATE = re.compile(r"(?P<y>[0-9]{4})-?(?P<yd>[0-9]{3})")
_WEEK_DATE = re.compile(r"(?P<y>[0-9]{4})(?P<sep>-?)W(?P<w>[0-9]{2})(?P=sep)(?P<wd>[1-7])")
_TIME = re.compile(
    r"""
    (?P<h>[0-9]{2})
    (?:(?P<sep>:?)(?P<m>[0-9]{2})
       (?:(?P=sep)(?P<s>[0-9]{2})(?:[.,](?P<frac>[0-9]+))?)?
    )?
    (?P<tz>Z|z|(?P<tzsign>[+-])(?P<tzh>[0-9]{2})(?::?(?P<tzm>[0-9]{2}))?)?
    """,
    re.VERBOSE,
)


class _NotADate(Exception):
    """Why a string is not an ISO 8601 date or datetime (mapped to the caller's rule)."""


def _parse_date(source: str) -> _date:
    """An ISO 8601 calendar, ordinal or week date, extended or basic; raises _NotADate."""
    try:
        if match := _CALENDAR_DATE.fullmatch(source):
            return _date(int(match["y"]), int(match["m"]), int(match["d"]))
        if match := _ORDINAL_DATE.fullmatch(source):
            day = int(match["yd"])
            first = _date(int(match["y"]), 1, 1)
            if not 1 <= day <= (366 if _is_leap(first.year) else 365):
                raise _NotADate(f"day of year {day} out of range")
            return first + timedelta(days=day - 1)
        if match := _WEEK_DATE.fullmatch(source):
            return _date.fromisocalendar(int(match["y"]), int(match["w"]), int(match["wd"]))
    except ValueError as exc:
        raise _NotADate(f"not a valid date ({exc})") from None
    raise _NotADate("not an ISO 8601 date (expected YYYY-MM-DD)")


def _is_leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def date(value: Value) -> str:
    """ISO 8601 dates agree when they name the same day; normal form ``"YYYY-MM-DD"``.

    Accepts calendar (``2026-03-25``, ``20260325``), ordinal (``2026-084``) and week
    (``2026-W13-3``) dates, with surrounding whitespace. Raises NormalizationError (rule
    ``normalizer:date``) for non-strings, datetimes, impossible dates and anything else.
    """
    if type(value) is not str:
        raise _reject("date", "a date must be an ISO 8601 str", value)
    try:
        return _parse_date(value.strip()).isoformat()
    except _NotADate as exc:
        raise _reject("date", str(exc), value) from None


def _parse_datetime_utc(source: str) -> _datetime:
    """A naive datetime holding the UTC time of an ISO 8601 datetime; raises _NotADate."""
    cut = next((i for i, ch in enumerate(source) if ch in "Tt "), -1)
    if cut < 0:
        raise _NotADate("not an ISO 8601 datetime (expected YYYY-MM-DDTHH:MM[:SS[.f]][Z|±HH:MM])")
    day = _parse_date(source[:cut])
    clock = _TIME.fullmatch(source[cut + 1 :])
    if clock is None:
        raise _NotADate("not an ISO 8601 time of day")
    hour, minute, second = int(clock["h"]), int(clock["m"] or 0), int(clock["s"] or 0)
    if hour > 23 or minute > 59 or second > 59:
        raise _NotADate("time of day out of range (24:00 and leap seconds are not supported)")
    micro = int((clock["frac"] or "")[:6].ljust(6, "0"))
    offset = timedelta(0)
    if clock["tzsign"]:
        tz_hours, tz_minutes = int(clock["tzh"]), int(clock["tzm"] or 0)
        if tz_hours > 23 or tz_minutes > 59:
            raise _NotADate("UTC offset out of range")
        offset = timedelta(hours=tz_hours, minutes=tz_minutes)
        if clock["tzsign"] == "-":
            offset = -offset
    local = _datetime(day.year, day.month, day.day, hour, minute, second, micro)
    try:
        return local - offset
    except OverflowError:
        raise _NotADate("outside years 1..9999 once converted to UTC") from None


def datetime(value: Value) -> str:
    """ISO 8601 datetimes agree when they name the same instant; normal form UTC with ``Z``.

    Accepts a date (as `date` does), ``T``/``t``/space, ``HH[:MM[:SS[.fraction]]]`` (or the
    basic ``HHMMSS``; ``,`` also marks the fraction) and an optional ``Z`` or ``±HH[:MM]``
    offset. A datetime without an offset is taken as UTC, never as the local time zone, so the
    result does not depend on the machine. Digits beyond microseconds are truncated. Parsing is
    done here rather than with ``datetime.fromisoformat``, whose accepted forms differ between
    Python 3.10 and 3.11. Raises NormalizationError (rule ``normalizer:datetime``) for
    non-strings, dates without a time, out-of-range fields and anything else.
    """
    if type(value) is not str:
        raise _reject("datetime", "a datetime must be an ISO 8601 str", value)
    try:
        utc = _parse_datetime_utc(value.strip())
    except _NotADate as exc:
        raise _reject("datetime", str(exc), value) from None
    # Formatted by hand: strftime("%Y") drops the leading zeros of years before 1000 on glibc.
    fraction = f".{utc.microsecond:06d}" if utc.microsecond else ""
    return f"{utc.date().isoformat()}T{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}{fraction}Z"


# --- money ----------------------------------------------------------------------------------

_CODE_FIRST = re.compile(r"(?P<code>[A-Za-z]{3})\s*(?P<amount>\S+)")
_CODE_LAST = re.compile(r"(?P<amount>\S+?)\s*(?P<code>[A-Za-z]{3})")
_SYMBOL_FIRST = re.compile(r"(?P<sign>[+-]?)(?P<symbol>[$€£¥])\s*(?P<amount>\S+)")
_SYMBOL_LAST = re.compile(r"(?P<amount>\S+?)\s*(?P<symbol>[$€£¥])")
_CURRENCY_CODE = re.compile(r"[A-Za-z]{3}")


def _money_from_str(source: str) -> tuple[str, str]:
    """(amount normal form, currency code) of a money string; raises _NotANumber."""
    source = source.strip()
    if match := _CODE_FIRST.fullmatch(source) or _CODE_LAST.fullmatch(source):
        return _parse_decimal(match["amount"]), match["code"].upper()
    if match := _SYMBOL_FIRST.fullmatch(source):
        amount = match["amount"]
        if match["sign"] and amount[:1] in ("+", "-"):
            raise _NotANumber("two signs")
        return _parse_decimal(match["sign"] + amount), CURRENCY_SYMBOLS[match["symbol"]]
    if match := _SYMBOL_LAST.fullmatch(source):
        return _parse_decimal(match["amount"]), CURRENCY_SYMBOLS[match["symbol"]]
    raise _NotANumber(
        "not an amount with a currency (expected e.g. 'USD 1,000.50', '1000.5 usd', '$1,000.50')"
    )


def _money_from_map(source: Mapping[str, Value]) -> tuple[str, str]:
    """(amount normal form, currency code) of a money map; raises _NotANumber."""
    if set(source) != {"amount", "currency"}:
        raise _NotANumber("a money map needs exactly the keys 'amount' and 'currency'")
    currency = source["currency"]
    if type(currency) is not str or not _CURRENCY_CODE.fullmatch(currency.strip()):
        raise _NotANumber("currency must be a three-letter ISO 4217 code")
    return _number_form(source["amount"]), currency.strip().upper()


def money(value: Value, *, currency: str | None = None) -> dict[str, Value]:
    """Amounts of one currency agree when equal as decimals.

    Accepts ``{"amount": <int, finite float or decimal str>, "currency": "usd"}`` and strings
    with a three-letter code before or after the amount (``"USD 1,000.50"``, ``"1000.5 usd"``)
    or a symbol from CURRENCY_SYMBOLS (``"$1,000.50"``, ``"-$5"``, ``"€12"``, ``"12 €"``).
    Currency codes are checked for shape (three ASCII letters), not against the ISO 4217 list,
    so new codes keep working. With ``currency`` (a three-letter code), a bare amount (an int,
    a finite float or a decimal str such as ``"1,150.00"``) is read in that currency. Raises
    NormalizationError (rule ``normalizer:money``) for a missing or malformed currency, an
    amount `number` rejects, extra map keys, or other types.
    """
    if currency is not None and (
        type(currency) is not str or not _CURRENCY_CODE.fullmatch(currency)
    ):
        raise _reject("money", "the currency parameter must be a three-letter code", currency)
    try:
        if currency is not None and (
            type(value) in (int, float) or (type(value) is str and _is_bare_amount(value))
        ):
            amount, code = _number_form(value), currency.upper()
        elif type(value) is str:
            amount, code = _money_from_str(value)
        elif isinstance(value, (dict, FrozenMap)):
            amount, code = _money_from_map(dict(value))
        else:
            raise _NotANumber("money must be a str or a map with 'amount' and 'currency'")
    except _NotANumber as exc:
        raise _reject("money", str(exc), value) from None
    return {"amount": amount, "currency": code}


def _is_bare_amount(source: str) -> bool:
    """Whether ``source`` is a decimal number without a currency (``"1,150.00"``)."""
    try:
        _parse_decimal(source.strip())
    except _NotANumber:
        return False
    return True


# --- boolean --------------------------------------------------------------------------------


def boolean(value: Value) -> bool:
    """Yes/no answers agree however they are written.

    Accepts bools, the ints 0 and 1, and the words true/yes/y/on/t/1 and false/no/n/off/f/0 in
    any ASCII case with surrounding whitespace. Raises NormalizationError (rule
    ``normalizer:boolean``) for anything else (other ints, floats, other words).
    """
    if type(value) is bool:
        return value
    if type(value) is int and value in (0, 1):
        return value == 1
    if type(value) is str:
        word = value.strip()
        if word.isascii():
            word = word.lower()
            if word in _TRUE_WORDS:
                return True
            if word in _FALSE_WORDS:
                return False
    raise _reject("boolean", "not a yes/no value", value)


# --- natural --------------------------------------------------------------------------------


def natural(value: Value) -> Value:
    """Values equal in the everyday sense agree: ``"Acme Corp"`` and ``" acme  corp"``, ``1`` and
    ``1.0``; never across types. Total: it never declines a value (see the module doc)."""
    if isinstance(value, str):
        return text(value)
    if type(value) is float:
        if value.is_integer() and INT_MIN <= value <= INT_MAX:
            return int(value)
        return value
    if isinstance(value, (list, tuple)):  # a FrozenList is a tuple
        return [natural(item) for item in value]
    if isinstance(value, (dict, FrozenMap)):
        return {key: natural(item) for key, item in value.items()}
    return value


BUILTIN_NORMALIZERS: Mapping[str, Normalizer] = MappingProxyType(
    {
        "exact": exact,
        "natural": natural,
        "text": text,
        "number": number,
        "date": date,
        "datetime": datetime,
        "money": money,
        "boolean": boolean,
    }
)
