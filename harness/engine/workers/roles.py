"""The roles a worker can take, by name: importing this module imports torch (the fork server
imports it once, so that the workers forked from it need not)."""
from .build import build_role
from .candidate import candidate_role
from .profile import profile_role
from .reference import reference_role

ROLES = {"build": build_role, "candidate": candidate_role, "reference": reference_role}

__all__ = ["ROLES", "profile_role"]
