"""Big CUDA outputs travel as CUDA IPC handles; the receiver copies only what lies inside the
sender's allocation and refuses a handle that claims more."""
import os
import subprocess
import sys
import textwrap

import pytest

from harness.engine.processes import channel

pytestmark = pytest.mark.gpu

# Sends one 64 MiB tensor of arange values, its spec edited by MODE, and waits for the reply.
SENDER = textwrap.dedent('''
    import json, sys, torch
    from harness.engine.processes import channel
    chan = channel.Channel.from_fd(int(sys.argv[1]))
    mode = sys.argv[2]
    t = torch.arange(16 << 20, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    real_send_frame = chan.send_frame
    def send_frame(data, fds=()):
        header = json.loads(data)
        if mode == "beyond":
            header["tensors"][0]["offset"] += 1 << 40
        if mode == "garbled":
            header["tensors"][0]["ipc"] = "00" * 64
        real_send_frame(json.dumps(header).encode(), fds)
    chan.send_frame = send_frame
    kept = channel.send(chan, {"cmd": "x"}, [t], share_gpu=True)
    print("shared" if kept else "copied", flush=True)
    chan.sock.recv(1)
''')


def _exchange(mode: str):
    import torch

    torch.cuda.init()
    parent, child_fd = channel.pair()
    proc = subprocess.Popen([sys.executable, "-c", SENDER, str(child_fd), mode], pass_fds=[child_fd],
                            stdout=subprocess.PIPE, text=True)
    os.close(child_fd)  # the sender's end, closed here: a sender that dies ends recv at once
    try:
        try:
            message = channel.recv(parent, gpu=torch.device("cuda"))
            return proc.stdout.readline().strip(), message.tensors[0], None
        except channel.ChannelError as exc:
            return proc.stdout.readline().strip(), None, exc
    finally:
        parent.sock.sendall(b"x")
        proc.wait(timeout=60)


def test_a_big_cuda_tensor_arrives_through_ipc():
    import torch

    how, tensor, error = _exchange("plain")
    assert how == "shared" and error is None
    assert tensor.is_cuda and torch.equal(tensor, torch.arange(16 << 20, dtype=torch.float32, device="cuda"))


@pytest.mark.parametrize("mode, says", [("beyond", "cannot hold"), ("garbled", "failed")])
def test_a_forged_handle_is_refused_not_read(mode, says):
    how, tensor, error = _exchange(mode)
    assert how == "shared" and tensor is None
    assert says in str(error)


def test_outputs_lost_on_their_way_through_ipc_are_a_trial_again_through_host_memory(tmp_path):
    # layernorm_4d's 256 MiB output travels as a CUDA IPC handle; its first trial's arrives zeroed
    from conftest import CANDIDATES, REPO
    from harness import EvalOptions, Verdict, evaluate

    options = EvalOptions(device="cuda", cache_dir=tmp_path, time_cap=1, shapes="off")
    result = evaluate(REPO / "problems" / "layernorm_4d.py", CANDIDATES / "output_lost_once.py", options)
    assert result.verdict is Verdict.CORRECT, result.explanation
    assert result.check.read_again == 1
    said = [w for w in result.warnings if "other than the candidate's process summed them" in w]
    assert len(said) == 1 and said[0].startswith("trial 1's outputs"), result.warnings
