"""The private channel between the harness and its child processes.

A message is one JSON header followed by zero or more raw byte blobs, one per
tensor the header describes. Nothing a child sends is unpickled: a candidate's
process could otherwise run code inside whoever reads its messages. Tensors
travel as dtype, shape and bytes, and are rebuilt as plain `torch.Tensor`s.
"""
from __future__ import annotations

import ctypes
import json
import socket
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

MAX_HEADER = 16 * 1024 * 1024


class ChannelError(Exception):
    """A malformed message: the sender broke the protocol."""


@dataclass
class Message:
    header: dict
    blobs: list = field(default_factory=list)  # tensors (decoded) or raw bytes (relayed)


def close_quietly(conn: Connection) -> None:
    try:
        conn.close()
    except OSError:
        pass


def pair() -> tuple[Connection, int]:
    """A connection for the parent and a raw fd to hand to a child through pass_fds."""
    parent, child = socket.socketpair()
    return Connection(parent.detach()), child.detach()


def connect(fd: int) -> Connection:
    return Connection(fd)


def _buffer(tensor) -> Any:
    """A zero-copy view of a contiguous CPU tensor's bytes."""
    return (ctypes.c_char * tensor.nbytes).from_address(tensor.data_ptr()) if tensor.nbytes else b""


def send(conn: Connection, header: dict, tensors: list = ()) -> None:
    """Send a header and tensors; the header gets a `tensors` list describing them."""
    import torch

    cpu = [t.detach().contiguous().cpu() if isinstance(t, torch.Tensor) else t for t in tensors]
    specs = [{"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
              "nbytes": t.nbytes} for t in cpu]
    conn.send_bytes(json.dumps({**header, "tensors": specs}).encode())
    for t in cpu:
        conn.send_bytes(_buffer(t))


def _recv_header(conn: Connection) -> dict:
    raw = conn.recv_bytes(MAX_HEADER)
    try:
        header = json.loads(raw)
    except ValueError as exc:
        raise ChannelError(f"unreadable message header: {exc}") from None
    if not isinstance(header, dict) or not isinstance(header.get("tensors", []), list):
        raise ChannelError("message header is not an object with a tensor list")
    return header


def recv(conn: Connection) -> Message:
    """Receive a message and rebuild its tensors."""
    import torch

    header = _recv_header(conn)
    tensors = []
    for spec in header.get("tensors", []):
        dtype = getattr(torch, str(spec.get("dtype")), None)
        if not isinstance(dtype, torch.dtype):
            raise ChannelError(f"unknown dtype {spec.get('dtype')!r}")
        shape = [int(s) for s in spec.get("shape", [])]
        tensor = torch.empty(shape, dtype=dtype)
        if tensor.nbytes != spec.get("nbytes"):
            raise ChannelError("tensor size does not match its shape and dtype")
        if tensor.nbytes:
            conn.recv_bytes_into(_buffer(tensor))
        else:
            conn.recv_bytes()
        tensors.append(tensor)
    return Message(header, tensors)


def recv_raw(conn: Connection) -> Message:
    """Receive a message without rebuilding tensors, for relaying between children."""
    header = _recv_header(conn)
    return Message(header, [conn.recv_bytes() for _ in header.get("tensors", [])])


def forward(conn: Connection, message: Message, **extra) -> None:
    """Send a message received with recv_raw on to another process."""
    conn.send_bytes(json.dumps({**message.header, **extra}).encode())
    for blob in message.blobs:
        conn.send_bytes(blob)


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

