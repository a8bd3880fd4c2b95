"""Tokenizer and BM25 index: what decides which past exchanges an agent is shown."""

from __future__ import annotations

import random

import numpy as np
import pytest

from memory_mcp.recall import bm25
from memory_mcp.recall.bm25 import BULK_BUILD_MIN_DOCUMENTS, LexicalIndex
from memory_mcp.recall.fact_ranking import rank_by_similarity_and_confidence
from memory_mcp.recall.fusion import lexical_share
from memory_mcp.recall.spelling import respelled
from memory_mcp.recall.terms import MAX_TERM_CHARS, index_terms, phrase_pairs, tokenize

# --- tokenize -------------------------------------------------------------------------------


def test_tokenize_lowercases_and_splits_on_punctuation_and_underscores() -> None:
    assert tokenize("Hello, WORLD! snake_case  Straße 42") == ["hello", "world", "snake", "case", "strasse", "42"]


def test_tokenize_plain_ascii_text_the_same_way() -> None:
    assert tokenize("Snake_case, CamelCase 42x! it's") == ["snake", "case", "camelcase", "42x", "it", "s"]


def test_tokenize_empty_and_punctuation_only() -> None:
    assert tokenize("") == []
    assert tokenize(" ?!... ，。 ") == []


def test_tokenize_chinese_runs_become_overlapping_bigrams() -> None:
    assert tokenize("我喜欢猫") == ["我喜", "喜欢", "欢猫"]


def test_tokenize_chinese_punctuation_separates_runs() -> None:
    assert tokenize("我喜欢猫，你呢？") == ["我喜", "喜欢", "欢猫", "你呢"]


def test_tokenize_single_cjk_character_is_one_token() -> None:
    assert tokenize("猫") == ["猫"]


def test_tokenize_mixed_latin_and_chinese() -> None:
    assert tokenize("Python和Java") == ["python", "和", "java"]
    assert tokenize("我用Python写代码") == ["我用", "python", "写代", "代码"]


def test_tokenize_japanese_kana_and_kanji() -> None:
    assert tokenize("ねこが好き") == ["ねこ", "こが", "が好", "好き"]
    assert tokenize("コーヒー") == ["コー", "ーヒ", "ヒー"]


def test_tokenize_korean_words_become_bigrams() -> None:
    assert tokenize("고양이 좋아") == ["고양", "양이", "좋아"]


def test_accents_on_latin_letters_are_folded_and_other_scripts_keep_their_marks() -> None:
    assert tokenize("Zürich crème brûlée, Łódź, Ærø, naïve") == ["zurich", "creme", "brulee", "lodz", "aero", "naive"]
    assert tokenize("ガギグ ёлка 고양이") == ["ガギ", "ギグ", "ёлка", "고양", "양이"], "kana, Cyrillic, Hangul intact"
    assert tokenize("Ｆｕｌｌ ﬁle") == ["full", "file"], "compatibility forms read as plain letters"


def test_emoji_are_terms_of_their_own_and_skin_tones_are_not() -> None:
    assert tokenize("I play 🎸 every day ☕️👍🏽") == ["i", "play", "🎸", "every", "day", "☕", "👍"]


def test_a_huge_word_is_indexed_by_its_beginning() -> None:
    word = "x" * 100_000
    assert index_terms(f"{word} guitar") == ["x" * MAX_TERM_CHARS, "guitar"]


# --- LexicalIndex ---------------------------------------------------------------------------


def build(*texts: str) -> LexicalIndex:
    """An index of unrelated documents: each in its own thread, so no neighbour text is shared."""
    index = LexicalIndex()
    for number, text in enumerate(texts):
        index.add(text, thread=f"t{number}")
    return index


def test_relevant_document_ranks_first() -> None:
    index = build(
        "the weather in paris is rainy today",
        "my cat loves tuna and sleeping in the sun",
        "stock prices fell sharply on monday",
    )

    hits = index.search("what does my cat love to eat", limit=3)

    assert hits[0][0] == 1
    assert hits == sorted(hits, key=lambda hit: -hit[1])
    assert all(score > 0 for _, score in hits)


