"""`harness mcp`: the judge's methods (judge.py) as MCP tools, on the official Python SDK, over stdio
or streamable HTTP behind a bearer token.

Each call runs its method in a worker thread, so the event loop stays free to answer other calls and
to carry the progress notifications the engine's phases send. A call the client cancels stops
waiting at once, and its processes are ended (Job.cancel). Input the judge refuses (a HarnessError:
one paragraph naming the file and what is wrong) comes back as a tool error, never a traceback. The
instructions and the tools' descriptions are in the words of the server's device (texts.py)."""
import hmac
import itertools
from typing import Annotated, Any, Callable, Literal, Optional

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import ConfigDict, Field, ValidationError
from typing_extensions import TypedDict

from ..errors import HarnessError
from ..results import to_dict
from ..version import __version__
from . import texts
from .devices import Cancelled, Job
from .judge import Judge

Problem = Annotated[str, Field(description="The problem file (KernelBench format: Model, get_inputs, "
                                           "get_init_inputs), a path under the server's roots.")]
Source = Annotated[Optional[str], Field(description="The candidate file's whole text. Give this or `path`.")]
CandidatePath = Annotated[Optional[str], Field(description="A candidate .py file under the server's roots. Give "
                                                          "this or `source`.")]
Run = Annotated[str, Field(description="A run id from start_run (or a unique prefix of one), or 'latest'.")]


class Options(TypedDict, total=False):
    """Evaluation options over the server's own (its flags), as `harness eval`'s flags of the same names."""

    # The schema names the keys taken; a key it does not name reaches the judge, which refuses it by
    # name (dropped here, it would be ignored without a word).
    __pydantic_config__ = ConfigDict(extra="allow", json_schema_extra={"additionalProperties": False})

    trials: Annotated[int, Field(ge=1, description="correctness trials, each on fresh inputs")]
    time_cap: Annotated[float, Field(gt=0, description="most seconds spent sampling times")]
    model_mode: Annotated[Literal["train", "eval"], Field(description="both models in training mode, as "
                                                                      "constructed (default), or in eval()")]
    backward: Annotated[bool, Field(description="check and time the backward pass too")]
    shapes: Annotated[Literal["warn", "strict", "off"], Field(description="a failure at the problem's other "
                                                                          "shapes warns (default), rejects, or is "
                                                                          "not checked")]
    atol: Annotated[float, Field(ge=0, description="absolute tolerance for every dtype")]
    rtol: Annotated[float, Field(ge=0, description="relative tolerance for every dtype")]
    clock: Annotated[Literal["gpu", "latency"], Field(description="the headline clock on a GPU")]
    compile_baseline: Annotated[bool, Field(description="also time torch.compile(Model)")]
    policy: Annotated[Literal["warn", "strict"], Field(description="strict refuses a candidate that calls the "
                                                                   "reference's op or torch.compile")]


