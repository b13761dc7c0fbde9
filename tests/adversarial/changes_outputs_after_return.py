# Outputs changed after the forward returned and the device was synchronized: a profile hook adds 1 to each
# output as the worker hands it to the reference process (as bytes or as a CUDA IPC handle), every call.
# invariant: fresh_outputs
# problem: tests/problems/small_layernorm.py
# problem[cuda]: problems/layernorm_4d.py
# device: cpu cuda
# expect: incorrect "changed after it returned"
import sys

import torch.nn as nn

_HANDING_OVER = {"_tensor_fd", "export"}  # harness/engine/processes/channel.py, gpu_ipc.py


def _changes_it(frame, event, arg):
    if event == "call" and frame.f_code.co_name in _HANDING_OVER and "processes" in frame.f_code.co_filename:
        frame.f_locals["tensor"].add_(1)
        sys.setprofile(None)


class ModelNew(nn.LayerNorm):
    def forward(self, x):
        sys.setprofile(_changes_it)
        return super().forward(x)