def test_documents_sharing_no_words_are_not_returned() -> None:
    index = build("apples and pears", "bananas and kiwis")

    assert index.search("submarine", limit=5) == []
    assert [number for number, _ in index.search("pears", limit=5)] == [0]


def test_a_misspelt_query_word_finds_the_word_pages_hold() -> None:
    index = build(
        "we talked about the garden and the roses",
        "I just signed my first business contract with a client",
        "the stage lights failed during the play",
    )

    assert [number for number, _ in index.search("my buisiness contract", limit=5)][:1] == [1]
    assert [number for number, _ in index.search("the buisiness", limit=5)] == [1]  # the typo alone finds it


def test_a_misspelt_query_word_is_written_as_the_word_pages_hold_for_the_query_vector() -> None:
    """What the query's vector is computed from: the typo respelled wherever the query has it,
    capitalised where it was; real words, and typos of a word no page holds, as they were."""
    index = build("I just signed my first business contract", "the fundraiser raised a lot", "apples and pears")
    query = "Buisiness news, the funraiser, and more buisiness plans for the gardn?"

    assert index.typos(query) == {"buisiness": "busi", "funraiser": "fundrais"}
    assert (
        respelled(query, index.typos(query)) == "Business news, the fundraiser, and more business plans for the gardn?"
    )
    assert respelled("which state is it in", index.typos("which state is it in")) == "which state is it in"


def test_a_page_added_after_a_query_changes_how_the_same_query_is_read() -> None:
    """A query is read once per index size: the word a new page holds is seen at the next search."""
    index = build("the stage lights failed during the play", "apples and pears")
    query = "my buisiness contract"
    assert index.typos(query) == {} and index.search(query, limit=5) == []

    index.add("I just signed my first business contract with a client", thread="t2")

    assert index.typos(query) == {"buisiness": "busi"}
    assert [number for number, _ in index.search(query, limit=5)] == [2]


def test_a_real_word_no_page_holds_is_not_taken_for_a_typo() -> None:
    """'state' is one letter from 'stage', but a word in its own right: nothing holds it."""
    index = build("the stage lights failed during the play", "apples and pears")

    assert index.search("which state", limit=5) == []
    assert index.search("a stage", limit=5) != []


def test_without_the_token_encoding_no_word_is_corrected_and_loading_it_is_tried_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from memory_mcp.recall import token_count

    attempts: list[str] = []

    def missing() -> None:
        attempts.append("load")
        raise FileNotFoundError("cl100k_base.tiktoken")

    index = build("I just signed my first business contract", "apples and pears")
    monkeypatch.setattr(token_count, "_loaded_encoding", missing)
    token_count._encoding_if_any.cache_clear()
    try:
        assert index.search("the buisiness", limit=5) == []
        assert index.search("buisiness plans", limit=5) == []
    finally:
        token_count._encoding_if_any.cache_clear()  # the next test loads the real one

    assert attempts == ["load"]


def test_short_words_are_never_corrected() -> None:
    """Four letters or fewer have too many neighbours one letter away to guess which was meant."""
    index = build("the tuna was fresh", "apples and pears")

    assert index.search("tunq", limit=5) == []
    assert [number for number, _ in index.search("pearz", limit=5)] == [1]  # five letters: read as "pears"


def test_empty_index_and_empty_query_return_nothing() -> None:
    assert LexicalIndex().search("anything", limit=5) == []
    assert build("some text").search("", limit=5) == []
    assert build("some text").search("some", limit=0) == []


def test_limit_caps_the_number_of_results() -> None:
    index = build(*(f"shared word variant{i}" + " filler" * i for i in range(10)))

    hits = index.search("shared", limit=3)

    assert len(hits) == 3
    # Shorter documents score higher (length normalisation), so the three shortest win.
    assert [number for number, _ in hits] == [0, 1, 2]


