"""Cases for reduce ops."""
CASES = []
