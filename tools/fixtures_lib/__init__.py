"""Helpers for tools/make_fixtures.py: tokenizer training, model specs, weight variants."""
