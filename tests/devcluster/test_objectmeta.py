"""metadata.name checks, with the messages of a real kube-apiserver."""

from __future__ import annotations

from trainjob_devcluster.common.status import Cause
from trainjob_devcluster.storage.objectmeta import validate_name

SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
    "regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


def test_custom_resource_name_must_be_a_subdomain() -> None:
    # a_create_trainjob_bad_name
    assert validate_name("Bad.Name", namespaced_or_custom=True) == [
        Cause("FieldValueInvalid", f'Invalid value: "Bad.Name": {SUBDOMAIN_MSG}', "metadata.name")
    ]
    assert validate_name("tj-rec.v2", namespaced_or_custom=True) == []


def test_subdomain_length_is_checked_in_bytes() -> None:
    name = "a" * 254
    assert validate_name(name, namespaced_or_custom=True) == [
        Cause(
            "FieldValueInvalid",
            f'Invalid value: "{name}": must be no more than 253 characters',
            "metadata.name",
        )
    ]


def test_namespace_name_must_be_a_label() -> None:
    assert validate_name("a.b", namespaced_or_custom=False) == [
        Cause("FieldValueInvalid", 'Invalid value: "a.b": must not contain dots', "metadata.name")
    ]
    assert validate_name("Rec", namespaced_or_custom=False) == [
        Cause("FieldValueInvalid", f'Invalid value: "Rec": {LABEL_MSG}', "metadata.name")
    ]
    long = "a" * 64
    assert validate_name(long, namespaced_or_custom=False) == [
        Cause(
            "FieldValueInvalid",
            f'Invalid value: "{long}": must be no more than 63 characters',
            "metadata.name",
        )
    ]


def test_empty_name_is_required() -> None:
    assert validate_name("", namespaced_or_custom=True) == [
        Cause(
            "FieldValueRequired",
            "Required value: name or generateName is required",
            "metadata.name",
        )
    ]
