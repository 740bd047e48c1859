"""Search by meaning: 20 reworded questions over 200 memories, lexical vs hybrid ranking.

``python -m benchmarks.search`` writes 200 memories (20 that the questions ask about, 180 others
drawn with a fixed seed from the same topics and words) to a replica in memory, asks 20
questions reworded so that none shares a word with the key or value of the memory it asks about
(stop words aside, and but for a person's and a company's name in two), and prints hit@1 and
hit@5 of the right memory for

- **lexical**: `LexicalRanker` (BM25, the default, no dependency);
- **hybrid**: `HybridRanker` (lexical and vector rankings fused by reciprocal rank fusion,
  k = 60) with `ConceptEmbedder`.

`ConceptEmbedder` is a stand-in for a model, defined here so that nothing downloads: a hashed
bag of concepts, where a small synonym table maps words to one concept ("venue", "room" and
"hall" are one), so a reworded question lands near the memory it means. A real model does this
from its training; the benchmark measures the fusion and the plumbing, not a model. The same
embedder and scenario serve the test suite (``tests/test_fusion.py``).
"""

from __future__ import annotations

import argparse
import hashlib
import random
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from statefuse.core.op import ClaimAdded
from statefuse.reading.ranker import STOPWORDS, LexicalRanker
from statefuse.retrieval.fusion import HybridRanker, ranking
from statefuse.sync.replica import Replica

#: Words of one meaning, each list one concept (named by its first word).
CONCEPTS: tuple[tuple[str, ...], ...] = (
    ("room", "venue", "hall", "space"),
    ("size", "capacity", "big", "large", "people", "headcount"),
    ("offsite", "retreat", "awayday"),
    ("vendor", "supplier", "provider"),
    ("price", "charge", "cost", "fee", "eur", "pay"),
    ("month", "monthly"),
    ("launch", "release", "ship", "go-live"),
    ("deadline", "due", "cutoff"),
    ("wifi", "wireless", "network"),
    ("password", "passphrase", "secret", "otter"),
    ("database", "db", "datastore", "postgresql"),
    ("engine", "system", "software"),
    ("hotel", "lodging", "accommodation", "stay", "hilton"),
    ("conference", "summit", "convention"),
    ("leave", "timeoff", "off"),
    ("parental", "parent", "mothers", "fathers", "baby"),
    ("mobile", "phone", "smartphone"),
    ("app", "application"),
    ("framework", "toolkit", "react", "native"),
    ("q3", "third"),
    ("budget", "money", "spend", "funds"),
    ("rotation", "renew", "rotate", "refresh"),
    ("api", "access"),
    ("keys", "key", "token", "tokens", "credentials"),
    ("support", "helpdesk", "servicedesk"),
    ("hours", "open", "reach", "weekdays"),
    ("newsletter", "digest", "bulletin"),
    ("email", "mail"),
    ("frequency", "often", "biweekly", "cadence"),
    ("contract", "agreement"),
    ("renewal", "extended", "extend", "renews"),
    ("oncall", "pager", "responder"),
    ("primary", "first", "lead"),
    ("brand", "logo", "identity"),
    ("color", "hue", "palette", "teal"),
    ("frontend", "ui", "interface"),
    ("openings", "vacancies", "positions", "roles"),
    ("backups", "snapshots", "copies"),
    ("retention", "kept", "keep", "retain", "retained", "days"),
    ("coffee", "espresso"),
    ("machine", "maker"),
    ("status", "working", "broken"),
    ("hiring", "recruiting"),
    ("customer", "client"),
    ("contact", "person", "dana"),
)
_CONCEPT = {w: group[0] for group in CONCEPTS for w in group}
_WORD = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)?")


def concepts(text: str) -> list[str]:
    """The concepts of ``text``: its words, stop words left out, each mapped by `CONCEPTS`."""
    out = []
    for w in _WORD.findall(text.lower().replace("_", " ")):
        if w in STOPWORDS:
            continue
        c = _CONCEPT.get(w)
        if c is None and len(w) > 3 and w.endswith("s"):
            c = _CONCEPT.get(w[:-1])
        out.append(c if c is not None else w)
    return out


@dataclass(slots=True)
class ConceptEmbedder:
    """A deterministic `Embedder`: each concept of the text (see `concepts`) adds ±1 at a
    position its hash picks (the signed hashing trick). ``calls`` and ``texts`` count what it
    was asked to embed."""

    name: str = "concepts-v1"
    dimension: int = 256
    calls: int = 0
    texts: int = 0

    def vector(self, text: str) -> list[float]:
        v = [0.0] * self.dimension
        for c in concepts(text):
            h = hashlib.blake2b(c.encode(), digest_size=8).digest()
            at = int.from_bytes(h[:4], "little") % self.dimension
            v[at] += 1.0 if h[4] & 1 else -1.0
        return v

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        self.texts += len(texts)
        return [self.vector(t) for t in texts]

    async def aembed(self, texts: Sequence[str]) -> list[list[float]]:
        return self.embed(texts)


