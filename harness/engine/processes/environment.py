"""What an evaluation ran on, recorded with every result."""
from __future__ import annotations

import platform
import socket

from ...device import nvidia_smi
from ...results import Environment
from ...torch_install import torch_cuda, torch_version
from ...version import __version__


def collect_environment(device: str, device_name: str = "", capability: str = "") -> Environment:
    on_gpu = device.startswith("cuda")
    drivers = nvidia_smi("driver_version") if on_gpu else []
    return Environment(
        device=device,
        device_name=device_name or (platform.processor() or platform.machine()),
        arch=f"sm_{capability.replace('.', '')}" if capability else ("cpu" if not on_gpu else ""),
        driver=drivers[0] if drivers else "",
        torch=torch_version(),
        cuda=str(torch_cuda() or ""),
        python=platform.python_version(),
        harness=__version__,
        hostname=socket.gethostname(),
    )
