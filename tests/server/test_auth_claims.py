"""The pure decisions of token authentication: the bearer header, the claims, the codes."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from trainjob_status.contract import audience as audience_for
from trainjob_status_server.auth import failures
from trainjob_status_server.auth.bearer import bearer_token
from trainjob_status_server.auth.claims import (
    TokenFacts,
    check_facts,
    check_times,
    parse_facts,
    unverified_claims,
)
from trainjob_status_server.auth.failures import AuthFailure
from trainjob_status_server.http.errors import answer_for

ISSUER = "https://kubernetes.default.svc.cluster.local"
AUD = "trainer.kubeflow.org/v1alpha1/namespaces/rec/trainjobs/tj-rec/status"
NOW = 1796236425.0
# The recorded claims of a TokenRequest bound to a pod (j_token_request_bound_pod).
CLAIMS: dict[str, Any] = {
    "aud": [AUD],
    "exp": 1796240025,
    "iat": 1796236425,
    "iss": ISSUER,
    "jti": "ebe7c967-caad-4b1e-b403-d95f45f2d5d8",
    "kubernetes.io": {
        "namespace": "rec",
        "pod": {"name": "tj-rec-node-0-0", "uid": "cfe06852-5984-44ea-b543-8f312cb958b6"},
        "serviceaccount": {"name": "trainer", "uid": "d45f01f3-8678-4a0a-8120-0bb8ab1119b8"},
    },
    "nbf": 1796236425,
    "sub": "system:serviceaccount:rec:trainer",
}


def reason_of(raiser: Any, *args: Any, **kwargs: Any) -> str | None:
    try:
        raiser(*args, **kwargs)
    except AuthFailure as failure:
        return failure.reason
    return None


# -- bearer ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [
        "Bearer abc",
        "bearer abc",
        "BeArEr abc",
        "Bearer\tabc",
        "Bearer \t  abc",
        "  Bearer abc  ",
        "\n\tBearer\vabc\f",
        "Bearer\u00a0abc",  # Go's unicode.IsSpace counts NBSP
        "Bearer\u3000abc",
    ],
)
def test_bearer_headers_that_pass(header: str) -> None:
    assert bearer_token(header) == "abc"


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        (None, "no_token"),
        ("", "bad_header"),
        (" \t ", "bad_header"),
        ("Bearer", "bad_header"),
        ("Bearer   ", "bad_header"),
        ("abc", "bad_header"),
        ("Basic abc", "bad_header"),
        ("Bearerx abc", "bad_header"),
        ("Bearer abc def", "bad_header"),
        ("Bearer abc Bearer def", "bad_header"),
    ],
)
def test_bearer_headers_that_fail(header: str | None, reason: str) -> None:
    assert reason_of(bearer_token, header) == reason


def test_separators_go_does_not_split_on_stay_in_the_token() -> None:
    # Python's str.split() would split on U+001C..U+001F; strings.Fields does not.
    assert bearer_token("Bearer a\x1cb") == "a\x1cb"


# Go's unicode.IsSpace, the separators of strings.Fields, written out by hand.
GO_SPACE = frozenset("\t\n\v\f\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | frozenset(
    map(chr, range(0x2000, 0x200B))
)


def peer_token(header: str | None) -> str:
    """What the Trainer's status server does with the header, as plainly as it can be written."""
    if header is None:
        raise AuthFailure("no_token")
    fields, field = [], ""
    for char in header + " ":
        if char in GO_SPACE:
            if field:
                fields.append(field)
            field = ""
        else:
            field += char
    if len(fields) != 2 or fields[0].lower() != "bearer":
        raise AuthFailure("bad_header")
    return fields[1]


def outcome(parse: Any, header: str | None) -> tuple[str, str]:
    try:
        return "token", parse(header)
    except AuthFailure as failure:
        return "refused", failure.reason


