"""Cases for movement ops."""
CASES = []