def test_among_first_excludes_later_documents() -> None:
    index = build("python tips", "java tips", "python tricks", "python news")

    hits = index.search("python", limit=10, among_first=3)

    assert {number for number, _ in hits} == {0, 2}
    assert index.search("python", limit=10, among_first=0) == []
    assert {n for n, _ in index.search("python", limit=10, among_first=100)} == {0, 2, 3}


def test_among_first_holds_when_the_limit_is_smaller_than_the_candidates() -> None:
    # The best match overall (document 3) lies outside the window and must not take the one slot.
    index = build("python", "python tips and many other words", "java", "python python")

    assert [number for number, _ in index.search("python", limit=1, among_first=3)] == [0]


def test_ties_prefer_the_later_document() -> None:
    index = build("remember the milk", "unrelated text", "remember the milk")

    hits = index.search("milk", limit=10)

    assert [number for number, _ in hits] == [2, 0]
    assert hits[0][1] == hits[1][1]


def test_ties_prefer_later_documents_even_when_the_limit_cuts_among_them() -> None:
    # Regression: np.argpartition used to pick an arbitrary (in practice the oldest) subset of
    # equally scored documents before the tie-break sort.
    index = build(*["remember the milk"] * 8)

    hits = index.search("milk", limit=2)

    assert [number for number, _ in hits] == [7, 6]


def test_incremental_add_after_search_is_searchable() -> None:
    index = build("alpha beta", "gamma delta")
    assert index.search("epsilon", limit=5) == []
    assert len(index) == 2

    index.add("epsilon zeta", thread="t2")
    index.add("alpha epsilon", thread="t3")

    assert len(index) == 4
    assert {number for number, _ in index.search("epsilon", limit=5)} == {2, 3}
    assert {number for number, _ in index.search("alpha", limit=5)} == {0, 3}


def test_incremental_index_scores_match_a_fresh_index() -> None:
    texts = ["red apple pie", "green apple", "blue sky", "apple apple orchard", "red sky at night"]
    incremental = build(*texts[:2])
    incremental.search("apple", limit=5)  # a search in between must not disturb later adds
    for number, text in enumerate(texts[2:], start=2):
        incremental.add(text, thread=f"t{number}")

    assert incremental.search("red apple", limit=5) == build(*texts).search("red apple", limit=5)


def test_chinese_query_finds_the_chinese_page() -> None:
    index = build(
        "我今天去超市买了牛奶和面包",
        "我最喜欢的动物是猫，尤其是橘猫",
        "明天下午三点开会讨论项目进度",
    )

    hits = index.search("你喜欢什么动物？", limit=3)

    assert hits[0][0] == 1


def test_japanese_and_korean_queries_find_their_pages() -> None:
    index = build(
        "私はコーヒーが大好きです",
        "今日は雨が降っています",
        "저는 고양이를 좋아해요",
        "내일 회의가 있어요",
    )

    assert index.search("コーヒー", limit=1)[0][0] == 0
    assert index.search("고양이", limit=1)[0][0] == 2


def test_rare_term_outweighs_a_repeated_common_term() -> None:
    # Same lengths; document 0 has the common word twice, document 1 the rare word once.
    index = build(
        "python python notes for the week",
        "kubernetes cluster notes for the week",
        "python script for data",
        "python class for beginners",
        "python tips and tricks",
        "python web framework",
    )

    hits = index.search("python kubernetes", limit=6)

    assert hits[0][0] == 1
    assert hits[1][0] == 0


def test_bm25_prefers_the_document_holding_the_rare_term() -> None:
    # 'project' is everywhere; 'kubernetes' occurs once. Both matching documents have the same length.
    index = build(
        "project meeting notes about the project",
        "project kubernetes deployment notes today",
        "project budget review for next quarter",
        "project timeline and the project goals",
    )

    hits = index.search("project kubernetes", limit=4)

    assert hits[0][0] == 1
    assert len(hits) == 4  # the common term still matches everything, just lower


