"""The harness as a coding agent's judge: `judge.py` is the Python API (describe a problem, evaluate or
profile a candidate, keep an agent's session as a run), `server.py` serves it as MCP tools (`harness mcp`)."""
