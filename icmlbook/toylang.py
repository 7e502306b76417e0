"""A toy language: a small probabilistic template grammar, a tokenizer and an exact
acceptor. Chapters 07-09 train tiny language models on it: because a known grammar
generates it, "is this sample grammatical?" has an exact answer (:meth:`Grammar.accepts`,
chapter 09's measure of degeneration), and sentences end with ``"."`` (chapter 07's
segment boundary).

A grammar is a list of weighted *templates*, each a sequence of literal words (lower
case) and slot names (upper case); each slot is a weighted word list. The language is
finite, so the acceptor matches each sentence against the templates. Pure Python: tens
of thousands of sentences take well under a second.
"""
from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate

SEP = "."

Words = list[str]


@dataclass
class Grammar:
    """A weighted template grammar over words.

    ``templates``: ``[(weight, ("the", "NOUN", "was", "ADJ", "."))...]``.
    ``slots``: ``{"NOUN": {"plot": 1.0, ...}, ...}`` (a plain list means
    uniform weights). ``sentiment``: optional ``{word: +1 or -1}`` lexicon.
    """

    templates: Sequence[tuple[float, Sequence[str]]]
    slots: Mapping[str, Mapping[str, float] | Sequence[str]]
    sentiment: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._slots: dict[str, tuple[list[str], list[float]]] = {}
        for name, words in self.slots.items():
            if not name.isupper():
                raise ValueError(f"slot name {name!r} must be upper case")
            if isinstance(words, Mapping):
                ws, weights = list(words), [float(w) for w in words.values()]
            else:
                ws, weights = list(words), [1.0] * len(words)
            if not ws or min(weights) <= 0:
                raise ValueError(f"slot {name!r} needs words with positive weights")
            self._slots[name] = (ws, list(accumulate(weights)))
        self._templates = [tuple(t) for _, t in self.templates]
        self._template_cum = list(accumulate(float(w) for w, _ in self.templates))
        for t in self._templates:
            if not t or t[-1] != SEP or SEP in t[:-1]:
                raise ValueError(f"template {t} must end with a single {SEP!r}")
            for item in t:
                if item.isupper() and item not in self._slots:
                    raise ValueError(f"template {t} uses unknown slot {item!r}")
        self._sets = {name: frozenset(ws) for name, (ws, _) in self._slots.items()}

    @property
    def words(self) -> list[str]:
        """Every word the grammar can emit, in a fixed (sorted) order."""
        out = {SEP}
        for t in self._templates:
            for item in t:
                out |= self._sets[item] if item in self._sets else {item}
        return sorted(out)

    def sentence(self, rng: int | random.Random, fixed: Mapping[str, str] | None = None) -> Words:
        """One sentence (ending with ``"."``). ``fixed`` pins slot values,
        e.g. ``{"NAME": "bo"}`` to chain a word from the previous sentence."""
        rng = rng if isinstance(rng, random.Random) else random.Random(rng)
        t = rng.choices(self._templates, cum_weights=self._template_cum)[0]
        out: Words = []
        for item in t:
            if item in self._slots:
                if fixed and item in fixed:
                    out.append(fixed[item])
                else:
                    ws, cum = self._slots[item]
                    out.append(rng.choices(ws, cum_weights=cum)[0])
            else:
                out.append(item)
        return out

    def _matches(self, words: Sequence[str], template: Sequence[str]) -> bool:
        return all(w in self._sets[t] if t in self._sets else w == t
                   for w, t in zip(words, template))

    def accepts_sentence(self, words: Sequence[str], prefix: bool = False) -> bool:
        """Is ``words`` one complete sentence (or, with ``prefix``, the start of one)?"""
        n = len(words)
        return any((n == len(t) or (prefix and n < len(t))) and self._matches(words, t)
                   for t in self._templates)

    def accepts(self, words: Sequence[str] | str, prefix: bool = False) -> bool:
        """Exact grammaticality of a word sequence (or text): every sentence
        matches a template. With ``prefix=True`` the last sentence may be cut
        short (a continuation of fixed length usually ends mid-sentence)."""
        words = split_words(words) if isinstance(words, str) else list(words)
        start = 0
        for i, w in enumerate(words):
            if w == SEP:
                if not self.accepts_sentence(words[start:i + 1]):
                    return False
                start = i + 1
        rest = words[start:]
        if not rest:
            return True
        return prefix and self.accepts_sentence(rest, prefix=True)

    def polarity(self, words: Iterable[str]) -> tuple[int, int]:
        """(number of positive words, number of negative words)."""
        pos = neg = 0
        for w in words:
            s = self.sentiment.get(w, 0)
            pos += s > 0
            neg += s < 0
        return pos, neg


