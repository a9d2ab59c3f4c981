# SPDX-License-Identifier: Apache-2.0
"""types.py - what the deras client returns and raises: events, completions, errors."""

from dataclasses import dataclass, field
from typing import Any, List, Optional

PROTOCOL_VERSION = 1

# Stable error codes of the protocol (common/wire/protocol.h); "timeout", "unavailable" and
# "unauthenticated" are the client's own.
ERROR_CODES = (
    "malformed", "unsupported_version", "unknown_type", "invalid_field", "missing_field",
    "message_too_large", "limit_exceeded", "value_out_of_range", "token_out_of_range",
    "invalid_utf8", "context_length_exceeded", "duplicate_id", "unknown_request", "busy",
    "no_workers", "worker_failed", "deadline_exceeded", "shutting_down", "internal",
    "chat_unsupported", "chat_template_error", "invalid_grammar", "grammar_budget_exceeded",
)


class DerasError(Exception):
    """The router refused or failed a request. code: a stable snake_case code (see
    ERROR_CODES; "timeout" from the client itself); message: the router's explanation;
    id: the request id ("" when the router could not tell)."""

    def __init__(self, code, message, id=""):
        super().__init__("%s: %s" % (code, message))
        self.code, self.message, self.id = code, message, id


class DerasTimeout(DerasError):
    """No reply within the timeout (router down, unreachable, or overloaded). code "timeout"."""


class DerasUnavailable(DerasTimeout):
    """Nothing answers: no connection to the router came up within connect_timeout (code
    "unavailable": no router at that address, or a handshake that failed), or the router
    refused this client's CURVE key (code "unauthenticated"). A DerasTimeout, so code that
    catches timeouts catches it too, only sooner."""


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    queue_ms: float = 0.0     # router receipt to dispatch
    ttft_ms: float = 0.0      # router receipt to first token
    total_ms: float = 0.0     # router receipt to the end
    # speculative decoding of the sample (0 when it had none): draft tokens the worker
    # verified, drafts that stood, and verification steps
    spec_proposed: int = 0
    spec_accepted: int = 0
    spec_verifications: int = 0


@dataclass(frozen=True)
class Chunk:
    """Streamed tokens of sample `index` and the text they complete (possibly "")."""
    id: str
    index: int
    text: str
    token_ids: List[int]
    # with logprobs=N, one entry per token as on the wire:
    # {"token_id": id, "logprob": lp, "top": [[id, lp], ...]}
    logprobs: Optional[List[Any]] = None


@dataclass(frozen=True)
class Final:
    """The end of sample `index`. finish_reason: "stop", "length" or "abort".
    Non-streaming requests carry the whole text and token ids here (None for streams)."""
    id: str
    index: int
    finish_reason: str
    usage: Usage
    abort_reason: Optional[str] = None
    text: Optional[str] = None
    token_ids: Optional[List[int]] = None
    logprobs: Optional[List[Any]] = None


@dataclass(frozen=True)
class Choice:
    index: int
    text: str
    token_ids: List[int]
    finish_reason: str
    abort_reason: Optional[str] = None
    logprobs: Optional[List[Any]] = None
    usage: Usage = field(default_factory=Usage)


@dataclass(frozen=True)
class Completion:
    """A finished request: one Choice per sample, in index order."""
    id: str
    choices: List[Choice]

    @property
    def text(self):
        return self.choices[0].text

    @property
    def texts(self):
        return [c.text for c in self.choices]

    @property
    def token_ids(self):
        return [c.token_ids for c in self.choices]

    @property
    def finish_reasons(self):
        return [c.finish_reason for c in self.choices]

    @property
    def usage(self):
        """Usage of the request: prompt tokens once, completion tokens summed over samples,
        router timings of the sample that finished last."""
        last = max(self.choices, key=lambda c: c.usage.total_ms).usage
        return Usage(prompt_tokens=max(c.usage.prompt_tokens for c in self.choices),
                     completion_tokens=sum(len(c.token_ids) for c in self.choices),
                     queue_ms=last.queue_ms, ttft_ms=min(c.usage.ttft_ms for c in self.choices),
                     total_ms=last.total_ms,
                     spec_proposed=sum(c.usage.spec_proposed for c in self.choices),
                     spec_accepted=sum(c.usage.spec_accepted for c in self.choices),
                     spec_verifications=sum(c.usage.spec_verifications for c in self.choices))
