"""What every inspector page needs: the per-app state, the templates, who is signed in, which user
a page may show, the CSRF check and the confirmation step of a change."""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from ..._apikeys import ApiKey
from ..._errors import InputError
from ..._facade._memory import Memory
from ..._input import check_id
from ._session import Session, Sessions
from ._signin import SignInLimits
from ._timings import Timings

log = logging.getLogger(__name__)
HERE = Path(__file__).parent
PREFIX = "/ui"


@dataclass
class UIState:
    """The inspector's state inside one app (``app.state.ui``)."""

    sessions: Sessions
    templates: Jinja2Templates
    keys: bool  # False for a store served without keys (``dialogmem ui``): every session is an admin
    timings: Timings = field(default_factory=Timings)
    signins: SignInLimits = field(default_factory=SignInLimits)  # install_ui sizes it by the settings
    #: (user, memories, evicted) -> memories per month and whether the scan stopped early
    month_cache: dict[tuple[str, int, int], tuple[list[tuple[str, float]], bool]] = field(default_factory=dict)
    month_lock: threading.Lock = field(default_factory=threading.Lock)


def make_templates() -> Jinja2Templates:
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["when"] = _when
    env.filters["seg"] = lambda text: segment(str(text))  # one URL path segment
    env.filters["hidden"] = hidden_chars
    return Jinja2Templates(env=env)


def segment(text: str) -> str:
    """``text`` as one URL path segment that comes back as it was (:func:`from_segment`).

    Percent-encoding is not enough for every id: the server decodes ``%2F`` into a ``/`` before it
    routes, and a browser resolves ``.``, ``..`` (and ``%2E%2E``) as steps up the path. Such an id
    (and one that starts with ``~``, to keep the two forms apart) is written as ``~`` and the
    unpadded base64url of its UTF-8 bytes."""
    if text in (".", "..") or text.startswith("~") or any(c in text for c in "/\\%"):
        return "~" + base64.urlsafe_b64encode(text.encode("utf-8", "surrogatepass")).decode("ascii").rstrip("=")
    return quote(text, safe="")


def from_segment(seg: str) -> str:
    """The id a path segment written by :func:`segment` holds; ``InputError`` when it holds none."""
    if not seg.startswith("~"):
        return seg
    body = seg[1:]
    try:
        return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        raise InputError("not an encoded id") from None


#: bidirectional controls and invisible characters that can disguise what a text says
_HIDDEN = {0x200B, 0x200C, 0x200D, 0x200E, 0x200F, 0x2060, 0xFEFF, 0x061C, *range(0x202A, 0x202F),
           *range(0x2066, 0x206A)}


def hidden_chars(text: str) -> list[str]:
    """The invisible or direction-changing characters in ``text`` (as U+XXXX), once each: the page
    shows the text as it is, and says that it holds them."""
    return sorted({f"U+{ord(c):04X}" for c in text if ord(c) in _HIDDEN})


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts)) + "Z" if ts else ""


class Redirect(Exception):
    """Leave this page for ``url`` (a 303 after a POST, or to the sign-in page)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.url = url


class PageError(Exception):
    """Answer with an error page of this status; ``message`` is shown (never a record's content)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def ui_state(request: Request) -> UIState:
    state: UIState = request.app.state.ui  # set by install_ui
    return state


def memory_of(request: Request) -> Memory:
    memory: Memory = request.app.state.memory
    return memory


@dataclass(frozen=True)
class Principal:
    """The signed-in browser: its session and the key it acts with."""

    session: Session
    key: ApiKey


async def _principal(request: Request) -> Principal:
    """The caller's session, resolved by ``UIGuard``; without one, off to the sign-in page."""
    session: Session | None = request.scope.get("state", {}).get("ui_session")
    key: ApiKey | None = request.scope.get("state", {}).get("key")
    if session is None or key is None:
        raise Redirect(f"{PREFIX}/login")
    return Principal(session=session, key=key)


PrincipalDep = Annotated[Principal, Depends(_principal)]


async def _scoped(user_id: str, who: PrincipalDep) -> str:
    """The user a page names (its path segment decoded, :func:`from_segment`), when this key reaches
    it. Anything else is the same 404 as an unknown user, so a page never tells another user's data
    apart from missing data."""
    try:
        user_id = check_id("user_id", from_segment(user_id))
    except InputError:
        raise PageError(404, "Not found.") from None
    if not who.key.reaches(user_id):
        raise PageError(404, "Not found.")
    return user_id


UserDep = Annotated[str, Depends(_scoped)]


def render(request: Request, name: str, context: Mapping[str, Any], *, status: int = 200,
           who: Principal | None = None) -> HTMLResponse:
    """A page from its template; every page gets the signed-in key and its CSRF token."""
    ctx: dict[str, Any] = {"prefix": PREFIX, "who": who.key if who else None,
                           "csrf": who.session.csrf if who else "", "user_id": None, **context}
    return ui_state(request).templates.TemplateResponse(request, name, ctx, status_code=status)


async def form_of(request: Request, who: Principal) -> dict[str, list[str]]:
    """A POST's form fields, once its CSRF token is checked (a wrong or missing one: 403, nothing done)."""
    form = await request.form()
    fields: dict[str, list[str]] = {}
    for name, value in form.multi_items():
        if isinstance(value, str):
            fields.setdefault(name, []).append(value)
    sent = fields.get("csrf", [""])[0]
    if not ui_state(request).sessions.csrf_ok(who.session, sent):
        raise PageError(403, "This form has expired or did not come from this inspector: reload the page and "
                             "try again.")
    return fields


def one(fields: Mapping[str, list[str]], name: str, default: str = "") -> str:
    values = fields.get(name)
    return values[0] if values else default


def confirmed(fields: Mapping[str, list[str]]) -> bool:
    return one(fields, "confirmed") == "yes"


def confirm_page(request: Request, who: Principal, *, title: str, question: str, action: str,
                 fields: Mapping[str, list[str]], details: Mapping[str, Any] | None = None,
                 back: str) -> HTMLResponse:
    """The confirmation step of a change: the same POST again, with ``confirmed=yes``."""
    keep = [(k, v) for k, values in fields.items() if k not in ("csrf", "confirmed") for v in values]
    return render(request, "confirm.html", {"title": title, "question": question, "action": action,
                                            "fields": keep, "details": details or {}, "back": back}, who=who)


def see_other(url: str) -> Response:
    return RedirectResponse(url, status_code=303)
