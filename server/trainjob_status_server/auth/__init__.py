"""Who may post a TrainJob's status: the authenticator seam and its implementations."""

from .authenticator import Authenticator, Identity, RejectAll

__all__ = ["Authenticator", "Identity", "RejectAll"]
