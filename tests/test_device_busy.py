"""bench/device_busy.py: a sweep's GPU samples put in the state its slot was in."""
import importlib.util
from datetime import datetime
from pathlib import Path

spec = importlib.util.spec_from_file_location("device_busy", Path(__file__).parent.parent / "bench" / "device_busy.py")
busy = importlib.util.module_from_spec(spec)
spec.loader.exec_module(busy)


def event(t, text, slot="gpu 0"):
    return {"t": t, "slot": slot, "text": text}


def test_each_sample_lands_in_the_spans_open_at_its_time():
    start = 1_800_000_000.0
    events = [event(start, "level1/a copy: checking"), event(start + 1, "level1/a copy: timing"),
              event(start + 1.5, "level1/a copy: waiting for GPU 0, held by pid 7"),
              event(start + 1.6, "level1/a copy: timing"),  # announced again: the span runs from the first
              event(start + 3, "level1/a copy: checking other shapes"),
              event(start + 3, "level1/b: starting the reference"),
              event(start + 3, "level1/b copy: checking"), event(start + 4, "level1/a copy: correct"),
              event(start + 5, "level1/b copy: timing"), event(start + 6, "level1/b copy: checking other shapes"),
              event(start + 7, "level1/b copy: correct"), event(start + 2, "level1/c copy: checking", slot="gpu 1")]
    utilization = [(-1, 99), (0.5, 40), (2, 90), (3.5, 70), (4.5, 30), (5.5, 80), (7.0, 5), (7.5, 99)]
    lines = ["garbage"] + [f"{datetime.fromtimestamp(start + t).strftime('%Y/%m/%d %H:%M:%S.%f')[:-3]}, {u}"
                           for t, u in utilization]
    found = busy.spans(events, "gpu 0")
    assert sorted(kind for _, _, kind in found) == ["check", "check", "shapes", "shapes", "timing", "timing"]
    states = busy.by_state(busy.samples(lines), found)
    # before the first span and after the last: not counted; at the last span's end: none open
    assert states == {"check": [40, 30], "timing": [90, 80], "check+shapes": [70], "none": [5]}
    assert busy.by_state(busy.samples(lines), []) == {}
