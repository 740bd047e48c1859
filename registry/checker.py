"""Contract checks for normalizers, run before a registry is trusted with them.

Invariant checked: a normalizer is a pure function of the value. On every sample it must

(a) give the same canonical bytes (or decline with NormalizationError) on every call, without
    changing its argument;
(b) give the same result in a fresh interpreter under another ``PYTHONHASHSEED``;
(c) be idempotent: ``n(n(x))`` has the same canonical bytes as ``n(x)``;
(d) return a canonical value (`canonical_value` accepts it: no sets, tuples, NaN, objects...).

Why: only a normalizer's *name* enters the registry fingerprint, so two replicas that agree on the
fingerprint agree on normal forms, claim refs and conflict groups only if every normalizer behaves
the same everywhere. Set and dict iteration order of str and bytes depends on the hash seed, so
(b) catches a class of bugs that no in-process test can see.

I/O: check (b) starts ``sys.executable -c`` once per seed in HASH_SEEDS, each bounded by
CHILD_TIMEOUT_SECONDS. It is the only I/O in the ``registry`` package; every other module of it
is pure. That is also why ``registry/__init__.py`` does not re-export this module: the pure core
does ``from statefuse.registry import ...`` and must not reach ``subprocess``; import it as
``statefuse.registry.checker``. The child imports the normalizer by ``__module__`` and
``__qualname__`` (so it must be defined at module level), reads the samples as canonical msgpack on
stdin and writes each result's canonical bytes as msgpack on stdout. ``across_interpreters=False``
skips it.

Malformed arguments raise ContractError. A broken check raises NormalizerContractError (a
ContractError, so also a ValueError) whose ``field`` names the sample (``samples[3]``) or ``fn``,
whose ``rule`` names the check and whose message shows the normalizer, the offending sample and
what went wrong.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import blake3
import msgpack

from statefuse.registry.detector import (
    Detector,
    DetectorClaim,
    DetectorInput,
    DetectorSpec,
    run_detector,
)
from statefuse.registry.document import parse_normalizer
from statefuse.registry.error import ContractError, InputError, NormalizationError
from statefuse.registry.normalizer import BUILTIN_NORMALIZERS, Normalizer
from statefuse.registry.registry import Registry
from statefuse.registry.value import (
    Value,
    canonical_value,
    decode_value,
    encode_canonical,
    encode_value,
    frozen_value,
)

#: Hash seeds of the fresh interpreters in check (b). Two fixed seeds, so that a seed-dependent
#: normalizer is caught whatever seed the checking process itself happens to run with.
HASH_SEEDS = (1, 2)
#: How long one fresh interpreter may take to import the normalizers and run all samples.
CHILD_TIMEOUT_SECONDS = 60.0
#: How many times each sample is normalized in this process for check (a).
REPEATS = 3
#: The longest excerpt of a sample or result a message quotes.
MAX_SHOWN_CHARS = 200
#: The longest tail of a failed child's stderr a message quotes.
MAX_STDERR_CHARS = 2000

# Runs in the fresh interpreter. It takes sys.path from the parent so that it imports the same
# modules, and moves sys.stdout to stderr so a print() in a normalizer cannot corrupt the reply.
_CHILD_SCRIPT = """\
import importlib, json, sys
sys.path[:] = json.loads(sys.argv[1])
reply, sys.stdout = sys.stdout.buffer, sys.stderr
import msgpack
from statefuse.registry.error import NormalizationError
from statefuse.registry.value import canonical_value, decode_value, encode_canonical, frozen_value
results = []
for module, qualname, samples in msgpack.unpackb(sys.stdin.buffer.read(), raw=False):
    fn = importlib.import_module(module)
    for part in qualname.split("."):
        fn = getattr(fn, part)
    rows = []
    for data in samples:
        try:
            result = fn(frozen_value(decode_value(data)))
            rows.append([0, encode_canonical(canonical_value(result))])
        except NormalizationError:
            rows.append([1, b""])
        except Exception as exc:
            rows.append([2, f"{type(exc).__name__}: {exc}".encode()])
    results.append(rows)
