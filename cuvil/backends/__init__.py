"""Cuvil's code generators, one package per target."""
