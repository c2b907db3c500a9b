"""retrievers/numba_jit.py: numba compiles inside the block whatever NUMBA_DISABLE_JIT says, the
settings come back after, and two threads' blocks never overlap (each would restore what the
other had set)."""

from __future__ import annotations

import threading

from numba.core import config

from retrievers import numba_jit
from retrievers.numba_jit import jit_enabled


def test_the_block_compiles_and_restores_the_settings() -> None:
    before = (getattr(config, "SLP_VECTORIZE", 0), config.DISABLE_JIT)
    with jit_enabled(slp_vectorize=True) as numba:
        assert config.DISABLE_JIT == 0 and config.SLP_VECTORIZE == 1
        assert numba_jit._LOCK.locked()
        twice = numba.njit("int64(int64)")(lambda value: 2 * value)
    assert twice(21) == 42 and hasattr(twice, "overloads")  # a compiled dispatcher
    assert (getattr(config, "SLP_VECTORIZE", 0), config.DISABLE_JIT) == before
    assert not numba_jit._LOCK.locked()


def test_blocks_on_two_threads_run_one_after_the_other() -> None:
    before = (getattr(config, "SLP_VECTORIZE", 0), config.DISABLE_JIT)
    inside: list[int] = []
    seen: list[int] = []
    entered, release = threading.Event(), threading.Event()

    def first() -> None:
        with jit_enabled():
            entered.set()
            release.wait(60)
            seen.append(config.DISABLE_JIT)
            inside.append(1)

    def second() -> None:
        with jit_enabled(slp_vectorize=True):
            inside.append(2)
            seen.append(config.DISABLE_JIT)

    one = threading.Thread(target=first)
    one.start()
    assert entered.wait(60)
    two = threading.Thread(target=second)
    two.start()
    assert inside == []  # the second waits for the first block to end
    release.set()
    one.join(60)
    two.join(60)
    assert inside == [1, 2] and seen == [0, 0]
    assert (getattr(config, "SLP_VECTORIZE", 0), config.DISABLE_JIT) == before
