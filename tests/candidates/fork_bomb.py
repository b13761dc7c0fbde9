# Forks daemons that leave the session and never end, then hangs (bounded, for tests).
import os
import time

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()

    def forward(self, x):
        record = os.environ.get("FORK_BOMB_PIDS", "pids.txt")
        for _ in range(20):
            if os.fork() == 0:
                os.setsid()
                if os.fork():  # daemonize: the middle process exits at once
                    os._exit(0)
                with open(record, "a") as f:
                    f.write(f"{os.getpid()}\n")
                while True:
                    time.sleep(1)
        while True:
            time.sleep(1)
