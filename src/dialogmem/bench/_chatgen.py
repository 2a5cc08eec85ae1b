"""Everyday chat for the haystack benchmark: two people talking about ordinary things, from templates.

Pure and seeded: the same ``random.Random`` state gives the same session. The vocabularies and the
people and places are invented here (none is taken from a dataset), so a generated line can carry
no fact of a LoCoMo conversation; the haystack's answer filter checks that anyway.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

#: invented first names; the distractor recipe draws its people from here
PEOPLE = (
    "Aldous", "Brisa", "Calloway", "Delphine", "Eskil", "Fenna", "Gideon", "Halvard", "Isolde", "Jorah",
    "Kestrel", "Linnea", "Marek", "Noor", "Oswin", "Petra", "Quill", "Rosalind", "Soren", "Tamsin",
    "Ulric", "Vesna", "Wystan", "Xanthe", "Yorick", "Zelda", "Anouk", "Bastian", "Cosima", "Dorian",
    "Elowen", "Florin", "Greer", "Hollis", "Ingrid", "Jasper", "Kalina", "Lorcan", "Mireille", "Nils",
    "Odalys", "Pascal", "Rafferty", "Saoirse", "Thaddeus", "Ursa", "Valentin", "Wren", "Ysolde", "Zoltan",
    "Amara", "Bertrand", "Clementine", "Desmond", "Esperanza", "Fitzgerald", "Gwendolyn", "Hamish", "Imogen",
    "Jovan", "Katya", "Leopold", "Marisol", "Nikolai", "Ottoline", "Perpetua", "Radomir", "Seraphina",
    "Tobiah", "Umberto", "Verity", "Wilhelmina", "Yannick", "Zinnia", "Anselm", "Briony", "Caspian",
    "Dagny", "Emrys", "Faustina", "Gulliver", "Henrike", "Ignatius", "Juniper", "Konrad", "Lucasta",
    "Mordecai", "Nerissa", "Octavian", "Philippa", "Rosamund", "Sylvester", "Theodora", "Valdemar",
)
#: invented towns and places
PLACES = (
    "Varnholm", "Quillby", "Ostmere", "Bramblecote", "Kellerwick", "Dunmarrow", "Pellingford", "Ashgrove Bay",
    "Thornwell", "Castlebury Heath", "Wrenfield", "Morrowdale", "Esterhaven", "Gallowmere", "Halvik",
    "Brisbury", "Lowenmark", "Saltcombe Reach", "Tarrowgate", "Fenwick Hollow", "Orrin Falls", "Pemberly Cross",
    "Ravelstoke", "Sunnacre", "Vellmoor", "Aldermoss", "Cobblestrand", "Drennick", "Elmsworth Vale",
    "Fairholt", "Glimmerton", "Hessock", "Ivybridge Lane", "Jarrowfield", "Kilnsey Point", "Larkmoor",
    "Millbrae Harbour", "Nettlecombe", "Oakhurst Rise", "Pinnacle Flats",
)

_VOCAB: dict[str, tuple[str, ...]] = {
    "food": ("lentil soup", "mushroom risotto", "banana bread", "chickpea curry", "sourdough", "ramen",
             "lemon tart", "stuffed peppers", "a tomato salad", "pancakes", "fish tacos", "apple crumble",
             "dumplings", "vegetable lasagna", "a spicy stew", "focaccia", "carrot cake", "pad thai"),
    "activity": ("cycling", "bouldering", "knitting", "woodworking", "birdwatching", "baking", "yoga",
                 "rowing", "chess", "salsa dancing", "gardening", "sketching", "trail running", "kayaking",
                 "photography", "crossword puzzles", "table tennis", "calligraphy"),
    "item": ("a new kettle", "a second-hand bike", "noise-cancelling headphones", "a standing desk",
             "a rain jacket", "a cast-iron pan", "hiking boots", "a sewing machine", "a tent", "a toaster",
             "a bookshelf", "a coffee grinder", "a desk lamp", "a yoga mat", "a mechanical keyboard"),
    "show": ("a documentary about deep-sea fish", "an old detective series", "a cooking competition",
             "a slow sci-fi film", "a sitcom about a hotel", "a nature series about owls",
             "a courtroom drama", "a travel show about islands", "a cartoon about a lighthouse keeper"),
    "chore": ("fixing the leaky tap", "painting the hallway", "clearing out the garage",
              "sorting the recycling", "repotting the plants", "cleaning the windows", "doing the taxes",
              "assembling a wardrobe", "mending a torn curtain", "descaling the kettle"),
    "weather": ("pouring rain", "a heatwave", "thick fog", "strong wind", "the first frost", "endless drizzle",
                "a thunderstorm", "bright sunshine", "a light snowfall"),
    "work": ("a long planning meeting", "a deadline on Friday", "a new manager", "a training course",
             "a project review", "the quarterly report", "an office move", "a client visit",
             "a team lunch", "a broken printer"),
    "animal": ("a hedgehog", "a fox", "a pair of swans", "a stray cat", "a woodpecker", "some ducklings",
               "a squirrel", "a heron", "a family of deer"),
    "weekday": ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"),
    "when": ("this morning", "last night", "over the weekend", "yesterday", "a few days ago", "on my lunch break",
             "after work", "earlier today"),
    "feeling": ("tired", "pretty good", "a bit stressed", "relaxed", "excited", "distracted", "cheerful",
                "restless", "content"),
    "number": ("two", "three", "four", "five", "six", "seven", "eight", "ten", "twelve"),
}

#: statements and questions by topic; ``{slot}`` is a vocabulary word, ``{person}`` a friend, ``{place}`` a town
_TOPICS: dict[str, tuple[str, ...]] = {
    "cooking": (
        "I made {food} {when} and it turned out better than expected.",
        "Have you ever tried making {food}? I keep burning the edges.",
        "{person} gave me a recipe for {food}, I might try it on {weekday}.",
        "I bought way too many vegetables, so it's going to be {food} all week.",
        "The secret to good {food} is patience, or so my neighbour says.",
    ),
    "hobbies": (
        "I started {activity} {when}, my arms are still sore.",
        "{person} asked me to join a {activity} group that meets every {weekday}.",
        "I've been doing {activity} for {number} weeks now and I'm hooked.",
        "Do you still do {activity}? I was thinking of giving it a go.",
        "There's a {activity} class in {place}, but it's always full.",
    ),
    "shopping": (
        "I finally bought {item}, it was on sale.",
        "Should I get {item}? Mine is falling apart.",
        "{person} recommended {item}, but the reviews are mixed.",
        "I returned {item} {when}, it was the wrong size.",
        "The market in {place} had {item} for almost nothing.",
    ),
    "tv": (
        "I watched {show} {when}, it was oddly relaxing.",
        "Have you seen {show}? Everyone at work talks about it.",
        "{person} and I fell asleep halfway through {show}.",
        "I'm on episode {number} of {show} and I can't stop.",
    ),
    "home": (
        "I spent {when} {chore}, it took forever.",
        "I keep putting off {chore}, maybe this {weekday}.",
        "{person} came over to help with {chore}, we ordered pizza afterwards.",
        "Our landlord finally agreed to pay for {chore}.",
    ),
    "weather": (
        "We had {weather} here {when}, I got completely soaked.",
        "Is it {weather} in {place} too? The forecast says it lasts till {weekday}.",
        "I love {weather}, it's the perfect excuse to stay in.",
        "The bus was late again because of {weather}.",
    ),
    "work": (
        "Work has been busy, there's {work} coming up.",
        "I had {work} {when}, I'm feeling {feeling} now.",
        "{person} from work invited everyone to {place} for a team day.",
        "I might ask for a day off on {weekday}, I need a break after {work}.",
    ),
    "nature": (
        "I saw {animal} in the park {when}!",
        "There's {animal} that visits our garden every {weekday}.",
        "We walked along the river near {place} and spotted {animal}.",
        "{person} swears there is {animal} living under their shed.",
    ),
    "travel": (
        "I'm thinking of a weekend in {place}, have you been?",
        "The train to {place} took {number} hours because of works on the line.",
        "{person} just moved to {place} and loves the quiet.",
        "We stayed in a tiny cabin near {place}, no signal at all.",
    ),
    "mood": (
        "I'm feeling {feeling} today, not sure why.",
        "Honestly I've been {feeling} since {weekday}.",
        "Slept {number} hours and I still feel {feeling}.",
    ),
}
#: replies that fit after almost any line
_REPLIES = (
    "Ha, that sounds like fun!", "Oh no, that's annoying.", "Nice! Tell me more.", "I know the feeling.",
    "That's great to hear.", "Really? I had no idea.", "Sounds lovely, I'm a bit jealous.",
    "Good for you!", "Hmm, I'm not sure I'd have the patience.", "Let me know how it goes.",
    "Same here, honestly.", "That made me laugh.", "Fair enough.", "Wow, that's a lot.",
    "I should try that sometime.", "Hope it gets better soon.",
)
_SLOT = re.compile(r"\{(\w+)\}")


def fill(template: str, rng: random.Random, people: Sequence[str], places: Sequence[str]) -> str:
    """A template with every slot filled from its vocabulary (``person`` and ``place`` from the given lists)."""
    def one(match: re.Match[str]) -> str:
        slot = match.group(1)
        if slot == "person":
            return rng.choice(people)
        if slot == "place":
            return rng.choice(places)
        return rng.choice(_VOCAB[slot])

    return _SLOT.sub(one, template)


def chat_session(rng: random.Random, speakers: tuple[str, str], n_turns: int, *,
                 friends: Sequence[str], places: Sequence[str]) -> list[tuple[str, str]]:
    """``n_turns`` (speaker, text) lines between the two ``speakers`` on one to three topics: each
    topic opens with a statement, and replies or further statements follow."""
    topics = rng.sample(sorted(_TOPICS), k=min(len(_TOPICS), rng.randint(1, 3)))
    lines: list[tuple[str, str]] = []
    who = rng.randrange(2)
    for i in range(n_turns):
        topic = topics[min(len(topics) - 1, i * len(topics) // max(1, n_turns))]
        if i > 0 and rng.random() < 0.35:
            text = rng.choice(_REPLIES)
        else:
            text = fill(rng.choice(_TOPICS[topic]), rng, friends, places)
        lines.append((speakers[who], text))
        who = 1 - who
    return lines
