"""Messages the app's helper threads post back to the UI: small, past-tense dataclasses."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message


@dataclass
class DashboardStarted(Message):
    """The dashboard serves this job at ``url``; ``opened`` says whether a browser was asked."""

    url: str
    browser_note: str


@dataclass
class DashboardUnavailable(Message):
    """The dashboard could not be started; ``reason`` says why in plain words."""

    reason: str


@dataclass
class SkillsLoaded(Message):
    """The skill library's matches for this task (or why there are none)."""

    matches: list
    note: str
