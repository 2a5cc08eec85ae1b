"""Benchmark prompts: the reader that answers from retrieved context, and the answer judges.

The judges follow the structure used by LongMemEval and the LightMem evaluation (question, gold
answer, model response, a yes/no verdict, with per-type allowances) in this project's own words.
The report prints the exact templates it used, so a reader can see what "judge accuracy" means.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

VERSION = "judge-v1"

READER_SYSTEM = (
    "You answer questions about a long conversation using only the notes you are given. "
    "Each note starts with the date and time it was written. Resolve relative dates "
    "(\"yesterday\", \"last week\") against the date of the note that contains them. "
    "Answer in a short phrase, not a sentence. If the notes do not contain the answer, reply "
    "exactly: not mentioned."
)

READER_USER = "Notes:\n{context}\n\nQuestion: {question}\nShort answer:"


class Verdict(BaseModel):
    """The judge's output: ``yes`` when the response counts as correct."""

    verdict: Literal["yes", "no"]


_JUDGE_SYSTEM = "You grade answers. Reply with JSON {\"verdict\": \"yes\"} or {\"verdict\": \"no\"}."

_GENERAL = (
    "Below are a question, its reference answer, and a response produced by a system. Say yes when "
    "the response gives the reference answer, says something equivalent to it, or spells out all the "
    "steps that lead to it. Say no when it is wrong, or when it gives only part of what the "
    "reference answer requires.{extra}\n\n"
    "Question: {question}\nReference answer: {answer}\nResponse: {response}\n\n"
    "Is the response correct? Answer yes or no."
)

_TEMPORAL_EXTRA = (
    " Counting errors of one are tolerated: if the question asks how many days, weeks or months "
    "passed and the response is off by one (say 19 days where the reference says 18), say yes."
)

_UPDATE_EXTRA = (
    " The facts may have changed over time: a response that mentions older values as well is still "
    "correct as long as the value it gives as current is the reference answer."
)

_PREFERENCE = (
    "Below are a question, a rubric describing a good personalised response, and a response produced "
    "by a system. Say yes when the response uses the user's personal information correctly in the way "
    "the rubric describes; it need not cover every point of the rubric. Otherwise say no.\n\n"
    "Question: {question}\nRubric: {answer}\nResponse: {response}\n\n"
    "Does the response satisfy the rubric? Answer yes or no."
)

_ABSTAIN = (
    "Below is a question that cannot be answered from the conversation, a note on why, and a "
    "response produced by a system. Say yes when the response recognises that the question cannot be "
    "answered: it may say the information is missing or incomplete, or that related facts are known "
    "but not the one asked for. Say no when it gives an answer as if it knew.\n\n"
    "Question: {question}\nWhy it is unanswerable: {answer}\nResponse: {response}\n\n"
    "Does the response recognise that the question cannot be answered? Answer yes or no."
)

_NOT_MENTIONED = (
    "Below is a question about a conversation that never mentions the asked fact, and a response "
    "produced by a system. Say yes when the response states that the conversation does not contain "
    "this information (for example \"not mentioned\" or \"no information available\"). Say no when "
    "the response gives an answer.\n\n"
    "Question: {question}\nResponse: {response}\n\n"
    "Does the response say that the information is not available? Answer yes or no."
)

TEMPLATES: dict[str, str] = {
    "general": _GENERAL.replace("{extra}", ""),
    "temporal": _GENERAL.replace("{extra}", _TEMPORAL_EXTRA),
    "knowledge-update": _GENERAL.replace("{extra}", _UPDATE_EXTRA),
    "preference": _PREFERENCE,
    "abstention": _ABSTAIN,
    "not-mentioned": _NOT_MENTIONED,
}


def template_for(dataset: str, category: str, *, adversarial: bool = False, abstention: bool = False) -> str:
    """Name of the judge template for a question."""
    if adversarial:
        return "not-mentioned"
    if abstention:
        return "abstention"
    if dataset == "longmemeval":
        if category == "temporal-reasoning":
            return "temporal"
        if category == "knowledge-update":
            return "knowledge-update"
        if category == "single-session-preference":
            return "preference"
    return "general"


def judge_messages(template: str, question: str, answer: str, response: str) -> list[dict[str, str]]:
    """Chat messages for one judgement."""
    body = TEMPLATES[template].format(question=question, answer=answer, response=response)
    return [{"role": "system", "content": _JUDGE_SYSTEM}, {"role": "user", "content": body}]


def reader_messages(context: str, question: str) -> list[dict[str, str]]:
    """Chat messages for the reader that answers from retrieved notes."""
    return [{"role": "system", "content": READER_SYSTEM},
            {"role": "user", "content": READER_USER.format(context=context, question=question)}]
