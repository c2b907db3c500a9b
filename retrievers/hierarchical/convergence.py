"""A warning when a hierarchical configuration is likely to stop before convergence.

The traversal stops after ``max_convergence_rounds`` rounds with an unchanged top k. On a large
store that comes long before the best leaves are found: over clustered synthetic 384-d vectors
(docs/scale.md, the growth benchmark) the default 3 rounds gave R@10 against exact search of
0.35 at 100k leaves and 0.20 at 1M (10 rounds: 0.96 / 0.62); 20 rounds reached 0.95 at 100k and
80 rounds 0.86 at 1M. The defaults are kept (the presets' results on SciFact and LoCoMo, a few
thousand leaves, must not change); a retriever over at least :data:`LARGE_SCOPE` leaves with
fewer than :data:`MIN_ROUNDS_LARGE` rounds warns once, in one line.
"""

from __future__ import annotations

import logging
import warnings

__all__ = ["LARGE_SCOPE", "MIN_ROUNDS_LARGE", "ConvergenceWarning", "warn_if_few_rounds"]

log = logging.getLogger(__name__)

#: leaves in scope from which few convergence rounds stop early
LARGE_SCOPE = 50_000
#: rounds below which a large scope warns (20 reached R@10 0.95 at 100k leaves)
MIN_ROUNDS_LARGE = 20


class ConvergenceWarning(UserWarning):
    """A hierarchical retriever's convergence rounds are likely too few for its store."""


def warn_if_few_rounds(max_rounds: int | None, n_leaves: int) -> str | None:
    """Warn (log and :class:`ConvergenceWarning`) when ``max_rounds`` is likely too few for
    ``n_leaves``; the message, or None when there is nothing to say."""
    if max_rounds is None or n_leaves < LARGE_SCOPE or max_rounds >= MIN_ROUNDS_LARGE:
        return None
    message = (
        f"hierarchical: max_convergence_rounds={max_rounds} over {n_leaves:,} leaves is likely to stop "
        f"before convergence (3 rounds gave R@10 0.35 against exact search at 100k leaves, 20 gave 0.95; "
        f"docs/scale.md): set retrievers.<name>.max_convergence_rounds to {MIN_ROUNDS_LARGE} or more, or null"
    )
    log.warning("%s", message)
    warnings.warn(message, ConvergenceWarning, stacklevel=3)
    return message
