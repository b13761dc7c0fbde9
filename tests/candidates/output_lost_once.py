# A correct LayerNorm whose first trial's outputs are zeroed on their way to the reference process, after its
# process summed them: a transfer lost once, as a fault of the harness's own would lose it. The harness must
# run that trial again, not call the candidate incorrect.
import sys

import torch.nn as nn

_HANDING_OVER = {"_tensor_fd", "export"}  # harness/engine/processes/channel.py, gpu_ipc.py
_armed = [True]


def _loses_it(frame, event, arg):
    if event == "call" and frame.f_code.co_name in _HANDING_OVER and "processes" in frame.f_code.co_filename:
        frame.f_locals["tensor"].zero_()
        sys.setprofile(None)


class ModelNew(nn.LayerNorm):
    def forward(self, x):
        if _armed[0]:
            _armed[0] = False
            sys.setprofile(_loses_it)
        return super().forward(x)