def test_repeating_a_term_saturates_rather_than_dominates() -> None:
    index = build("cat " * 50 + "dog", "cat dog", "bird")

    hits = dict(index.search("cat dog", limit=3))

    # BM25's saturation and length normalisation: spamming a word does not win.
    assert hits[1] > hits[0]


# --- neighbour text -------------------------------------------------------------------------


def test_an_answer_is_found_by_the_words_of_the_question_before_it() -> None:
    index = LexicalIndex()
    for text in ("where did you go on holiday?", "we went to the lake in june", "pass the salt please"):
        index.add(text, thread="chat")
    index.add("a lake house for sale", thread="ads")

    # Page 1 never says "holiday": no page holding it, it is found through the question before it.
    assert {number for number, _ in index.search("holiday trip", limit=3)} == {0}
    lake = dict(index.search("holiday lake", limit=3))
    assert set(lake) == {0, 1, 3}
    assert lake[1] > lake[3], "the lake of the holiday conversation before the lake of an advert"
    alone = LexicalIndex()
    for text in ("where did you go on holiday?", "we went to the lake in june"):
        alone.add(text, thread="chat")
    recent_left_out = np.array([False, True])
    assert {number for number, _ in alone.search("holiday", limit=3, allowed=recent_left_out)} == {1}, (
        "with the question itself left out (it is among the recent pages), its answer is found"
    )


def test_a_page_tied_to_the_query_only_by_its_neighbour_scores_nothing_beside_pages_holding_it() -> None:
    index = LexicalIndex()
    index.add("우리 강아지 이름은 초코야", thread="chat")  # "our puppy is called Choco"
    index.add("שלום, מה שלומך היום?", thread="chat")  # a Hebrew greeting that followed it
    index.add("초코는 산책을 좋아해", thread="other")  # "Choco loves walks"

    hits = dict(index.search("강아지 이름", limit=3))

    assert set(hits) == {0}, "the Hebrew page shares no term with the Korean query"


def test_neighbour_text_weighs_half_of_the_page_own_text() -> None:
    index = LexicalIndex()
    index.add("kayak", thread="chat")
    index.add("nothing relevant here, kayak aside", thread="chat")
    index.add("kayak kayak", thread="other")

    hits = dict(index.search("kayak", limit=3))

    # Page 1 holds "kayak" once and borrows half of page 0's: it weighs 1.5 against page 2's 2.
    assert hits[2] > hits[1] > 0


def test_neighbours_are_taken_only_from_the_same_thread() -> None:
    index = LexicalIndex()
    index.add("kayak trip planning", thread="a")
    index.add("tax return questions", thread="b")
    index.add("kayak rental prices", thread="a")

    assert {number for number, _ in index.search("tax", limit=3)} == {1}
    borrowed = dict(index.search("kayak planning", limit=3))
    assert set(borrowed) == {0, 2} and borrowed[2] > 0, "page 2 holds kayak and borrows planning from page 0"
    assert {number for number, _ in index.search("rental questions", limit=3)} == {1, 2}


def test_stemming_and_function_words() -> None:
    index = build("I went hiking in the mountains", "what did they do and when")

    assert [number for number, _ in index.search("hiked mountain", limit=2)] == [0]
    assert index.search("what did they do", limit=2) == []  # function words alone match nothing


# --- building a fresh index from many pages at once ---------------------------------------------


def conversation(count: int, seed: int) -> list[tuple[str, str]]:
    """Pages over a small vocabulary (so terms repeat across pages and within them), in a few
    interleaved threads, some pages empty of index terms."""
    rng = random.Random(seed)
    words = [f"w{number}" for number in range(300)] + ["hiking", "hiked", "the", "what", "我喜欢猫"]
    threads = ["", "a", "b", "c", "thread-d"]
    pages = []
    for _ in range(count):
        text = "the what" if rng.random() < 0.02 else " ".join(rng.choices(words, k=rng.randint(1, 40)))
        pages.append((text, rng.choice(threads)))
    return pages


