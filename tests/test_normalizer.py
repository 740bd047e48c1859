"""The built-in normalizers: their normal forms, what they reject, and the contract they keep."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unicodedata
from collections.abc import Callable
from datetime import date as Date
from datetime import datetime as DateTime
from datetime import timedelta, timezone
from decimal import Context, Decimal

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from statefuse.registry import (
    BUILTIN_NORMALIZERS,
    DEFAULT_REGISTRY,
    NormalizationError,
    PredicateContract,
)
from statefuse.registry.normalizer import boolean, date, datetime, money, number, text
from statefuse.registry.value import INT_MAX, INT_MIN, Value, canonical_value, encode_value

# --- strategies -----------------------------------------------------------------------------
# Each ``*_cases`` strategy draws one underlying value from ``pool``, writes it in one of the ways
# the normalizer accepts, and returns ``(rendering, expected normal form)``. The expected form is
# computed independently (with ``decimal``, ``datetime``...), so the tests are oracle tests.

Case = tuple[Value, Value]

values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(INT_MIN, INT_MAX)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
    | st.binary(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)

_WIDE = Context(prec=2000)

decimals = st.builds(
    lambda negative, digits, exponent: Decimal(f"{'-' if negative else ''}{digits}E{exponent}"),
    st.booleans(),
    st.integers(0, 10**20) | st.integers(0, 30),
    st.integers(-25, 25),
)


def _number_oracle(d: Decimal) -> str:
    return "0" if d == 0 else format(d.normalize(_WIDE), "f")


def _number_renderings(d: Decimal) -> list[Value]:
    plain = format(d, "f")
    out: list[Value] = [
        plain,
        format(d, ",f"),
        format(d, ",f").replace(",", "_"),
        str(d),
        str(d).lower(),
        f" \t{plain}\n ",
        plain + ("" if "." in plain else ".") + "000",
    ]
    if not plain.startswith("-"):
        out.append("+" + plain)
    if d == d.to_integral_value() and INT_MIN <= int(d) <= INT_MAX:
        out.append(int(d))
    as_float = float(d)
    if Decimal(repr(as_float)) == d:
        out.append(as_float)
    return out


@st.composite
def number_cases(draw: st.DrawFn, pool: st.SearchStrategy[Decimal] = decimals) -> Case:
    d = draw(pool)
    return draw(st.sampled_from(_number_renderings(d))), _number_oracle(d)


_TEXT_ALPHABET = "abcxyzéåøß\u03a3\u03c3"  # capital and small sigma fold alike
_SPACES = [" ", "  ", "\t", "\n", "\u00a0", "\u2003", "\u3000", " \r\n "]
word_lists = st.lists(st.text(_TEXT_ALPHABET, min_size=1, max_size=6), min_size=1, max_size=4)


@st.composite
def text_cases(draw: st.DrawFn, pool: st.SearchStrategy[list[str]] = word_lists) -> Case:
    words = draw(pool)
    rendered = []
    for word in words:
        cased = "".join(ch.upper() if draw(st.booleans()) else ch for ch in word)
        rendered.append(unicodedata.normalize(draw(st.sampled_from(["NFC", "NFD"])), cased))
    out = rendered[0]
    for word in rendered[1:]:
        out += draw(st.sampled_from(_SPACES)) + word
    pad = draw(st.sampled_from(["", " ", "\t\n"]))
    return pad + out + pad, unicodedata.normalize("NFC", " ".join(words).casefold())


dates = st.dates(min_value=Date(1, 1, 1), max_value=Date(9999, 12, 31))


@st.composite
def date_cases(draw: st.DrawFn, pool: st.SearchStrategy[Date] = dates) -> Case:
    d = draw(pool)
    year, week, weekday = d.isocalendar()
    yday = d.timetuple().tm_yday
    renderings = [
        d.isoformat(),
        f"{d.year:04d}{d.month:02d}{d.day:02d}",
        f"{d.year:04d}-{yday:03d}",
        f"{d.year:04d}{yday:03d}",
        f"{year:04d}-W{week:02d}-{weekday}",
        f"{year:04d}W{week:02d}{weekday}",
        f"  {d.isoformat()} ",
    ]
    return draw(st.sampled_from(renderings)), d.isoformat()


instants = st.builds(
    lambda local, minutes: local.replace(tzinfo=timezone(timedelta(minutes=minutes))),
    st.datetimes(min_value=DateTime(2, 1, 1), max_value=DateTime(9998, 12, 31)),
    st.integers(-(23 * 60 + 59), 23 * 60 + 59) | st.just(0),
)


def _clock(dt: DateTime, *, colons: bool = True, comma: bool = False) -> str:
    sep = ":" if colons else ""
    out = f"{dt.hour:02d}{sep}{dt.minute:02d}{sep}{dt.second:02d}"
    return out + (f"{',' if comma else '.'}{dt.microsecond:06d}" if dt.microsecond else "")


def _offset(dt: DateTime, *, colon: bool = True) -> str:
    offset = dt.utcoffset()
    assert offset is not None
    minutes = int(offset.total_seconds()) // 60
    hours, mins = divmod(abs(minutes), 60)
    return f"{'-' if minutes < 0 else '+'}{hours:02d}{':' if colon else ''}{mins:02d}"


@st.composite
def datetime_cases(draw: st.DrawFn, pool: st.SearchStrategy[DateTime] = instants) -> Case:
    dt = draw(pool)
    day = dt.date().isoformat()
    renderings = [
        f"{day}T{_clock(dt)}{_offset(dt)}",
        f"{day} {_clock(dt)}{_offset(dt, colon=False)}",
        f"{day.replace('-', '')}T{_clock(dt, colons=False, comma=True)}{_offset(dt, colon=False)}",
        f" {day}t{_clock(dt)}{_offset(dt)}  ",
    ]
    if dt.utcoffset() == timedelta(0):
        renderings += [f"{day}T{_clock(dt)}Z", f"{day}T{_clock(dt)}z", f"{day}T{_clock(dt)}"]
    if not dt.microsecond:
        renderings.append(f"{day}T{_clock(dt)}.000000000{_offset(dt)}")
    utc = dt.astimezone(timezone.utc)
    return draw(st.sampled_from(renderings)), f"{utc.date().isoformat()}T{_clock(utc)}Z"


_SYMBOLS = {"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥"}
amounts = st.tuples(decimals, st.sampled_from(["USD", "EUR", "GBP", "JPY", "CHF"]))


@st.composite
def money_cases(
    draw: st.DrawFn,
    pool: st.SearchStrategy[tuple[Decimal, str]] = amounts,
) -> Case:
    amount, currency = draw(pool)
    code = draw(st.sampled_from([currency, currency.lower(), currency.title()]))
    numbers = _number_renderings(amount)
    tight = draw(st.sampled_from([r for r in numbers if type(r) is str])).strip()
    renderings: list[Value] = [
        {"amount": draw(st.sampled_from(numbers)), "currency": code},
        f"{code} {tight}",
        f"{code}{tight}",
        f"{tight} {code}",
        f" {tight}{code} ",
    ]
    if currency in _SYMBOLS:
        symbol = _SYMBOLS[currency]
        sign = "-" if tight.startswith("-") else ""
        renderings += [
            f"{sign}{symbol}{tight.lstrip('+-')}",
            f"{symbol} {tight}",
            f"{tight} {symbol}",
        ]
    expected: Value = {"amount": _number_oracle(amount), "currency": currency}
    return draw(st.sampled_from(renderings)), expected


truths = st.booleans()
_WORDS = {True: ["true", "yes", "y", "on", "t", "1"], False: ["false", "no", "n", "off", "f", "0"]}


@st.composite
def boolean_cases(draw: st.DrawFn, pool: st.SearchStrategy[bool] = truths) -> Case:
    truth = draw(pool)
    word = draw(st.sampled_from(_WORDS[truth]))
    cased = "".join(ch.upper() if draw(st.booleans()) else ch for ch in word)
    renderings: list[Value] = [truth, int(truth), cased, f" {cased}\t"]
    return draw(st.sampled_from(renderings)), truth


CASES: dict[str, Callable[..., st.SearchStrategy[Case]]] = {
    "number": number_cases,
    "text": text_cases,
    "date": date_cases,
    "datetime": datetime_cases,
    "money": money_cases,
    "boolean": boolean_cases,
}

#: Small pools, so that independently drawn cases often stand for the same value.
SMALL_POOLS: dict[str, st.SearchStrategy[object]] = {
    "number": st.sampled_from([Decimal(s) for s in ["0", "-0.5", "1000", "1E+3", "0.1", "-7"]]),
    "text": st.sampled_from([["ab"], ["ab", "c"], ["ß"], ["ss"], ["åσ"]]),
    "date": st.sampled_from([Date(2026, 3, 25), Date(2026, 3, 26), Date(2024, 12, 31)]),
    "datetime": st.sampled_from(
        [
            DateTime(2026, 3, 25, 10, 0, tzinfo=timezone.utc),
            DateTime(2026, 3, 25, 11, 0, tzinfo=timezone(timedelta(hours=1))),
            DateTime(2026, 3, 25, 10, 0, tzinfo=timezone(timedelta(hours=-2))),
            DateTime(2026, 3, 25, 10, 0, 0, 500, tzinfo=timezone.utc),
        ]
    ),
    "money": st.tuples(
        st.sampled_from([Decimal("1000.5"), Decimal("1000.50"), Decimal("3")]),
        st.sampled_from(["USD", "EUR"]),
    ),
    "boolean": st.booleans(),
}

#: Values each normalizer declines, mixed into the equivalence tests to exercise the fallback.
DECLINED: dict[str, list[Value]] = {
    "number": ["1,00", "abc", True, None],
    "text": [5, b"x", None],
    "date": ["2026-02-30", "x", 20260325],
    "datetime": ["2026-03-25", "10:00", None],
    "money": ["1000", {"amount": 1}, 5],
    "boolean": ["maybe", 2, 1.0],
}

#: For each builtin: values that often stand for the same thing, or that it declines.
COLLIDING: dict[str, st.SearchStrategy[Value]] = {
    name: cases(SMALL_POOLS[name]).map(lambda c: c[0]) | st.sampled_from(DECLINED[name])
    for name, cases in CASES.items()
}

#: For each builtin: inputs it accepts, mixed with junk it declines.
INPUTS: dict[str, st.SearchStrategy[Value]] = {
    "exact": values,
    "natural": values | st.text() | text_cases().map(lambda c: c[0]) | st.lists(st.text()),
    "text": st.text() | text_cases().map(lambda c: c[0]) | values,
    "number": number_cases().map(lambda c: c[0])
    | st.text("0123456789,._-+eE ", max_size=12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | values,
    "date": date_cases().map(lambda c: c[0]) | st.text("0123456789-W ", max_size=11) | values,
    "datetime": datetime_cases().map(lambda c: c[0])
    | st.text("0123456789-:TZ+.", max_size=26)
    | values,
    "money": money_cases().map(lambda c: c[0])
    | st.text("0123456789,.$€ USDeur-", max_size=12)
    | values,
    "boolean": boolean_cases().map(lambda c: c[0]) | st.text("yesnoftru01 ", max_size=5) | values,
}


def _rejects(normalize: object, value: Value) -> NormalizationError:
    assert callable(normalize)
    with pytest.raises(NormalizationError) as caught:
        normalize(value)
    return caught.value


# --- the contract, for every builtin --------------------------------------------------------


@pytest.mark.parametrize("name", sorted(BUILTIN_NORMALIZERS))
@given(data=st.data())
def test_every_builtin_normalizer_is_deterministic_idempotent_and_canonical(
    name: str, data: st.DataObject
) -> None:
    normalize = BUILTIN_NORMALIZERS[name]
    value = data.draw(INPUTS[name], label="value")
    try:
        once = normalize(value)
    except NormalizationError as exc:
        assert (exc.field, exc.rule) == ("value", f"normalizer:{name}")
        _rejects(normalize, value)
        return
    encoded = encode_value(once)
    assert encode_value(canonical_value(once)) == encoded
    assert encode_value(normalize(value)) == encoded
    assert encode_value(normalize(once)) == encoded


@pytest.mark.parametrize("name", sorted(CASES))
@given(data=st.data())
def test_every_way_of_writing_a_value_normalizes_to_its_expected_normal_form(
    name: str, data: st.DataObject
) -> None:
    rendering, expected = data.draw(CASES[name](), label="case")
    assert encode_value(BUILTIN_NORMALIZERS[name](rendering)) == encode_value(expected)


@given(
    st.sampled_from(sorted(COLLIDING)).flatmap(
        lambda name: st.tuples(st.just(name), *[COLLIDING[name]] * 3)
    )
)
def test_equality_under_a_normalizer_is_an_equivalence_relation(
    drawn: tuple[str, Value, Value, Value],
) -> None:
    name, a, b, c = drawn
    contract = PredicateContract(predicate="p", normalizer=name)

    def agree(x: Value, y: Value) -> bool:
        return DEFAULT_REGISTRY.group_key(contract, x) == DEFAULT_REGISTRY.group_key(contract, y)

    assert agree(a, a)
    assert agree(a, b) == agree(b, a)
    if agree(a, b) and agree(b, c):
        assert agree(a, c)


@given(st.text())
@example("ΐ\u0316")
@example("e\u0301\u0316 \u0345")
def test_text_normalizer_is_idempotent_on_any_text(value: str) -> None:
    once = text(value)
    assert text(once) == once


SEED_SAMPLES: list[Value] = [
    " Straße  Σίσυφος\tABC ",
    "1,000.50",
    " 1_000 ",
    1000.0,
    -0.0,
    "1e-7",
    "2026-W13-3",
    "2026-03-25T10:00:00.5+05:30",
    "USD 1,000.50",
    "$-3",
    {"amount": "12", "currency": "eur", "x": None},
    {"currency": "eur", "amount": 12},
    " Yes ",
    0,
    None,
    [b"\x00", {"b": 1, "a": [True, 2.5]}],
]


def test_builtin_normal_forms_do_not_depend_on_the_hash_seed() -> None:
    samples = [(name, sample) for name in sorted(BUILTIN_NORMALIZERS) for sample in SEED_SAMPLES]
    script = (
        "import json, sys\n"
        "from statefuse.registry import BUILTIN_NORMALIZERS, NormalizationError\n"
        "from statefuse.registry import decode_value, encode_value\n"
        "out = []\n"
        "for name, data in json.load(sys.stdin):\n"
        "    value = decode_value(bytes.fromhex(data))\n"
        "    try:\n"
        "        out.append(encode_value(BUILTIN_NORMALIZERS[name](value)).hex())\n"
        "    except NormalizationError as exc:\n"
        "        out.append(exc.rule)\n"
        "json.dump(out, sys.stdout)\n"
    )
    request = json.dumps([[name, encode_value(sample).hex()] for name, sample in samples])
    results = []
    for seed in ("1", "2"):
        done = subprocess.run(
            [sys.executable, "-c", script],
            input=request,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
            check=True,
            timeout=60,
        )
        results.append(json.loads(done.stdout))
    here = []
    for name, sample in samples:
        try:
            here.append(encode_value(BUILTIN_NORMALIZERS[name](sample)).hex())
        except NormalizationError as exc:
            here.append(exc.rule)
    assert results[0] == results[1] == here


# --- text -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "variant",
    ["hello world", "Hello World", "  HELLO\t\tworld\n", "hello\u00a0world", "hello\u3000 WORLD"],
)
def test_text_normalizer_ignores_case_and_whitespace_layout(variant: str) -> None:
    assert text(variant) == "hello world"


def test_text_normalizer_makes_composed_and_decomposed_accents_agree() -> None:
    assert text("Caf\u00e9") == text("Cafe\u0301") == "caf\u00e9"


def test_text_normalizer_folds_case_beyond_lowercasing() -> None:
    assert text("Straße") == text("STRASSE") == "strasse"
    assert text("ΣΊΣΥΦΟΣ") == text("σίσυφος")


def test_text_normalizer_keeps_the_empty_string() -> None:
    assert text("") == text(" \t\n ") == ""


@pytest.mark.parametrize("value", [5, None, b"text", ["a"], True])
def test_text_normalizer_rejects_non_strings_naming_its_rule(value: Value) -> None:
    error = _rejects(text, value)
    assert error.rule == "normalizer:text"
    assert repr(value) in error.message


# --- number ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "variant", ["1,000", 1000, 1000.0, "1000.00", " 1_000 ", "1e3", "1E+3", "+1000", "1,000.0"]
)
def test_number_normalizer_makes_thousands_separators_and_types_agree(variant: Value) -> None:
    assert number(variant) == "1000"


@pytest.mark.parametrize("variant", [0, -0.0, 0.0, "0", "-0", "0.000", "-0e5", "0e999999999999"])
def test_number_normalizer_makes_every_zero_agree(variant: Value) -> None:
    assert number(variant) == "0"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.1, "0.1"),
        (-0.5, "-0.5"),
        ("-.5", "-0.5"),
        (1e-7, "0.0000001"),
        (1.5e16, "15000000000000000"),
        ("12.5e-1", "1.25"),
        ("007", "7"),
        (INT_MIN, str(INT_MIN)),
        ("1,234,567.891_2", "1234567.8912"),
    ],
)
def test_number_normalizer_writes_plain_decimals_without_exponent(
    value: Value, expected: str
) -> None:
    assert number(value) == expected


def test_number_normalizer_reads_floats_through_their_shortest_repr() -> None:
    assert number(0.1) == number("0.1") != number(0.30000000000000004)
    assert number(0.1 + 0.2) == "0.30000000000000004"


def test_number_normalizer_accepts_every_finite_float_magnitude() -> None:
    assert number(5e-324).endswith("5")
    assert number(1.7976931348623157e308).startswith("17976931348623157")
    assert number("1e400") == "1" + "0" * 400
    assert number("-1e-400") == "-0." + "0" * 399 + "1"


@pytest.mark.parametrize(
    "value",
    [
        True,
        False,
        None,
        b"1",
        [1],
        "",
        "   ",
        "nan",
        "NaN",
        "inf",
        "-Infinity",
        "abc",
        "1,00",
        "1,0000",
        "1,000_000",
        "1__000",
        "_1000",
        "1 000",
        "1.2.3",
        "--1",
        ".",
        "e5",
        "1e",
        "0x10",
        "1e401",
        "1e-401",
        "9" * 402,
        "1e99999999999",
    ],
)
def test_number_normalizer_rejects_non_numbers_and_absurd_magnitudes(value: Value) -> None:
    error = _rejects(number, value)
    assert (error.field, error.rule) == ("value", "normalizer:number")
    assert repr(value)[:40] in error.message


# --- date and datetime ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "variant", ["2026-03-25", "20260325", " 2026-03-25\n", "2026-084", "2026084", "2026-W13-3"]
)
def test_date_normalizer_makes_iso_8601_date_forms_agree(variant: str) -> None:
    assert date(variant) == "2026-03-25"


def test_date_normalizer_knows_leap_years_in_ordinal_dates() -> None:
    assert date("2024-366") == "2024-12-31"
    assert _rejects(date, "2025-366").rule == "normalizer:date"


@pytest.mark.parametrize(
    "value",
    [
        "2026-03-25T10:00",
        "2026-03-25 10:00:00Z",
        "2026-02-30",
        "2026-13-01",
        "0000-01-01",
        "2026-3-25",
        "2026-0325",
        "2026-W54-1",
        "25.03.2026",
        "",
        "yesterday",
        20260325,
        None,
    ],
)
def test_date_normalizer_rejects_datetimes_and_garbage(value: Value) -> None:
    error = _rejects(date, value)
    assert error.rule == "normalizer:date"
    assert repr(value) in error.message


@pytest.mark.parametrize(
    "variant",
    [
        "2026-03-25T10:00:00Z",
        "2026-03-25T10:00:00z",
        "2026-03-25T10:00:00",
        "2026-03-25T10:00",
        "2026-03-25T10",
        "2026-03-25 10:00:00+00:00",
        "2026-03-25T11:00:00+01:00",
        "2026-03-25T11:00:00+0100",
        "2026-03-25T11:00:00+01",
        "2026-03-25T05:30:00-04:30",
        "20260325T100000Z",
        "2026-03-25T10:00:00.000Z",
        "2026-03-26T00:00:00+14:00",
        "2026-084T10:00Z",
    ],
)
def test_datetime_normalizer_converts_every_offset_to_utc(variant: str) -> None:
    assert datetime(variant) == "2026-03-25T10:00:00Z"


def test_datetime_normalizer_keeps_microseconds_and_truncates_finer_digits() -> None:
    assert datetime("2026-03-25T10:00:00.5Z") == "2026-03-25T10:00:00.500000Z"
    assert datetime("2026-03-25T10:00:00,123456789Z") == "2026-03-25T10:00:00.123456Z"


def test_datetime_normalizer_takes_a_naive_datetime_as_utc() -> None:
    assert datetime("2026-03-25T10:00:00") == datetime("2026-03-25T10:00:00+00:00")


def test_datetime_normalizer_crosses_day_and_year_boundaries() -> None:
    assert datetime("2026-01-01T00:30:00+01:00") == "2025-12-31T23:30:00Z"
    assert datetime("0999-12-31T23:00:00-02:00") == "1000-01-01T01:00:00Z"


@pytest.mark.parametrize(
    "value",
    [
        "2026-03-25",
        "10:00:00",
        "2026-03-25T",
        "2026-03-25T24:00:00",
        "2026-03-25T23:59:60Z",
        "2026-03-25T10:61",
        "2026-03-25T10:00:00+24:00",
        "2026-03-25T10:00:00+01:60",
        "2026-03-25T10:00:00 +01:00",
        "2026-03-25T10:00:00UTC",
        "0001-01-01T00:00:00+01:00",
        "9999-12-31T23:00:00-01:00",
        "2026-02-30T10:00Z",
        1774432800,
        None,
    ],
)
def test_datetime_normalizer_rejects_dates_out_of_range_fields_and_garbage(value: Value) -> None:
    error = _rejects(datetime, value)
    assert error.rule == "normalizer:datetime"
    assert repr(value) in error.message


# --- money ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "variant",
    [
        "USD 1,000.50",
        "usd1000.5",
        "1000.5 usd",
        "1,000.50USD",
        "$1,000.50",
        "$ 1000.5",
        "1000.50 $",
        {"amount": "1,000.50", "currency": "usd"},
        {"amount": 1000.5, "currency": " USD "},
    ],
)
def test_money_normalizer_makes_codes_symbols_and_maps_agree(variant: Value) -> None:
    assert money(variant) == {"amount": "1000.5", "currency": "USD"}


@pytest.mark.parametrize(
    ("variant", "expected"),
    [
        ("€12", {"amount": "12", "currency": "EUR"}),
        ("12 €", {"amount": "12", "currency": "EUR"}),
        ("£3", {"amount": "3", "currency": "GBP"}),
        ("¥100", {"amount": "100", "currency": "JPY"}),
        ("-$5", {"amount": "-5", "currency": "USD"}),
        ("$-5", {"amount": "-5", "currency": "USD"}),
        ("CHF -0.0", {"amount": "0", "currency": "CHF"}),
        ({"amount": 12, "currency": "eur"}, {"amount": "12", "currency": "EUR"}),
    ],
)
def test_money_normalizer_reads_symbols_signs_and_codes(variant: Value, expected: Value) -> None:
    assert money(variant) == expected


def test_money_normalizer_keeps_currencies_apart() -> None:
    assert money("USD 5") != money("EUR 5")


@pytest.mark.parametrize(
    "value",
    [
        "1000",
        "1000 dollars",
        "US$ 5",
        "$5 USD",
        "-$-5",
        "USD",
        "USD 1,00",
        "USD nan",
        "€",
        {"amount": 5},
        {"currency": "USD"},
        {"amount": 5, "currency": "US"},
        {"amount": 5, "currency": "USD", "note": "x"},
        {"amount": True, "currency": "USD"},
        {"amount": "five", "currency": "USD"},
        5,
        None,
    ],
)
def test_money_normalizer_rejects_missing_currency_and_bad_amounts(value: Value) -> None:
    error = _rejects(money, value)
    assert error.rule == "normalizer:money"
    assert repr(value) in error.message


# --- boolean --------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", [True, 1, "true", " TRUE ", "Yes", "y", "on", "T", "1"])
def test_boolean_normalizer_reads_yes_words_as_true(variant: Value) -> None:
    assert boolean(variant) is True


@pytest.mark.parametrize("variant", [False, 0, "false", "No", " n\t", "OFF", "f", "0"])
def test_boolean_normalizer_reads_no_words_as_false(variant: Value) -> None:
    assert boolean(variant) is False


@pytest.mark.parametrize(
    "value",
    [2, -1, 1.0, 0.0, "", "maybe", "yes!", "y e s", "\uff59\uff45\uff53", "ye\u017f", None, [True]],
)
def test_boolean_normalizer_rejects_other_values(value: Value) -> None:
    error = _rejects(boolean, value)
    assert error.rule == "normalizer:boolean"
    assert repr(value) in error.message
