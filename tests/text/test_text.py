"""The one text toolkit: the same words count in memories and questions, and no input is slow."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dialogmem._text._words import (
    content_tokens,
    entities,
    is_filler,
    looks_like_verb,
    memory_keywords,
    missing_words,
    query_keywords,
    tokens,
)
from timing import assert_linear


def test_entities_keywords_filler() -> None:
    text = "Hey Mel! The Museum of Modern Art in New York was great, Alice and I loved it."
    assert entities(text) == ["Mel", "Museum of Modern Art", "New York", "Alice"]
    assert entities("Yesterday I met John Smith at Barnes & Noble on Monday.") == ["John Smith", "Barnes & Noble"]
    assert memory_keywords("Caroline: I went to the LGBTQ support group yesterday (2023-05-07).") == [
        "caroline", "lgbtq", "support", "group"]
    assert is_filler("ok thanks!") and is_filler("Haha, so cool!") and is_filler("See you soon!")
    assert not is_filler("I adopted 2 cats") and not is_filler("Thanks, the pottery class was fun")


def test_question_keywords_and_entities() -> None:
    q = 'What did Caroline say about the "Pride parade" in New York last week?'
    kws = query_keywords(q)
    assert kws[0] == "Pride parade"
    assert {"caroline", "pride", "parade", "new", "york"} <= set(kws)
    assert not {"what", "did", "say", "the", "about", "last", "week"} & set(kws)
    assert entities(q) == ["Caroline", "Pride", "New York"]
    assert entities("What is Melanie's favourite book?") == ["Melanie"]
    assert entities("According to Gina, what makes Jon a mentor?") == ["Gina", "Jon"]
    assert "long" not in query_keywords("How long has Jon run his studio?")


def test_memories_and_questions_share_one_tokenizer() -> None:
    memory = "Melanie: My son’s favourite book is Charlotte's Web."
    question = "What is Melanie's son's favourite book?"
    assert {"melanie", "son", "favourite", "book"} <= set(content_tokens(memory))
    assert {"melanie", "son", "favourite", "book"} <= set(query_keywords(question))
    assert tokens("Melanie’s") == tokens("Melanie's") == ["melanie"]


def test_tokens_lower_case_each_word_as_normalise_word_does() -> None:
    """Plain-ASCII text is lower-cased once as a whole (the fast path): the words equal those of
    normalising word by word, on random ASCII text made of the characters that matter (other text
    takes the word-by-word path itself)."""
    import random

    from dialogmem._text._words import WORD, normalise_word

    rng = random.Random(5)
    with_apostrophes = [*"aZqS09'&.-  ,!?", "'s", "'S", "n't"]
    without = [*"aZqS09&.-  ,!?", "s", "S"]  # the path that skips the possessive pass
    for alphabet in (with_apostrophes, without):
        for _ in range(3000):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
            assert tokens(text) == [w for w in (normalise_word(m) for m in WORD.findall(text)) if w], text


def test_missing_words() -> None:
    assert missing_words("I went to the LGBTQ support group yesterday, the group was great",
                         "Caroline attended a support group") == ["lgbtq", "yesterday", "great"]
    assert missing_words("", "anything") == [] and missing_words("Same words here", "same WORDS here.") == []


@pytest.mark.parametrize(("word", "verb"), [("Painting", True), ("Walked", True), ("Honestly", True),
                                              ("Ed", False), ("Bing", False), ("Sing", False), ("Mel", False)])
def test_verb_shape(word: str, verb: bool) -> None:
    assert looks_like_verb(word) is verb


ADVERSARIAL: dict[str, Callable[[int], str]] = {  # each at n = 100k characters or so
    "one long word": lambda n: "A" + "a" * n,
    "one long word ending like a verb": lambda n: "A" + "a" * n + "ing",
    "one long capitalised run": lambda n: "Aaaa " * (n // 5),
    "apostrophes and dots": lambda n: "a" + "'." * (n // 2) + "!",
    "quotes never closed": lambda n: '"' + "x " * (n // 2),
    "many quotes": lambda n: "'ab' " * (n // 5),
    "date notes never closed": lambda n: "(2023 " * (n // 6),
    "spaces": lambda n: "how" + " " * n + "long",
    "connectors": lambda n: "Bank" + " of" * (n // 3),
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_every_function_is_fast_on_adversarial_text(name: str) -> None:
    # 100k characters: a quadratic pattern takes minutes here, a linear one milliseconds.
    for fn in (tokens, content_tokens, is_filler, memory_keywords, query_keywords, entities,
               lambda t: missing_words(t, t[::-1])):
        assert_linear(fn, ADVERSARIAL[name], 100_000)
