"""Following (``statefuse serve --nats`` / ``--peer``) stops on Ctrl-C or SIGTERM through a flag,
never a KeyboardInterrupt raised wherever the main thread is: raised inside ``with lock:`` it
would leave the follower's lock held and the stop would wait forever. A process started with
Ctrl-C ignored (the background of a script) keeps ignoring it, as Python does."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = textwrap.dedent(
    """
    import os, signal, threading
    from statefuse.entry.cli import _stop_signals

    initial = signal.getsignal(signal.SIGINT)
    lock = threading.RLock()
    with _stop_signals() as stop:
        with lock:  # where a KeyboardInterrupt could land and leave the lock held
            os.kill(os.getpid(), signal.SIGINT)
            after_int = stop.requested
            os.kill(os.getpid(), signal.SIGTERM)
            after_term = stop.requested
        second = "ignored"
        try:
            os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C interrupts as usual
        except KeyboardInterrupt:
            second = "interrupted"
    restored = signal.getsignal(signal.SIGINT) is initial
    free = lock.acquire(blocking=False)
    print(after_int, after_term, second, restored, free)
    """
)


def _run(sigint: signal.Handlers) -> list[str]:
    def disposition() -> None:  # in the child, before it runs Python
        signal.signal(signal.SIGINT, sigint)

    return subprocess.run(
        [sys.executable, "-c", CHILD],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=True,
        preexec_fn=disposition,
    ).stdout.split()


def test_ctrl_c_while_following_sets_a_flag_and_a_second_one_interrupts():
    assert _run(signal.SIG_DFL) == ["True", "True", "interrupted", "True", "True"]


def test_a_follower_started_with_ctrl_c_ignored_keeps_ignoring_it_and_stops_on_sigterm():
    assert _run(signal.SIG_IGN) == ["False", "True", "ignored", "True", "True"]