def one_by_one(pages: list[tuple[str, str]]) -> LexicalIndex:
    index = LexicalIndex()
    for text, thread in pages:
        index.add(text, thread)
    return index


def test_a_fresh_index_built_at_once_ranks_exactly_as_one_built_page_by_page() -> None:
    pages = conversation(BULK_BUILD_MIN_DOCUMENTS + 500, seed=7)
    expected = one_by_one(pages)
    bulk = LexicalIndex()
    bulk.extend(pages)

    assert len(bulk) == len(expected) == len(pages)
    rng = random.Random(8)
    queries = ["w1", "hiking w7 w250", "我喜欢", "the what", "w299 w0 w150 w3"] + [
        " ".join(rng.choices(pages, k=1)[0][0].split()[:3]) for _ in range(40)
    ]
    for query in queries:
        assert bulk.search(query, 20) == expected.search(query, 20), query
        assert bulk.search(query, 5, among_first=1000) == expected.search(query, 5, among_first=1000), query


def test_pages_added_after_a_bulk_build_lend_their_neighbours_text_as_usual() -> None:
    pages = conversation(BULK_BUILD_MIN_DOCUMENTS, seed=11)
    later = conversation(300, seed=12) + [("zebra crossing", "a"), ("where exactly", "a")]
    expected = one_by_one(pages + later)
    bulk = LexicalIndex()
    bulk.extend(pages)
    bulk.extend(later)

    for query in ["zebra", "w5 w6", "hiked", "w42 w43 w44", "crossing w9"]:
        assert bulk.search(query, 30) == expected.search(query, 30), query
    # The last page of thread "a" before `later` took words from the first page of `later` in "a".
    first_later_in_a = next(text for text, thread in later if thread == "a")
    assert bulk.search(first_later_in_a, 50) == expected.search(first_later_in_a, 50)


