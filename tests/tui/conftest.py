"""Shared helpers for the kernel-code app tests: scripted runs and waiting for them to land."""

from __future__ import annotations

import asyncio
import inspect
import time

import pytest

from kernelcode.tui.app import KernelCodeApp, create_app
from kernelcode.tui.demo import CPU, demo_events
from openkernel import events as ev

SIZE = (140, 44)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """Run ``async def`` tests in a fresh event loop (no pytest-asyncio or anyio needed)."""
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        names = pyfuncitem._fixtureinfo.argnames
        asyncio.run(pyfuncitem.obj(**{name: pyfuncitem.funcargs[name] for name in names}))
        return True
    return None


def held_run(events: list[object]):
    """A source that plays ``events``, then holds the run open until the app stops it.

    So pause, backend and quit act on a run that is still going, as in a real search.
    """

    def source(control):
        yield from events
        while not control.stopped:
            time.sleep(0.01)
        yield ev.RunFinished("stopped", None, 1.84, 9, "runs/kernels.sqlite3")

    return source


async def settle(pilot, count: int, timeout: float = 10.0) -> None:
    """Wait until the app has applied ``count`` events, written their chat lines, redrawn."""
    app: KernelCodeApp = pilot.app
    deadline = time.monotonic() + timeout
    while app.events_applied < count or app.showing_pending:
        assert time.monotonic() < deadline, f"only {app.events_applied}/{count} events applied"
        await pilot.pause(0.01)
    await pilot.pause()


async def wait_until(pilot, predicate, timeout: float = 20.0) -> None:
    """Poll ``predicate`` between turns of the app's loop until it holds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await pilot.pause(0.02)


async def chat_says(pilot, text: str, timeout: float = 2.0) -> None:
    """Wait until the chat has written ``text`` (lines said together are written together,
    at most a few times a second)."""
    await wait_until(pilot, lambda: text in chat_text(pilot.app), timeout=timeout)


def chat_text(app: KernelCodeApp) -> str:
    """Everything the chat panel has written, as plain text."""
    return "\n".join(strip.text for strip in app.query_one("#chat-log").lines)


@pytest.fixture
def demo() -> list[object]:
    return demo_events()


@pytest.fixture
def cpu_demo() -> list[object]:
    return demo_events(hardware=CPU)


@pytest.fixture
def held_app(demo) -> KernelCodeApp:
    return create_app(event_source=held_run(demo))
