"""Test helpers shared by the suites (fake servers and the like)."""