def _error(message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


def _record(value: Any) -> Any:
    """A result's record for structured content: all of it but its text (the content already) and the
    raw timing samples (hundreds of numbers a timing; the run's eval.json keeps them)."""
    if isinstance(value, dict):
        return {k: _record(v) for k, v in value.items()
                if k != "text" and not (k == "samples" and isinstance(v, list) and v
                                        and all(isinstance(x, (int, float)) for x in v))}
    if isinstance(value, list):
        return [_record(v) for v in value]
    return value


async def _call(ctx: Context, work: Callable[[Job], Any]) -> CallToolResult:
    """`work` in a worker thread, its phases sent as progress; a cancelled call ends its processes."""
    steps = itertools.count(1)

    def said(doing: str) -> None:
        try:
            anyio.from_thread.run(ctx.report_progress, next(steps), None, doing)
        except Exception:  # noqa: BLE001  a notification the client cannot take changes nothing of the result
            pass

    job = Job(said)
    try:
        done = await anyio.to_thread.run_sync(work, job, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(job.cancel)
        raise
    except Cancelled:
        return _error("The call was cancelled; its processes were ended.")
    except HarnessError as exc:
        return _error(str(exc))
    return CallToolResult(content=[TextContent(type="text", text=done.text)], structured_content=_record(to_dict(done)))


class Server(MCPServer):
    """The SDK's server, whose refusal of arguments its schemas do not admit is one sentence (pydantic's
    own runs to several lines, with links)."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Optional[Context] = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(texts.refused_arguments(name, exc.__cause__.errors())) from exc.__cause__
            raise


def build_server(judge: Judge) -> MCPServer:
    cpu = judge.options.device == "cpu"
    server = Server("harness", instructions=texts.instructions(cpu), version=__version__, log_level="WARNING")
    reads = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    runs = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
    described = texts.descriptions(cpu)
    # built here, for the device (annotations are evaluated where the tools are defined)
    Kernel = Annotated[Optional[str], Field(description=texts.words(cpu).kernel)]

    def tool(annotations: ToolAnnotations) -> Callable[[Callable], Callable]:
        """A tool described as texts.descriptions says, for the server's device: the text a model reads."""
        def register(fn: Callable) -> Callable:
            server.add_tool(fn, description=described[fn.__name__], annotations=annotations, structured_output=False)
            return fn
        return register

    @tool(reads)
    async def describe_problem(problem: Problem, ctx: Context) -> CallToolResult:
        return await _call(ctx, lambda job: judge.describe(problem, job))

    @tool(runs)
    async def start_run(problem: Problem, ctx: Context,
                        accept: Annotated[float, Field(gt=0, description="the acceptable speedup")] = 1.5,
                        target: Annotated[float, Field(gt=0, description="the speedup that ends the run")] = 2.0,
                        options: Optional[Options] = None) -> CallToolResult:
        return await _call(ctx, lambda job: judge.start_run(problem, accept, target, options, job))

    @tool(runs)
    async def evaluate(problem: Problem, ctx: Context, source: Source = None, path: CandidatePath = None,
                       run: Annotated[Optional[str], Field(description="A run id from start_run: the evaluation "
                                                                       "is kept as its next round.")] = None,
                       note: Annotated[str, Field(description="What this candidate tries, in a few words, for the "
                                                              "table of rounds.")] = "",
                       options: Optional[Options] = None) -> CallToolResult:
        return await _call(ctx, lambda job: judge.evaluate(problem, source, path, run, options, note, job))

    @tool(reads)
    async def profile(problem: Problem, ctx: Context, source: Source = None, path: CandidatePath = None,
                      kernel: Kernel = None) -> CallToolResult:
        return await _call(ctx, lambda job: judge.profile(problem, source, path, kernel, job))

    @tool(reads)
    async def history(ctx: Context, run: Run = "latest") -> CallToolResult:
        return await _call(ctx, lambda job: judge.records.history(run))

    @tool(reads)
    async def best(ctx: Context, run: Run = "latest") -> CallToolResult:
        return await _call(ctx, lambda job: judge.records.best(run))

    @tool(reads)
    async def show_round(run: Run, ctx: Context,
                         # the schema's minimum, not checked here: the judge says which rounds the run has
                         round: Annotated[int, Field(description="The round's number, from 1.",
                                                     json_schema_extra={"minimum": 1})]
                         ) -> CallToolResult:
        return await _call(ctx, lambda job: judge.records.show_round(run, round))

    return server


class BearerGuard:
    """ASGI: every HTTP request must carry `Authorization: Bearer TOKEN`; any other gets 401 and nothing else.
    The scheme matches in any case (RFC 7235: `bearer`, `BEARER`), the token only exactly."""

    def __init__(self, app: Any, token: str):
        self.app, self.expected = app, token.encode()

    def _authorised(self, given: bytes) -> bool:
        scheme, _, token = given.partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(token.lstrip(b" "), self.expected)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        if scope["type"] == "http" and not self._authorised(given):
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"text/plain"), (b"www-authenticate", b"Bearer")]})
            await send({"type": "http.response.body",
                        "body": b"This harness mcp server needs `Authorization: Bearer TOKEN`.\n"})
            return
        await self.app(scope, receive, send)


def serve_stdio(judge: Judge) -> None:
    anyio.run(build_server(judge).run_stdio_async)


def serve_http(judge: Judge, host: str, port: int, token: str) -> None:
    import uvicorn  # the SDK's own HTTP server, needed for --http alone

    app = BearerGuard(build_server(judge).streamable_http_app(host=host), token)
    anyio.run(uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning")).serve)
