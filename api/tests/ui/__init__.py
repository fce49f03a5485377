"""Tests of the web pages (mallard_api.ui)."""
