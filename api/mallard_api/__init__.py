"""Mallard API."""
