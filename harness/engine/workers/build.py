"""The build role: import the candidate once (load_inline compiles at import) and report."""
from __future__ import annotations

from ...results import from_dict, to_dict
from ..building.extensions import BUILT, headers_of
from ..processes import channel
from ..processes.protocol import BuildDone, BuildSpec
from .common import classify_import_error, error_message, import_candidate


def build_role(conn, header: dict) -> None:
    try:
        module = import_candidate(from_dict(BuildSpec, header))
    except BaseException as exc:  # noqa: BLE001 - SystemExit from a candidate is a result too
        channel.send(conn, {**error_message(classify_import_error(exc), exc), "headers": to_dict(headers_of(BUILT))})
        return
    ok = isinstance(getattr(module, "ModelNew", None), type)
    done = BuildDone(ok=True, extensions=[b.key for b in BUILT], compiled=any(b.compiled for b in BUILT),
                     headers=headers_of(BUILT)) if ok \
        else BuildDone(error="import_error", message="the file defines no class ModelNew")
    channel.send(conn, to_dict(done))
