"""The clone's root, for the tests that read its files (docs, examples, lock files) or start a process in it."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