def render(words: Sequence[str]) -> str:
    """Words to text: ``["the", "plot", "was", "dull", "."]`` -> ``"the plot was dull."``."""
    return " ".join(words).replace(" " + SEP, SEP)


def split_words(text: str) -> Words:
    """Text back to words (the inverse of :func:`render`)."""
    return text.replace(SEP, " " + SEP + " ").split()


# ---------------------------------------------------------------------------
# The book's default grammar: short movie reviews with a sentiment lexicon.
# Adjectives are skewed towards neutral/negative (P(positive) = 0.25) so that a
# reward for positive words has somewhere to go (chapter 09).
POSITIVE = ("great", "good", "moving", "loved", "enjoyed")
NEGATIVE = ("dull", "bad", "boring", "hated", "weak")

REVIEWS = Grammar(
    templates=[
        (3.0, ("the", "NOUN", "was", "ADJ", ".")),
        (2.0, ("the", "NOUN", "was", "ADV", "ADJ", ".")),
        (2.0, ("i", "VERB", "the", "NOUN", ".")),
        (1.0, ("i", "watched", "the", "NOUN", "twice", "and", "it", "was", "ADJ", ".")),
        (1.5, ("PRON", "found", "the", "NOUN", "ADJ", ".")),
        (1.0, ("the", "NOUN", "and", "the", "NOUN", "were", "ADJ", ".")),
    ],
    slots={
        "NOUN": ["film", "plot", "music", "acting", "ending", "cast", "story", "script"],
        "ADJ": {"great": 1, "good": 1, "moving": 1,
                "fine": 2, "long": 2, "odd": 2,
                "dull": 1.5, "bad": 1.5, "boring": 1.5},
        "ADV": ["quite", "very", "rather"],
        "VERB": {"loved": 1, "enjoyed": 1, "watched": 2, "hated": 1.5, "disliked": 1.5},
        "PRON": ["we", "they", "she", "he"],
    },
    sentiment={**{w: +1 for w in POSITIVE}, **{w: -1 for w in NEGATIVE}, "disliked": -1},
)


# ---------------------------------------------------------------------------
class Tokenizer:
    """A fixed symbol table, at the level of characters or words.

    ``Tokenizer.for_grammar(g, "char")`` covers the letters, space and ``"."``
    of the grammar's text; ``"word"`` uses the grammar's words. ``specials``
    (e.g. ``("<bos>",)``) come first, so their ids are 0, 1, ...
    """

    def __init__(self, symbols: Sequence[str], level: str, specials: Sequence[str] = ()):
        if level not in ("char", "word"):
            raise ValueError(f"level must be 'char' or 'word', got {level!r}")
        self.level = level
        self.symbols = [*specials, *[s for s in symbols if s not in specials]]
        self.index = {s: i for i, s in enumerate(self.symbols)}
        if len(self.index) != len(self.symbols):
            raise ValueError("symbols must be unique")

    @classmethod
    def for_grammar(cls, grammar: Grammar, level: str, specials: Sequence[str] = ()) -> Tokenizer:
        chars = sorted(set("".join(grammar.words)) | {" "})
        return cls(grammar.words if level == "word" else chars, level, specials)

    def __len__(self) -> int:
        return len(self.symbols)

    def units(self, words: Sequence[str] | str) -> list[str]:
        """The tokens (as strings) of a word sequence or a text."""
        if self.level == "word":
            return split_words(words) if isinstance(words, str) else list(words)
        return list(words if isinstance(words, str) else render(words))

    def encode(self, words: Sequence[str] | str) -> list[int]:
        units = self.units(words)
        try:
            return [self.index[u] for u in units]
        except KeyError as err:
            raise ValueError(f"unknown {self.level} {err.args[0]!r}") from None

    def decode(self, ids: Iterable[int]) -> str:
        """Ids to text (special symbols are dropped)."""
        units = [self.symbols[int(i)] for i in ids]
        units = [u for u in units if not (u.startswith("<") and u.endswith(">"))]
        return render(units) if self.level == "word" else "".join(units)

    def id(self, symbol: str) -> int:
        return self.index[symbol]

