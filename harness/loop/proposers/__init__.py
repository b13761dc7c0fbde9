"""Where candidates come from: a chat endpoint, a person, or files."""
from .base import Conversation, Exhausted, Proposal, Proposer, ProposerError, Turn

__all__ = ["Conversation", "Exhausted", "Proposal", "Proposer", "ProposerError", "Turn"]
