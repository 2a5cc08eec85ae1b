"""The one text toolkit: the same words count in memories and questions, and no input is slow."""

from __future__ import annotations

import time

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


def test_missing_words() -> None:
    assert missing_words("I went to the LGBTQ support group yesterday, the group was great",
                         "Caroline attended a support group") == ["lgbtq", "yesterday", "great"]
    assert missing_words("", "anything") == [] and missing_words("Same words here", "same WORDS here.") == []


@pytest.mark.parametrize(("word", "verb"), [("Painting", True), ("Walked", True), ("Honestly", True),
                                              ("Ed", False), ("Bing", False), ("Sing", False), ("Mel", False)])
def test_verb_shape(word: str, verb: bool) -> None:
    assert looks_like_verb(word) is verb


ADVERSARIAL = {
    "one long word": "A" + "a" * 99_999,
    "one long word ending like a verb": "A" + "a" * 99_999 + "ing",
    "one long capitalised run": "Aaaa " * 20_000,
    "apostrophes and dots": "a" + "'." * 50_000 + "!",
    "quotes never closed": '"' + "x " * 50_000,
    "many quotes": "'ab' " * 20_000,
    "date notes never closed": "(2023 " * 20_000,
    "spaces": "how" + " " * 100_000 + "long",
    "connectors": "Bank" + " of" * 30_000,
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_every_function_is_fast_on_adversarial_text(name: str) -> None:
    # 100k characters: a quadratic pattern takes minutes here, a linear one milliseconds. The bound
    # is generous so a loaded CI machine does not flake, yet far below what quadratic work needs.
    text = ADVERSARIAL[name]
    for fn in (tokens, content_tokens, is_filler, memory_keywords, query_keywords, entities,
               lambda t: missing_words(t, t[::-1])):
        started = time.perf_counter()
        fn(text)
        assert time.perf_counter() - started < 2.0, (fn.__name__, name)