#: (key, value, a question reworded to share no word with either but a name).
TARGETS: tuple[tuple[str, str, str], ...] = (
    ("events/offsite/room_size", "40 people", "What capacity must the retreat venue have?"),
    ("billing/vendor_acme/price", "1200 EUR per month", "How much does the supplier charge?"),
    ("launch/beta/deadline", "March 3", "When is the release due?"),
    ("office/wifi/password", "blue-otter-42", "What is the wireless passphrase?"),
    ("infra/database/engine", "PostgreSQL 16", "Which db system do we run?"),
    ("travel/conference/hotel", "Hilton Midtown", "Where are we lodging for the summit?"),
    ("hr/parental_leave/weeks", "16", "How long is the time off for new mothers?"),
    ("product/mobile_app/framework", "React Native", "What toolkit is the phone application on?"),
    ("finance/q3/budget", "250k", "How much money can we spend in the third quarter?"),
    ("security/api_keys/rotation", "every 90 days", "How often do we renew access tokens?"),
    ("support/desk/hours", "9 to 5 weekdays", "When can clients reach the helpdesk?"),
    ("marketing/newsletter/frequency", "biweekly", "How often does the email digest go out?"),
    ("legal/contract_acme/renewal", "auto-renews in June", "When is the agreement extended?"),
    ("ops/oncall/primary", "Bob", "Who is the lead responder this week?"),
    ("design/brand/color", "teal", "What hue is our logo?"),
    ("hiring/frontend/openings", "2 positions", "How many ui vacancies are there?"),
    ("data/backups/retention", "30 days", "How long are snapshots retained?"),
    ("kitchen/coffee_machine/status", "broken since Monday", "Is the espresso maker working?"),
    ("customer/globex/contact", "Dana Smith", "Who is our person at Globex?"),
    ("team/alice/role", "backend engineer", "What does Alice do here?"),
)

_TOPICS = (
    "events", "billing", "launch", "office", "infra", "travel", "hr", "product", "finance",
    "security", "support", "marketing", "legal", "ops", "design", "hiring", "data", "kitchen",
)  # fmt: skip
_SUBJECTS = (
    "retreat_photos", "calendar_old", "spend_report", "archive", "parking",
    "lunch_order", "quarterly_review", "printer", "standup", "onboarding", "badge_reader",
    "plants", "mailroom", "whiteboard", "fire_drill", "desk_booking", "visitor_log",
    "style_guide", "roadmap", "okrs", "town_hall", "wiki", "expense_tool", "laptop_refresh",
    "team_lunch",
)  # fmt: skip
_PREDICATES = ("owner", "location", "note", "state", "link", "reviewer", "updated")
_VALUES = (
    "in the shared drive", "Carol", "pending review", "see the wiki", "room 4B", "done",
    "Erin and Frank", "next sprint", "the old one", "blocked on legal", "archived", "weekly",
)  # fmt: skip

SEED = 20_261_127
MEMORIES = 200


def memories(seed: int = SEED, n: int = MEMORIES) -> list[tuple[str, str]]:
    """The (key, value) of the ``n`` memories: `TARGETS` and others drawn with ``seed``."""
    rng = random.Random(seed)
    out = [(k, v) for k, v, _ in TARGETS]
    keys = {k for k, _ in out}
    while len(out) < n:
        key = f"{rng.choice(_TOPICS)}/{rng.choice(_SUBJECTS)}/{rng.choice(_PREDICATES)}"
        if key not in keys:
            keys.add(key)
            out.append((key, rng.choice(_VALUES)))
    return out


def load(replica: Replica) -> dict[str, ClaimAdded]:
    """Write the memories; their claims by key."""
    with replica.batch():
        return {k: replica.add_claim(k, v) for k, v in memories()}


@dataclass(frozen=True, slots=True)
class Hits:
    at1: int
    at5: int
    asked: int


def measure(ranker: object, claims: dict[str, ClaimAdded]) -> Hits:
    """hit@1 and hit@5 of the right memory over `TARGETS` with ``ranker``."""
    corpus = tuple(claims.values())
    at1 = at5 = 0
    for key, _, question in TARGETS:
        order = ranking(ranker.scores(question, corpus))  # type: ignore[attr-defined]
        want = claims[key].claim_id
        at1 += order[:1] == [want]
        at5 += want in order[:5]
    return Hits(at1, at5, len(TARGETS))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.search", description=__doc__)
    parser.parse_args(argv)
    with Replica.memory(space="bench-search") as replica:
        claims = load(replica)
        rows = [
            ("lexical (BM25)", measure(LexicalRanker(), claims)),
            ("hybrid (RRF k=60)", measure(HybridRanker(ConceptEmbedder()), claims)),
        ]
    print(f"{len(TARGETS)} reworded questions over {MEMORIES} memories (seed {SEED})")
    print(f"{'ranking':<20} {'hit@1':>7} {'hit@5':>7}")
    for label, h in rows:
        print(f"{label:<20} {h.at1:>4}/{h.asked} {h.at5:>4}/{h.asked}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
