"""What an OpenAI-compatible server answers, read: a chat completion's message, choice and usage,
its text fields, the message of an error answer, and Retry-After."""

from __future__ import annotations

import json


def parse_completion(data: dict):
    """(message, choice, usage) of a chat completion; raises where there is no choices[0].message."""
    choice = data["choices"][0]
    if not isinstance(choice["message"], dict):
        raise TypeError("message")
    return choice["message"], choice, data.get("usage") or {}


def text_of(value) -> str | None:
    """A message field as text: a string, or the text parts of a list of content parts."""
    if isinstance(value, list):
        value = "".join(p.get("text") or "" for p in value if isinstance(p, dict)) or None
    return value if isinstance(value, str) and value else None


def server_message(resp) -> str:
    """What the server said: error.message / error / detail / message of a JSON body, else its text."""
    try:
        data = json.loads(resp.content)
        if isinstance(data, dict):
            err = data.get("error", data.get("detail", data.get("message")))
            if isinstance(err, dict):
                err = err.get("message", err)
            if err is not None:
                return str(err)
    except ValueError:
        pass
    return resp.text or resp.reason_phrase or "(empty body)"


def retry_after_s(value: str | None) -> float | None:
    """Retry-After in seconds (a number or an HTTP date), None when absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    from email.utils import parsedate_to_datetime
    from datetime import datetime, timezone

    try:
        return max(0.0, (parsedate_to_datetime(value) - datetime.now(timezone.utc)).total_seconds())
    except (TypeError, ValueError, IndexError):
        return None
