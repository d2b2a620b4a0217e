"""Verified tokens by SHA-256 digest, so repeated posts skip the signature check (pure).

What is cached is only what does not change while the token lives: its claims, parsed,
and the key that verified them (None when TokenReview vouched for it). The pod binding
is never cached here: every post, cached or not, looks its pod up in the pod watch
cache, so an entry cannot outlive its pod. An entry cannot outlive its key either: the
caller compares ``key`` with the current key set on every hit (identity, one dict
lookup), and drops entries of keys that left the set when it changes. Entries die at
``exp`` plus the leeway; beyond ``max_entries`` the least recently used goes first.
The token itself is never stored, only its digest.

An entry also remembers the last TrainJob its claims passed ``check_facts`` for, with the
identity that post got and what passed the pod binding (``admitted``): the next post
there needs the time checks only, and no pod judgement while the pod cache holds that
same object, the TrainJob is the same incarnation and the binding mode the same.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from .authenticator import Identity
from .binding import Fit
from .claims import TokenFacts
from .keys import VerificationKey


@dataclass(slots=True)
class Admission:
    """A TrainJob the claims passed every check but the time checks for (the others
    depend only on the facts, the issuer and the settings, none of which changes while
    the entry lives), the identity its posts get, and the pod cache's object that last
    passed the pod binding for it (``PodBinding.check``)."""

    namespace: str
    trainjob: str
    identity: Identity
    pod: Fit | None = None


@dataclass(slots=True)
class Verified:
    facts: TokenFacts
    key: VerificationKey | None
    until: float  # wall-clock seconds; dead from then on
    admitted: Admission | None = None  # the one field that changes: the last one passed


class TokenCache:
    """A bounded LRU map digest -> Verified; ``max_entries`` 0 disables it."""

    def __init__(self, max_entries: int) -> None:
        if max_entries < 0:
            raise ValueError(f"max_entries must be >= 0, got {max_entries}")
        self.max_entries = max_entries
        self._entries: OrderedDict[bytes, Verified] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, digest: bytes, now: float) -> Verified | None:
        entry = self._entries.get(digest)
        if entry is None:
            return None
        if now >= entry.until:
            del self._entries[digest]
            return None
        self._entries.move_to_end(digest)
        return entry

    def put(self, digest: bytes, entry: Verified, now: float) -> None:
        if self.max_entries == 0 or now >= entry.until:
            return
        self._entries[digest] = entry
        self._entries.move_to_end(digest)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def discard(self, digest: bytes) -> None:
        self._entries.pop(digest, None)

    def drop_where(self, doomed: Callable[[Verified], bool]) -> int:
        """Remove every entry ``doomed`` selects (a key left the set); how many."""
        gone = [digest for digest, entry in self._entries.items() if doomed(entry)]
        for digest in gone:
            del self._entries[digest]
        return len(gone)
