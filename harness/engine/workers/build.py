"""The build role: import the candidate once (load_inline compiles at import) and report."""
from __future__ import annotations

from .. import channel
from .common import classify_import_error, error_message, import_candidate


def build_role(conn, spec: dict) -> None:
    try:
        module = import_candidate(spec)
    except BaseException as exc:  # noqa: BLE001 - SystemExit from a candidate is a result too
        channel.send(conn, error_message(classify_import_error(exc), exc))
        return
    ok = isinstance(getattr(module, "ModelNew", None), type)
    channel.send(conn, {"ok": ok} if ok else {"error": "import_error", "exception": "",
                                               "message": "the file defines no class ModelNew"})
