"""Follow-up questions turned into standalone search queries.

"How long does it last?" after a question about the probation period searches, alone, for
a pronoun. A follow-up names its subject only through the conversation: a referring word
(it, they, that, there ...), an opening that continues the last turn ("and ...", "what
about ..."), or too few words of its own. Such a question is searched for together with
the key terms of the turn before, whose own query already carries the subject of the turns
before it, so a chain of follow-ups keeps its subject. Any other question is searched for
as asked: a standalone question never changes.

No model runs here: on a CPU a rewrite by the chat model costs seconds of prefill before
the first token, and this measures as good on the follow-up golden sets (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from retrieval.lexical import STOPWORDS
from retrieval.types import Hit

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?")
# Words that stand for something said before. "there" and "that" also have other uses
# ("is there a gym", "the form that HR keeps"); a question using them so is still read
# together with the last turn, which costs a standalone question little.
_REFERRING_WORDS = """it its it's itself they them their theirs themselves this that these
    those there he him his she her hers one ones former latter such same above"""
_REFERRING = frozenset(_REFERRING_WORDS.split())
_OPENERS = (
    "and",
    "also",
    "but",
    "what about",
    "how about",
    "what else",
    "same",
    "then",
    "so",
    "or",
)
_ASKING_WORDS = """what which who whom whose when where why how is are was were do does did
    can could should would will may might shall must tell please give show list explain
    describe there any much many long often get gets got need want know find say says mean
    means"""
_QUESTION_WORDS = frozenset(_ASKING_WORDS.split())
MIN_OWN_TERMS = 2  # a question with fewer key terms than this leans on the last turn
MAX_CARRIED_TERMS = 12  # the last turn's key terms carried into the query, at most
MAX_FOLLOWED = 3  # earlier questions shown with a follow-up, at most


def conversation_query(questions: Sequence[str]) -> str:
    """The query for the last of ``questions`` (a conversation's questions, oldest first),
    each earlier one turned into its own query first, so a chain of follow-ups keeps the
    subject the first of them named."""
    queries: list[str] = []
    for question in questions:
        queries.append(search_query(question, queries))
    return queries[-1]


def search_query(question: str, earlier: Sequence[str]) -> str:
    """The query to retrieve with for ``question``, asked after turns whose search queries
    were ``earlier`` (oldest first): the question as asked unless it is a follow-up."""
    if not earlier or not is_follow_up(question):
        return question
    own = {term.lower() for term in key_terms(question)}
    carried = [term for term in key_terms(earlier[-1]) if term.lower() not in own]
    if not carried:
        return question
    return f"{question} ({' '.join(carried[:MAX_CARRIED_TERMS])})"


def followed(questions: Sequence[str]) -> tuple[str, ...]:
    """The earlier questions the last of ``questions`` (oldest first) follows up, oldest
    first: none for a question of its own; for a follow-up, the one before, and before
    that back to the last question of its own ("What time is lunch served?", "And
    breakfast?" for "And on Sundays?"), at most :data:`MAX_FOLLOWED`."""
    if len(questions) < 2 or not is_follow_up(questions[-1]):
        return ()
    chain: list[str] = []
    for earlier in reversed(questions[:-1]):
        if not earlier.strip():  # a /v1 history may hold an answer with no question
            break
        chain.append(earlier)
        if len(chain) == MAX_FOLLOWED or not is_follow_up(earlier):
            break
    return tuple(reversed(chain))


def followed_each(questions: Sequence[str]) -> list[tuple[str, ...]]:
    """:func:`followed` for each of ``questions`` (a conversation's, oldest first) in turn:
    how each turn of a prompt is laid out."""
    return [followed(questions[: i + 1]) for i in range(len(questions))]


def is_follow_up(question: str) -> bool:
    """Whether ``question`` leans on the turn before it for its subject."""
    if asks_about_the_last_answer(question):
        return True
    return bool(_words(question)) and len(key_terms(question)) < MIN_OWN_TERMS


def refers_back(question: str) -> bool:
    """Whether ``question`` names its subject with a referring word ("How high is it?",
    "And its anthem?"): its subject is then the one the turn before was answered about.
    "What about Ireland?" leans on the turn before too, but names a subject of its own."""
    return any(word in _REFERRING for word in _words(question))


def asks_about_the_last_answer(question: str) -> bool:
    """Whether ``question`` asks about what the last answer was about: it refers back
    ("How high is it?"), or continues the last question ("And the lowest?", "What about
    a debit?"); its passages are then looked for first in the documents the last answer
    cited (:func:`prefer_cited`). A short question of its own ("Who is the CEO?") is
    not: it may change the subject, and is only searched for with the last turn's terms."""
    return _continues(_words(question)) or refers_back(question)


def _words(question: str) -> list[str]:
    return [word.lower().replace("’", "'") for word in _WORD.findall(question)]


def _continues(words: Sequence[str]) -> bool:
    """Whether a question of ``words`` opens by continuing the last ("and ...")."""
    opening = " ".join(words[:2])
    return any(opening == opener or opening.startswith(opener + " ") for opener in _OPENERS)


def prefer_cited(
    hits: Sequence[Hit], cited_documents: Collection[int], question: str = ""
) -> list[Hit]:
    """For a ``question`` about the last answer (:func:`asks_about_the_last_answer`):
    ``hits`` narrowed to the passages of the documents the turn before cited, and of any
    document the question names by a word of its title ("How does it compare with
    Sweden's?"), in the search's order; all of them when none of those was found. A
    question that continues the last without referring back and names another document
    ("What about Ireland?" after Norway) changes the subject: that document's passages;
    one with a word that only other documents' passages hold ("What about Beerenberg's
    height?" after an answer about Hekla) moves on too: all of them.

    Its query carries the turn before's terms, so it also finds the same kind of fact
    about other subjects ("And its anthem?" after a question about Norway finds Ireland's
    anthem) and other facts of the same kind ("How high is it?" after Norway's volcano
    finds Norway's highest mountain and Nepal's): a small model answers from whichever it
    reads, and listing the subject's own first was not enough (docs/BENCHMARKS.md)."""
    named = {_bare(term) for term in key_terms(question)}

    def names(hit: Hit) -> bool:
        return bool(named) and not named.isdisjoint(map(_bare, _WORD.findall(hit.title)))

    if not refers_back(question):
        switched = [hit for hit in hits if names(hit) and hit.document_id not in cited_documents]
        if switched:
            return switched
        if _moves_on(hits, cited_documents, named):
            return list(hits)
    own = [hit for hit in hits if hit.document_id in cited_documents or names(hit)]
    return own if any(hit.document_id in cited_documents for hit in own) else list(hits)


def _moves_on(hits: Sequence[Hit], cited_documents: Collection[int], named: set[str]) -> bool:
    """Whether a word of the question (``named``, bare) is found in a passage of another
    document than those cited, and in none of theirs."""
    words = {True: set[str](), False: set[str]()}
    for hit in hits:
        words[hit.document_id in cited_documents].update(map(_bare, _WORD.findall(hit.text)))
    return bool((named & words[False]) - words[True])


def _bare(word: str) -> str:
    """``word`` lowercased, without a possessive ("Sweden's" names Sweden)."""
    lower = word.lower().replace("’", "'")
    return lower[:-2] if lower.endswith("'s") else lower


def key_terms(text: str) -> list[str]:
    """The words of ``text`` that carry its subject, in order, each once: no function
    words, question words or referring words."""
    seen: set[str] = set()
    terms: list[str] = []
    for word in _WORD.findall(text):
        lower = word.lower().replace("’", "'")
        if lower in STOPWORDS or lower in _QUESTION_WORDS or lower in _REFERRING:
            continue
        if lower in seen:
            continue
        seen.add(lower)
        terms.append(word)
    return terms
