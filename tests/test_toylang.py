"""The toy language: generation, tokenizer and the exact acceptor."""
import random

import pytest

from icmlbook.toylang import REVIEWS, SEP, Grammar, Tokenizer, render, split_words


def sentences(n, seed):
    rng = random.Random(seed)
    return [REVIEWS.sentence(rng) for _ in range(n)]


def test_sentences_are_reproducible_and_grammatical():
    a, b = sentences(300, seed=3), sentences(300, seed=3)
    assert a == b and a != sentences(300, seed=4)
    assert all(REVIEWS.accepts(s) for s in a)
    assert all(s.count(SEP) == 1 and s[-1] == SEP for s in a)
    assert REVIEWS.accepts(sum(a, []))                            # sentences chain into a text


def test_acceptor_rejects_what_the_grammar_cannot_make():
    assert REVIEWS.accepts("the plot was dull.")
    assert not REVIEWS.accepts("the plot was great great.")        # a repeated adjective
    assert not REVIEWS.accepts("the plot was")                      # cut short ...
    assert REVIEWS.accepts("the plot was", prefix=True)             # ... unless a prefix is allowed
    assert not REVIEWS.accepts("plot the was dull.", prefix=True)
    assert not REVIEWS.accepts("the plot was dull. dull", prefix=True)
    assert REVIEWS.accepts("")


def test_every_corpus_prefix_is_a_prefix_of_the_language():
    doc = sum(sentences(3, seed=0), [])
    assert all(REVIEWS.accepts(doc[:i], prefix=True) for i in range(len(doc) + 1))


def test_fixed_slots_and_polarity():
    s = REVIEWS.sentence(1, fixed={"NOUN": "plot", "ADJ": "great", "ADV": "very", "VERB": "loved"})
    assert "plot" in s and REVIEWS.accepts(s)
    assert REVIEWS.polarity("the plot was great. i hated the film.".replace(".", " .").split()) == (1, 1)


def test_tokenizers_round_trip():
    doc = sum(sentences(2, seed=1), [])
    for level in ("char", "word"):
        tok = Tokenizer.for_grammar(REVIEWS, level, specials=("<bos>",))
        assert tok.id("<bos>") == 0
        assert tok.decode([0] + tok.encode(doc)) == render(doc)
    assert split_words(render(doc)) == doc
    with pytest.raises(ValueError, match="unknown word"):
        Tokenizer.for_grammar(REVIEWS, "word").encode(["zebra"])


def test_bad_grammars_are_refused():
    with pytest.raises(ValueError, match="unknown slot"):
        Grammar([(1.0, ("the", "X", "."))], {"Y": ["a"]})
    with pytest.raises(ValueError, match="must end"):
        Grammar([(1.0, ("the", "Y"))], {"Y": ["a"]})
    with pytest.raises(ValueError, match="level"):
        Tokenizer(["a"], "byte")
