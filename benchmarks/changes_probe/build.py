"""Build the changes probe set (LoCoMo JSON) from a spec file and a small-talk pool.

    python benchmarks/changes_probe/build.py [SPEC] [FILLER] [OUT]

Defaults: ``conversations.txt`` and ``filler.txt`` beside this file, written to
``src/dialogmem/data/changes_probe.json``. The facts and questions are the spec's, word for word;
only the small talk between them, the neutral reactions and each session's length are drawn, from a
random generator seeded by the conversation id, so a rebuild gives the same file.
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
DEFAULT_OUT = ROOT / "src" / "dialogmem" / "data" / "changes_probe.json"

GREETINGS = [
    "Hey {you}! How's your week been?|Not bad at all, busy but good. You?|Can't complain, honestly.",
    "Hi {you}, got a minute to catch up?|Always! It feels like ages.|It really does.",
    "Morning {you}! Coffee in hand?|Tea, but close enough. What's new?|Loads, where do I start.",
    "{you}! Long time no chat.|I know, life got hectic. Good to hear from you.|You too!",
    "Evening {you}, you free for a chat?|Yes, just sat down after dinner.|Perfect timing then.",
    "Hey you. Survived the week?|Barely! Tell me something nice.|I'll try my best.",
    "Hello hello! How are things?|Good, a bit tired. How about you?|Same, but happy to talk.",
]
CLOSERS = [
    "Right, I should get going. Talk soon?|Definitely, take care!",
    "I need to start dinner, but this was lovely.|Same, speak soon!",
    "Okay, bedtime for me. Night!|Night night, chat soon.",
    "Gotta run, my next thing starts in five minutes.|No worries, catch you later!",
    "Let's do this again next week.|Deal. Bye for now!",
    "I'll let you go. Great catching up!|You too, bye!",
]
REACTIONS = [
    "Wow, that's a change!",
    "Really? Tell me more.",
    "Huh, I did not see that coming.",
    "Okay, noted!",
    "How do you feel about it?",
    "Interesting, how did that come about?",
    "That's a lot going on.",
    "Oh wow. Big week for you.",
    "Fair enough!",
    "Ha, life is never boring with you.",
    "Makes sense to me.",
    "Good to know!",
]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]


@dataclass
class Fact:
    tag: str
    session: int
    who: str  # "a" or "b"
    text: str
    reply: str | None = None


@dataclass
class Question:
    state: str
    kind: str
    said: str
    evidence: list[str]
    superseded: list[str]
    answer: str
    question: str


@dataclass
class Spec:
    id: str
    a: str
    b: str
    dates: list[str] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)


def _tags(text: str) -> list[str]:
    text = text.strip()
    return [] if text == "-" else [t.strip() for t in text.split(",") if t.strip()]


def parse_spec(text: str) -> list[Spec]:
    specs: list[Spec] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"line {n}"
        if line.startswith("== "):
            cid, a, b = (p.strip() for p in line[3:].split("|"))
            specs.append(Spec(cid, a, b))
        elif line.startswith("dates:"):
            specs[-1].dates = [d.strip() for d in line[6:].split(";")]
        elif line.startswith("F "):
            head, body = line[2:].split("|", 1)
            tag, session, who = head.split()
            if who not in ("a", "b"):
                raise ValueError(f"{where}: speaker must be a or b")
            specs[-1].facts.append(Fact(tag, int(session), who, body.strip()))
        elif line.startswith("R "):
            specs[-1].facts[-1].reply = line.split("|", 1)[1].strip()
        elif line.startswith("Q "):
            head, ev, sup, answer, question = line[2:].split("|")
            state, kind, said = head.split()
            specs[-1].questions.append(Question(state, kind, said, _tags(ev), _tags(sup), answer.strip(),
                                                question.strip()))
        else:
            raise ValueError(f"{where}: cannot read {line!r}")
    return specs


def parse_filler(text: str) -> list[list[str]]:
    return [[t.strip() for t in line.split(" | ")] for line in text.splitlines()
            if line.strip() and not line.startswith("#")]


def locomo_time(text: str) -> str:
    when = datetime.strptime(text, "%Y-%m-%d %H:%M")
    hour = when.hour % 12 or 12
    half = "am" if when.hour < 12 else "pm"
    return f"{hour}:{when.minute:02d} {half} on {when.day} {MONTHS[when.month - 1]}, {when.year}"


def build_conversation(spec: Spec, filler: list[list[str]], *, min_turns: int = 16, max_turns: int = 34
                       ) -> dict[str, object]:
    rng = random.Random(spec.id)
    names = {"a": spec.a, "b": spec.b}
    other = {"a": "b", "b": "a"}
    pool = list(range(len(filler)))
    rng.shuffle(pool)
    conv: dict[str, object] = {"speaker_a": spec.a, "speaker_b": spec.b}
    ids: dict[str, str] = {}
    for s, date in enumerate(spec.dates, 1):
        # blocks of (speaker key, text, fact tag or None)
        facts = [f for f in spec.facts if f.session == s]
        fact_blocks = []
        for f in facts:
            reply = f.reply or rng.choice(REACTIONS)
            fact_blocks.append([(f.who, f.text, f.tag), (other[f.who], reply, None)])
        target = rng.randint(min_turns, max_turns)
        used = 5 + sum(len(b) for b in fact_blocks)  # greeting 3 + closer 2
        fill_blocks = []
        while used < target and pool:
            ex = filler[pool.pop()]
            first = rng.choice("ab")
            block = []
            who = first
            for text in ex:
                block.append((who, text.replace("{you}", names[other[who]]), None))
                who = other[who]
            fill_blocks.append(block)
            used += len(block)
        # facts keep their order; small talk goes around them at random places
        slots = sorted(rng.sample(range(len(fill_blocks) + len(fact_blocks)), len(fact_blocks)))
        body, fi, ki = [], 0, 0
        for i in range(len(fill_blocks) + len(fact_blocks)):
            if ki < len(slots) and slots[ki] == i:
                body.append(fact_blocks[ki])
                ki += 1
            else:
                body.append(fill_blocks[fi])
                fi += 1
        opener = rng.choice("ab")
        greet = rng.choice(GREETINGS).split("|")
        close = rng.choice(CLOSERS).split("|")
        blocks = [[(opener if i % 2 == 0 else other[opener], t.replace("{you}", names[other[opener]]), None)
                   for i, t in enumerate(greet)], *body,
                  [(opener if i % 2 == 0 else other[opener], t, None) for i, t in enumerate(close)]]
        turns = []
        for block in blocks:
            for who, text, tag in block:
                dia = f"D{s}:{len(turns) + 1}"
                turns.append({"speaker": names[who], "dia_id": dia, "text": text})
                if tag is not None:
                    if tag in ids:
                        raise ValueError(f"{spec.id}: tag {tag} used twice")
                    ids[tag] = dia
        conv[f"session_{s}_date_time"] = locomo_time(date)
        conv[f"session_{s}"] = turns
    missing = [f.tag for f in spec.facts if f.tag not in ids]
    if missing:
        raise ValueError(f"{spec.id}: facts in sessions that do not exist: {missing}")
    qa = []
    for q in spec.questions:
        unknown = [t for t in q.evidence + q.superseded if t not in ids]
        if unknown:
            raise ValueError(f"{spec.id}: unknown tags {unknown} in {q.question!r}")
        qa.append({"question": q.question, "answer": q.answer, "evidence": [ids[t] for t in q.evidence],
                   "category": 2 if q.kind == "plan" else 4, "state": q.state, "change_kind": q.kind,
                   "said": q.said, "superseded": [ids[t] for t in q.superseded]})
    return {"sample_id": spec.id, "conversation": conv, "qa": qa}


def build(spec_text: str, filler_text: str) -> list[dict[str, object]]:
    filler = parse_filler(filler_text)
    return [build_conversation(s, filler) for s in parse_spec(spec_text)]


def main(argv: list[str]) -> None:
    spec = Path(argv[0]) if argv else HERE / "conversations.txt"
    filler = Path(argv[1]) if len(argv) > 1 else HERE / "filler.txt"
    out = Path(argv[2]) if len(argv) > 2 else DEFAULT_OUT
    data = build(spec.read_text(encoding="utf-8"), filler.read_text(encoding="utf-8"))
    out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    turns = sum(len(v) for c in data for k, v in c["conversation"].items()  # type: ignore[attr-defined]
                if k.startswith("session_") and isinstance(v, list))
    print(f"wrote {out}: {len(data)} conversations, {turns} turns, "
          f"{sum(len(c['qa']) for c in data)} questions")  # type: ignore[arg-type]


if __name__ == "__main__":
    main(sys.argv[1:])
