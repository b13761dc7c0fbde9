"""The private channel between the harness and its child processes.

A message is one JSON header on a Unix socket. Each tensor it carries lives in
a memfd (an anonymous in-memory file) whose descriptor travels with the
header (SCM_RIGHTS): the harness relays descriptors between children without
touching the data, and big tensors cost one copy in and one copy out. Big CUDA
tensors a sender offers to share travel as CUDA IPC handles instead (gpu_ipc).

Nothing a child sends is unpickled, since a candidate's process could
otherwise run code inside whoever reads its messages. Tensors are rebuilt from
dtype, shape and bytes as plain `torch.Tensor`s, read with pread (never
mapped: a file the sender shrinks afterwards cannot fault the reader).
"""
from __future__ import annotations

import array
import json
import os
import select
import socket
import stat
import struct
from dataclasses import dataclass, field
from typing import Any, Optional

MAX_HEADER = 16 * 1024 * 1024
MAX_FDS = 64
_PREFIX = struct.Struct("!QI")  # header length, descriptor count


class ChannelError(Exception):
    """A malformed message: the sender broke the protocol."""


@dataclass
class Message:
    header: dict
    tensors: list = field(default_factory=list)  # decoded tensors
    fds: list = field(default_factory=list)  # raw descriptors, when received for relaying


