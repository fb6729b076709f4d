"""Cases for nn ops."""
CASES = []
