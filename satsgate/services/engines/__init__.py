"""Deterministic, CPU-bound engines: card rendering, fonts and PDF tools."""
