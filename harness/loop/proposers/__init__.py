"""Where candidates come from: a chat endpoint, a person, or files."""
from .base import Conversation, Exhausted, OutOfTime, Proposal, Proposer, ProposerError, Turn

__all__ = ["Conversation", "Exhausted", "OutOfTime", "Proposal", "Proposer", "ProposerError", "Turn"]