def test_an_index_of_pages_without_a_word_is_built_restored_and_grown() -> None:
    """Punctuation alone makes no term: built in one pass, then restored from its state as a
    restart does, the index still takes the next pages and ranks as one built page by page."""
    pages = [("?!", "t"), ("...", "u")] * (BULK_BUILD_MIN_DOCUMENTS // 2)
    later = [("We lint with ruff", "t"), ("ruff again", "t")]
    bulk = LexicalIndex()
    bulk.extend(pages)
    assert bulk.search("ruff", 5) == []

    restored = LexicalIndex.from_state(bulk.state())
    restored.extend(later)
    assert restored.search("ruff", 5) == one_by_one(pages + later).search("ruff", 5) != []


def test_queries_without_accents_or_with_emoji_find_their_pages() -> None:
    index = build("We had crème brûlée in Zürich", "Dinner at the harbour", "Learning 🎸 on Sundays")
    assert index.search("creme brulee in Zurich", limit=3)[0][0] == 0
    assert index.search("Crème Brûlée", limit=3)[0][0] == 0
    assert [number for number, _ in index.search("🎸", limit=3)] == [2]


def test_a_page_holding_the_query_words_side_by_side_is_lifted_above_one_holding_them_apart() -> None:
    texts = [
        "We got ice cream at the beach",
        "Ice on the road; cream for the cake",
        "Nothing about desserts here",
    ]
    index = LexicalIndex()
    index.extend([(text, str(n)) for n, text in enumerate(texts)])
    words = index.scores("where did we have ice cream?")
    assert words[1] >= words[0], "by words alone the other page is as good"

    lifted = index.with_phrases(words, "where did we have ice cream?", lambda numbers: [texts[n] for n in numbers])

    assert lifted[0] > lifted[1], "the pair side by side in one clause counts"
    assert lifted[1] == words[1] and lifted[2] == words[2], "pages without the pair keep their score"


def test_word_pairs_stay_within_a_clause_and_skip_function_words_and_cjk() -> None:
    assert phrase_pairs("The coconut milk, then ice. Cream of the crop") == [
        ("coconut", "milk"),
        ("cream", "crop"),
    ]
    assert phrase_pairs("我喜欢冰淇淋") == []


def test_short_queries_lean_to_vectors_and_long_ones_to_words() -> None:
    short = "Jon's dance?"
    long = "what did Jon say about the dance studio he opened in the city last spring"
    assert round(lexical_share(0.5, short), 2) == 0.4
    assert round(lexical_share(0.5, long), 2) == 0.6
    assert lexical_share(0.0, short) == 0.0 and lexical_share(1.0, long) == 1.0


FACT_WORDS = (
    "Alice lives in Lyon works as a nurse night shifts prefers tea over coffee her brother Tom plays chess "
    "every Sunday allergic to peanuts training for the Paris marathon in April learning Japanese uses Go "
    "and Rust at work moved from Berlin last May daughter Emma starts school in September vegetarian since "
    "2019 dislikes long meetings wants to visit Kyoto café Zürich O'Brien"
).split()


def test_fact_similarity_is_scikit_learns_tfidf_cosine() -> None:
    """Facts are ranked by the TF-IDF cosine scikit-learn's TfidfVectorizer computes by default,
    written out so that no process loads scikit-learn; the two agree to rounding."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    rng = random.Random(3)
    for _ in range(40):
        facts = [" ".join(rng.choices(FACT_WORDS, k=rng.randint(1, 14))) for _ in range(rng.randint(1, 60))]
        vectorizer = TfidfVectorizer(analyzer=index_terms)
        matrix = vectorizer.fit_transform(facts)
        for query in [" ".join(rng.choices(FACT_WORDS, k=rng.randint(1, 8))) for _ in range(5)] + ["unheard of"]:
            expected = (matrix @ vectorizer.transform([query]).T).toarray().ravel()
            ranked = rank_by_similarity_and_confidence(facts, [0.0] * len(facts), query, 1.0, 0.0)
            assert sorted(number for number, _ in ranked) == list(range(len(facts)))
            for number, score in ranked:
                assert abs(score - expected[number]) < 1e-12


def test_facts_without_a_word_between_them_rank_by_confidence() -> None:
    ranked = rank_by_similarity_and_confidence(["...", "the a"], [0.9, 0.7], "the a", 0.5, 0.5)
    assert ranked == [(0, 0.9), (1, 0.7)]


def test_a_pages_own_words_count_for_it_however_its_thread_interleaves_with_others() -> None:
    """A page lent a term by its thread's next page gets that entry after later pages of other
    threads: the term's postings are then out of document order, and must still be read right."""
    pages = conversation(BULK_BUILD_MIN_DOCUMENTS + 100, seed=5)
    by_page = one_by_one(pages)
    bulk = LexicalIndex()
    bulk.extend(pages)
    documents = list(range(len(pages)))

    for query in ["w1", "w17 w250", "hiking"]:
        wanted = set(index_terms(query))
        own = by_page.own_scores(query, documents)
        assert [score > 0 for score in own] == [bool(wanted & set(index_terms(text))) for text, _ in pages], query
        assert own == pytest.approx(bulk.own_scores(query, documents)), query


def test_a_page_past_the_most_an_index_holds_is_refused_and_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bm25, "MAX_DOCUMENTS", 3)
    index = one_by_one([("hiking in may", "a"), ("the lake", "a"), ("boats", "a")])
    before = index.copy().state()

    with pytest.raises(ValueError, match="at most 3"):
        index.add("kayak rental", "a")

    after = index.copy().state()
    assert (after.terms, bytes(after.offsets), bytes(after.entries), bytes(after.lengths)) == (
        before.terms,
        bytes(before.offsets),
        bytes(before.entries),
        bytes(before.lengths),
    )
