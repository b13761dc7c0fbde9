"""The reference timed alone in its own process, the candidate's processes stopped: its rule, its twins
(placement_spread), and the figures a problem's candidates share for a while, the first prompt's and
describe_problem's included, so that every figure of the reference alone a user reads is one timing."""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Optional

from ...results import Timing, to_dict
from ..building.builder import paused
from ..children import REFERENCE_START_S, Children
from ..processes.footprint import placement_budget
from ..processes.protocol import Command, ReferenceTimed, Request, StopRule
from ..verdicts import Deadline, after
from . import speedups, stages

# {clock: {what was timed: Timing}}: one timing step's figures on every clock the device has
Clocked = dict[str, dict[str, Timing]]
# references timed both beside the candidate and alone, each compared with itself
BESIDE_AND_ALONE = ("reference", "reference_defaults")
# The reference alone samples at most this long: it is the same program every time, so a longer
# cap (given for the candidate) would add seconds, not certainty.
REFERENCE_ALONE_CAP_S = 3.0
# ...and is timed once per shape, its figures shared by the problem's next candidates for this
# long (the device's clocks and temperature drift over minutes, not seconds). A slowdown, or a gap
# beyond the noise, is always judged again on fresh figures (Measure._time).
REFERENCE_ALONE_REUSE_S = 300.0


class Alone:
    """One problem's reference alone: timed on demand, shared by shape while it is recent."""

    def __init__(self, children: Children):
        self.children = children
        # by shape label ("" the main shape), then clock: placement_spread, measured once per problem and
        # shape; None: the model is too big to copy twice
        self.placement: dict[str, dict[str, Optional[float]]] = {}
        # by shape label: when the reference was last timed alone there, and what it found
        self._kept: dict[str, tuple[float, Clocked]] = {}

    def before_candidates(self) -> dict[str, Timing]:
        """The reference alone at the main shape on every clock the device has, each clock's faster numerics
        setting: the first prompt's and describe_problem's figure. The shared figures where they are recent
        and on every clock, else timed now and shared from then on. Holds the device's lock."""
        children = self.children
        children.start_reference()
        clocks = self.shared("")
        if clocks is None or set(clocks) != self._device_clocks():
            with children.device_lock():
                clocks = self.time_reference(self.rule())
            self.keep("", clocks)
        return {clock: min((by_key[key] for key in BESIDE_AND_ALONE if key in by_key), key=lambda t: t.median)
                for clock, by_key in clocks.items() if any(key in by_key for key in BESIDE_AND_ALONE)}

    def shared(self, shape: str, clock: Optional[str] = None) -> Optional[Clocked]:
        """The figures kept at `shape` while recent (on `clock` at least, where given), as a copy; None else."""
        kept = self._kept.get(shape)
        if not kept or time.monotonic() - kept[0] >= REFERENCE_ALONE_REUSE_S or (clock and clock not in kept[1]):
            return None
        return {each: dict(found) for each, found in kept[1].items()}

    def age(self, shape: str) -> float:
        return round(time.monotonic() - self._kept[shape][0], 1) if shape in self._kept else 0.0

    def keep(self, shape: str, clocked: Clocked) -> None:
        self._kept[shape] = (time.monotonic(), {each: dict(found) for each, found in clocked.items()})

    def timed(self, shares: int, shape: str, clock: str, clocks: list[str], pause: list) -> Clocked:
        """The reference alone on the verdict's `clock` (every clock where a compiled reference is asked),
        the processes of `pause` stopped, and the first time at a shape its twins (placement_spread), whose
        spread every clock of `clocks` takes where it was not timed alone: placement moves the device's
        work, which each clock times."""
        info = self.children.reference_info
        measure = shape not in self.placement
        alone = self.time_reference(self.rule(shares, clock), pause, self.children.options.compile_baseline,
                                    placement_budget(info) if measure else 0)
        twins = {each: [timed.pop(key) for key in [key for key in timed if key.startswith("placement_")]]
                 for each, timed in alone.items()}
        if measure:
            # no twins of a model that holds tensors: too big to copy twice, the spread is not known
            unmeasured = not any(twins.values()) and info.parameter_bytes
            spreads = {each: None if unmeasured else speedups.placement_spread(alone[each]["reference"], twins[each])
                       for each in alone}
            self.placement[shape] = {each: spreads.get(each, spreads[clock]) for each in {*clocks, *spreads}}
        return alone

    def time_reference(self, rule: StopRule, pause: tuple = (), compile_baseline: bool = False,
                       twin_budget: int = 0) -> Clocked:
        """The reference alone under `rule`, at each numerics setting the candidate's timing has, the
        processes in `pause` stopped meanwhile; the compiled reference and the twins only where asked."""
        children = self.children
        with paused(list(pause)):
            children.reference.send(to_dict(Request(Command.TIME_REFERENCE, rule=rule,
                                                    compile_baseline=compile_baseline,
                                                    default_numerics=children.reference_info.numerics_differ,
                                                    placement_budget=twin_budget)))
            return children.reference_says(self.deadline(rule), ReferenceTimed, "timing the reference alone").timings

    def rule(self, shares: int = 1, clock: Optional[str] = None) -> StopRule:
        """Sampling the reference alone: every clock the device has, or where a verdict's `clock` is
        given, that clock's stage only after fewer samples (StopRule.fewer_samples), unless a compiled
        reference is timed (its baselines are reported on both clocks, with intervals of their own).
        The slowdown is judged on the verdict's clock, and the other clock's figures take nothing from
        the reference alone but the compiled reference's. Fewer samples suffice: the slowdown is read
        against thresholds far above the noise, the twins' spread counts only where it stands out of
        theirs (speedups.placement_spread), and the candidate's own interval is the beside stage's."""
        o = self.children.options
        rule = o.stop_rule(min(o.time_cap, REFERENCE_ALONE_CAP_S) / shares)
        if clock is None or o.compile_baseline:
            return rule
        return replace(rule, clock=clock, second_clock=False, min_samples=rule.fewer_samples())

    def deadline(self, rule: StopRule) -> Deadline:
        """A timing step: the sampling its time cap allows, then a run timeout, which bounds a call
        (the cap is looked at between batches of calls), and torch.compile's compile where asked."""
        o = self.children.options
        extra = REFERENCE_START_S if o.compile_baseline else 0.0
        return after(rule.time_cap + o.run_timeout + extra,
                     f"its time cap's {rule.time_cap:.3g} s of sampling, then the run timeout of {o.run_timeout:.0f} s"
                     + (" and the reference's start limit for torch.compile" if extra else ""))

    def _device_clocks(self) -> set[str]:
        return set(stages.stages_of(self.children.options.device != "cpu", self.rule().clock))
