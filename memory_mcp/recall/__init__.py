"""Finding what was said: terms, periods, token counting, ranking, the saved index, vectors, the <memory> block."""
