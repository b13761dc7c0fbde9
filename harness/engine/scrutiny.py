"""How hard an evaluation looks at a candidate: the fast verdict samples several invariants, an audit
looks at every call (harness audit, docs/guards.md). No imports: every room of the engine may read it."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scrutiny:
    """How hard an evaluation looks: the fast verdict's sampling of the invariants, or an audit's, which
    looks at every call a share of which the fast verdict samples (harness audit, docs/guards.md)."""

    probe_share: float  # of the queued timed calls, those under the stream-order probe (a GPU's)
    checked_calls: int  # the fewest of the candidate's calls whose outputs the re-check compares
    every_trial_exact: bool  # every check trial against float64 too, not one drawn at random
    trace_every: bool  # a per-stream trace of timed calls always, not only where the clocks disagree (a GPU's)
    other_inputs: bool  # a trial on each other input distribution too (integrity/distributions.py)


# The fewest calls of the candidate whose outputs the re-check compares: a call that is wrong one time in
# 20 passes all of the fast verdict's with probability 0.95**60 = 4.6%, one in 50 with 0.98**60 = 30%;
# an audit's, 4e-14 and 5e-6. Where the timing stops sooner, the rest are extra calls, checked and not
# timed (Measure._check_more).
FAST = Scrutiny(probe_share=0.25, checked_calls=60, every_trial_exact=False, trace_every=False, other_inputs=False)
# The reference is timed in its own process, the candidate's stopped, in both. A CPU's second timing of it in
# the candidate's process (CANDIDATE_PROCESS_REFERENCE) stays in an audit too: the faster of the two divides,
# so it can only lower a figure, and without it a copy read 0.41x under load where the process placement,
# not the code, differed.
AUDIT = Scrutiny(probe_share=1.0, checked_calls=10 * FAST.checked_calls, every_trial_exact=True, trace_every=True,
                 other_inputs=True)
