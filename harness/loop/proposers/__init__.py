"""Where candidates come from: a chat endpoint, a person, files, a program of your own, or (runs that
`harness mcp` keeps) a coding agent. kinds.py lists the kinds; each kind's module holds its `KIND`."""
from .base import Conversation, Exhausted, OutOfTime, Proposal, Proposer, ProposerError, Turn

__all__ = ["Conversation", "Exhausted", "OutOfTime", "Proposal", "Proposer", "ProposerError", "Turn"]
