"""Following (``statefuse serve --nats`` / ``--peer``) stops on Ctrl-C or SIGTERM through a flag,
never a KeyboardInterrupt raised wherever the main thread is: raised inside ``with lock:`` it
left the follower's lock held and the stop waited forever (seen under load)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = textwrap.dedent(
    """
    import os, signal, threading
    from statefuse.entry.cli import _stop_signals

    lock = threading.RLock()
    with _stop_signals() as stop:
        with lock:  # where a KeyboardInterrupt used to land and leave the lock held
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGTERM)
            inside = stop.requested
        second = None
        try:
            os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C interrupts as usual
        except KeyboardInterrupt:
            second = "interrupted"
    restored = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    free = lock.acquire(blocking=False)
    print(inside, second, restored, free)
    """
)


def test_ctrl_c_while_following_sets_a_flag_and_a_second_one_interrupts():
    out = subprocess.run(
        [sys.executable, "-c", CHILD],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=True,
    ).stdout.split()
    assert out == ["True", "interrupted", "True", "True"]
