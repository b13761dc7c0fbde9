# Starts a sleeper in a session of its own, records both pids, then sleeps in forward for ever.
import os
import time

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()

    def forward(self, x):
        record = os.environ.get("FORWARD_PIDS", "pids.txt")
        if os.fork() == 0:
            os.setsid()
            with open(record, "a") as f:
                f.write(f"{os.getpid()}\n")
            while True:
                time.sleep(1)
        with open(record, "a") as f:
            f.write(f"{os.getpid()}\n")
        while True:
            time.sleep(1)
