"""Mallard runner."""