reply.write(msgpack.packb(results, use_bin_type=True))
"""
_OK, _DECLINED, _FAILED = 0, 1, 2


class NormalizerContractError(ContractError):
    """A normalizer broke one of the checks of `check_normalizer` on a sample."""


@dataclass(frozen=True, slots=True)
class _Outcome:
    """What a normalizer did with one sample: canonical bytes of its result, or a decline.

    Only ``encoded`` is compared: all declines are alike to the registry (see
    `Registry.group_key`), so ``declined_because`` only serves messages.
    """

    encoded: bytes | None
    declined_because: str = ""

    def describe(self) -> str:
        if self.encoded is None:
            return f"declined ({self.declined_because})" if self.declined_because else "declined"
        return f"returned {_show(decode_value(self.encoded))}"


@dataclass(frozen=True, slots=True)
class _Job:
    """One normalizer with its samples, as checked in this process."""

    fn: Normalizer
    name: str
    samples: tuple[bytes, ...]
    outcomes: tuple[_Outcome, ...]


def _show(value: object) -> str:
    shown = repr(value)
    if len(shown) > MAX_SHOWN_CHARS:
        return shown[: MAX_SHOWN_CHARS - 3] + "..."
    return shown


def check_normalizer(
    fn: Normalizer,
    samples: Iterable[Value],
    *,
    name: str | None = None,
    across_interpreters: bool = True,
) -> None:
    """Check that ``fn`` keeps the normalizer contract on every sample (see the module doc).

    ``name`` is used in messages (default: ``module.qualname``). Samples that ``fn`` declines
    with NormalizationError are fine as long as it declines them every time and everywhere.

    Raises ContractError if an argument is malformed (``fn`` not callable, a sample that is not a
    StateFuse value), and NormalizerContractError, with the sample and the rule, if ``fn`` is
    not deterministic, raises anything but NormalizationError, mutates its argument, returns a
    non-canonical value, is not idempotent, is not importable by module and qualified name
    (lambdas, closures, ``__main__``: define it at module level or pass
    ``across_interpreters=False``) or gives another result in a fresh interpreter.
    """
    job = _check_in_process(fn, samples, name=name)
    if across_interpreters:
        _check_across_interpreters([job])


def check_registry(
    registry: Registry,
    samples: Mapping[str, Iterable[Value]],
    *,
    across_interpreters: bool = True,
) -> None:
    """`check_normalizer` for each normalizer of ``registry`` named in ``samples``, and
    `check_detector` for each of its declared detectors.

    Every custom normalizer named by one of ``registry.contracts`` must have samples, keyed by
    its name (version 1) or ``"name@version"`` (registered with `register_normalizer`). All
    normalizers share the same fresh interpreters, so this is cheaper than one call each.
    Every declared detector that is not built in must have samples too, keyed by its
    ``"name@version"``: each sample is one input, a list of claims (see `check_detector`).

    Raises ContractError if ``samples`` names a normalizer the registry does not know or leaves
    out a custom one its contracts use, and NormalizerContractError as `check_normalizer` does.
    """
    if not isinstance(registry, Registry):
        raise ContractError("registry", "type", f"expected a Registry, got {_show(registry)}")
    if not isinstance(samples, Mapping):
        raise ContractError("samples", "type", "samples must map normalizer names to samples")
    detectors = {d.label: d for d in registry.detectors}
    detector_jobs = _detector_jobs(registry, detectors, samples)
    samples = {k: v for k, v in samples.items() if _as_label(k) not in detectors}
    used = {
        str(c.normalizer) if c.normalizer_version == 1 else f"{c.normalizer}@{c.normalizer_version}"
        for c in (*registry.contracts, registry.default)
    } - set(BUILTIN_NORMALIZERS)
    missing = sorted(used - set(samples))
    if missing:
        raise ContractError(
            "samples",
            "samples-for-custom-normalizers",
            f"no samples for custom normalizer(s) {', '.join(map(repr, missing))}",
        )
    jobs = []
    for normalizer_name in sorted(samples):
        try:
            name, version = parse_normalizer(normalizer_name, "samples")
            fn = registry.normalizer(name, version)
        except ContractError:
            raise ContractError(
                "samples", "known-normalizer", f"the registry has no normalizer {normalizer_name!r}"
            ) from None
        jobs.append(_check_in_process(fn, samples[normalizer_name], name=normalizer_name))
    if across_interpreters:
        if jobs:
            _check_across_interpreters(jobs)
        if detector_jobs:
            _check_detectors_across_interpreters(detector_jobs)


# --- detectors --------------------------------------------------------------------------------

#: What a detector sample's claim may hold (``namespace``, ``subject``, ``predicate`` and
#: ``value`` are required).
_SAMPLE_CLAIM_KEYS = frozenset(("namespace", "subject", "predicate", "value", "scope"))
_SAMPLE_DOMAIN = b"statefuse/detector-sample/v1"

_DETECTOR_CHILD_SCRIPT = """\
import importlib, json, sys
sys.path[:] = json.loads(sys.argv[1])
reply, sys.stdout = sys.stdout.buffer, sys.stderr
import msgpack
from statefuse.registry.checker import _detector_outcome
results = []
for module, qualname, name, version, reads, samples in msgpack.unpackb(
    sys.stdin.buffer.read(), raw=False
):
    fn = importlib.import_module(module)
    for part in qualname.split("."):
        fn = getattr(fn, part)
    results.append([_detector_outcome(fn, name, version, reads, s) for s in samples])
