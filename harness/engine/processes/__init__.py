"""The processes of an evaluation and what they share: owning every process started
(ownership.py), one child and its limits (child.py), the private channel and the protocol spoken
over it (channel.py, gpu_ipc.py, protocol.py), the cores and the device's lock they run under
(cores.py, device_lock.py), the memory they need (footprint.py) and what they ran on
(environment.py)."""
