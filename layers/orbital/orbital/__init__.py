"""Orbital: a personal AI-agent gateway speaking the GSV protocol."""

__version__ = "0.1.0"
