"""Who may post a TrainJob's status: the authenticator seam and its implementations."""

from .authenticator import Authenticator, Identity
from .failures import AuthFailure
from .settings import AuthSettings
from .verifier import TokenAuthenticator

__all__ = [
    "AuthFailure",
    "AuthSettings",
    "Authenticator",
    "Identity",
    "TokenAuthenticator",
]
