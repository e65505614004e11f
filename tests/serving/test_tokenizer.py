from serving.tokenizer import memoized_counter


def test_memoized_counter_caches_small_texts_only() -> None:
    calls: list[str] = []

    def count(text: str) -> int:
        calls.append(text)
        return len(text.split())

    counter = memoized_counter(count, max_chars=10)
    assert counter("a b") == counter("a b") == 2
    big = "word " * 10
    assert counter(big) == counter(big) == 10
    assert calls == ["a b", big, big]  # the small text counted once, the large one every time
