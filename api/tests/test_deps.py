"""deps.in_thread: the results post's hop to a request thread."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from mallard_api.deps import in_thread

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")


def test_in_thread_runs_in_the_pool_with_the_callers_context_vars():
    pool = ThreadPoolExecutor(1, thread_name_prefix="test-request")

    def work(a: int) -> tuple[int, str, str]:
        return a, VAR.get(), threading.current_thread().name

    async def main() -> tuple[int, str, str]:
        VAR.set("the caller's")
        return await in_thread(pool, work, 7)

    try:
        a, var, name = asyncio.run(main())
    finally:
        pool.shutdown()
    assert (a, var) == (7, "the caller's")
    assert name.startswith("test-request")


def test_in_thread_raises_what_the_function_raises():
    pool = ThreadPoolExecutor(1)

    def work() -> None:
        raise LookupError("from the thread")

    try:
        with pytest.raises(LookupError, match="from the thread"):
            asyncio.run(in_thread(pool, work))
    finally:
        pool.shutdown()


def test_a_cancelled_caller_is_cancelled_only_once_the_function_is_done():
    """As anyio's run_sync: the caller's `finally` (closing the session the function
    uses) must not run while the function still runs."""
    pool = ThreadPoolExecutor(1)
    started, release = threading.Event(), threading.Event()
    finished: list[bool] = []

    def work() -> None:
        started.set()
        release.wait(60)
        finished.append(True)

    async def main() -> None:
        task = asyncio.create_task(in_thread(pool, work))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 60)
        task.cancel()
        for _ in range(20):
            await asyncio.sleep(0)
        assert not task.done() and finished == []  # the function is held by `release`
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert finished == [True]

    try:
        asyncio.run(main())
    finally:
        release.set()
        pool.shutdown()
