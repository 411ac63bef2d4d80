"""Blocking work handed from a coroutine to a thread, on an executor the caller names.

:func:`in_thread` is ``asyncio.to_thread`` with a choice of executor: None is the running
loop's default (what ``to_thread`` uses), and the work runs in a copy of the caller's context,
as ``to_thread`` runs it, so what rides on context variables (the spending meter, the channel
the log lines name) follows the work into the thread.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

T = TypeVar("T")


async def in_thread(executor: Executor | None, work: Callable[..., T], *args: Any) -> T:
    """``work(*args)`` on ``executor`` (None: the running loop's default), awaited."""
    context = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(executor, functools.partial(context.run, work, *args))