reply.write(msgpack.packb(results, use_bin_type=True))
"""


class DetectorContractError(ContractError):
    """A detector broke one of the checks of `check_detector` on a sample."""


@dataclass(frozen=True, slots=True)
class _DetectorJob:
    fn: Detector
    spec: DetectorSpec
    samples: tuple[bytes, ...]
    outcomes: tuple[bytes, ...]

    @property
    def name(self) -> str:
        return self.spec.label


def _as_label(key: object) -> str:
    if isinstance(key, str) and "@" not in key:
        return f"{key}@1"
    return str(key)


def _sample_input(data: bytes, reads: list[list[Any]]) -> DetectorInput:
    """The `DetectorInput` a sample (canonical bytes of a list of claim maps) stands for:
    each claim's id a hash of its place and content, its author zeros, its lamport its place;
    claims of predicates the declaration does not read are left out, as replicas do."""
    spec_reads = [(None if n is None else str(n), str(p)) for n, p in reads]
    claims = []
    decoded = decode_value(data)
    assert isinstance(decoded, list)
    for i, raw in enumerate(decoded):
        assert isinstance(raw, Mapping)
        claim = dict(raw)
        scope = str(claim.get("scope", "global"))
        ns, subject, predicate = (
            str(claim["namespace"]),
            str(claim["subject"]),
            str(claim["predicate"]),
        )
        if not any(p == predicate and (n is None or n == ns) for n, p in spec_reads):
            continue
        cid = blake3.blake3(_SAMPLE_DOMAIN + encode_canonical([i, claim])).digest()
        value = frozen_value(claim["value"])
        claims.append(DetectorClaim(cid, ns, subject, predicate, scope, value, bytes(32), i + 1))
    claims.sort(key=lambda c: c.claim_id)
    return DetectorInput(tuple(claims))


def _detector_outcome(
    fn: Detector, name: str, version: int, reads: list[list[Any]], data: bytes
) -> bytes:
    """The canonical bytes of what ``fn`` finds on one sample: ``[0, findings]`` or ``[1,
    why it failed]`` (the same function runs here and in the fresh interpreters)."""
    spec = DetectorSpec(name, version, tuple((r[0], r[1]) for r in reads))
    found, error = run_detector(spec, fn, _sample_input(data, reads))
    if error is not None:
        return encode_value([1, error])
    return encode_value(
        [
            0,
            [
                [f.type, list(f.anchor), f.scope, list(f.claim_ids), f.reason, f.witness]
                for f in sorted(found, key=lambda f: (f.type, f.anchor, f.scope))
            ],
        ]
    )


def _describe_outcome(data: bytes) -> str:
    decoded = decode_value(data)
    assert isinstance(decoded, list)
    kind, body = decoded
    if kind == 1:
        return f"failed: {body!s}"
    return f"found {_show(body)}"


def _detector_violation(job_name: str, index: int, rule: str, detail: str) -> DetectorContractError:
    return DetectorContractError(
        f"samples[{index}]", rule, f"detector {job_name!r} on sample {index}: {detail}"
    )


def _check_sample(index: int, sample: object) -> bytes:
    if isinstance(sample, (str, bytes, Mapping)) or not isinstance(sample, Iterable):
        raise ContractError(
            f"samples[{index}]", "detector-sample", "a detector sample is a list of claims"
        )
    claims = []
    for j, claim in enumerate(sample):
        where = f"samples[{index}][{j}]"
        if not isinstance(claim, Mapping) or not set(claim) <= _SAMPLE_CLAIM_KEYS:
            raise ContractError(
                where,
                "detector-sample",
                "a claim is a map of namespace, subject, predicate, value and optional scope",
            )
        for part in ("namespace", "subject", "predicate"):
            if type(claim.get(part)) is not str or not claim[part]:
                raise ContractError(
                    f"{where}.{part}", "non-empty-str", f"{part} is a non-empty str"
                )
        if "value" not in claim:
            raise ContractError(f"{where}.value", "required", "a claim has a value")
        claims.append(dict(claim))
    try:
        return encode_canonical(canonical_value(claims, f"samples[{index}]"))
    except InputError as exc:
        raise ContractError(exc.field, "canonical-sample", exc.message) from None


def check_detector(
    spec: DetectorSpec,
    fn: Detector,
    samples: Iterable[Iterable[Mapping[str, Value]]],
    *,
    across_interpreters: bool = True,
) -> None:
    """Check that ``fn``, declared as ``spec``, keeps the detector contract on every sample.

    A sample is one input: a list of claims, each a map ``{"namespace", "subject",
    "predicate", "value"}`` with an optional ``"scope"``; claims of predicates ``spec`` does
    not read are left out, as every replica leaves them out. On every sample ``fn`` must
    (a) return well-formed findings (it never fails: a failure is a ``detector-failed``
    finding on every replica), (b) return the same findings on every call, and (c) the same
    in fresh interpreters under other ``PYTHONHASHSEED`` values (the order of a set or dict
    of str depends on it).

    Raises ContractError for a malformed argument or sample and DetectorContractError, naming
    the sample and the rule (``detector-fails``, ``deterministic``, ``importable``,
    ``same-in-every-interpreter``), otherwise.
    """
    job = _detector_job(spec, fn, samples)
    if across_interpreters:
        _check_detectors_across_interpreters([job])


def _detector_job(spec: DetectorSpec, fn: Detector, samples: object) -> _DetectorJob:
    if not isinstance(spec, DetectorSpec):
        raise ContractError("spec", "type", f"expected a DetectorSpec, got {_show(spec)}")
    if not callable(fn):
        raise ContractError("fn", "callable", f"a detector must be callable, got {_show(fn)}")
    if isinstance(samples, (str, bytes, Mapping)) or not isinstance(samples, Iterable):
        raise ContractError("samples", "iterable", "samples must be a list of inputs")
    encoded = tuple(_check_sample(i, sample) for i, sample in enumerate(samples))
    reads = [[n, p] for n, p in spec.reads]
    outcomes = []
    for index, data in enumerate(encoded):
        first = _detector_outcome(fn, spec.name, spec.version, reads, data)
        if decode_value(first)[0] == 1:  # type: ignore[index]
            raise _detector_violation(spec.label, index, "detector-fails", _describe_outcome(first))
        for _ in range(REPEATS - 1):
            again = _detector_outcome(fn, spec.name, spec.version, reads, data)
            if again != first:
                raise _detector_violation(
                    spec.label,
                    index,
                    "deterministic",
                    f"one call {_describe_outcome(first)}, another {_describe_outcome(again)}",
                )
        outcomes.append(first)
    return _DetectorJob(fn, spec, encoded, tuple(outcomes))


def _detector_jobs(
    registry: Registry, detectors: Mapping[str, DetectorSpec], samples: Mapping[str, Any]
) -> list[_DetectorJob]:
    from statefuse.registry.detectors import BUILTIN_DETECTORS

    custom = {
        label
        for label, spec in detectors.items()
        if not (spec.version == 1 and spec.name in BUILTIN_DETECTORS)
    }
    given = {_as_label(k): k for k in samples if _as_label(k) in detectors}
    missing = sorted(custom - set(given))
    if missing:
        raise ContractError(
            "samples",
            "samples-for-detectors",
            f"no samples for declared detector(s) {', '.join(map(repr, missing))}",
        )
    return [
        _detector_job(detectors[label], registry.detector_code(detectors[label]), samples[key])
        for label, key in sorted(given.items())
    ]


def _check_detectors_across_interpreters(jobs: list[_DetectorJob]) -> None:
    try:
        paths = [_import_path(job) for job in jobs]  # type: ignore[arg-type]
    except NormalizerContractError as exc:
        message = exc.message.replace("normalizer", "detector")
        raise DetectorContractError(exc.field, exc.rule, message) from None
    request = msgpack.packb(
        [
            [
                module,
                qualname,
                job.spec.name,
                job.spec.version,
                [list(r) for r in job.spec.reads],
                list(job.samples),
            ]
            for (module, qualname), job in zip(paths, jobs, strict=True)
        ],
        use_bin_type=True,
    )
    which = ", ".join(repr(job.name) for job in jobs)
    for seed in HASH_SEEDS:
        stdout = _fresh_interpreter(
            _DETECTOR_CHILD_SCRIPT, request, seed, which, DetectorContractError
        )
        try:
            reply = msgpack.unpackb(stdout, raw=False)
        except (ValueError, msgpack.UnpackException):
            reply = None
        if not isinstance(reply, list) or len(reply) != len(jobs):
            raise DetectorContractError(
                "fn",
                "child-failed",
                f"unreadable reply from the fresh interpreter checking {which}",
            )
        for job, rows in zip(jobs, reply, strict=True):
            for index, here in enumerate(job.outcomes):
                there = rows[index] if isinstance(rows, list) and index < len(rows) else b""
                if there != here:
                    said = _describe_outcome(there) if there else "gave no answer"
                    raise _detector_violation(
                        job.name,
                        index,
                        "same-in-every-interpreter",
                        f"here it {_describe_outcome(here)}, but in a fresh interpreter with"
                        f" PYTHONHASHSEED={seed} it {said}"
                        " (findings must not depend on the hash seed, e.g. on set or dict"
                        " order of str, nor on process state)",
                    )


def _check_in_process(fn: Normalizer, samples: Iterable[Value], *, name: str | None) -> _Job:
    """Checks (a), (c) and (d) on every sample; the job carries the outcomes for check (b)."""
    if not callable(fn):
        raise ContractError("fn", "callable", f"a normalizer must be callable, got {_show(fn)}")
    if name is not None and not isinstance(name, str):
        raise ContractError("name", "str", f"name must be a str or None, got {_show(name)}")
    label = name or _dotted_name(fn) or repr(fn)
    if isinstance(samples, (str, bytes, dict)) or not isinstance(samples, Iterable):
        raise ContractError(
            "samples", "iterable", "samples must be a list of values, not one value"
        )
    encoded: list[bytes] = []
    for index, sample in enumerate(samples):
        try:
            encoded.append(encode_canonical(canonical_value(sample, f"samples[{index}]")))
        except InputError as exc:
            raise ContractError(exc.field, "canonical-sample", exc.message) from None
    outcomes = []
    for index, data in enumerate(encoded):
        first = _apply(fn, label, index, data)
        for _ in range(REPEATS - 1):
            again = _apply(fn, label, index, data)
            if again.encoded != first.encoded:
                raise _violation(
                    label,
                    index,
                    data,
                    "deterministic",
                    f"one call {first.describe()}, another {again.describe()}",
                )
        if first.encoded is not None:
            twice = _apply(fn, label, index, first.encoded)
            if twice.encoded != first.encoded:
                raise _violation(
                    label,
                    index,
                    data,
                    "idempotent",
                    f"it {first.describe()}, but on that result it {twice.describe()}",
                )
        outcomes.append(first)
    return _Job(fn, label, tuple(encoded), tuple(outcomes))


def _apply(fn: Normalizer, label: str, index: int, data: bytes) -> _Outcome:
    """Run ``fn`` on a fresh copy of the sample encoded as ``data``, frozen as an op holds it
    (what a normalizer is given when a claim is written); checks (a) purity and (d)."""
    argument = frozen_value(decode_value(data))
    try:
        result = fn(argument)
    except NormalizationError as exc:
        return _Outcome(None, exc.rule)
    except Exception as exc:
        raise _violation(
            label,
            index,
            data,
            "declines-with-normalization-error",
            f"it raised {type(exc).__name__}: {exc} (decline a value by raising "
            "NormalizationError; anything else is a bug in the normalizer)",
        ) from exc
    if not _still_encodes_as(argument, data):
        raise _violation(label, index, data, "pure", "it changed its argument")
    try:
        return _Outcome(encode_canonical(canonical_value(result, "normal_form")))
    except InputError as exc:
        raise _violation(
            label,
            index,
            data,
            "canonical-output",
            f"it returned {_show(result)}, which is not a StateFuse value ({exc.message})",
        ) from None


def _still_encodes_as(value: object, data: bytes) -> bool:
    try:
        return encode_canonical(canonical_value(value)) == data
    except InputError:
        return False


def _violation(
    label: str, index: int, data: bytes, rule: str, detail: str
) -> NormalizerContractError:
    sample = _show(decode_value(data))
    return NormalizerContractError(
        f"samples[{index}]", rule, f"normalizer {label!r} on sample {sample}: {detail}"
    )


def _dotted_name(fn: object) -> str | None:
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if isinstance(module, str) and isinstance(qualname, str):
        return f"{module}.{qualname}"
    return None


def _import_path(job: _Job) -> tuple[str, str]:
    """(module, qualname) that import ``job.fn`` itself; raises NormalizerContractError."""
    module = getattr(job.fn, "__module__", None)
    qualname = getattr(job.fn, "__qualname__", None)
    hint = (
        "define it at module level of an importable module, or pass across_interpreters=False "
        "to skip the check in a fresh interpreter"
    )
    if not isinstance(module, str) or not isinstance(qualname, str):
        raise NormalizerContractError(
            "fn", "importable", f"normalizer {job.name!r} has no module and qualified name; {hint}"
        )
    where = f"{module}.{qualname}"
    who = f"normalizer {where}" if job.name == where else f"normalizer {job.name!r} ({where})"
    if module == "__main__" or "<" in qualname:
        raise NormalizerContractError("fn", "importable", f"{who} cannot be imported; {hint}")
    try:
        found: object = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise NormalizerContractError(
            "fn", "importable", f"{who}: importing it failed ({exc}); {hint}"
        ) from None
    if found is not job.fn:
        raise NormalizerContractError(
            "fn", "importable", f"{who}: that name holds another object than the one given; {hint}"
        )
    return module, qualname


def _check_across_interpreters(jobs: list[_Job]) -> None:
    """Check (b): each job's outcomes equal those of fresh interpreters under HASH_SEEDS."""
    request = msgpack.packb(
        [[*_import_path(job), list(job.samples)] for job in jobs], use_bin_type=True
    )
    for seed in HASH_SEEDS:
        replies = _run_child(request, seed, jobs)
        for job, rows in zip(jobs, replies, strict=True):
            for index, (here, (kind, payload)) in enumerate(zip(job.outcomes, rows, strict=True)):
                if kind == _OK and payload == here.encoded:
                    continue
                if kind == _DECLINED and here.encoded is None:
                    continue
                if kind == _FAILED:
                    there = f"raised {payload.decode(errors='replace')}"
                else:
                    there = _Outcome(payload if kind == _OK else None).describe()
                raise _violation(
                    job.name,
                    index,
                    job.samples[index],
                    "same-in-every-interpreter",
                    f"here it {here.describe()}, but in a fresh interpreter with "
                    f"PYTHONHASHSEED={seed} it {there} (normal forms must not depend on the hash "
                    "seed, e.g. on set or dict order of str, nor on process state)",
                )


