"""movement ops (being written)."""