# Every separator either split knows, some that neither does, and token characters.
HEADER_CHARS = st.sampled_from(
    list(" \t\n\v\f\r\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u200a\u200b\u2028\u3000")
    + list("Bbearxé.-_0")
)


@settings(max_examples=1000, deadline=None, database=None)
@given(
    st.one_of(
        st.text(HEADER_CHARS, max_size=12),
        st.builds(
            lambda scheme, gap, rest: scheme + gap + rest,
            st.sampled_from(["Bearer", "bearer", "BEARER", "Bearerx", "Basic", ""]),
            st.one_of(st.just(" "), st.text(HEADER_CHARS, max_size=3)),
            st.text(HEADER_CHARS, max_size=8),
        ),
    )
)
@example("Bearer abc")
@example("Bearer a b")
@example("Bearer  abc")
@example("Bearer abc ")
@example("Bearer a\x1cb")
@example("Bearer a\xa0b")
@example("Bearer é")
@example("Bearer ")
@example(" Bearer abc")
def test_bearer_parsing_is_the_peers_for_any_header(header: str) -> None:
    assert outcome(bearer_token, header) == outcome(peer_token, header)


# -- facts ------------------------------------------------------------------------------------


def test_recorded_claims_parse_to_facts() -> None:
    assert parse_facts(CLAIMS) == TokenFacts(
        issuer=ISSUER,
        subject="system:serviceaccount:rec:trainer",
        audiences=(AUD,),
        expires=1796240025.0,
        not_before=1796236425.0,
        issued_at=1796236425.0,
        namespace="rec",
        service_account="trainer",
        pod_name="tj-rec-node-0-0",
        pod_uid="cfe06852-5984-44ea-b543-8f312cb958b6",
    )


def test_a_single_string_audience_counts() -> None:
    assert parse_facts({**CLAIMS, "aud": AUD}).audiences == (AUD,)


@pytest.mark.parametrize(
    "change",
    [
        {"exp": "1796240025"},
        {"exp": True},
        {"aud": [AUD, 1]},
        {"aud": {"a": 1}},
        {"iss": 5},
        {"sub": None, "kubernetes.io": []},
        {"kubernetes.io": {"namespace": "rec", "pod": "tj-rec-node-0-0"}},
        {"kubernetes.io": {"namespace": 1}},
    ],
)
def test_claims_of_the_wrong_type_are_malformed(change: dict[str, Any]) -> None:
    assert reason_of(parse_facts, {**CLAIMS, **change}) == "malformed"