def _fresh_interpreter(
    script: str,
    request: bytes,
    seed: int,
    which: str,
    error: type[NormalizerContractError] | type[DetectorContractError],
) -> bytes:
    """Run ``script`` in a fresh interpreter with ``PYTHONHASHSEED=seed`` on ``request``; its
    stdout. Raises ``error`` (rule ``child-timeout`` or ``child-failed``) if the child cannot
    start, outlives `CHILD_TIMEOUT_SECONDS` or fails."""
    env = {**os.environ, "PYTHONHASHSEED": str(seed)}
    try:
        done = subprocess.run(
            [sys.executable, "-c", script, json.dumps(sys.path)],
            input=request,
            capture_output=True,
            env=env,
            timeout=CHILD_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise error(
            "fn",
            "child-timeout",
            f"checking {which} took longer than {CHILD_TIMEOUT_SECONDS} s in a fresh "
            f"interpreter with PYTHONHASHSEED={seed}",
        ) from None
    except OSError as exc:
        raise error(
            "fn", "child-failed", f"could not start {sys.executable!r} to check {which}: {exc}"
        ) from None
    if done.returncode != 0:
        stderr = done.stderr.decode(errors="replace").strip()[-MAX_STDERR_CHARS:]
        raise error(
            "fn",
            "child-failed",
            f"a fresh interpreter with PYTHONHASHSEED={seed} failed while checking {which} "
            f"(exit status {done.returncode}):\n{stderr}",
        )
    return done.stdout


def _run_child(request: bytes, seed: int, jobs: list[_Job]) -> list[list[tuple[int, bytes]]]:
    """Run the child script under ``seed``; its rows per job, one ``(kind, payload)`` per sample.

    Raises NormalizerContractError if the child cannot start, times out, fails or replies with
    something else than one row per sample.
    """
    which = ", ".join(repr(job.name) for job in jobs)
    stdout = _fresh_interpreter(_CHILD_SCRIPT, request, seed, which, NormalizerContractError)
    return _parse_reply(stdout, jobs, which)


def _parse_reply(data: bytes, jobs: list[_Job], which: str) -> list[list[tuple[int, bytes]]]:
    unreadable = NormalizerContractError(
        "fn", "child-failed", f"unreadable reply from the fresh interpreter checking {which}"
    )
    try:
        reply = msgpack.unpackb(data, raw=False)
    except (ValueError, msgpack.UnpackException):
        raise unreadable from None
    if not isinstance(reply, list) or len(reply) != len(jobs):
        raise unreadable
    parsed = []
    for job, rows in zip(jobs, reply, strict=True):
        if not isinstance(rows, list) or len(rows) != len(job.samples):
            raise unreadable
        parsed_rows = []
        for row in rows:
            if not (
                isinstance(row, list)
                and len(row) == 2
                and row[0] in (_OK, _DECLINED, _FAILED)
                and isinstance(row[1], bytes)
            ):
                raise unreadable
            parsed_rows.append((int(row[0]), row[1]))
        parsed.append(parsed_rows)
    return parsed