class Channel:
    """One end of a socketpair, speaking length-prefixed JSON plus descriptors."""

    def __init__(self, sock: socket.socket):
        self.sock = sock

    @classmethod
    def from_fd(cls, fd: int) -> "Channel":
        return cls(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=fd))

    def poll(self, timeout: float) -> bool:
        return bool(select.select([self.sock], [], [], timeout)[0])

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def send_frame(self, data: bytes, fds: list[int] = ()) -> None:
        prefix = _PREFIX.pack(len(data), len(fds))
        if fds:
            self.sock.sendmsg([prefix], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        else:
            self.sock.sendall(prefix)
        self.sock.sendall(data)

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            k = self.sock.recv_into(view[got:])
            if not k:
                raise ChannelError("a message ended before its declared length")
            got += k
        return bytes(buf)

    def recv_frame(self) -> tuple[bytes, list[int]]:
        data, ancillary, _, _ = self.sock.recvmsg(_PREFIX.size, socket.CMSG_SPACE(MAX_FDS * 4))
        if not data:
            raise EOFError("channel closed")
        fds = array.array("i")
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
        data += self._recv_exact(_PREFIX.size - len(data))
        length, count = _PREFIX.unpack(data)
        if length > MAX_HEADER or count != len(fds):
            for fd in fds:
                os.close(fd)
            raise ChannelError("message header too large or its descriptors missing")
        return self._recv_exact(length), list(fds)


def pair() -> tuple[Channel, int]:
    """A channel for the parent and a raw fd to hand to a child through pass_fds."""
    parent, child = socket.socketpair()
    return Channel(parent), child.detach()


# --- tensors in memfds ---------------------------------------------------------

def _tensor_fd(tensor) -> int:
    """A memfd holding the tensor's bytes; GPU tensors are staged through pinned memory."""
    import torch

    fd = os.memfd_create("harness-tensor", os.MFD_CLOEXEC)
    source = tensor.detach().contiguous()
    if source.is_cuda:
        staged = torch.empty(source.shape, dtype=source.dtype, pin_memory=True)
        staged.copy_(source)
        source = staged
    view, done = _view(source), 0
    while done < source.nbytes:
        done += os.pwrite(fd, view[done:done + (1 << 30)], done)
    return fd


def _view(tensor) -> memoryview:
    """The bytes of a contiguous CPU tensor, without a copy."""
    if not tensor.nbytes:
        return memoryview(b"")
    import ctypes

    return memoryview((ctypes.c_char * tensor.nbytes).from_address(tensor.data_ptr())).cast("B")


def _read_fd(fd: int, tensor) -> None:
    """Fill `tensor` (contiguous, CPU) from a descriptor that must hold exactly its bytes."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size != tensor.nbytes:
        raise ChannelError("a tensor's data does not match its shape and dtype")
    view, done = _view(tensor), 0
    while done < tensor.nbytes:
        n = os.preadv(fd, [view[done:done + (1 << 30)]], done)
        if n <= 0:
            raise ChannelError("a tensor's data ended early")
        done += n


def send(chan: Channel, header: dict, tensors: list = (), share_gpu: bool = False) -> list:
    """Send a header and tensors; the header gets a `tensors` list describing them. With
    `share_gpu`, big CUDA tensors travel as CUDA IPC handles (gpu_ipc) instead of bytes: the
    caller must keep the returned tensors alive until the receiver has answered."""
    from . import gpu_ipc

    specs, fds, shared = [], [], []
    try:
        for t in tensors:
            spec = {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "nbytes": t.nbytes}
            source = t.detach().contiguous() if share_gpu and t.is_cuda else None
            handle = gpu_ipc.export(source) if source is not None else None
            if handle:
                spec.update(handle)
                shared.append(source)
            else:
                fds.append(_tensor_fd(t))
            specs.append(spec)
        chan.send_frame(json.dumps({**header, "tensors": specs}).encode(), fds)
    finally:
        for fd in fds:
            os.close(fd)
    return shared


def _parse_header(raw: bytes, fds: list[int]) -> dict:
    try:
        header = json.loads(raw)
    except ValueError as exc:
        header, error = None, f"unreadable message header: {exc}"
    if header is not None:
        specs = header.get("tensors", []) if isinstance(header, dict) else None
        if isinstance(specs, list) and all(isinstance(s, dict) for s in specs) and \
                sum("ipc" not in s for s in specs) == len(fds):
            return header
        error = "message header does not describe its tensors"
    for fd in fds:
        os.close(fd)
    raise ChannelError(error)


def recv(chan: Channel, max_bytes: Optional[int] = None, pin: bool = False, gpu=None) -> Message:
    """Receive a message and rebuild its tensors (at most `max_bytes` in all),
    in pinned memory if `pin`, ready for a fast copy to the GPU. Tensors sent as CUDA IPC
    handles are copied onto `gpu` (a torch.device); without one they are refused."""
    raw, fds = chan.recv_frame()
    header = _parse_header(raw, fds)
    if not header.get("tensors"):  # no descriptors either (_parse_header): the harness's messages need no torch
        return Message(header, [])
    import torch

    from . import gpu_ipc

    tensors = []
    left = iter(fds)
    try:
        total = 0
        for spec in header["tensors"]:
            dtype = getattr(torch, str(spec.get("dtype")), None)
            if not isinstance(dtype, torch.dtype):
                raise ChannelError(f"unknown dtype {spec.get('dtype')!r}")
            shape = [int(s) for s in spec.get("shape", [])]
            numel = 1
            for s in shape:
                numel *= s
            total += numel * dtype.itemsize
            if any(s < 0 for s in shape) or (max_bytes is not None and total > max_bytes):
                raise ChannelError("tensors larger than the reference's outputs allow")
            if "ipc" in spec:
                if gpu is None:
                    raise ChannelError("shared GPU memory where none is expected")
                tensor = torch.empty(shape, dtype=dtype, device=gpu)
                try:
                    gpu_ipc.copy_in(spec, tensor)
                except gpu_ipc.IpcError as exc:
                    raise ChannelError(str(exc)) from None
            else:
                tensor = torch.empty(shape, dtype=dtype, pin_memory=pin)
                _read_fd(next(left), tensor)
            tensors.append(tensor)
    finally:
        for fd in fds:
            os.close(fd)
    return Message(header, tensors)


def recv_raw(chan: Channel) -> Message:
    """Receive a message keeping its descriptors, for relaying between children."""
    raw, fds = chan.recv_frame()
    return Message(_parse_header(raw, fds), fds=fds)


def forward(chan: Channel, message: Message, **extra) -> None:
    """Send a message received with recv_raw on to another process, then let go of it."""
    try:
        chan.send_frame(json.dumps({**message.header, **extra}).encode(), message.fds)
    finally:
        for fd in message.fds:
            os.close(fd)
        message.fds = []


# --- outputs and inputs as trees of tensors and plain values -----------------

def flatten(value: Any, tensors: list) -> Any:
    """Turn nested outputs into a JSON tree, moving tensors into `tensors`."""
    import torch

    if type(value) is torch.Tensor:
        tensors.append(value)
        return {"tensor": len(tensors) - 1, "device": str(value.device)}
    if isinstance(value, torch.Tensor):
        # subclasses (lazy tensors and the like) are refused, not converted
        return {"unsupported": f"Tensor subclass {type(value).__qualname__}"}
    if isinstance(value, (list, tuple)):
        return {type(value).__name__: [flatten(v, tensors) for v in value]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    return {"unsupported": type(value).__qualname__}


def unflatten(tree: Any, tensors: list) -> Any:
    """Inverse of flatten; unsupported leaves come back as Unsupported markers."""
    if not isinstance(tree, dict) or len(tree) not in (1, 2):
        raise ChannelError("malformed value tree")
    if "tensor" in tree:
        index = tree["tensor"]
        if not isinstance(index, int) or not 0 <= index < len(tensors):
            raise ChannelError("value tree names a tensor that was not sent")
        return tensors[index]
    if "list" in tree or "tuple" in tree:
        items = [unflatten(v, tensors) for v in tree.get("list", tree.get("tuple"))]
        return items if "list" in tree else tuple(items)
    if "value" in tree:
        return tree["value"]
    return Unsupported(str(tree.get("unsupported")))


@dataclass(frozen=True)
class Unsupported:
    type_name: str


def devices(tree: Any) -> list[str]:
    """Devices of the tensors in a value tree, in flatten order."""
    if isinstance(tree, dict):
        if "tensor" in tree:
            return [str(tree.get("device"))]
        for key in ("list", "tuple"):
            if key in tree:
                return [d for v in tree[key] for d in devices(v)]
    return []
