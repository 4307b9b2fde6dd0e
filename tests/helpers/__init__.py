"""Helpers shared by several test files (imported as ``tests.helpers.NAME``)."""
