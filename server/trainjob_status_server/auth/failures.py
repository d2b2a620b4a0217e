"""Why a post was refused: one reason per failure, and which of two kinds it is.

401 means "we cannot establish a current credential of this cluster's issuer": nothing
usable in the header, a token we cannot parse or verify, one outside its validity
window, or one whose bound pod is gone (kube-apiserver itself calls such a token
invalidated, and TokenReview mode can only answer that way). 403 means "a valid
credential that may not write this TrainJob": the audience, namespace or pod names
another TrainJob, or the token is not bound to a pod. Clients see only the generic
message (``errors.answer_for``); the reason goes to the log and to
``trainjob_status_auth_failures_total``.
"""

from __future__ import annotations

from ..failures import Failure

# -- 401: no valid credential ---------------------------------------------------------------
NO_TOKEN = "no_token"  # no Authorization header
BAD_HEADER = "bad_header"  # not exactly "Bearer <token>"
MALFORMED = "malformed"  # not a compact JWS, or claims of the wrong JSON types
ALGORITHM = "algorithm"  # alg outside the allowlist (none, HMAC) or not the key's type
UNKNOWN_KID = "unknown_kid"  # no key with that kid, even after a refresh
SIGNATURE = "signature"  # the key named by kid does not verify it
ISSUER = "issuer"  # iss is not the cluster issuer
EXPIRED = "expired"
NOT_YET_VALID = "not_yet_valid"  # nbf or iat in the future (beyond the leeway)
CLAIMS = "claims"  # no exp, no kubernetes.io namespace/service account, sub disagrees
POD_GONE = "pod_gone"  # the bound pod no longer exists (as a pod of a TrainJob)
POD_UID = "pod_uid"  # a pod of that name exists, but it is another incarnation

# -- 403: valid, but not for this TrainJob --------------------------------------------------
AUDIENCE = "audience"  # aud does not name this TrainJob's status
NAMESPACE = "namespace"  # kubernetes.io.namespace is not the URL's namespace
NO_POD = "no_pod"  # no kubernetes.io.pod binding (refused unless --allow-unbound-tokens)
NOT_MEMBER = "not_member"  # the pod's jobset-name label is not this TrainJob
NOT_OWNED = "not_owned"  # its Job, JobSet and TrainJob are not this TrainJob's, by uid
NOT_PEER = "not_peer"  # a hand-over from a token of another account than the server's

FORBIDDEN_REASONS = frozenset({AUDIENCE, NAMESPACE, NO_POD, NOT_MEMBER, NOT_OWNED, NOT_PEER})
UNAUTHORIZED_REASONS = frozenset(
    {
        NO_TOKEN,
        BAD_HEADER,
        MALFORMED,
        ALGORITHM,
        UNKNOWN_KID,
        SIGNATURE,
        ISSUER,
        EXPIRED,
        NOT_YET_VALID,
        CLAIMS,
        POD_GONE,
        POD_UID,
    }
)
ALL_REASONS = FORBIDDEN_REASONS | UNAUTHORIZED_REASONS


class AuthFailure(Failure):
    """A refusal with its reason (one of the constants above)."""

    def __init__(self, reason: str) -> None:
        if reason not in ALL_REASONS:
            raise ValueError(f"unknown authentication failure reason {reason!r}")
        super().__init__(reason)
        self.reason = reason

    @property
    def forbidden(self) -> bool:
        """A valid credential that may not write this TrainJob (else: no valid credential)."""
        return self.reason in FORBIDDEN_REASONS

    @property
    def code(self) -> int:
        """The code of its answer (401 or 403), as the refusal's log line gives it."""
        return 403 if self.forbidden else 401
