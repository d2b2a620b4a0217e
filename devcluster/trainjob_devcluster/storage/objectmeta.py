"""The built-in ``metadata.name`` checks every object meets, with the real messages.

A real API server checks names before any schema rule: namespaced objects and all
custom resources must be lowercase RFC 1123 subdomains, namespaces RFC 1123 labels.
The messages (including the doubled space after the first example of the label
message) are the ones apimachinery's validation helpers produce; clients and tests
match on them.
"""

from __future__ import annotations

import re

from ..common.go_text import go_quote
from ..common.status import Cause

_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN_FMT = _LABEL_FMT + r"(\." + _LABEL_FMT + ")*"
_LABEL_RE = re.compile(_LABEL_FMT)
_SUBDOMAIN_RE = re.compile(_SUBDOMAIN_FMT)
_LABEL_MAX = 63
_SUBDOMAIN_MAX = 253

_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character"
)


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    # Mirrors apimachinery's RegexError, whose joiner leaves two spaces before " or ".
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    text = msg + " (e.g. "
    for i, example in enumerate(examples):
        if i:
            text += " or "
        text += f"'{example}', "
    return text + f"regex used for validation is '{fmt}')"


def dns1123_subdomain_errors(value: str) -> list[str]:
    """Problems with ``value`` as a lowercase RFC 1123 subdomain (empty if none)."""
    errs: list[str] = []
    # Go measures strings in bytes.
    if len(value.encode()) > _SUBDOMAIN_MAX:
        errs.append(f"must be no more than {_SUBDOMAIN_MAX} characters")
    if _SUBDOMAIN_RE.fullmatch(value) is None:
        errs.append(_regex_error(_SUBDOMAIN_MSG, _SUBDOMAIN_FMT, "example.com"))
    return errs


def dns1123_label_errors(value: str) -> list[str]:
    """Problems with ``value`` as a lowercase RFC 1123 label (empty if none)."""
    errs: list[str] = []
    if len(value.encode()) > _LABEL_MAX:
        errs.append(f"must be no more than {_LABEL_MAX} characters")
    if _LABEL_RE.fullmatch(value) is None:
        if _SUBDOMAIN_RE.fullmatch(value) is not None:
            # A valid subdomain that is not a label can only differ by its dots.
            errs.append("must not contain dots")
        else:
            errs.append(_regex_error(_LABEL_MSG, _LABEL_FMT, "my-name", "123-abc"))
    return errs


def validate_name(name: str, *, namespaced_or_custom: bool) -> list[Cause]:
    """The ``metadata.name`` causes of a create, in the real server's order.

    ``namespaced_or_custom`` selects the RFC 1123 subdomain rule (namespaced objects and
    every custom resource); otherwise the name must be an RFC 1123 label (namespaces).
    """
    if not name:
        return [
            Cause(
                "FieldValueRequired",
                "Required value: name or generateName is required",
                "metadata.name",
            )
        ]
    problems = (
        dns1123_subdomain_errors(name) if namespaced_or_custom else dns1123_label_errors(name)
    )
    shown = go_quote(name)
    return [
        Cause("FieldValueInvalid", f"Invalid value: {shown}: {problem}", "metadata.name")
        for problem in problems
    ]
