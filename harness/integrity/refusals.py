"""The runtime guards' refusals: what each guard (guards.py) reports under its name, and what the
rejection says of it. A new guard is a watcher in guards.py and a line here; the reply carries
every guard's findings by name (protocol.Guarded.guards) and the engine refuses on the first.

Torch-free, unlike guards.py: the harness process, which never imports torch, reads it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Refusal:
    name: str  # the key of what the guard saw, in a reply and in a rejected result's details
    says: str  # the rejection's reason, "{}" standing for what was seen
    joined: str = ", "  # between the things seen

    def reason(self, seen: list[str]) -> str:
        return self.says.format(self.joined.join(map(str, seen)))


# In the order they are refused: the first guard that saw something gives the reason.
REFUSALS = (
    Refusal("tampered", "It replaced {}, which the harness uses to check or time it."),
    Refusal("dispatch", "It registered kernels of its own for operators torch already had ({}): the harness "
                        "runs those operators in its process to draw, copy and sample what it times, and the "
                        "candidate's code would run there, outside its timed window."),
    Refusal("modes", "It left a torch function or dispatch mode active ({}), which intercepts every operation, "
                     "the reference's too."),
    Refusal("precision", "It lowered float32 precision ({}): TF32 rounds every product, and it would apply to "
                         "the reference too.", "; "),
    Refusal("l2_persistence", "It left persisting L2 set ({}): data kept in L2 that way outlives the cache flush "
                              "before each timed call.", "; "),
    Refusal("subreaper", "It turned off its process's adoption of the processes it starts ({}): a process it "
                         "detaches would then run beside the reference, which the harness times with the "
                         "candidate's processes stopped."),
    Refusal("threads", "It left background thread(s) running ({}): work finished after forward returns escapes "
                       "the check and the clock."),
)


def first_refusal(findings: dict[str, list[str]]) -> Optional[tuple[Refusal, list[str]]]:
    """The refusal `findings` (name -> what that guard saw) call for, with what was seen; None if none."""
    for refusal in REFUSALS:
        seen = findings.get(refusal.name)
        if seen:
            return refusal, list(seen)
    return None
