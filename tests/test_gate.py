"""processes/gate.py: a timing alone on its device among this process's threads, untimed work side by side."""
import threading

from harness.engine.processes.gate import Gate

WAIT_S = 30.0  # the most a step here may take on a loaded machine; a deadlock fails the test instead of hanging


def _in_thread(gate: Gate, how: str, entered: threading.Event, leave: threading.Event) -> threading.Thread:
    def hold() -> None:
        with getattr(gate, how)():
            entered.set()
            leave.wait(WAIT_S)
    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    return thread


def test_untimed_work_goes_side_by_side_and_a_timing_waits_for_all_of_it():
    gate = Gate()
    first, second, timed = threading.Event(), threading.Event(), threading.Event()
    leave_first, leave_second, leave_timed = threading.Event(), threading.Event(), threading.Event()
    _in_thread(gate, "shared", first, leave_first)
    _in_thread(gate, "shared", second, leave_second)
    assert first.wait(WAIT_S) and second.wait(WAIT_S)  # both in at once
    _in_thread(gate, "alone", timed, leave_timed)
    assert not timed.wait(0.2)
    leave_first.set()
    assert not timed.wait(0.2)  # the second still holds it
    leave_second.set()
    assert timed.wait(WAIT_S)
    leave_timed.set()


def test_a_waiting_timing_goes_before_untimed_work_that_comes_after_it():
    gate = Gate()
    untimed, timed, later = threading.Event(), threading.Event(), threading.Event()
    leave_untimed, leave_timed, leave_later = threading.Event(), threading.Event(), threading.Event()
    _in_thread(gate, "shared", untimed, leave_untimed)
    assert untimed.wait(WAIT_S)
    _in_thread(gate, "alone", timed, leave_timed)
    assert not timed.wait(0.2)
    _in_thread(gate, "shared", later, leave_later)
    assert not later.wait(0.2)  # the timing waits: nothing new goes in before it
    leave_untimed.set()
    assert timed.wait(WAIT_S) and not later.is_set()
    leave_timed.set()
    assert later.wait(WAIT_S)
    leave_later.set()


def test_the_thread_holding_the_gate_enters_it_again_either_way():
    gate = Gate()
    with gate.alone():
        with gate.shared(), gate.alone():
            pass
    with gate.shared():
        with gate.shared(), gate.alone():  # no other thread shares it: its own untimed work may time
            pass
    done = threading.Event()
    _in_thread(gate, "alone", done, threading.Event()).join(0)
    assert done.wait(WAIT_S)  # everything was let go
