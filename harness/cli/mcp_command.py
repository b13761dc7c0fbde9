"""`harness mcp`: its flags, and the judge (agent/judge.py) served as MCP tools (agent/server.py)
over stdio, or over streamable HTTP behind a bearer token."""
from __future__ import annotations

import argparse
import os
import secrets
from functools import partial
from pathlib import Path

from rich.console import Console

from ..errors import HarnessError
from .config import COUNT, add_eval_options, eval_options, evaluation_options, parse_gpus, take_free_gpu

TOKEN_ENV = "HARNESS_MCP_TOKEN"
DEFAULT_PORT = 8765
DESCRIPTION = ("Serve the harness to a coding agent as MCP tools: describe_problem, evaluate, profile, start_run, "
               "history, best and show_round. Candidates are judged as `harness eval` judges them; an agent's "
               "session started with start_run is stored under runs/ as a run, one round per evaluation. Over "
               "stdio by default (the agent's client starts the command); --http serves streamable HTTP on "
               "this machine, behind a bearer token. See docs/agents.md.")


def add_mcp_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", action="append", type=Path, default=None, metavar="DIR",
                        help="a directory whose problem and candidate files the tools may read; repeat for more "
                             "(default: the current directory)")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"), metavar="DIR",
                        help="where the runs an agent starts are stored (default runs)")
    parser.add_argument("--http", action="store_true",
                        help=f"serve streamable HTTP at http://HOST:PORT/mcp instead of stdio; every request "
                             f"must carry `Authorization: Bearer TOKEN`, the token from ${TOKEN_ENV} or else "
                             "made and printed at the start")
    parser.add_argument("--host", default="127.0.0.1",
                        help="with --http: the address to listen on (default 127.0.0.1, this machine alone)")
    parser.add_argument("--port", type=COUNT, default=DEFAULT_PORT, help=f"with --http: the port (default "
                                                                         f"{DEFAULT_PORT})")
    add_eval_options(parser)  # the device, limits and evaluation defaults, as `harness eval`'s


def mcp_main(args: argparse.Namespace, console: Console) -> int:
    """Serve until the client closes stdin (stdio) or the process is stopped (--http); `console` is
    stderr, for stdout carries the protocol."""
    try:
        from ..agent.judge import Judge
        from ..agent.server import serve_http, serve_stdio
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] == "mcp":
            raise HarnessError("harness mcp needs the MCP SDK: pip install -e '.[mcp]' (or pip install "
                               "'mcp>=2.0,<3').") from None
        raise
    if (args.host != "127.0.0.1" or args.port != DEFAULT_PORT) and not args.http:
        raise HarnessError("--host and --port go with --http; over stdio the agent's client starts the server.")
    say = partial(console.print, markup=False, highlight=False, soft_wrap=True)
    gpus = parse_gpus(args.gpus)
    options = take_free_gpu(eval_options(args), gpus, say)
    judge = Judge(options, evaluation_options(args)[0], args.root or [Path.cwd()], args.runs_dir, args.jobs)
    try:
        if args.http:
            token = os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(24)
            said = f"the token from ${TOKEN_ENV}" if os.environ.get(TOKEN_ENV) else f"token {token}"
            say(f"harness mcp: http://{args.host}:{args.port}/mcp on {options.device}; every request needs "
                f"`Authorization: Bearer TOKEN`, {said}. Ctrl-C stops it.")
            serve_http(judge, args.host, args.port, token)
        else:
            serve_stdio(judge)
    finally:
        judge.close()
    return 0