def _b64(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def test_unverified_claims() -> None:
    assert unverified_claims(f"{_b64({'alg': 'RS256'})}.{_b64(CLAIMS)}.sig") == CLAIMS
    for token in ("abc", "a.b", f"x.{_b64([1])}.y", "x.!!!.y", "x.e30x.y", "a.b.c.d"):
        assert reason_of(unverified_claims, token) == "malformed"


# -- checks -----------------------------------------------------------------------------------


def check(
    claims: dict[str, Any],
    *,
    now: float = NOW,
    audience: str = AUD,
    namespace: str = "rec",
    issuer: str | None = ISSUER,
    allow_unbound: bool = False,
) -> str | None:
    return reason_of(
        check_facts,
        parse_facts(claims),
        issuer=issuer,
        audience=audience,
        namespace=namespace,
        now=now,
        leeway=60,
        allow_unbound=allow_unbound,
    )


def without(key: str, claims: dict[str, Any] = CLAIMS) -> dict[str, Any]:
    return {k: v for k, v in claims.items() if k != key}


def private(**changes: Any) -> dict[str, Any]:
    inner = {**CLAIMS["kubernetes.io"], **changes}
    return {**CLAIMS, "kubernetes.io": {k: v for k, v in inner.items() if v is not None}}


def test_the_recorded_token_passes_for_its_trainjob() -> None:
    assert audience_for("rec", "tj-rec") == AUD
    assert check(CLAIMS) is None


@pytest.mark.parametrize(
    ("claims", "kwargs", "reason"),
    [
        (CLAIMS, {"issuer": "https://other"}, "issuer"),
        ({**CLAIMS, "iss": "https://other"}, {}, "issuer"),
        (without("iss"), {}, "issuer"),
        (without("exp"), {}, "claims"),
        (CLAIMS, {"now": 1796240025 + 61}, "expired"),
        (CLAIMS, {"now": 1796236425 - 61}, "not_yet_valid"),
        ({**without("nbf"), "iat": NOW + 61}, {}, "not_yet_valid"),
        (without("kubernetes.io"), {}, "claims"),
        (private(namespace=None), {}, "claims"),
        (private(serviceaccount=None), {}, "claims"),
        ({**CLAIMS, "sub": "system:serviceaccount:rec:other"}, {}, "claims"),
        ({**CLAIMS, "sub": "system:serviceaccount:other:trainer"}, {}, "claims"),
        (without("sub"), {}, "claims"),
        (private(pod={"name": "tj-rec-node-0-0"}), {}, "claims"),
        (CLAIMS, {"audience": audience_for("rec", "other")}, "audience"),
        (without("aud"), {}, "audience"),
        (
            {**CLAIMS, "aud": [audience_for("other", "tj-rec")]},
            {"namespace": "other", "audience": audience_for("other", "tj-rec")},
            "namespace",
        ),
        (private(pod=None), {}, "no_pod"),
    ],
)
def test_each_check_has_its_reason(
    claims: dict[str, Any], kwargs: dict[str, Any], reason: str
) -> None:
    assert check(claims, **kwargs) == reason


@settings(max_examples=300, deadline=None, database=None)
@given(st.floats(min_value=NOW - 200, max_value=1796240025 + 200))
@example(1796236425.0 - 60)
@example(1796236425.0 - 60.5)
@example(1796240025.0 + 60)
@example(1796240025.0 + 60.5)
def test_the_time_checks_alone_decide_a_post_the_others_passed(now: float) -> None:
    # What a cached token that passed for this TrainJob before is checked with.
    assert reason_of(check_times, parse_facts(CLAIMS), now, 60) == check(CLAIMS, now=now)


def test_the_time_checks_want_an_expiry() -> None:
    assert reason_of(check_times, parse_facts(without("exp")), NOW, 60) == "claims"
    early = {**without("nbf"), "iat": NOW + 61}
    assert reason_of(check_times, parse_facts(early), NOW, 60) == "not_yet_valid"


def test_the_leeway_is_one_minute_either_side() -> None:
    assert check(CLAIMS, now=1796240025 + 60) is None
    assert check(CLAIMS, now=1796236425 - 60) is None


def test_no_issuer_to_compare_skips_that_check() -> None:
    assert check({**CLAIMS, "iss": "https://other"}, issuer=None) is None


def test_an_unbound_token_passes_only_when_allowed() -> None:
    assert check(private(pod=None), allow_unbound=True) is None


# -- codes ------------------------------------------------------------------------------------


def test_codes_by_reason() -> None:
    assert {r: AuthFailure(r).code for r in sorted(failures.ALL_REASONS)} == {
        "algorithm": 401,
        "audience": 403,
        "bad_header": 401,
        "claims": 401,
        "expired": 401,
        "issuer": 401,
        "malformed": 401,
        "namespace": 403,
        "no_pod": 403,
        "no_token": 401,
        "not_member": 403,
        "not_owned": 403,
        "not_peer": 403,
        "not_yet_valid": 401,
        "pod_gone": 401,
        "pod_uid": 401,
        "signature": 401,
        "unknown_kid": 401,
    }
    assert answer_for(AuthFailure("audience")).body()["message"] == "Forbidden"
    assert answer_for(AuthFailure("expired")).body()["message"] == "Unauthorized"
    with pytest.raises(ValueError, match="unknown authentication failure reason"):
        AuthFailure("whatever")
