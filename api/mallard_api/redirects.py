"""Redirects never point at the host a request named (pure ASGI).

Starlette's trailing-slash redirect (`GET /api/v1/projects/` -> `/api/v1/projects`)
builds an absolute URL from the request's Host header, so `Host: evil.example` sent the
client to `http://evil.example/...`. `PublicRedirects` rewrites the Location of every
redirect the app answers: an absolute one becomes MALLARD_PUBLIC_URL + its path and
query (`links.absolute`), or the bare path and query (relative to the address the client
used) when no public URL is set. The pages build their redirects that way already.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mallard_api.ui.links import absolute


def public_location(location: str, public_url: str | None) -> str:
    """`location` with any scheme and host replaced by the public URL's (or dropped)."""
    parts = urlsplit(location)
    if not parts.scheme and not parts.netloc and not location.startswith("//"):
        return location  # a path already
    path = "/" + parts.path.lstrip("/") + (f"?{parts.query}" if parts.query else "")
    return absolute(public_url, path)


class PublicRedirects:
    def __init__(self, app: ASGIApp, *, public_url: str | None) -> None:
        self.app = app
        self.public_url = public_url

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start" and 300 <= message["status"] < 400:
                message["headers"] = [
                    (k, public_location(v.decode("latin-1"), self.public_url).encode("latin-1"))
                    if k.lower() == b"location" else (k, v)
                    for k, v in message.get("headers", [])]
            await send(message)

        await self.app(scope, receive, sending)
